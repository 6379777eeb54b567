"""Classify: the packaged CLINC intent head, a fixture-trained transformers classifier, custom
classifiers fitted through FitClassifier (also across a restart), and zero-shot labels."""

from __future__ import annotations

import grpc
import pytest
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import inference_service_pb2_grpc

from service.server import start_server
from tests.conftest import error_info
from tests.engines.encoders.conftest import EMBED, INTENT, TEXT_CLASSIFIER
from tests.engines.encoders.training import CLASSIFIER_EXAMPLES, CLASSIFIER_LABELS


async def test_intent_head_names_transfer_and_weather(enc):
    response = await enc.Classify(
        e.ClassifyRequest(
            model=INTENT,
            inputs=[
                "Please transfer 200 dollars from my checking account to my savings account",
                "What's the weather going to be like in Boston tomorrow?",
                "I want to talk to a real person right now",
            ],
            all_scores=True,
        )
    )
    labels = [c.label for c in response.classifications]
    assert labels == ["transfer", "weather", "connect_to_human"]
    first = response.classifications[0]
    assert first.score > 0.5
    assert len(first.scores) == 157
    names = {s.label for s in first.scores}
    # Every class has its name: no bare numeric ids left.
    assert not [n for n in names if n.lstrip("-").isdigit()]
    assert {"follow_up", "oos", "connect_to_human"} <= names
    assert sum(s.score for s in first.scores) == pytest.approx(1.0, abs=1e-3)


async def test_transformers_classifier_gets_its_training_sentences_right(enc):
    texts = [text for text, _ in CLASSIFIER_EXAMPLES]
    response = await enc.Classify(e.ClassifyRequest(model=TEXT_CLASSIFIER, inputs=texts, all_scores=True))
    assert [c.label for c in response.classifications] == [label for _, label in CLASSIFIER_EXAMPLES]
    for c in response.classifications:
        assert {s.label for s in c.scores} == set(CLASSIFIER_LABELS)
        assert sum(s.score for s in c.scores) == pytest.approx(1.0, abs=1e-4)


async def test_transformers_classifier_multi_label_uses_sigmoid_and_threshold(enc):
    response = await enc.Classify(
        e.ClassifyRequest(
            model=TEXT_CLASSIFIER,
            inputs=["The striker scored twice in the second half."],
            multi_label=True,
            threshold=0.5,
            all_scores=True,
        )
    )
    c = response.classifications[0]
    assert [p.label for p in c.predicted_labels] == ["sports"]
    assert c.label == "sports"
    assert sum(s.score for s in c.scores) != pytest.approx(1.0, abs=1e-3)  # independent sigmoids


async def test_zero_shot_picks_the_obvious_label(enc):
    response = await enc.Classify(
        e.ClassifyRequest(
            model=EMBED,
            inputs=[
                "The goalkeeper saved a penalty in the final minute.",
                "Preheat the oven and grease the pan.",
            ],
            candidate_labels=["sports", "cooking", "politics"],
            all_scores=True,
        )
    )
    assert [c.label for c in response.classifications] == ["sports", "cooking"]
    assert len(response.classifications[0].scores) == 3


FIT_EXAMPLES = [
    ("I forgot my password and cannot log in", "account_access"),
    ("How do I reset my login credentials?", "account_access"),
    ("My account is locked after too many attempts", "account_access"),
    ("I can't sign in to my profile", "account_access"),
    ("Where is my package? It has not arrived", "shipping"),
    ("When will my order be delivered?", "shipping"),
    ("The parcel tracking number does not work", "shipping"),
    ("My delivery is late by a week", "shipping"),
    ("I was charged twice for the same purchase", "billing"),
    ("Can I get a refund for this invoice?", "billing"),
    ("Why is there an extra fee on my credit card bill?", "billing"),
    ("Update the payment method on my subscription", "billing"),
]
HELD_OUT = [
    ("I cannot log into my account since yesterday", "account_access"),
    ("Has my order shipped yet?", "shipping"),
    ("I want my money back for the double charge", "billing"),
]


def fit_request(name: str, **kwargs) -> e.FitClassifierRequest:
    return e.FitClassifierRequest(
        name=name,
        embedding_model=EMBED,
        examples=[e.ClassifierExample(text=t, label=label) for t, label in FIT_EXAMPLES],
        **kwargs,
    )


async def test_fitted_classifier_classifies_held_out_sentences_and_survives_a_restart(enc, encoder_settings):
    fitted = await enc.FitClassifier(fit_request("support-router"))
    info = fitted.classifier
    assert info.name == "support-router" and info.embedding_model == EMBED
    assert list(info.labels) == ["account_access", "billing", "shipping"]
    assert info.example_count == len(FIT_EXAMPLES) and info.training_accuracy == 1.0
    folder = encoder_settings.data_dir / "classifiers"
    files = sorted(p.name for p in folder.iterdir() if p.name.startswith("support-router."))
    assert files == ["support-router.json", "support-router.v1.skops"]

    texts = [t for t, _ in HELD_OUT]
    response = await enc.Classify(e.ClassifyRequest(model="support-router", inputs=texts))
    assert [c.label for c in response.classifications] == [label for _, label in HELD_OUT]

    listed = await enc.ListClassifiers(e.ListClassifiersRequest())
    assert "support-router" in [c.name for c in listed.classifiers]

    # A second server over the same data_dir finds it again.
    second = await start_server(encoder_settings.model_copy())
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{second.port}") as channel:
            stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
            again = await stub.Classify(e.ClassifyRequest(model="support-router", inputs=texts))
            assert [c.label for c in again.classifications] == [label for _, label in HELD_OUT]
    finally:
        await second.stop(grace=1.0)


async def test_fit_refuses_an_existing_name_unless_overwrite_and_delete_removes_it(enc):
    await enc.FitClassifier(fit_request("to-delete"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await enc.FitClassifier(fit_request("to-delete"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(caught.value).reason == "CLASSIFIER_EXISTS"
    await enc.FitClassifier(fit_request("to-delete", overwrite=True))

    deleted = await enc.DeleteClassifier(e.DeleteClassifierRequest(name="to-delete"))
    assert deleted.classifier.name == "to-delete"
    listed = await enc.ListClassifiers(e.ListClassifiersRequest())
    assert "to-delete" not in [c.name for c in listed.classifiers]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await enc.Classify(e.ClassifyRequest(model="to-delete", inputs=["hello"]))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await enc.DeleteClassifier(e.DeleteClassifierRequest(name="to-delete"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(caught.value).reason == "CLASSIFIER_NOT_FOUND"


async def test_saved_heads_hold_only_trusted_types(enc, encoder_settings):
    import skops.io as sio

    # Fit a head here, so the check has a file to read whether the test runs alone or after others.
    await enc.FitClassifier(fit_request("trusted-types", overwrite=True))
    folder = encoder_settings.data_dir / "classifiers"
    heads = sorted(folder.glob("*.skops"))
    assert [p for p in heads if p.name.startswith("trusted-types.v")]
    for path in heads:
        assert sio.get_untrusted_types(file=path) == [], path.name
