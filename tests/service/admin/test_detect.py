"""Backend and tasks chosen from a repo's files and configs (service.admin.detect)."""

from __future__ import annotations

import pytest

from service.admin.connection import CommandError
from service.admin.detect import explicit_plan, plan_for, weight_files

BERT = ["config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json", "onnx/model.onnx"]


@pytest.mark.parametrize(
    ("configs", "backend", "tasks"),
    [
        ({"config.json": {"architectures": ["Qwen2ForCausalLM"]}}, "transformers", ("generate",)),
        ({"config.json": {"architectures": ["GPT2LMHeadModel"]}}, "transformers", ("generate",)),
        ({"config.json": {"architectures": ["BertForSequenceClassification"], "num_labels": 1}}, "cross_encoder", ("rerank",)),
        ({"config.json": {"architectures": ["BertForSequenceClassification"], "id2label": {"0": "LABEL_0"}}}, "cross_encoder", ("rerank",)),
        ({"config.json": {"architectures": ["RobertaForSequenceClassification"], "id2label": {"0": "neg", "1": "pos"}}}, "transformers_classifier", ("classify",)),
        ({"config.json": {"architectures": ["BertForTokenClassification"]}}, "transformers_ner", ("extract_entities",)),
        ({"config.json": {}, "modules.json": []}, "sentence_transformers", ("embed",)),
        ({"config.json": {}, "config_sentence_transformers.json": {"model_type": "CrossEncoder"}}, "cross_encoder", ("rerank",)),
    ],
)  # fmt: skip
def test_rules(configs, backend, tasks):
    plan = plan_for(BERT, configs)
    assert (plan.backend, plan.tasks) == (backend, tasks)
    # Pickled weights are left out when safetensors are there; ONNX exports too.
    assert plan.files == ("config.json", "model.safetensors", "tokenizer.json")


def test_pickled_weights_are_kept_when_they_are_all_there_is():
    assert weight_files(["config.json", "pytorch_model.bin"]) == ("config.json", "pytorch_model.bin")


def test_a_sparse_encoder_is_refused():
    with pytest.raises(CommandError, match="'SparseEncoder' is not served here"):
        plan_for(BERT, {"config_sentence_transformers.json": {"model_type": "SparseEncoder"}})


def test_gguf_beside_a_config_needs_file():
    paths = [*BERT, "model.Q4_0.gguf"]
    assert plan_for(paths, {"config.json": {"architectures": ["LlamaForCausalLM"]}}).backend == "transformers"
    plan = plan_for(paths, {"config.json": {}}, gguf_file="model.Q4_0.gguf")
    assert (plan.backend, plan.files, plan.entry_file) == (
        "llama_cpp",
        ("model.Q4_0.gguf",),
        "model.Q4_0.gguf",
    )
    with pytest.raises(CommandError, match=r"--file other\.gguf is not a GGUF file of this repo"):
        plan_for(paths, {}, gguf_file="other.gguf")


def test_explicit_backend_and_tasks():
    plan = explicit_plan(BERT, "transformers_classifier", ["classify"], None)
    assert plan.backend == "transformers_classifier" and plan.files == (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    )
    with pytest.raises(CommandError, match="needs a GGUF file"):
        explicit_plan(BERT, "llama_cpp", ["generate"], None)
