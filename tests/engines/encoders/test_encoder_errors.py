"""Bad input to the encoder RPCs: a clear error with the right status, and the server stays healthy."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from universal_runtime.v1 import encoders_pb2 as e

from tests.conftest import error_info
from tests.engines.encoders.conftest import CROSS_ENCODER, EMBED, INTENT, MAX_INPUTS, SPACY, TINY_QUEUE

INVALID = grpc.StatusCode.INVALID_ARGUMENT
LONG_TEXT = "word " * 600


@pytest.fixture(autouse=True)
async def still_healthy(enc):
    yield
    response = await enc.Embed(e.EmbedRequest(model=EMBED, inputs=["still alive"]))
    assert len(response.embeddings) == 1


async def fails(call, code: grpc.StatusCode, reason: str | None = None):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, caught.value.details()
    info = error_info(caught.value)
    if reason is not None:
        assert info.reason == reason
    return caught.value, info


def fit(name: str, examples, model: str = EMBED) -> e.FitClassifierRequest:
    return e.FitClassifierRequest(
        name=name,
        embedding_model=model,
        examples=[e.ClassifierExample(text=t, label=lb) for t, lb in examples],
    )


TWO_CLASSES = [("good morning", "greeting"), ("the bill is wrong", "billing")]


@pytest.mark.parametrize(
    "rpc,request_",
    [
        ("Embed", e.EmbedRequest(model=EMBED, inputs=[])),
        ("Embed", e.EmbedRequest(model=EMBED, inputs=["ok", "  "])),
        ("Embed", e.EmbedRequest(model=EMBED, inputs=["x"] * (MAX_INPUTS + 1))),
        ("Embed", e.EmbedRequest(model=EMBED, inputs=["x"], dimensions=385)),
        ("Rerank", e.RerankRequest(model=EMBED, query="q", documents=[])),
        ("Rerank", e.RerankRequest(model=EMBED, query="", documents=["d"])),
        ("Rerank", e.RerankRequest(model=EMBED, query="q", documents=["d"], top_n=-1)),
        ("Classify", e.ClassifyRequest(model=INTENT, inputs=[])),
        ("Classify", e.ClassifyRequest(model=INTENT, inputs=[""])),
        ("Classify", e.ClassifyRequest(model=INTENT, inputs=["x"] * (MAX_INPUTS + 1))),
        ("Classify", e.ClassifyRequest(model=INTENT, inputs=["x"], threshold=1.5)),
        ("Classify", e.ClassifyRequest(model=EMBED, inputs=["x"], candidate_labels=["a", "a"])),
        ("Classify", e.ClassifyRequest(model="../../etc/passwd", inputs=["x"])),
        ("ExtractEntities", e.ExtractEntitiesRequest(model=SPACY, inputs=[])),
        ("ExtractEntities", e.ExtractEntitiesRequest(model=SPACY, inputs=["\n"])),
        ("ExtractEntities", e.ExtractEntitiesRequest(model=SPACY, inputs=["x"], min_score=2)),
        ("FitClassifier", fit("one-class", [("a", "x"), ("b", "x")])),
        ("FitClassifier", fit("no-examples", [])),
        ("FitClassifier", fit("empty-label", [("a", "x"), ("b", "")])),
        ("FitClassifier", fit("../escape", TWO_CLASSES)),
        ("FitClassifier", fit("a/b", TWO_CLASSES)),
        ("FitClassifier", fit(".hidden", TWO_CLASSES)),
        ("FitClassifier", fit(EMBED, TWO_CLASSES)),
        ("DeleteClassifier", e.DeleteClassifierRequest(name="../x")),
    ],
)
async def test_invalid_requests(enc, rpc, request_):
    _, info = await fails(getattr(enc, rpc)(request_), INVALID)
    assert info.metadata.get("field") or info.reason in ("INVALID_MODEL_NAME", "INVALID_CLASSIFIER_NAME")


async def test_path_characters_in_classifier_names_name_the_reason(enc):
    _, info = await fails(
        enc.FitClassifier(fit("../escape", TWO_CLASSES)), INVALID, "INVALID_CLASSIFIER_NAME"
    )
    assert info.metadata["field"] == "name"


async def test_input_too_long_with_truncation_off(enc):
    error, info = await fails(
        enc.Embed(
            e.EmbedRequest(model=EMBED, inputs=["short", LONG_TEXT], truncation=e.TRUNCATION_POLICY_ERROR)
        ),
        INVALID,
        "INPUT_TOO_LONG",
    )
    assert info.metadata["max_tokens"] == "256"
    assert int(info.metadata["input_tokens"]) > 256
    assert info.metadata["field"] == "inputs[1]"
    assert "256" in error.details() and info.metadata["input_tokens"] in error.details()


async def test_rerank_and_classify_pairs_too_long_with_truncation_off(enc):
    await fails(
        enc.Rerank(
            e.RerankRequest(
                model=CROSS_ENCODER, query="q", documents=[LONG_TEXT], truncation=e.TRUNCATION_POLICY_ERROR
            )
        ),
        INVALID,
        "INPUT_TOO_LONG",
    )
    await fails(
        enc.Classify(
            e.ClassifyRequest(model=INTENT, inputs=[LONG_TEXT], truncation=e.TRUNCATION_POLICY_ERROR)
        ),
        INVALID,
        "INPUT_TOO_LONG",
    )


async def test_unknown_model_or_classifier(enc):
    await fails(
        enc.Classify(e.ClassifyRequest(model="no-such-classifier", inputs=["x"])), grpc.StatusCode.NOT_FOUND
    )
    await fails(
        enc.Rerank(e.RerankRequest(model="nope", query="q", documents=["d"])), grpc.StatusCode.NOT_FOUND
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda enc: enc.Rerank(e.RerankRequest(model=SPACY, query="q", documents=["d"])),
        lambda enc: enc.Embed(e.EmbedRequest(model=INTENT, inputs=["x"])),
        lambda enc: enc.ExtractEntities(e.ExtractEntitiesRequest(model=EMBED, inputs=["x"])),
        lambda enc: enc.Classify(e.ClassifyRequest(model=CROSS_ENCODER, inputs=["x"])),
        lambda enc: enc.FitClassifier(fit("fit-on-spacy", TWO_CLASSES, model=SPACY)),
    ],
)
async def test_a_model_asked_for_a_task_it_cannot_do(enc, call):
    await fails(call(enc), grpc.StatusCode.FAILED_PRECONDITION, "TASK_NOT_SUPPORTED")


async def test_classify_on_an_embedding_model_needs_candidate_labels(enc):
    await fails(
        enc.Classify(e.ClassifyRequest(model=EMBED, inputs=["x"])),
        grpc.StatusCode.FAILED_PRECONDITION,
        "CANDIDATE_LABELS_REQUIRED",
    )
    await fails(
        enc.Classify(e.ClassifyRequest(model=INTENT, inputs=["x"], candidate_labels=["a", "b"])),
        grpc.StatusCode.FAILED_PRECONDITION,
        "ZERO_SHOT_NOT_SUPPORTED",
    )


async def test_a_full_queue_answers_overloaded(enc):
    # max_queue=2 and max_wait_ms=1000: the first two single-input calls wait in the queue for a
    # second, every call beyond them is refused at once.
    await enc.Embed(e.EmbedRequest(model=TINY_QUEUE, inputs=["load the model"]))
    calls = [enc.Embed(e.EmbedRequest(model=TINY_QUEUE, inputs=[f"text {i}"])) for i in range(8)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    served = [r for r in results if isinstance(r, e.EmbedResponse)]
    assert len(served) == 2 and len(refused) == 6
    for error in refused:
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error_info(error).reason == "OVERLOADED"
    # Once drained, the model serves again.
    assert len((await enc.Embed(e.EmbedRequest(model=TINY_QUEUE, inputs=["after"]))).embeddings) == 1


async def test_ner_input_over_spacys_max_length_is_input_too_long(enc):
    # spaCy refuses texts over nlp.max_length (1,000,000 characters) with E088 inside nlp.pipe,
    # which would surface as INTERNAL; the engine checks first, naming the limit.
    too_long = "Paris " * 166_667  # 1,000,002 characters
    error, info = await fails(
        enc.ExtractEntities(e.ExtractEntitiesRequest(model=SPACY, inputs=["Tim Cook", too_long])),
        INVALID,
        "INPUT_TOO_LONG",
    )
    assert info.metadata["field"] == "inputs[1]"
    assert info.metadata["max_chars"] == "1000000"
    assert info.metadata["input_chars"] == str(len(too_long))
    assert "1000000" in error.details() and str(len(too_long)) in error.details()
    # The model still answers normal texts.
    text = "Tim Cook visited Paris on Monday for Apple"
    response = await enc.ExtractEntities(e.ExtractEntitiesRequest(model=SPACY, inputs=[text]))
    assert "Paris" in [x.text for x in response.results[0].entities]
