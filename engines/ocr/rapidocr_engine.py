"""OCR with RapidOCR: PP-OCRv4 detection, direction classification and recognition on ONNX Runtime.

The catalog ``source`` is a folder holding the three ONNX files (the ``rapidocr-onnxruntime``
package ships them: ``pkg://rapidocr_onnxruntime/models``). Catalog options: ``det_model``,
``rec_model``, ``cls_model`` (file names in that folder; defaults are the packaged PP-OCRv4
ones), ``threads`` (ONNX Runtime intra-op threads; default: all cores), ``text_score``
(minimum line confidence kept, default 0.5), ``word_gap`` (see :func:`split_words`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from PIL import Image

from engines.errors import InvalidArgumentError
from engines.ocr.base import OcrEngine
from engines.ocr.layout import reading_order, same_line
from engines.ocr.types import Box, OcrLine, OcrWord
from engines.registry import register_backend
from engines.sources import resolve_source

# The packaged PP-OCRv4 recognition model reads Chinese and Latin script (English).
LANGUAGES = {"en": "en", "eng": "en", "zh": "zh", "chi_sim": "zh"}
DEFAULT_FILES = {
    "det_model": "ch_PP-OCRv4_det_infer.onnx",
    "rec_model": "ch_PP-OCRv4_rec_infer.onnx",
    "cls_model": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
}


def split_words(
    chars: Sequence[str], boxes: Sequence[Box], scores: Sequence[float], gap_ratio: float
) -> list[OcrWord]:
    """Group a line's characters into words at spaces and at wide gaps.

    A gap wider than ``gap_ratio`` times the median character width also starts a new word
    (``gap_ratio`` 0 turns that off, the default: PP-OCR's character boxes are CTC cells of
    nearly fixed width, so gaps measured between them are only a rough cue; the packaged
    recognizer, trained mostly on Chinese, sometimes drops the space between Latin words).
    """
    widths = [b.width for c, b in zip(chars, boxes, strict=True) if c.strip()]
    threshold = gap_ratio * (statistics.median(widths) if widths else 0.0)
    words: list[OcrWord] = []
    current: list[int] = []

    def flush() -> None:
        if current:
            text = "".join(chars[i] for i in current)
            confidence = sum(scores[i] for i in current) / len(current)
            words.append(OcrWord(text, Box.union([boxes[i] for i in current]), confidence))
            current.clear()

    for i, char in enumerate(chars):
        if not char.strip():
            flush()
            continue
        if (
            current
            and gap_ratio > 0
            and boxes[i].x - (boxes[current[-1]].x + boxes[current[-1]].width) > threshold
        ):
            flush()
        current.append(i)
    flush()
    return words


def merge_fragments(lines: list[OcrLine]) -> list[OcrLine]:
    """Join detections that are pieces of one text line (the detector splits widely spaced text).

    Fragments are joined left to right with a space when :func:`same_line` holds; the merged
    confidence is the character-weighted mean.
    """
    merged: list[OcrLine] = []
    for line in sorted(lines, key=lambda item: item.box.x):
        target = next((m for m in merged if same_line(m.box, line.box)), None)
        if target is None:
            merged.append(OcrLine(line.text, line.box, line.confidence, list(line.words)))
            continue
        weight_a, weight_b = len(target.text), len(line.text)
        target.confidence = (target.confidence * weight_a + line.confidence * weight_b) / max(
            1, weight_a + weight_b
        )
        target.text = f"{target.text} {line.text}"
        target.box = Box.union([target.box, line.box])
        target.words.extend(line.words)
    return merged


@register_backend
class RapidOcrEngine(OcrEngine):
    """RapidOCR (``rapidocr-onnxruntime``) on the CPU."""

    backend = "rapidocr"
    int_options = ("threads",)

    def load(self) -> None:
        """Create the three ONNX Runtime sessions."""
        from rapidocr_onnxruntime import RapidOCR

        folder = resolve_source(self.spec.source).path
        if folder is None:
            raise ValueError("rapidocr needs a local folder of ONNX models as its source")
        paths = {key: str(folder / self.option(key, name)) for key, name in DEFAULT_FILES.items()}
        threads = int(self.option("threads", -1))
        self.ocr = RapidOCR(
            det_model_path=paths["det_model"],
            rec_model_path=paths["rec_model"],
            cls_model_path=paths["cls_model"],
            intra_op_num_threads=threads,
            inter_op_num_threads=threads,
        )
        self.text_score = float(self.option("text_score", 0.5))
        self.word_gap = float(self.option("word_gap", 0.0))

    def unload(self) -> None:
        """Drop the sessions and stop the PDF worker."""
        self.pdf_worker.stop()
        self.ocr = None

    def resolve_languages(self, languages: tuple[str, ...]) -> tuple[str, ...]:
        """``en`` and ``zh`` (the packaged model's); anything else is refused."""
        resolved = []
        for code in languages:
            if code.lower() not in LANGUAGES:
                raise InvalidArgumentError(
                    f"rapidocr's model reads en and zh, not {code!r}; "
                    "use a tesseract model for other languages",
                    reason="UNSUPPORTED_LANGUAGE",
                    field="options.languages",
                    language=code,
                )
            resolved.append(LANGUAGES[code.lower()])
        return tuple(resolved)

    def recognize(
        self, image: Image.Image, languages: tuple[str, ...], *, words: bool = True
    ) -> list[OcrLine]:
        """Detect, classify and recognize lines; words come from the per-character boxes.

        The per-character positions cost about 3% of a page's time, so they are computed only
        when ``words`` is asked for, or when ``word_gap`` needs them to split the text.
        """
        with_chars = words or self.word_gap > 0
        result, _ = self.ocr(image, return_word_box=with_chars, text_score=self.text_score)
        lines: list[OcrLine] = []
        for item in result or []:
            quad, text, score = item[0], item[1], float(item[2])
            line_words: list[OcrWord] = []
            if len(item) > 3 and item[3] and len(item[3]) == len(item[4]):
                char_boxes = [Box.around(points) for points in item[3]]
                line_words = split_words(item[4], char_boxes, [float(s) for s in item[5]], self.word_gap)
            # Both paths give the same text: words joined by one space.
            line_text = " ".join(w.text for w in line_words) if line_words else " ".join(text.split())
            lines.append(OcrLine(text=line_text, box=Box.around(quad), confidence=score, words=line_words))
        lines = merge_fragments(lines)
        return [lines[i] for i in reading_order([line.box for line in lines])]
