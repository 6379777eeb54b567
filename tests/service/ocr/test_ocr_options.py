"""The OCR backends' typed catalog options (engines/ocr/options.py): catalogs parse, mistakes are refused.

The options are checked when the catalog is read (``check_spec``), before any model loads, with
INVALID_MODEL_OPTION naming the option and what is allowed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.base import ModelSpec
from engines.errors import InvalidArgumentError
from engines.ocr.options import RapidOcrOptions, TesseractOptions
from engines.ocr.rapidocr_engine import PageOrientation, SpaceRestorer
from engines.options import parse_options
from engines.registry import engine_class
from engines.types import Task
from service.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[3]
OCR_BACKENDS = ("rapidocr", "tesseract")


def _refusal(backend: str, options: dict) -> InvalidArgumentError:
    spec = ModelSpec(
        name="bad",
        backend=backend,
        tasks=(Task.OCR,),
        source="system" if backend == "tesseract" else "pkg://rapidocr_onnxruntime/models",
        options=options,
    )
    with pytest.raises(InvalidArgumentError) as caught:
        engine_class(backend).check_spec(spec)
    assert caught.value.reason == "INVALID_MODEL_OPTION"
    return caught.value


@pytest.mark.parametrize("path", [None, ROOT / "deploy/k8s/base/catalog.yaml"], ids=["default", "k8s"])
def test_the_catalogs_ocr_entries_parse(path):
    specs = [s for s in load_catalog(path).specs.values() if s.backend in OCR_BACKENDS]
    assert {s.backend for s in specs} == set(OCR_BACKENDS)
    for spec in specs:
        options = parse_options(engine_class(spec.backend).options_model, spec.options, backend=spec.backend)
        assert isinstance(options, RapidOcrOptions | TesseractOptions)


def test_rapidocr_defaults_are_the_measured_ones_of_its_wrappers():
    # SpaceRestorer's and PageOrientation's own defaults are the values measured and documented there.
    options = RapidOcrOptions()
    restorer = SpaceRestorer.__init__.__defaults__
    assert (options.space_probability, options.wide_gap_space_probability, options.wide_gap) == restorer
    assert (options.cls_thresh,) == PageOrientation.__init__.__defaults__
    assert (options.threads, options.text_score, options.word_gap) == (None, 0.5, 0.0)


@pytest.mark.parametrize(
    ("backend", "options", "option", "words"),
    [
        ("rapidocr", {"text_score": 1.5}, "text_score", "less than or equal to 1"),
        ("rapidocr", {"cls_thresh": -0.1}, "cls_thresh", "greater than or equal to 0"),
        ("rapidocr", {"word_gap": -1}, "word_gap", "greater than or equal to 0"),
        ("rapidocr", {"threads": 0}, "threads", "greater than or equal to 1"),
        ("rapidocr", {"det_model": ""}, "det_model", "at least 1 character"),
        ("tesseract", {"psm": 14}, "psm", "less than or equal to 13"),
        ("tesseract", {"oem": "lstm"}, "oem", "valid integer"),
        ("tesseract", {"timeout_s": 0}, "timeout_s", "greater than 0"),
        ("tesseract", {"default_language": ""}, "default_language", "at least 1 character"),
    ],
)
def test_a_value_out_of_range_names_the_option_and_the_bound(backend, options, option, words):
    error = _refusal(backend, options)
    assert error.message.startswith(f"option {option}: ") and words in error.message
    assert error.metadata["option"] == option


def test_a_wide_gap_may_not_need_more_evidence_than_any_gap():
    error = _refusal("rapidocr", {"space_probability": 0.001})  # the wide-gap default is 0.002
    assert "wide_gap_space_probability (0.002) must not exceed space_probability (0.001)" in error.message
    # Space restoring turned off (1) and a lower wide-gap bound are both fine.
    parse_options(
        RapidOcrOptions, {"space_probability": 1, "wide_gap_space_probability": 0.0}, backend="rapidocr"
    )


def test_a_misspelt_option_is_refused_with_the_closest_known_one():
    error = _refusal("tesseract", {"timeout": 30})
    assert "unknown option 'timeout' for backend tesseract (did you mean timeout_s?)" in error.message
    error = _refusal("rapidocr", {"space_prob": 0.1})
    assert "(did you mean space_probability?)" in error.message
