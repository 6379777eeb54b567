"""Hugging Face models built one at a time (engines/hf_construction.py), on two real SmolLM2 loads.

Two SmolLM2 transformers entries loaded together must both load, and so must every later load:
transformers' ``from_pretrained`` swaps ``PreTrainedModel.tie_weights`` for a no-op while it builds
and puts back what it saved, so two overlapping builds can save each other's no-op, and every later
load in the process lacks its tied ``lm_head`` ("Cannot copy out of meta tensor"; see
docs/architecture/design-notes.md#one-transformers-build-at-a-time). Each build here is held 0.5 s inside
``from_pretrained``, so without the lock the two overlap every time.
"""

from __future__ import annotations

import threading
import time

import transformers
from transformers import PreTrainedModel

from engines.base import ModelSpec
from engines.executor import DeviceExecutor
from engines.generation.transformers_engine import TransformersGenerationEngine
from engines.types import Task
from tests.conftest import HF_CHAT_MODEL, TEST_CATALOG


def test_two_models_loading_at_once_build_one_after_the_other_and_keep_their_tied_weights(monkeypatch):
    entry = TEST_CATALOG["models"][HF_CHAT_MODEL]
    original_tie_weights = PreTrainedModel.tie_weights
    original_build = transformers.AutoModelForCausalLM.from_pretrained
    spans: list[tuple[float, float]] = []

    def slow_build(*args, **kwargs):
        start = time.monotonic()
        time.sleep(0.5)  # inside the build: a second build now would overlap it
        model = original_build(*args, **kwargs)
        spans.append((start, time.monotonic()))
        return model

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", slow_build)
    engines = []
    for name in ("hf-build-a", "hf-build-b"):
        spec = ModelSpec(
            name=name,
            backend="transformers",
            tasks=(Task.GENERATE,),
            source=entry["source"],
            options=entry["options"],
        )
        engines.append(TransformersGenerationEngine(spec, "cpu", DeviceExecutor(f"cpu-{name}")))
    errors: list[BaseException] = []

    def load(engine: TransformersGenerationEngine) -> None:
        try:
            engine.load()
        except BaseException as exc:  # reported below, with the other thread's outcome
            errors.append(exc)

    threads = [threading.Thread(target=load, args=(engine,)) for engine in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)  # bounded: a load takes a few seconds
    try:
        assert not errors, errors
        assert len(spans) == 2
        first, second = sorted(spans)
        assert first[1] <= second[0], spans  # one build after the other
        assert PreTrainedModel.tie_weights is original_tie_weights
        for engine in engines:
            model = engine.model
            assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
            assert not any(parameter.is_meta for parameter in model.parameters())
    finally:
        for engine in engines:
            engine.unload()
            engine.executor.shutdown()
