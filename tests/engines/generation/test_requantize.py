"""Requantized GGUF copies (engines/generation/requantize.py): made once, under a lock, keyed by
the source file and the type; a bad ``quantize`` option is refused when the catalog is read."""

from __future__ import annotations

import os
import threading
import time
import typing
from pathlib import Path

import pytest

from engines.base import ModelSpec
from engines.errors import InvalidArgumentError
from engines.generation.llama_cpp_engine import LlamaCppGenerationEngine
from engines.generation.options import LlamaCppOptions, QuantizeType
from engines.generation.requantize import QUANTIZE_TYPES, cached_path, model_file, requantized
from engines.options import parse_options
from tests.conftest import GGUF_SOURCE


def gguf_options(**raw) -> LlamaCppOptions:
    return parse_options(LlamaCppOptions, raw, backend="llama_cpp")


class CountingQuantizer:
    """Stands in for llama_model_quantize: writes the source's bytes plus the type, counts calls."""

    def __init__(self, delay_s: float = 0.0, fail: bool = False):
        self.calls: list[tuple[Path, Path, int]] = []
        self.delay_s = delay_s
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, source: Path, target: Path, ftype: int) -> None:
        with self.lock:
            self.calls.append((source, target, ftype))
        time.sleep(self.delay_s)  # a slow quantize: the other loads wait on the lock meanwhile
        target.write_bytes(source.read_bytes() + bytes([ftype]))
        if self.fail:
            raise RuntimeError("quantize failed")


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "model.Q4_1.gguf"
    path.write_bytes(b"GGUF weights")
    return path


def test_quantize_option_is_a_closed_set_of_the_types_llama_cpp_can_write():
    assert gguf_options().quantize is None
    assert (
        gguf_options(quantize="Q4_0").quantize == "q4_0" and gguf_options(quantize="q8_0").quantize == "q8_0"
    )
    with pytest.raises(
        InvalidArgumentError, match=r"option quantize: Input should be 'q4_0', 'q8_0' or 'f16'"
    ):
        gguf_options(quantize="q4_1")
    # Every type the option allows has its llama_ftype, and no other.
    assert set(QUANTIZE_TYPES) == set(typing.get_args(QuantizeType))
    with pytest.raises(ValueError, match=r"quantize must be one of q4_0, q8_0, f16, got 'q4_1'"):
        requantized(Path("model.gguf"), "q4_1")  # type: ignore[arg-type]


def test_second_call_reuses_the_cached_copy(source, tmp_path):
    quantizer = CountingQuantizer()
    cache = tmp_path / "cache"
    first = requantized(source, "q4_0", cache, quantizer)
    again = requantized(source, gguf_options(quantize="Q4_0").quantize, cache, quantizer)
    assert first == again and first.parent.parent == cache and first.read_bytes() == b"GGUF weights\x02"
    assert [ftype for _, _, ftype in quantizer.calls] == [QUANTIZE_TYPES["q4_0"]]
    folder = first.parent.name
    assert folder.startswith("model.Q4_1-q4_0-") and first.name == "model.Q4_1-q4_0.gguf"
    assert sorted(p.name for p in cache.iterdir()) == [f".{folder}.lock", folder]  # no leftovers


def test_the_key_follows_the_type_and_the_source_file(source, tmp_path):
    quantizer = CountingQuantizer()
    cache = tmp_path / "cache"
    q4 = requantized(source, "q4_0", cache, quantizer)
    q8 = requantized(source, "q8_0", cache, quantizer)
    assert q4 != q8 and len(quantizer.calls) == 2
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: the same weights
    assert requantized(source, "q4_0", cache, quantizer) == q4 and len(quantizer.calls) == 2
    source.write_bytes(source.read_bytes()[:-1] + b"\x03")  # the file replaced in place
    assert requantized(source, "q4_0", cache, quantizer) != q4 and len(quantizer.calls) == 3


def test_concurrent_loads_quantize_once(source, tmp_path):
    quantizer = CountingQuantizer(delay_s=0.3)
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(requantized(source, "q4_0", tmp_path, quantizer)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(quantizer.calls) == 1 and len(set(results)) == 1 and len(results) == 4


def test_a_failed_quantize_leaves_nothing_behind(source, tmp_path):
    with pytest.raises(RuntimeError, match="quantize failed"):
        requantized(source, "q8_0", tmp_path / "cache", CountingQuantizer(fail=True))
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []
    assert not cached_path(source, "q8_0", tmp_path / "cache").exists()


def test_model_file_without_the_option_is_the_source(source):
    assert model_file(source, gguf_options(n_ctx=512)) == source


def test_real_requantize_writes_a_q4_0_gguf_llama_cpp_loads(tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    from engines.sources import resolve_source

    shipped = resolve_source(GGUF_SOURCE).path
    copy = model_file(shipped, gguf_options(quantize="q4_0", cache_dir=str(tmp_path)))
    assert copy.parent.parent == tmp_path and copy.name == "SmolLM2-135M-Instruct.Q4_1-q4_0.gguf"
    vocab = llama_cpp.Llama(model_path=str(copy), vocab_only=True, verbose=False)
    assert vocab.metadata["general.file_type"] == str(QUANTIZE_TYPES["q4_0"])
    assert vocab.metadata["tokenizer.chat_template"]  # metadata is carried over


def test_bad_quantize_option_is_refused_by_the_catalog_check():
    spec = ModelSpec(
        name="chat",
        backend="llama_cpp",
        tasks=(),
        source=GGUF_SOURCE,
        options={"quantize": "q2_k"},
    )
    with pytest.raises(
        InvalidArgumentError, match=r"option quantize: Input should be 'q4_0', 'q8_0' or 'f16' \(got 'q2_k'\)"
    ) as caught:
        LlamaCppGenerationEngine.check_spec(spec)
    assert caught.value.reason == "INVALID_MODEL_OPTION"
    LlamaCppGenerationEngine.check_spec(
        ModelSpec(
            name="chat", backend="llama_cpp", tasks=(), source=GGUF_SOURCE, options={"quantize": "q8_0"}
        )
    )
