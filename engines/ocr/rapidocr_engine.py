"""OCR with RapidOCR: PP-OCRv4 detection, direction classification and recognition on ONNX Runtime.

The catalog ``source`` is a folder holding the three ONNX files (the ``rapidocr-onnxruntime``
package ships them: ``pkg://rapidocr_onnxruntime/models``). Catalog options:
:class:`~engines.ocr.options.RapidOcrOptions` (``word_gap``: see :func:`split_words`;
``space_probability``, ``wide_gap_space_probability`` and ``wide_gap``: see :class:`SpaceRestorer`;
``cls_thresh``: see :class:`PageOrientation`).
"""

from __future__ import annotations

import itertools
import statistics
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from engines.errors import InvalidArgumentError
from engines.ocr.base import OcrEngine
from engines.ocr.layout import reading_order, same_line
from engines.ocr.options import RapidOcrOptions
from engines.ocr.types import Box, OcrLine, OcrWord
from engines.reasons import Reason
from engines.registry import register_backend
from engines.sources import file_in_folder, resolve_source
from engines.types import MemoryUsage

# The packaged PP-OCRv4 recognition model reads Chinese and Latin script (English).
LANGUAGES = {"en": "en", "eng": "en", "zh": "zh", "chi_sim": "zh"}
#: Tallest height-to-width ratio handed to RapidOCR. Its detector scales the image's short side up
#: to 736 px, so the work grows with the ratio: RapidOCR letterboxes wide images itself (to about
#: 4:1) but not tall ones (see docs/architecture/design-notes.md#narrow-images-and-rapidocr).
#: Taller images are padded on the right to this ratio, which moves no coordinate.
MAX_TALL_RATIO = 4


def pad_tall(image: Image.Image) -> Image.Image:
    """``image`` widened on the right to a height of at most :data:`MAX_TALL_RATIO` times its width.

    The padding takes the colour of the image's right edge (its median), so no new edge appears
    for the detector to read. Images that are not that tall come back unchanged.
    """
    width, height = image.size
    if height <= MAX_TALL_RATIO * width:
        return image
    edge = np.asarray(image.crop((width - 1, 0, width, height)))
    fill = tuple(int(v) for v in np.median(edge.reshape(height, -1), axis=0))
    padded = Image.new(image.mode, (-(-height // MAX_TALL_RATIO), height), fill if len(fill) > 1 else fill[0])
    padded.paste(image, (0, 0))
    return padded


def _spaced_script(token: str) -> bool:
    """Whether a dictionary entry is text written with spaces between words (no CJK wide forms)."""
    return all(unicodedata.east_asian_width(char) not in ("W", "F") for char in token)


class SpaceRestorer:
    """Puts back the spaces PP-OCR's CTC recognizer reads but does not emit (a wrapper of its decoder).

    The packaged recognizer, trained mostly on Chinese, keeps the space class's probability
    below the blank's between most Latin words, so greedy CTC decoding glues them
    (``Revenuegrewbytenpercent``). Where the recognizer did not emit a space, each gap between
    two emitted characters of space-separated scripts (Latin, digits, Cyrillic...; never
    between CJK characters) becomes a space when, on the gap's blank frames, the space class's
    highest probability is at least ``space_probability``, or at least
    ``wide_gap_space_probability`` when the gap spans ``wide_gap`` times the line's median
    distance between characters, in frames. That frame then decodes as the space, with the
    frame's probability of holding no character as its confidence.

    The defaults separate the gaps inside words from those between them on rendered English (see
    docs/architecture/design-notes.md#word-gaps-in-rapidocrs-output); ``bench/ocr.py`` reports
    the word error rate with and without.

    Args:
        decode: rapidocr's ``CTCLabelDecode`` (its ``character`` list: blank first, space last).
        space_probability: the space probability that alone makes a gap a space.
        wide_gap_space_probability: the lower bound for a wide gap.
        wide_gap: how many median character distances make a gap wide.

    """

    def __init__(
        self,
        decode: Callable[..., Any],
        space_probability: float = 0.01,
        wide_gap_space_probability: float = 0.002,
        wide_gap: float = 1.4,
    ) -> None:
        self.decode = decode
        self.character = list(decode.character)
        self.space = self.character.index(" ")
        self.spaced = np.array([_spaced_script(c) for c in self.character])
        self.space_probability = space_probability
        self.wide_gap_space_probability = wide_gap_space_probability
        self.wide_gap = wide_gap

    def __call__(self, preds: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        """Decode ``preds`` (batch, frames, classes: softmax output) with the spaces restored."""
        if self.space_probability < 1:
            preds = preds.copy()
            for row in preds:
                self.restore(row)
        return self.decode(preds, *args, **kwargs)

    def restore(self, probs: np.ndarray) -> None:
        """Mark the frames that read as spaces in one line's (frames, classes) array, in place."""
        best = probs.argmax(axis=1)
        # The frames where greedy decoding emits a character other than the space.
        starts = [
            t
            for t in range(len(best))
            if best[t] not in (0, self.space) and (t == 0 or best[t] != best[t - 1])
        ]
        if len(starts) < 2:
            return
        pitch = float(np.median(np.diff(starts)))
        for first, second in itertools.pairwise(starts):
            left, right = best[first], best[second]
            between = best[first + 1 : second]
            if (between == self.space).any() or not (self.spaced[left] and self.spaced[right]):
                continue
            blanks = [t for t in range(first + 1, second) if best[t] == 0]
            if not blanks:
                continue
            frame = max(blanks, key=lambda t: probs[t, self.space])
            score = probs[frame, self.space]
            wide = second - first >= self.wide_gap * pitch
            if score >= self.space_probability or (wide and score >= self.wide_gap_space_probability):
                # Swap blank and space: the frame decodes as a space, with the blank's score.
                probs[frame, 0], probs[frame, self.space] = score, probs[frame, 0]


class PageOrientation:
    """Turns a page's line crops by 180 degrees only when most of them read as upside down.

    PP-OCR's direction classifier (``ch_ppocr_mobile_v2.0_cls``) sees each crop squeezed to
    48 x 192 pixels, so on long upright English lines it often says "180" (with scores up to
    0.995 on rendered DejaVu lines, against 0.94-1.0 on truly upside-down ones); turning such
    a line makes it unreadable (an empty or one-letter line: the line is lost). Pages are
    scanned upside down as a whole, so the classifier's answers are taken as a page vote: the
    crops it scores "180" above ``threshold`` are turned only when they are more than half of
    the page's crops.

    Args:
        classify: rapidocr's ``TextClassifier``, built with a threshold it never reaches (it
            classifies, this wrapper turns).
        threshold: the score above which a crop counts as upside down (rapidocr's default 0.9).

    """

    def __init__(self, classify: Callable[..., Any], threshold: float = 0.9) -> None:
        self.classify = classify
        self.threshold = threshold

    def __call__(self, crops: list[np.ndarray]) -> tuple[list[np.ndarray], list[Any], float]:
        """Classify ``crops`` (H x W x 3 arrays); returns them turned or not, the answers, the seconds."""
        crops, answers, elapsed = self.classify(crops)
        turned = {i for i, (label, score) in enumerate(answers) if "180" in label and score > self.threshold}
        if len(turned) * 2 > len(answers):
            crops = [crop[::-1, ::-1] if i in turned else crop for i, crop in enumerate(crops)]
        return crops, answers, elapsed


def split_words(
    chars: Sequence[str], boxes: Sequence[Box], scores: Sequence[float], gap_ratio: float
) -> list[OcrWord]:
    """Group a line's characters into words at spaces and at wide gaps.

    A gap wider than ``gap_ratio`` times the median character width also starts a new word
    (``gap_ratio`` 0 turns that off, the default: PP-OCR's character boxes are CTC cells of
    nearly fixed width, so gaps measured between them are only a rough cue; the spaces the
    recognizer reads come back through :class:`SpaceRestorer`).
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


#: Peak working memory of one page (640 x 480) over the model files: ONNX Runtime's buffers for the
#: detector's feature maps and the recognizer's line batches (measured, see required_memory).
RAPIDOCR_PAGE_BYTES = 250 * 1024 * 1024


@register_backend
class RapidOcrEngine(OcrEngine[RapidOcrOptions]):
    """RapidOCR (``rapidocr-onnxruntime``) on the CPU."""

    backend = "rapidocr"

    def required_memory(self) -> MemoryUsage:
        """The three ONNX files (the sessions' weights) plus the working memory of one page, in host RAM.

        :data:`RAPIDOCR_PAGE_BYTES` is the peak over the files for a 640 x 480 page
        (``python -m bench.memory_estimate``; the peak is transient and varies from run to run, see
        docs/architecture/design-notes.md#memory-estimates-against-measured-peaks); the detector works on
        the page at no less than 736 pixels a side, so larger pages need more.

        Raises:
            ValueError: the source is not a local folder.
            FileNotFoundError: one of the three model files is missing.

        """
        files = list(self._model_files().values())
        missing = [str(path) for path in files if not path.is_file()]
        if missing:
            raise FileNotFoundError(f"rapidocr model files not found: {', '.join(missing)}")
        return MemoryUsage(ram_bytes=sum(path.stat().st_size for path in files) + RAPIDOCR_PAGE_BYTES)

    def _model_files(self) -> dict[str, Path]:
        """The three ONNX files by option, each inside the source folder (:func:`file_in_folder`).

        Raises:
            ValueError: the source is not a local folder.
            ModelLoadError: a file option resolves outside the folder (MODEL_SOURCE_INVALID).

        """
        folder = resolve_source(self.spec.source).path
        if folder is None:
            raise ValueError("rapidocr needs a local folder of ONNX models as its source")
        names = {name: getattr(self.options, name) for name in ("det_model", "rec_model", "cls_model")}
        return {
            name: file_in_folder(folder, file, option=name, model=self.spec.name)
            for name, file in names.items()
        }

    def estimated_load_bytes(self) -> int:
        """:meth:`required_memory` (host RAM: the sessions run on the CPU)."""
        return self.required_memory().ram_bytes

    def load(self) -> None:
        """Create the three ONNX Runtime sessions."""
        from rapidocr_onnxruntime import RapidOCR

        files = self._model_files()
        # rapidocr leaves ONNX Runtime's own default (every core) for -1.
        threads = self.options.threads if self.options.threads is not None else -1
        self.ocr = RapidOCR(
            det_model_path=str(files["det_model"]),
            rec_model_path=str(files["rec_model"]),
            cls_model_path=str(files["cls_model"]),
            intra_op_num_threads=threads,
            inter_op_num_threads=threads,
            cls_thresh=2.0,  # never reached: PageOrientation turns the crops
        )
        self.ocr.text_cls = PageOrientation(self.ocr.text_cls, self.options.cls_thresh)
        self.ocr.text_rec.postprocess_op = SpaceRestorer(
            self.ocr.text_rec.postprocess_op,
            space_probability=self.options.space_probability,
            wide_gap_space_probability=self.options.wide_gap_space_probability,
            wide_gap=self.options.wide_gap,
        )

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
                    reason=Reason.UNSUPPORTED_LANGUAGE,
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
        with_chars = words or self.options.word_gap > 0
        result, _ = self.ocr(pad_tall(image), return_word_box=with_chars, text_score=self.options.text_score)
        lines: list[OcrLine] = []
        for item in result or []:
            quad, text, score = item[0], item[1], float(item[2])
            line_words: list[OcrWord] = []
            if len(item) > 3 and item[3] and len(item[3]) == len(item[4]):
                char_boxes = [Box.around(points) for points in item[3]]
                line_words = split_words(
                    item[4], char_boxes, [float(s) for s in item[5]], self.options.word_gap
                )
            # Both paths give the same text: words joined by one space.
            line_text = " ".join(w.text for w in line_words) if line_words else " ".join(text.split())
            lines.append(OcrLine(text=line_text, box=Box.around(quad), confidence=score, words=line_words))
        lines = merge_fragments(lines)
        return [lines[i] for i in reading_order([line.box for line in lines])]
