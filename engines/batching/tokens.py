"""Token counting and truncation checks that run before inputs join a batch.

The batcher needs each input's token count (its cost) and over-long inputs must be refused or
cut before they share a batch with other callers' inputs. That tokenization is the only one: its
ids (:class:`TokenIds`, special tokens added, cut on the ids for ``Truncation.START``/``END`` by
the tokenizer's own truncation) are what the batch runs, padded by :class:`Padding` into the
model's arrays, as text-embeddings-inference queues token ids and infinity hands ``encode_pre``'s
features to ``encode_core``.

Tokenizing is cheap CPU work on a Rust tokenizer that releases the GIL, so it runs in a worker
thread (``asyncio.to_thread``),
overlapping the model's forward passes on the model's lane, the way text-embeddings-inference
runs tokenization in its own workers. A small request (at most :data:`INLINE_CHARS` characters)
is counted on the event loop itself: the hand-off to a thread costs more than the tokenizing.

Hugging Face fast tokenizers are not safe to call from two threads at once when their
truncation/padding settings change between calls ("Already borrowed"), and the model's own
tokenizer is in use on the executor thread; so :class:`TokenCounter` keeps its own copy of the
tokenizer, behind a lock.

Work is bounded by the model's window, not by the input: a tokenizer normalizes and splits the
whole string even when asked to truncate (memory and time in the whole input; see
docs/architecture/design-notes.md#work-bounded-by-the-models-window), so every text is
first cut to :data:`MAX_CHARS_PER_TOKEN` characters per token of the window (the end kept for
``Truncation.START``), or refused with ``Truncation.ERROR``, before any tokenizer sees it.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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
#: thread: a short text costs the loop less than the hand-off to a thread would, and 2,048
#: characters tokenize in well under a millisecond of loop time (see
#: docs/architecture/design-notes.md#json-bodies-on-or-off-the-event-loop).
INLINE_CHARS = 2048


@dataclass(frozen=True, slots=True)
class TokenIds:
    """One model input as token ids, special tokens included and truncated: what the runtime consumes.

    Attributes:
        input_ids: the ids, at most the model's ``max_length`` of them.
        token_type_ids: segment ids (0 for a single text; 0 then 1 for a pair), same length.

    """

    input_ids: list[int]
    token_type_ids: list[int]

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True, slots=True)
class Padding:
    """How a batch of :class:`TokenIds` becomes the model's arrays (the tokenizer's padding settings).

    Attributes:
        pad_id: the padding token's id.
        left: pad on the left (the tokenizer's ``padding_side``); encoders pad on the right.
        input_names: the arrays the model takes, of ``input_ids``, ``attention_mask``,
            ``token_type_ids`` (the tokenizer's ``model_input_names``).

    """

    pad_id: int = 0
    left: bool = False
    input_names: tuple[str, ...] = ("input_ids", "attention_mask")

    @classmethod
    def of(cls, tokenizer: Any) -> Padding:
        """The padding of a ``transformers`` tokenizer (pad id 0 when it has none)."""
        names = tuple(getattr(tokenizer, "model_input_names", None) or ("input_ids", "attention_mask"))
        return cls(
            int(tokenizer.pad_token_id or 0), getattr(tokenizer, "padding_side", "right") == "left", names
        )

    def collate(self, batch: Sequence[TokenIds]) -> dict[str, np.ndarray]:
        """The batch's int64 arrays, each of shape (len(batch), longest input's tokens), padded.

        Equal to the tokenizer's own ``padding=True`` output for the same ids.
        """
        longest = max(len(item) for item in batch)
        ids = np.full((len(batch), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), longest), dtype=np.int64)
        types = np.zeros((len(batch), longest), dtype=np.int64)
        for row, item in enumerate(batch):  # bounded by the batch size
            n = len(item)
            span = slice(longest - n, longest) if self.left else slice(0, n)
            ids[row, span] = item.input_ids
            mask[row, span] = 1
            types[row, span] = item.token_type_ids
        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return {name: arrays[name] for name in self.input_names if name in arrays}

    def tensors(self, batch: Sequence[TokenIds], device: str | Any = "cpu") -> dict[str, Any]:
        """:meth:`collate` as torch tensors on ``device`` (no copy on the CPU)."""
        import torch

        return {name: torch.from_numpy(array).to(device) for name, array in self.collate(batch).items()}


@dataclass(frozen=True, slots=True)
class TextWindows:
    """One whole text as a token-classification model reads it: overlapping windows of its ids.

    The windows are the fast tokenizer's overflowing encodings (``return_overflowing_tokens`` with
    a ``stride``), as the ``token-classification`` pipeline makes them: each has the special tokens
    and at most ``max_length`` ids, and repeats the last ``stride`` text tokens of the one before.

    Attributes:
        windows: each window's ids, in text order (at least one, empty text included).
        offsets: each window's ``(start, end)`` character offsets into the text, one per id
            (``(0, 0)`` for special tokens).
        special_tokens_mask: each window's 1 per special token, 0 per text token.
        tokens: the text's tokens plus one window's special tokens (overlaps counted once).

    """

    windows: list[TokenIds]
    offsets: list[list[tuple[int, int]]]
    special_tokens_mask: list[list[int]]
    tokens: int

    def __len__(self) -> int:
        """Ids of all the windows together (what the model reads)."""
        return sum(len(window) for window in self.windows)


def padded_tokens(lengths: Sequence[int]) -> int:
    """Tokens a batch of inputs of ``lengths`` tokens occupies once padded to its longest."""
    return len(lengths) * max(lengths, default=0)


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
        self.padding = Padding.of(tokenizer)
        # Rust copies of a fast tokenizer: one that never truncates (the raw ids, to count), and one
        # per truncation side that adds the special tokens and cuts on ids with the tokenizer's own
        # rules (``longest_first`` for pairs), so nothing is tokenized twice. None: a slow tokenizer.
        self._raw: Any = None
        self._cut: dict[bool, Any] = {}
        self._windows: dict[int, Any] = {}  # by stride: Rust copies that cut texts into windows
        backend = (
            getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
        )
        if backend is not None:
            from tokenizers import Tokenizer

            spec = backend.to_str()
            self._raw = Tokenizer.from_str(spec)
            self._raw.no_truncation()
            self._raw.no_padding()
            for keep_end in (False, True):
                cut = Tokenizer.from_str(spec)
                cut.no_padding()
                direction = "left" if keep_end else "right"
                cut.enable_truncation(self.max_length, strategy="longest_first", direction=direction)
                self._cut[keep_end] = cut

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

    def encode(
        self, texts: Sequence[str], truncation: Truncation, *, field: str = "inputs"
    ) -> list[TokenIds]:
        """The model inputs of single texts: ids with special tokens, cut to ``max_length`` (blocking).

        Each text is tokenized once; :attr:`Truncation.END` keeps the first tokens and
        :attr:`Truncation.START` the last ones, cut on the ids by the tokenizer's own truncation
        (the special tokens stay), exactly as the tokenizer's ``truncation_side`` would.

        Raises:
            InputTooLongError: with :attr:`Truncation.ERROR`, the first text over ``max_length``
                tokens or over :attr:`max_chars` characters (see :meth:`clip` and :meth:`check`).

        """
        texts = self.clip(texts, truncation, field=field)
        with self._lock:
            if self._raw is None:
                return self._encode_slow(texts, None, truncation, field=field, what="input")
            raw = self._raw.encode_batch(texts, add_special_tokens=False)
            special = self._special_tokens(pair=False)
            self.check([len(e) + special for e in raw], truncation, field=field)
            cut = self._cut[truncation is Truncation.START]
            return [_token_ids(cut.post_process(e)) for e in raw]

    def encode_pairs(
        self, query: str, documents: Sequence[str], truncation: Truncation, *, field: str = "documents"
    ) -> list[TokenIds]:
        """The model inputs of ``(query, documents[i])`` pairs, the query tokenized once (blocking).

        Over-long pairs are cut by the tokenizer's ``longest_first`` rule (the longer side loses
        tokens first) from the end (:attr:`Truncation.END`) or the start (:attr:`Truncation.START`).

        Raises:
            InputTooLongError: with :attr:`Truncation.ERROR`, the first pair over ``max_length``
                tokens, or a text over :attr:`max_chars` characters.

        """
        [query] = self.clip([query], truncation, field="query")
        documents = self.clip(documents, truncation, field=field)
        what = "query+document pair"
        with self._lock:
            if self._raw is None:
                return self._encode_slow(
                    [query] * len(documents), documents, truncation, field=field, what=what
                )
            first, *rest = self._raw.encode_batch([query, *documents], add_special_tokens=False)
            special = self._special_tokens(pair=True)
            lengths = [len(first) + len(e) + special for e in rest]
            self.check(lengths, truncation, field=field, what=what)
            cut = self._cut[truncation is Truncation.START]
            return [_token_ids(cut.post_process(first, e)) for e in rest]

    def encode_windows(self, texts: Sequence[str], stride: int) -> list[TextWindows]:
        """Each whole text as overlapping windows of ids with offsets (blocking; fast tokenizers only).

        Equal to the fast tokenizer's ``truncation=True, return_overflowing_tokens=True,
        stride=stride, return_offsets_mapping=True, return_special_tokens_mask=True`` (the
        ``token-classification`` pipeline's own call) with ``max_length`` the model's, from one
        tokenization per text. Texts are not cut to :attr:`max_chars`: the caller bounds their
        characters (every window is read).

        Raises:
            InvalidArgumentError: the special tokens leave no more than ``stride`` ids per window
                (the windows could not advance).
            RuntimeError: a slow tokenizer (no Rust tokenizer to take offsets and windows from).

        """
        with self._lock:
            if self._raw is None:
                raise RuntimeError(f"model {self.model!r}: windows with offsets need a fast tokenizer")
            special = self._special_tokens(pair=False)
            if self.max_length - special <= stride:
                raise InvalidArgumentError(
                    f"model {self.model!r}: a stride of {stride} tokens leaves no room in a window of "
                    f"{self.max_length} tokens"
                )
            cut = self._windows.get(stride)
            if cut is None:
                from tokenizers import Tokenizer

                cut = Tokenizer.from_str(self._raw.to_str())
                cut.no_padding()
                cut.enable_truncation(
                    self.max_length, stride=stride, strategy="longest_first", direction="right"
                )
                self._windows[stride] = cut
            out = []
            for raw in self._raw.encode_batch(list(texts), add_special_tokens=False):  # bounded by texts
                first = cut.post_process(raw)
                parts = [first, *first.overflowing]
                out.append(
                    TextWindows(
                        windows=[_token_ids(part) for part in parts],
                        offsets=[part.offsets for part in parts],
                        special_tokens_mask=[part.special_tokens_mask for part in parts],
                        tokens=len(raw.ids) + special,
                    )
                )
            return out

    async def encode_windows_async(self, texts: Sequence[str], stride: int) -> list[TextWindows]:
        """:meth:`encode_windows` in a worker thread, or on the event loop for a small request."""
        return await self._off_loop(_characters(texts), self.encode_windows, texts, stride)

    def _special_tokens(self, *, pair: bool) -> int:
        """Special tokens the model adds to one text or a pair (lock held).

        Raises:
            InvalidArgumentError: they alone fill ``max_length`` (no room for input tokens).

        """
        processor = self._raw.post_processor
        special = processor.num_special_tokens_to_add(pair) if processor is not None else 0
        if special >= self.max_length:
            raise InvalidArgumentError(f"model {self.model!r} has no room for input tokens")
        return special

    def _encode_slow(
        self, texts: list[str], pairs: Sequence[str] | None, truncation: Truncation, *, field: str, what: str
    ) -> list[TokenIds]:
        """:meth:`encode` for a slow (Python) tokenizer: over-long inputs are tokenized a second time, cut."""
        tokenizer = self._tokenizer
        second = list(pairs) if pairs is not None else None
        encoded = tokenizer(
            texts, second, add_special_tokens=True, truncation=False, return_token_type_ids=True
        )
        self.check([len(ids) for ids in encoded["input_ids"]], truncation, field=field, what=what)
        rows = [
            TokenIds(list(i), list(t))
            for i, t in zip(encoded["input_ids"], encoded["token_type_ids"], strict=True)
        ]
        over = [index for index, row in enumerate(rows) if len(row) > self.max_length]
        if over:
            side = tokenizer.truncation_side
            tokenizer.truncation_side = "left" if truncation is Truncation.START else "right"
            try:
                cut = tokenizer(
                    [texts[i] for i in over],
                    [second[i] for i in over] if second is not None else None,
                    truncation="longest_first",
                    max_length=self.max_length,
                    return_token_type_ids=True,
                )
            finally:
                tokenizer.truncation_side = side
            for index, ids, types in zip(over, cut["input_ids"], cut["token_type_ids"], strict=True):
                rows[index] = TokenIds(list(ids), list(types))
        return rows

    async def encode_async(
        self, texts: Sequence[str], truncation: Truncation, *, field: str = "inputs"
    ) -> list[TokenIds]:
        """:meth:`encode` in a worker thread, or on the event loop for a small request (same results)."""
        return await self._off_loop(_characters(texts), self.encode, texts, truncation, field=field)

    async def encode_pairs_async(
        self, query: str, documents: Sequence[str], truncation: Truncation, *, field: str = "documents"
    ) -> list[TokenIds]:
        """:meth:`encode_pairs` in a worker thread, or on the event loop for a small request."""
        characters = len(query) + _characters(documents)
        return await self._off_loop(characters, self.encode_pairs, query, documents, truncation, field=field)

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


def _token_ids(encoding: Any) -> TokenIds:
    return TokenIds(encoding.ids, encoding.type_ids)


def _characters(texts: Sequence[str]) -> int:
    return sum(len(text) for text in texts)
