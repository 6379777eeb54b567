"""Catalog options of the OCR backends (``rapidocr``, ``tesseract``), typed.

A light module (pydantic only): the catalog check and the catalog's JSON Schema import it without
ONNX Runtime or pytesseract. Both backends also take ``niceness`` (:class:`EngineOptions`); an OCR
lane runs at nice 10 when it is unset (``OcrEngine.default_niceness``).
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, NonNegativeFloat, PositiveFloat, model_validator

from engines.options import (
    OVERRIDE,
    THREADS_OVERRIDE,
    AtLeastOne,
    EngineOptions,
    Fraction,
    LoadOverride,
    NonEmptyStr,
)

#: The PP-OCR ONNX files the ``rapidocr-onnxruntime`` package ships, by option name.
DEFAULT_FILES = {
    "det_model": "ch_PP-OCRv4_det_infer.onnx",
    "rec_model": "ch_PP-OCRv4_rec_infer.onnx",
    "cls_model": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
}


class RapidOcrOptions(EngineOptions):
    """Options of the ``rapidocr`` backend (PP-OCRv4 on ONNX Runtime, CPU)."""

    det_model: NonEmptyStr = DEFAULT_FILES["det_model"]
    """File name of the text detection ONNX model in the source folder."""
    rec_model: NonEmptyStr = DEFAULT_FILES["rec_model"]
    """File name of the text recognition ONNX model in the source folder."""
    cls_model: NonEmptyStr = DEFAULT_FILES["cls_model"]
    """File name of the line direction classifier ONNX model in the source folder."""
    threads: Annotated[AtLeastOne | None, THREADS_OVERRIDE] = None
    """ONNX Runtime intra-op and inter-op threads of each of the three sessions; unset (or more than
    the machine's cores, which rapidocr ignores): ONNX Runtime's default, every core."""
    text_score: Annotated[Fraction, OVERRIDE] = 0.5
    """Lowest recognition confidence (0-1) of a line that is kept."""
    cls_thresh: Annotated[Fraction, OVERRIDE] = 0.9
    """Direction classifier score (0-1) above which a line crop counts as upside down; the page is
    turned only when most of its crops do."""
    word_gap: Annotated[NonNegativeFloat, LoadOverride(at_most=100)] = 0.0
    """Gap between characters, in median character widths, that also splits a word; 0: only spaces
    split words."""
    space_probability: Annotated[Fraction, OVERRIDE] = 0.01
    """Space-class probability (0-1) on a gap between characters that restores a space the
    recognizer dropped; 1: no space restoring."""
    wide_gap_space_probability: Annotated[Fraction, OVERRIDE] = 0.002
    """Space-class probability (0-1) that restores a space on a wide gap; at most space_probability."""
    wide_gap: Annotated[NonNegativeFloat, LoadOverride(at_most=100)] = 1.4
    """Gap, in median distances between characters (recognizer frames), from which a gap is wide."""

    @model_validator(mode="after")
    def _wide_gap_needs_less(self) -> Self:
        # A wide gap is the weaker evidence's case: a larger bound there could never restore a space.
        if self.wide_gap_space_probability > self.space_probability:
            raise ValueError(
                f"wide_gap_space_probability ({self.wide_gap_space_probability}) must not exceed "
                f"space_probability ({self.space_probability}): a wide gap needs less evidence of a space"
            )
        return self


class TesseractOptions(EngineOptions):
    """Options of the ``tesseract`` backend (the installed ``tesseract`` program)."""

    psm: Annotated[int, Field(ge=0, le=13), OVERRIDE] = 3
    """Tesseract page segmentation mode (0-13); 3: automatic layout analysis."""
    oem: Annotated[int, Field(ge=0, le=3), OVERRIDE] = 1
    """Tesseract engine mode (0-3); 1: the LSTM recognizer only."""
    default_language: NonEmptyStr = "eng"
    """Tesseract language name(s), joined by +, read when a request names no language."""
    timeout_s: Annotated[PositiveFloat, LoadOverride(at_most=600)] = 120.0
    """Seconds one page's tesseract process may run before it is killed."""
