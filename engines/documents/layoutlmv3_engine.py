"""Document QA, fields and classes with LayoutLMv3 (Huang et al. 2022, arXiv:2204.08387).

LayoutLMv3 reads a page as its words, each word's box on a 0-1000 grid, and the page image in
16x16 patches. It runs no OCR of its own here: the words and boxes come from our OCR
(:class:`~engines.ocr.types.OcrPage`), so the processor is used with ``apply_ocr=False``. Which
task a checkpoint serves depends on its head, read from ``config.architectures``:

* ``LayoutLMv3ForQuestionAnswering`` (DocVQA fine-tunes): ``document_qa``; the answer is the
  best start/end span over the page's words, so it is always a run of page words with a box.
* ``LayoutLMv3ForTokenClassification`` (FUNSD, CORD, SROIE fine-tunes): ``extract_fields``; one
  label per word (its first sub-token), BIO runs grouped into fields.
* ``LayoutLMv3ForSequenceClassification`` (RVL-CDIP fine-tunes): ``classify_document``.

Bounds (catalog options): a page's first ``max_words`` words are read (default 2,048); the text
window is the model's ``max_position_embeddings - 2`` tokens (512 for the base models) or
``max_seq_length`` if smaller; longer pages are read in windows overlapping by ``stride`` tokens
(default 128), at most ``max_windows`` of them for QA and fields (default 8); classification
reads the first window only. Questions are at most ``max_question_chars`` characters (default
1,000) and half the window in tokens. Answers are at most ``max_answer_tokens`` tokens (default 64).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.base import ModelSpec
from engines.device import torch_dtype_for
from engines.documents.model_engine import DocumentModelEngine, read_model_config, softmax
from engines.documents.options import LayoutLMv3Options
from engines.documents.types import Citation, DocumentAnswer, DocumentField, DocumentLabel
from engines.errors import InputTooLongError, ModelLoadError
from engines.hf_construction import hf_construction
from engines.ocr.types import Box, OcrPage
from engines.reasons import Reason
from engines.registry import register_backend
from engines.sources import resolve_source
from engines.types import Task

if TYPE_CHECKING:
    from PIL.Image import Image

HEADS: dict[str, Task] = {
    "LayoutLMv3ForQuestionAnswering": Task.DOCUMENT_QA,
    "LayoutLMv3ForTokenClassification": Task.EXTRACT_FIELDS,
    "LayoutLMv3ForSequenceClassification": Task.CLASSIFY_DOCUMENT,
}
"""The head named in ``config.architectures`` -> the one task it serves."""

GRID = 1000
"""LayoutLMv3 boxes are integers on a 0-1000 grid over the page (its 2-D position embeddings)."""


# -- pre-processing ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PageWord:
    """A word as the model reads it: its text and its box in page pixels."""

    text: str
    box: Box


def page_words(page: OcrPage, limit: int | None = None) -> list[PageWord]:
    """The words of ``page`` in reading order, at most ``limit``.

    Lines the OCR gave without word boxes are split on whitespace and their box is shared out
    between the words in proportion to their characters (a space counted as one), which is
    exact for monospaced text and close enough for the model's coarse 0-1000 grid otherwise.
    """
    words: list[PageWord] = []
    for line in page.lines:
        if line.words:
            words.extend(PageWord(w.text, w.box) for w in line.words if w.text.strip())
        else:
            parts = line.text.split()
            total = sum(len(p) for p in parts) + max(len(parts) - 1, 0)
            x = line.box.x
            for part in parts:
                width = line.box.width * len(part) / total if total else 0.0
                words.append(PageWord(part, Box(x, line.box.y, width, line.box.height)))
                x += width + line.box.width / total
        if limit is not None and len(words) >= limit:
            return words[:limit]
    return words


def normalized_box(box: Box, width: int, height: int) -> list[int]:
    """``box`` (pixels) as ``[x0, y0, x1, y1]`` integers on the 0-1000 grid, clamped to the page.

    Raises:
        ValueError: a page of zero width or height.

    """
    if width <= 0 or height <= 0:
        raise ValueError(f"page size must be positive, got {width}x{height}")

    def scale(value: float, size: int) -> int:
        return min(GRID, max(0, round(GRID * value / size)))

    x0, y0 = scale(box.x, width), scale(box.y, height)
    x1, y1 = scale(box.x + box.width, width), scale(box.y + box.height, height)
    return [x0, y0, max(x0, x1), max(y0, y1)]


# -- post-processing -----------------------------------------------------------------------


def best_span(
    start_logits: np.ndarray, end_logits: np.ndarray, allowed: np.ndarray, max_length: int
) -> tuple[int, int, float] | None:
    """The most probable answer span over token positions.

    Args:
        start_logits: shape (tokens,), the QA head's start logits.
        end_logits: shape (tokens,), its end logits.
        allowed: shape (tokens,) bool, the positions an answer may start or end at (the
            page's words; not the question, special tokens or padding).
        max_length: most tokens in the answer (end - start + 1).

    Returns:
        ``(start, end, score)`` with ``start <= end < start + max_length``; ``score`` is
        P(start) * P(end), each a softmax over the allowed positions (as the transformers
        question-answering pipeline scores spans). None when no position is allowed.

    Cost: O(tokens * max_length).

    """
    allowed = np.asarray(allowed, dtype=bool)
    if not allowed.any() or max_length < 1:
        return None
    p_start = softmax(np.where(allowed, start_logits, -np.inf))
    p_end = softmax(np.where(allowed, end_logits, -np.inf))
    count = len(p_start)
    best: tuple[int, int, float] | None = None
    for offset in range(min(max_length, count)):
        # Spans of length offset + 1: start i, end i + offset.
        scores = p_start[: count - offset] * p_end[offset:]
        i = int(np.argmax(scores))
        if best is None or scores[i] > best[2]:
            best = (i, i + offset, float(scores[i]))
    return best


def split_label(label: str) -> tuple[str, str]:
    """A token label as (scheme prefix, entity): ``B-TOTAL`` -> (``B``, ``TOTAL``), ``O`` -> (``O``, ``""``).

    Prefixes B, I, E, S (BIO/IOB2, IOB1, BIOES; also L and U of BILOU) separated by ``-`` or
    ``_``; a label with no prefix is its own entity and continues a run of the same label.
    """
    if label in ("O", "o", ""):
        return "O", ""
    if len(label) > 2 and label[1] in "-_" and label[0].upper() in "BIESLU":
        return label[0].upper(), label[2:]
    return "", label


def group_bio(labels: Sequence[tuple[str, float] | None]) -> list[tuple[str, int, int, float]]:
    """Group per-word labels into entities.

    Args:
        labels: one ``(label, probability)`` per word in reading order; None for a word the
            model did not read (past its windows), which ends any open entity.

    Returns:
        ``(entity, first word, last word, mean probability)`` per entity in order. ``B``/``S``/
        ``U`` start an entity; ``I``/``E``/``L`` or a bare label continue one of the same name,
        else start one (IOB1 and a model's stray ``I`` after ``O``); ``E``/``S``/``L``/``U``
        close it; ``O`` closes it and starts nothing.

    """
    entities: list[tuple[str, int, int, float]] = []
    current: list[Any] | None = None  # [entity, first, last, probabilities]

    def close() -> None:
        nonlocal current
        if current is not None:
            entities.append((current[0], current[1], current[2], float(np.mean(current[3]))))
            current = None

    for index, item in enumerate(labels):
        if item is None:
            close()
            continue
        prefix, entity = split_label(item[0])
        if prefix == "O":
            close()
            continue
        continues = current is not None and current[0] == entity and prefix in ("I", "E", "L", "")
        if continues:
            assert current is not None
            current[2] = index
            current[3].append(item[1])
        else:
            close()
            current = [entity, index, index, [item[1]]]
        if prefix in ("E", "S", "L", "U"):
            close()
    close()
    return entities


def head_of(config: dict[str, Any] | Any) -> str:
    """The LayoutLMv3 head named first in a config's ``architectures`` (a dict or a config object).

    Raises:
        ModelLoadError: no LayoutLMv3 head there (reason MODEL_SOURCE_INVALID).

    """
    names = (
        config.get("architectures") if isinstance(config, dict) else getattr(config, "architectures", None)
    )
    for name in names or ():
        if name in HEADS:
            return str(name)
    raise ModelLoadError(
        f"config.architectures {names!r} names no LayoutLMv3 head ({', '.join(HEADS)})",
        reason=Reason.MODEL_SOURCE_INVALID,
    )


# -- the engine ----------------------------------------------------------------------------


@register_backend
class LayoutLMv3Engine(DocumentModelEngine[LayoutLMv3Options]):
    """A LayoutLMv3 checkpoint (hub id or local folder) with its processor; see the module docstring.

    Catalog options: :class:`~engines.documents.options.LayoutLMv3Options` (bounds in the module
    docstring).
    """

    backend = "layoutlmv3"
    tasks = frozenset(HEADS.values())

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """The base checks (the options), and the head against the entry's tasks (config only).

        Raises:
            ModelLoadError: see :meth:`Engine.check_spec`; a config naming no LayoutLMv3 head, or
                a head that cannot serve a listed task (MODEL_SOURCE_INVALID).
            InvalidArgumentError: an invalid option (INVALID_MODEL_OPTION).

        """
        super().check_spec(spec)
        config = read_model_config(spec.source)
        if config is not None:
            head = head_of(config)
            cls.refuse_unserved(spec, frozenset({HEADS[head]}), head)

    def load(self) -> None:
        """Load the processor (``apply_ocr`` off) and the model with the head its config names.

        Raises:
            ModelLoadError: the head cannot serve a task of the entry (MODEL_SOURCE_INVALID).
            Exception: whatever transformers raises for a missing or broken checkpoint.

        """
        import transformers
        from transformers import AutoConfig, LayoutLMv3Processor

        resolved = resolve_source(self.spec.source)
        local = resolved.path is not None
        config = AutoConfig.from_pretrained(resolved.location, local_files_only=local)
        self.head = head_of(config)
        self.served = frozenset({HEADS[self.head]})
        self.refuse_unserved(self.spec, self.served, self.head)
        processor = LayoutLMv3Processor.from_pretrained(resolved.location, local_files_only=local)
        # Words and boxes come from our OCR; the checkpoint's own Tesseract pass would only cost time.
        processor.image_processor.apply_ocr = False
        with hf_construction():  # one build at a time: engines/hf_construction.py
            model = getattr(transformers, self.head).from_pretrained(
                resolved.location,
                dtype=torch_dtype_for(self.device, self.options.dtype),
                local_files_only=local,
            )
        self.model = model.to(self.device).eval()
        self.processor = processor
        # RoBERTa-style positions start after the padding index: 514 embeddings hold 512 tokens.
        window = min(int(processor.tokenizer.model_max_length), int(config.max_position_embeddings) - 2)
        self.max_length = min(window, self.options.max_seq_length or window)
        self.stride = min(self.options.stride, self.max_length // 4)
        self.labels = [str(config.id2label[i]) for i in range(int(config.num_labels))]

    # -- blocking work on the lane ---------------------------------------------------------

    def _encode(
        self, image: Image, words: list[PageWord], page: OcrPage, question: str | None, windows: int
    ) -> tuple[Any, dict[str, Any]]:
        """Processor output for ``words`` (and ``question``), at most ``windows`` windows, on the device."""
        boxes = [normalized_box(w.box, page.width, page.height) for w in words]
        texts = [w.text for w in words]
        common = {
            "boxes": boxes,
            "truncation": "only_second" if question is not None else True,
            "max_length": self.max_length,
            "stride": self.stride,
            "return_overflowing_tokens": True,
            "padding": "longest",
            "return_tensors": "pt",
        }
        if question is not None:
            encoding = self.processor(image.convert("RGB"), question, texts, **common)
        else:
            encoding = self.processor(image.convert("RGB"), texts, **common)
        import torch

        count = min(int(encoding["input_ids"].shape[0]), windows)
        dtype = next(self.model.parameters()).dtype
        inputs = {}
        for key in ("input_ids", "bbox", "attention_mask", "pixel_values"):
            value = encoding[key]
            if isinstance(value, list):  # the processor repeats the image per window as a list
                value = torch.stack([torch.as_tensor(v) for v in value[:count]])
            value = value[:count].to(self.device)
            inputs[key] = value.to(dtype) if key == "pixel_values" else value
        return encoding, inputs

    def _answer(self, image: Image, page: OcrPage, question: str) -> DocumentAnswer:
        import torch

        backend = self.processor.tokenizer.backend_tokenizer
        backend.no_truncation()  # the Rust tokenizer keeps the previous call's truncation setting
        question_tokens = len(backend.encode(question, add_special_tokens=False).ids)
        if question_tokens > self.max_length // 2:
            raise InputTooLongError(
                f"question has {question_tokens} tokens, more than half of model "
                f"{self.spec.name!r}'s window of {self.max_length}",
                field="question",
                max_tokens=self.max_length // 2,
                model=self.spec.name,
            )
        words = page_words(page, self.options.max_words)
        if not words:
            return DocumentAnswer(answer="", score=0.0)
        encoding, inputs = self._encode(image, words, page, question, self.options.max_windows)
        with torch.inference_mode():
            output = self.model(**inputs)
        # The QA head scores the image patches too (they follow the text tokens): keep the text.
        text_length = inputs["input_ids"].shape[1]
        starts = output.start_logits[:, :text_length].float().cpu().numpy()
        ends = output.end_logits[:, :text_length].float().cpu().numpy()
        best: tuple[float, int, int] | None = None
        for window in range(starts.shape[0]):
            word_ids = encoding.word_ids(window)
            sequence_ids = encoding.sequence_ids(window)
            allowed = np.array(
                [s == 1 and w is not None for s, w in zip(sequence_ids, word_ids, strict=True)], dtype=bool
            )
            span = best_span(starts[window], ends[window], allowed, self.options.max_answer_tokens)
            if span is None:
                continue
            first, last = word_ids[span[0]], word_ids[span[1]]
            if best is None or span[2] > best[0]:
                best = (span[2], int(first), int(last))
        if best is None:
            return DocumentAnswer(answer="", score=0.0)
        score, first, last = best
        chosen = words[first : last + 1]
        text = " ".join(w.text for w in chosen)
        citation = Citation(page.page_number, Box.union([w.box for w in chosen]), text)
        return DocumentAnswer(answer=text, score=score, citations=[citation])

    def _fields(self, image: Image, page: OcrPage) -> list[DocumentField]:
        import torch

        words = page_words(page, self.options.max_words)
        if not words:
            return []
        encoding, inputs = self._encode(image, words, page, None, self.options.max_windows)
        with torch.inference_mode():
            logits = self.model(**inputs).logits.float().cpu().numpy()
        probabilities = softmax(logits)
        # One label per word, from its first sub-token (how LayoutLMv3 token heads are trained);
        # a word seen by two overlapping windows keeps the first window's label.
        labels: list[tuple[str, float] | None] = [None] * len(words)
        for window in range(probabilities.shape[0]):
            previous = None
            for position, word in enumerate(encoding.word_ids(window)):
                if word is not None and word != previous and labels[word] is None:
                    best = int(np.argmax(probabilities[window, position]))
                    labels[word] = (self.labels[best], float(probabilities[window, position, best]))
                previous = word
        fields = []
        for entity, first, last, confidence in group_bio(labels):
            chosen = words[first : last + 1]
            text = " ".join(w.text for w in chosen)
            box = Box.union([w.box for w in chosen])
            fields.append(DocumentField(entity, text, confidence, [Citation(page.page_number, box, text)]))
        return fields

    def _classify(self, image: Image, page: OcrPage) -> list[DocumentLabel]:
        import torch

        words = page_words(page, self.options.max_words)
        _, inputs = self._encode(image, words, page, None, 1)
        with torch.inference_mode():
            logits = self.model(**inputs).logits.float().cpu().numpy()[0]
        scores = softmax(logits)
        order = np.argsort(-scores, kind="stable")
        return [DocumentLabel(self.labels[i], float(scores[i])) for i in order]

    # -- task methods ----------------------------------------------------------------------

    async def answer_question(self, image: Image, page: OcrPage, question: str) -> DocumentAnswer:
        """The best span of the page's words for ``question`` (one lane job).

        Returns:
            The span's words joined by spaces, its probability P(start) * P(end) in [0, 1], and a
            citation with the union box of those words; an empty answer with score 0 for a page
            without words.

        Raises:
            TaskNotSupportedError: the model has no QA head.
            InvalidArgumentError: an empty question.
            InputTooLongError: a question over ``max_question_chars`` characters or half the
                model's window in tokens.

        """
        self.require(Task.DOCUMENT_QA)
        text = self.check_question(question)
        return await self.page_job(self._answer, image, page, text)

    async def extract_fields(self, image: Image, page: OcrPage) -> list[DocumentField]:
        """Runs of words with one entity label (BIO grouping), in reading order (one lane job).

        Each field's name is the label without its B-/I- prefix, its value the words' text, its
        confidence the mean probability of the words' labels, and its citation their union box.

        Raises:
            TaskNotSupportedError: the model has no token-classification head.

        """
        self.require(Task.EXTRACT_FIELDS)
        return await self.page_job(self._fields, image, page)

    async def classify_document(self, image: Image, page: OcrPage) -> list[DocumentLabel]:
        """Every label of ``id2label`` with its softmax score, best first (one lane job).

        Raises:
            TaskNotSupportedError: the model has no sequence-classification head.

        """
        self.require(Task.CLASSIFY_DOCUMENT)
        return await self.page_job(self._classify, image, page)
