"""ExtractEntities through the transformers token-classification backend (MiniLM + a head trained here)."""

from __future__ import annotations

import pytest

from engines.base import ModelSpec
from engines.encoder_types import EntityRequest
from engines.executor import DeviceExecutor
from engines.ner.transformers_engine import TransformersNerEngine
from engines.types import Task
from tests.encoders.conftest import minilm_dir
from tests.encoders.training import train_token_classifier


@pytest.fixture(scope="module")
async def ner_engine(tmp_path_factory):
    out = tmp_path_factory.mktemp("token-classifier")
    train_token_classifier(minilm_dir(), out, steps=40, lr=5e-4)
    executor = DeviceExecutor("cpu-ner-test")
    spec = ModelSpec(
        name="tiny-ner", backend="transformers_ner", tasks=(Task.EXTRACT_ENTITIES,), source=str(out)
    )
    engine = TransformersNerEngine(spec, "cpu", executor)
    await executor.run(engine.load)
    yield engine
    await executor.run(engine.unload)
    executor.shutdown()


async def test_sub_words_are_aggregated_into_entities_with_offsets(ner_engine):
    texts = ["Tim Cook visited Paris on Monday", "Alan Turing designed an early computer"]
    result = await ner_engine.extract_entities(EntityRequest(inputs=texts))
    for text, entities in zip(texts, result.entities, strict=True):
        for entity in entities:
            assert text[entity.start : entity.end] == entity.text
            assert 0.0 <= entity.score <= 1.0
    assert [(x.text, x.label) for x in result.entities[0]] == [("Tim Cook", "PER")]
    assert [(x.text, x.label, x.start, x.end) for x in result.entities[1]] == [("Alan Turing", "PER", 0, 11)]
    assert result.prompt_tokens > 0


async def test_min_score_and_label_filters(ner_engine):
    result = await ner_engine.extract_entities(
        EntityRequest(inputs=["Tim Cook visited Paris on Monday"], labels=["ORG"])
    )
    assert result.entities == [[]]
    result = await ner_engine.extract_entities(
        EntityRequest(inputs=["Tim Cook visited Paris"], min_score=1.0)
    )
    assert all(x.score >= 1.0 for x in result.entities[0])


async def test_a_text_over_max_input_chars_is_refused_before_any_work(ner_engine):
    from engines.errors import InputTooLongError
    from engines.ner.options import MAX_INPUT_CHARS

    with pytest.raises(InputTooLongError) as caught:
        await ner_engine.extract_entities(EntityRequest(inputs=["ok", "x " * (MAX_INPUT_CHARS // 2 + 1)]))
    assert caught.value.metadata["field"] == "inputs[1]"
    assert caught.value.metadata["max_chars"] == str(MAX_INPUT_CHARS)


async def test_entities_past_the_model_window_are_still_found(ner_engine):
    # The pipeline reads long texts in overlapping windows: nothing is cut at the model's window.
    filler = "the weather was mild and nothing else happened that day . " * 400  # 23,600 characters
    text = filler + "Tim Cook visited Paris on Monday"
    result = await ner_engine.extract_entities(EntityRequest(inputs=[text]))
    assert ("Tim Cook", "PER") in [(x.text, x.label) for x in result.entities[0]]
