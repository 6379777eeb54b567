"""Where a request's tokens are counted: on the event loop when small, in a worker thread otherwise."""

from __future__ import annotations

import asyncio
import threading

import pytest
from transformers import AutoTokenizer

from engines.batching.tokens import INLINE_CHARS, TokenCounter
from engines.errors import InputTooLongError
from engines.types import Truncation
from tests.engines.encoders.conftest import minilm_dir


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter(AutoTokenizer.from_pretrained(str(minilm_dir())), 256, "minilm")


def spy_threads(counter: TokenCounter, monkeypatch, method: str = "lengths") -> list[int]:
    """Record the thread each call of ``method`` (``lengths``, ``encode``) runs on."""
    threads: list[int] = []
    real = getattr(counter, method)

    def spy(*args, **kwargs):
        threads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(counter, method, spy)
    return threads


async def test_a_small_request_is_counted_on_the_loop_a_large_one_in_a_thread(counter, monkeypatch):
    threads = spy_threads(counter, monkeypatch, "encode")
    small = ["a short sentence to embed"]
    large = ["word " * (INLINE_CHARS // 5 + 1)]
    assert await counter.encode_async(small, Truncation.END) == counter.encode(small, Truncation.END)
    assert await counter.encode_async(large, Truncation.END) == counter.encode(large, Truncation.END)
    loop_thread = threading.get_ident()
    assert threads[0] == loop_thread and threads[2] != loop_thread


async def test_pairs_count_both_texts_towards_the_inline_limit(counter, monkeypatch):
    threads = spy_threads(counter, monkeypatch)
    query, document = "what is it?", "x" * INLINE_CHARS
    assert await counter.lengths_async([query], [document]) == counter.lengths([query], [document])
    assert threads[0] != threading.get_ident()


async def test_the_loop_never_waits_for_a_tokenizer_held_by_a_worker_thread(counter, monkeypatch):
    threads = spy_threads(counter, monkeypatch)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with counter._lock:
            held.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    try:
        pending = asyncio.ensure_future(counter.lengths_async(["short"]))
        await asyncio.sleep(0.05)  # the loop runs on: the call went to a worker thread, which waits
        assert not pending.done()
    finally:
        release.set()
        holder.join()
    assert await pending == counter.lengths(["short"])
    assert threads[0] != threading.get_ident()


async def test_a_small_request_over_the_window_is_refused_on_the_loop_too(counter):
    text = "word " * 300  # 1,500 characters (counted on the loop), 302 tokens (over 256)
    assert len(text) <= INLINE_CHARS
    with pytest.raises(InputTooLongError) as caught:
        await counter.encode_async([text], Truncation.ERROR)
    assert caught.value.metadata["input_tokens"] == "302"
