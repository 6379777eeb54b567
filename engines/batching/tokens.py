"""Token counting and truncation checks that run before inputs join a batch.

The batcher needs each input's token count (its cost) and over-long inputs must be refused or
cut before they share a batch with other callers' inputs. Tokenizing is cheap CPU work on a
Rust tokenizer that releases the GIL, so it runs in a worker thread (``asyncio.to_thread``),
overlapping the model's forward passes on the model's lane, the way text-embeddings-inference
runs tokenization in its own workers. A small request (at most :data:`INLINE_CHARS` characters)
is counted on the event loop itself: the hand-off to a thread costs more than the tokenizing.

Hugging Face fast tokenizers are not safe to call from two threads at once when their
truncation/padding settings change between calls ("Already borrowed"), and the model's own
tokenizer is in use on the executor thread; so :class:`TokenCounter` keeps its own copy of the
tokenizer, behind a lock.

Work is bounded by the model's window, not by the input: a tokenizer normalizes and splits the
whole string even when asked to truncate (a 20 MB string took 8 GB and 30 s), so every text is
first cut to :data:`MAX_CHARS_PER_TOKEN` characters per token of the window (the end kept for
``Truncation.START``), or refused with ``Truncation.ERROR``, before any tokenizer sees it.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Sequence
from typing import Any

from engines.errors import InputTooLongError, InvalidArgumentError
from engines.tokenization import Offsets, check_token_ids, hf_detokenize, hf_tokenize
from engines.types import Truncation

#: Characters per token of the window that a text may have before it is cut or refused without
#: tokenizing. Tokens of common vocabularies span a few characters (English ~4; CJK ~1; the longest
#: whitespace or code tokens of Llama-style vocabularies 16), so a cut this far out leaves the
#: window's tokens as they were; only texts of mostly over-long "words" (a WordPiece [UNK] stands
#: for up to 100 characters) can count more characters per token than this.
MAX_CHARS_PER_TOKEN = 32


#: Most characters (all of a request's texts) counted on the event loop rather than in a worker
#: thread. Measured for one sentence: 105 µs on the loop against 260 µs through
#: ``asyncio.to_thread``; 2,048 characters tokenize in well under a millisecond of loop time.
INLINE_CHARS = 2048


def character_limit(max_tokens: int) -> int:
    """Most characters a text for a window of ``max_tokens`` tokens is read up to."""
    return max_tokens * MAX_CHARS_PER_TOKEN


class TokenCounter:
    """Counts tokens with a private copy of a Hugging Face tokenizer (thread-safe).

    Args:
        tokenizer: a ``transformers`` tokenizer (copied, so the original may be used elsewhere).
        max_length: the model's longest input in tokens, special tokens included.
        model: the model's catalog name, for error messages.

    """

    def __init__(self, tokenizer: Any, max_length: int, model: str) -> None:
        self._tokenizer = copy.deepcopy(tokenizer)
        # Reentrant: a call counted on the event loop holds it around methods that take it too.
        self._lock = threading.RLock()
        self.max_length = int(max_length)
        self.max_chars = character_limit(self.max_length)
        self.model = model

    def clip(self, texts: Sequence[str], truncation: Truncation, *, field: str = "inputs") -> list[str]:
        """Texts cut to :attr:`max_chars` characters (the start kept; the end for ``START``).

        Cheap (slicing only): call it before anything tokenizes the texts.

        Raises:
            InputTooLongError: with :attr:`Truncation.ERROR`, the first text over ``max_chars``
                characters (it cannot fit: the message gives both limits).

        """
        limit = self.max_chars
        out = list(texts)
        for index, text in enumerate(texts):
            if len(text) <= limit:
                continue
            if truncation is Truncation.ERROR:
                raise InputTooLongError(
                    f"{field}[{index}] is {len(text)} characters; model {self.model!r} takes at most "
                    f"{self.max_length} tokens, and texts over {limit} characters are refused without "
                    "tokenizing (set truncation to truncate it instead)",
                    field=f"{field}[{index}]",
                    index=index,
                    input_characters=len(text),
                    max_characters=limit,
                    max_tokens=self.max_length,
                )
            out[index] = text[-limit:] if truncation is Truncation.START else text[:limit]
        return out

    def lengths(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[int]:
        """Token counts of ``texts`` (or of ``(texts[i], pairs[i])`` pairs), special tokens included."""
        with self._lock:
            if pairs is None:
                encoded = self._tokenizer(list(texts), add_special_tokens=True, truncation=False)
            else:
                encoded = self._tokenizer(list(texts), list(pairs), add_special_tokens=True, truncation=False)
        return [len(ids) for ids in encoded["input_ids"]]

    def check(
        self, lengths: Sequence[int], truncation: Truncation, *, field: str = "inputs", what: str = "input"
    ) -> list[int]:
        """Apply the truncation policy to token counts; returns the counts the model will see.

        Raises:
            InputTooLongError: with :attr:`Truncation.ERROR`, the first input over ``max_length``
                (the message and metadata give its length and the limit).

        """
        limit = self.max_length
        if truncation is Truncation.ERROR:
            for index, length in enumerate(lengths):
                if length > limit:
                    raise InputTooLongError(
                        f"{what} {index} is {length} tokens; model {self.model!r} takes at most {limit} "
                        "(set truncation to truncate it instead)",
                        field=f"{field}[{index}]",
                        index=index,
                        input_tokens=length,
                        max_tokens=limit,
                    )
        return [min(length, limit) for length in lengths]

    def keep_last_tokens(self, texts: Sequence[str], lengths: Sequence[int]) -> list[str]:
        """Cut over-long texts from the start so that their last tokens fit ``max_length``.

        Raises:
            InvalidArgumentError: the model's special tokens alone fill ``max_length``.

        """
        out = list(texts)
        with self._lock:
            special = self._tokenizer.num_special_tokens_to_add(pair=False)
            budget = self.max_length - special
            if budget <= 0:
                raise InvalidArgumentError(f"model {self.model!r} has no room for input tokens")
            for i, (text, length) in enumerate(zip(texts, lengths, strict=True)):
                if length > self.max_length:
                    ids = self._tokenizer(text, add_special_tokens=False)["input_ids"]
                    out[i] = self._tokenizer.decode(ids[len(ids) - budget :])
        return out

    def prepare(
        self, texts: Sequence[str], truncation: Truncation, *, field: str = "inputs"
    ) -> tuple[list[str], list[int]]:
        """Count, check and (for :attr:`Truncation.START`) cut single texts (blocking).

        Returns:
            the texts to run (cut to :attr:`max_chars`, and from the start where needed) and the
            token count of each as the model will see it.

        Raises:
            InputTooLongError: see :meth:`clip` and :meth:`check`.

        """
        texts = self.clip(texts, truncation, field=field)
        raw = self.lengths(texts)
        used = self.check(raw, truncation, field=field)
        if truncation is Truncation.START and any(n > self.max_length for n in raw):
            return self.keep_last_tokens(texts, raw), used
        return list(texts), used

    async def prepare_async(
        self, texts: Sequence[str], truncation: Truncation, *, field: str = "inputs"
    ) -> tuple[list[str], list[int]]:
        """:meth:`prepare` in a worker thread, or on the event loop for a small request (same results)."""
        return await self._off_loop(_characters(texts), self.prepare, texts, truncation, field=field)

    async def lengths_async(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[int]:
        """:meth:`lengths` in a worker thread, or on the event loop for a small request."""
        return await self._off_loop(_characters(texts) + _characters(pairs or ()), self.lengths, texts, pairs)

    async def _off_loop(self, characters: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # On the loop only when no worker thread holds the tokenizer: the loop must never wait
        # for someone else's large request.
        if characters <= INLINE_CHARS and self._lock.acquire(blocking=False):
            try:
                return fn(*args, **kwargs)
            finally:
                self._lock.release()
        return await asyncio.to_thread(fn, *args, **kwargs)

    # -- Tokenize / Detokenize ----------------------------------------------------------------

    def tokenize(
        self, text: str, *, add_special_tokens: bool, return_token_strings: bool, return_offsets: bool
    ) -> tuple[list[int], list[str], Offsets]:
        """Ids (and the strings and offsets asked for) of one whole text, untruncated (blocking).

        Raises:
            InputTooLongError: ``text`` is over :attr:`max_chars` characters (see :meth:`clip`).
            FailedPreconditionError: offsets of a slow tokenizer (OFFSETS_NOT_SUPPORTED).

        """
        [text] = self.clip([text], Truncation.ERROR, field="prompt")
        with self._lock:
            return hf_tokenize(
                self._tokenizer,
                text,
                add_special_tokens=add_special_tokens,
                return_token_strings=return_token_strings,
                return_offsets=return_offsets,
                model=self.model,
            )

    def detokenize(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        """The text of ``ids`` (blocking).

        Raises:
            InvalidArgumentError: an id outside the vocabulary, or more ids than :attr:`max_chars`
                (see :func:`engines.tokenization.check_token_ids`).

        """
        checked = check_token_ids(ids, len(self._tokenizer), self.max_chars, self.model)
        with self._lock:
            return hf_detokenize(self._tokenizer, checked, skip_special_tokens=skip_special_tokens)


def _characters(texts: Sequence[str]) -> int:
    return sum(len(text) for text in texts)
