"""ExtractEntities through the transformers token-classification backend (MiniLM + a head trained here)."""

from __future__ import annotations

import pytest

from engines.base import ModelSpec
from engines.encoder_types import EntityRequest
from engines.executor import DeviceExecutor
from engines.ner.transformers_engine import TransformersNerEngine
from engines.types import Task
from tests.engines.encoders.conftest import minilm_dir
from tests.engines.encoders.training import train_token_classifier


@pytest.fixture(scope="module")
def ner_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("token-classifier")
    train_token_classifier(minilm_dir(), out, steps=40, lr=5e-4)
    return out


@pytest.fixture(scope="module")
def executor():
    ex = DeviceExecutor("cpu-ner-test")
    yield ex
    ex.shutdown()


def ner_spec(source, **options) -> ModelSpec:
    return ModelSpec(
        name="tiny-ner",
        backend="transformers_ner",
        tasks=(Task.EXTRACT_ENTITIES,),
        source=str(source),
        options=options,
    )


@pytest.fixture(scope="module")
async def ner_engine(ner_dir, executor):
    engine = TransformersNerEngine(ner_spec(ner_dir), "cpu", executor)
    await executor.run(engine.load)
    yield engine
    await executor.run(engine.unload)


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


# Names at the start, the end, inside words and across the 512-token windows of a long text.
FILLER = "the weather was mild and nothing else happened that day . "
EQUALITY_TEXTS = [
    "Tim Cook visited Paris on Monday",
    "Alan Turing designed an early computer",
    "yesterday Ada Lovelace and Grace Hopper met Linus Torvalds",
    "no names here at all",
    "",
    "Ünïcödé: Zoë Saldaña met 東京 Björk 🙂",
    FILLER * 60 + "Tim Cook visited Paris" + FILLER * 30 + " Alan Turing",
    (FILLER * 8 + "Grace Hopper ") * 12,
]


def as_tuples(found):
    return [(e["start"], e["end"], str(e["entity_group"])) for e in found]


@pytest.mark.parametrize("aggregation", ["simple", "first", "max"])
async def test_entities_equal_the_librarys_pipeline(ner_dir, executor, aggregation):
    # One tokenization (ids, offsets, windows) feeds the model; the entities are the pipeline's own
    # on the same texts, spans and labels equal, scores to float rounding (batches pad differently).
    from transformers import pipeline

    engine = TransformersNerEngine(ner_spec(ner_dir, aggregation=aggregation), "cpu", executor)
    await executor.run(engine.load)
    try:

        def no_second_tokenization(*args, **kwargs):
            raise AssertionError("the pipeline tokenized a text")

        engine.pipeline.preprocess = no_second_tokenization
        library = pipeline(
            "token-classification", model=str(ner_dir), aggregation_strategy=aggregation, stride=16
        )
        want = library(EQUALITY_TEXTS)
        result = await engine.extract_entities(EntityRequest(inputs=EQUALITY_TEXTS))
        assert sum(len(w) for w in want) >= 10  # the set has entities to compare
        for text, got, expected in zip(EQUALITY_TEXTS, result.entities, want, strict=True):
            assert [(e.start, e.end, e.label) for e in got] == sorted(as_tuples(expected)), text[:60]
            for entity, item in zip(got, sorted(expected, key=lambda x: (x["start"], x["end"])), strict=True):
                assert entity.text == text[entity.start : entity.end]
                assert entity.score == pytest.approx(float(item["score"]), abs=1e-5)
    finally:
        await executor.run(engine.unload)


def test_windows_equal_the_tokenizers_overflowing_encodings(ner_engine):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_dir()))
    for text in EQUALITY_TEXTS:  # bounded: the fixed set
        [got] = ner_engine.tokens.encode_windows([text], 16)
        want = tokenizer(
            text,
            truncation=True,
            max_length=ner_engine.tokens.max_length,
            stride=16,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
        )
        assert [w.input_ids for w in got.windows] == want["input_ids"]
        assert got.offsets == [[tuple(o) for o in row] for row in want["offset_mapping"]]
        assert got.special_tokens_mask == want["special_tokens_mask"]
        assert got.tokens == len(tokenizer(text)["input_ids"])
    long_text = EQUALITY_TEXTS[6]
    assert len(ner_engine.tokens.encode_windows([long_text], 16)[0].windows) > 1


def test_a_long_texts_windows_run_in_forward_passes_within_the_token_bound():
    from engines.batching.tokens import TokenIds
    from engines.ner.transformers_engine import forward_groups

    windows = [TokenIds([0] * n, [0] * n) for n in (512, 512, 100, 512, 30, 600)]
    groups = forward_groups(windows, 1024)
    assert [[len(w) for w in g] for g in groups] == [[512, 512], [100, 512], [30], [600]]
    assert [w for g in groups for w in g] == windows
    assert all(len(g) * max(len(w) for w in g) <= 1024 for g in groups if len(g) > 1)


def test_windows_refuse_a_stride_that_leaves_no_room_and_a_slow_tokenizer():
    from transformers import AutoTokenizer

    from engines.batching.tokens import TokenCounter
    from engines.errors import InvalidArgumentError

    tokens = TokenCounter(AutoTokenizer.from_pretrained(str(minilm_dir())), 12, "tiny")
    assert (
        len(
            tokens.encode_windows(["one two three four five six seven eight nine ten eleven twelve"], 9)[
                0
            ].windows
        )
        > 1
    )
    with pytest.raises(InvalidArgumentError, match="stride of 10 tokens"):
        tokens.encode_windows(["a text"], 10)  # 12 - [CLS] - [SEP] = 10 ids per window: no advance
    tokens._raw = None  # a slow (Python) tokenizer has no offsets to read windows from
    with pytest.raises(RuntimeError, match="fast tokenizer"):
        tokens.encode_windows(["a text"], 2)
