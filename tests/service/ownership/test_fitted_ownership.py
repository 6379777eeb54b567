"""Fitted classifiers and anomaly detectors belong to the key that fitted them, or to the shared
namespace that only admin keys write and every key may use.

From a second key, over gRPC and the gateway (standalone and in-process): another key's name is
NOT_FOUND / 404 for use (Classify, DetectAnomaly), delete and listing; fitting the same name, with or
without ``overwrite``, makes the second key's own and leaves the first key's as it was. A user key
gets PERMISSION_DENIED / 403 for fitting or deleting shared ones; an admin key does both; every key
uses and lists shared ones; a key's own of a name comes before the shared one. Detectors saved by a
server without keys (as older versions saved everything) are shared ones.
"""

from __future__ import annotations

import uuid

import grpc
import numpy as np
import pytest
from universal_runtime.v1 import anomaly_pb2 as a
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import inference_service_pb2_grpc

from engines.owners import owner_segment
from service.server import start_server
from tests.conftest import RERANK_MODEL
from tests.service.ownership.keys import ADMIN, DOTS, TEAM_A, TEAM_B, bearer, headers, refused

EMBEDDER = RERANK_MODEL  # MiniLM on torch: an embedding model with no converted copy to make
OTHERS = (TEAM_B, ADMIN, DOTS)  # whatever its role, no key sees another key's own

A_EXAMPLES = [
    ("I forgot my password and cannot log in", "account"),
    ("My account is locked", "account"),
    ("Where is my parcel?", "shipping"),
    ("When will my order arrive?", "shipping"),
]
B_EXAMPLES = [
    ("The cat purrs on the sofa", "cats"),
    ("Kittens chase a ball of yarn", "cats"),
    ("The dog barks at the mailman", "dogs"),
    ("Puppies love to fetch sticks", "dogs"),
]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def fit_classifier(name: str, examples=A_EXAMPLES, **kwargs) -> e.FitClassifierRequest:
    return e.FitClassifierRequest(
        name=name,
        embedding_model=EMBEDDER,
        examples=[e.ClassifierExample(text=t, label=label) for t, label in examples],
        **kwargs,
    )


async def labels_of(stubs, key: str, name: str) -> list[tuple[str, bool]]:
    """``(labels joined, shared)`` of each listed classifier ``name`` the key sees, in listed order."""
    listed = await stubs.inference.ListClassifiers(e.ListClassifiersRequest(), metadata=bearer(key))
    return [(",".join(c.labels), c.shared) for c in listed.classifiers if c.name == name]


async def classify(stubs, key: str, name: str) -> str:
    response = await stubs.inference.Classify(
        e.ClassifyRequest(model=name, inputs=["Where is my parcel? The dog barks."]), metadata=bearer(key)
    )
    return response.classifications[0].label


async def test_a_keys_classifier_is_not_found_by_any_other_key(stubs, keyed):
    name = unique("router")
    fitted = await stubs.inference.FitClassifier(fit_classifier(name), metadata=bearer(TEAM_A))
    assert fitted.classifier.shared is False
    data = keyed.settings.data_dir
    assert (data / "owners" / owner_segment("team-a") / "classifiers" / f"{name}.json").is_file()
    assert not (data / "classifiers" / f"{name}.json").exists()
    for key in OTHERS:
        assert await labels_of(stubs, key, name) == []
        reason, _ = await refused(
            stubs.inference.Classify(e.ClassifyRequest(model=name, inputs=["x"]), metadata=bearer(key)),
            grpc.StatusCode.NOT_FOUND,
        )
        assert reason == "MODEL_NOT_FOUND"
        reason, _ = await refused(
            stubs.inference.DeleteClassifier(e.DeleteClassifierRequest(name=name), metadata=bearer(key)),
            grpc.StatusCode.NOT_FOUND,
        )
        assert reason == "CLASSIFIER_NOT_FOUND"
    # A second key fitting the name, with and without overwrite, makes its own.
    await stubs.inference.FitClassifier(fit_classifier(name, B_EXAMPLES), metadata=bearer(TEAM_B))
    await stubs.inference.FitClassifier(
        fit_classifier(name, B_EXAMPLES, overwrite=True), metadata=bearer(TEAM_B)
    )
    assert await labels_of(stubs, TEAM_A, name) == [("account,shipping", False)]
    assert await labels_of(stubs, TEAM_B, name) == [("cats,dogs", False)]
    assert await classify(stubs, TEAM_A, name) == "shipping"
    assert await classify(stubs, TEAM_B, name) == "dogs"
    await stubs.inference.DeleteClassifier(e.DeleteClassifierRequest(name=name), metadata=bearer(TEAM_B))
    assert await classify(stubs, TEAM_A, name) == "shipping"  # B deleted its own only
    await stubs.inference.DeleteClassifier(e.DeleteClassifierRequest(name=name), metadata=bearer(TEAM_A))


async def test_shared_classifiers_are_fitted_and_deleted_by_admins_and_used_by_every_key(stubs, keyed):
    name = unique("common")
    shared_file = keyed.settings.data_dir / "classifiers" / f"{name}.json"
    for request in (fit_classifier(name, shared=True), fit_classifier(name, shared=True, overwrite=True)):
        reason, metadata = await refused(
            stubs.inference.FitClassifier(request, metadata=bearer(TEAM_A)), grpc.StatusCode.PERMISSION_DENIED
        )
        assert (reason, metadata["key_name"]) == ("ADMIN_ROLE_REQUIRED", "team-a")
    assert not shared_file.exists()
    fitted = await stubs.inference.FitClassifier(fit_classifier(name, shared=True), metadata=bearer(ADMIN))
    assert fitted.classifier.shared is True and shared_file.is_file()
    for key in (TEAM_A, TEAM_B, DOTS):
        assert await labels_of(stubs, key, name) == [("account,shipping", True)]
        assert await classify(stubs, key, name) == "shipping"
        await refused(
            stubs.inference.DeleteClassifier(e.DeleteClassifierRequest(name=name), metadata=bearer(key)),
            grpc.StatusCode.NOT_FOUND,  # not its own
        )
        reason, _ = await refused(
            stubs.inference.DeleteClassifier(
                e.DeleteClassifierRequest(name=name, shared=True), metadata=bearer(key)
            ),
            grpc.StatusCode.PERMISSION_DENIED,
        )
        assert reason == "ADMIN_ROLE_REQUIRED"
    # A key's own of that name comes first for it, and for no one else.
    await stubs.inference.FitClassifier(fit_classifier(name, B_EXAMPLES), metadata=bearer(TEAM_B))
    assert await labels_of(stubs, TEAM_B, name) == [("cats,dogs", False), ("account,shipping", True)]
    assert await classify(stubs, TEAM_B, name) == "dogs"
    assert await classify(stubs, TEAM_A, name) == "shipping"
    deleted = await stubs.inference.DeleteClassifier(
        e.DeleteClassifierRequest(name=name, shared=True), metadata=bearer(ADMIN)
    )
    assert deleted.classifier.shared is True and not shared_file.exists()
    await refused(
        stubs.inference.Classify(e.ClassifyRequest(model=name, inputs=["x"]), metadata=bearer(TEAM_A)),
        grpc.StatusCode.NOT_FOUND,
    )
    assert await classify(stubs, TEAM_B, name) == "dogs"  # its own is untouched
    await stubs.inference.DeleteClassifier(e.DeleteClassifierRequest(name=name), metadata=bearer(TEAM_B))


# -- anomaly detectors ---------------------------------------------------------------------------


def rows(seed: int) -> a.NumericRows:
    data = np.random.default_rng(seed).normal(size=(64, 3))
    return a.NumericRows(column_count=3, values=data.ravel().tolist())


def fit_detector(name: str, seed: int = 0, **kwargs) -> a.FitAnomalyDetectorRequest:
    return a.FitAnomalyDetectorRequest(detector=name, numeric_rows=rows(seed), **kwargs)


def detect(name: str) -> a.DetectAnomalyRequest:
    return a.DetectAnomalyRequest(detector=name, numeric_rows=rows(1))


async def listed(stubs, key: str, name: str) -> list[tuple[int, int, bool]]:
    """``(version, row_count, shared)`` of each listed detector ``name`` the key sees."""
    response = await stubs.inference.ListAnomalyDetectors(
        a.ListAnomalyDetectorsRequest(), metadata=bearer(key)
    )
    return [(d.version, d.row_count, d.shared) for d in response.detectors if d.detector == name]


async def test_a_keys_detector_is_not_found_by_any_other_key(stubs, keyed):
    name = unique("meter")
    fitted = await stubs.inference.FitAnomalyDetector(fit_detector(name), metadata=bearer(TEAM_A))
    assert (fitted.version, fitted.shared) == (1, False)
    for key in OTHERS:
        assert await listed(stubs, key, name) == []
        for call in (
            stubs.inference.DetectAnomaly(detect(name), metadata=bearer(key)),
            stubs.inference.DeleteAnomalyDetector(
                a.DeleteAnomalyDetectorRequest(detector=name), metadata=bearer(key)
            ),
        ):
            reason, _ = await refused(call, grpc.StatusCode.NOT_FOUND)
            assert reason == "DETECTOR_NOT_FOUND"
    # Fitting the name again from another key starts that key's own at version 1: A's is untouched.
    assert (
        await stubs.inference.FitAnomalyDetector(fit_detector(name, 5), metadata=bearer(TEAM_B))
    ).version == 1
    assert (
        await stubs.inference.FitAnomalyDetector(fit_detector(name, 6), metadata=bearer(TEAM_B))
    ).version == 2
    assert await listed(stubs, TEAM_A, name) == [(1, 64, False)]
    assert await listed(stubs, TEAM_B, name) == [(2, 64, False)]
    await stubs.inference.DeleteAnomalyDetector(
        a.DeleteAnomalyDetectorRequest(detector=name), metadata=bearer(TEAM_B)
    )
    scored = await stubs.inference.DetectAnomaly(detect(name), metadata=bearer(TEAM_A))
    assert scored.summary.row_count == 64
    # The key named '..' keeps its own under a hash of its name, inside the state store.
    await stubs.inference.FitAnomalyDetector(fit_detector(name), metadata=bearer(DOTS))
    data = keyed.settings.data_dir
    assert (data / "owners" / owner_segment("..") / "anomaly" / name / "manifest.json").is_file()
    assert not (data / "owners" / name).exists() and not (data.parent / "anomaly").exists()


async def test_shared_detectors_are_fitted_and_deleted_by_admins_and_used_by_every_key(stubs):
    name = unique("fleet")
    reason, _ = await refused(
        stubs.inference.FitAnomalyDetector(fit_detector(name, shared=True), metadata=bearer(TEAM_B)),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    assert reason == "ADMIN_ROLE_REQUIRED"
    fitted = await stubs.inference.FitAnomalyDetector(fit_detector(name, shared=True), metadata=bearer(ADMIN))
    assert fitted.shared is True
    for key in (TEAM_A, TEAM_B):
        assert await listed(stubs, key, name) == [(1, 64, True)]
        assert (
            await stubs.inference.DetectAnomaly(detect(name), metadata=bearer(key))
        ).summary.row_count == 64
        await refused(
            stubs.inference.DeleteAnomalyDetector(
                a.DeleteAnomalyDetectorRequest(detector=name), metadata=bearer(key)
            ),
            grpc.StatusCode.NOT_FOUND,
        )
        await refused(
            stubs.inference.DeleteAnomalyDetector(
                a.DeleteAnomalyDetectorRequest(detector=name, shared=True), metadata=bearer(key)
            ),
            grpc.StatusCode.PERMISSION_DENIED,
        )
    deleted = await stubs.inference.DeleteAnomalyDetector(
        a.DeleteAnomalyDetectorRequest(detector=name, shared=True), metadata=bearer(ADMIN)
    )
    assert deleted.versions_deleted == 1
    await refused(
        stubs.inference.DetectAnomaly(detect(name), metadata=bearer(TEAM_A)), grpc.StatusCode.NOT_FOUND
    )


async def test_detectors_saved_without_keys_are_shared_once_keys_are_on(settings, keys_file, tmp_path):
    """A server without keys saves where older versions saved everything: the shared namespace."""
    for update in ({}, {"api_keys_file": keys_file}):
        running = await start_server(settings.model_copy(update={"data_dir": tmp_path, **update}))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
                inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
                if not update:
                    fitted = await inference.FitAnomalyDetector(fit_detector("legacy"))
                    assert fitted.shared is True  # without keys everything is shared
                    continue
                listing = await inference.ListAnomalyDetectors(
                    a.ListAnomalyDetectorsRequest(), metadata=bearer(TEAM_A)
                )
                assert [(d.detector, d.shared) for d in listing.detectors] == [("legacy", True)]
                scored = await inference.DetectAnomaly(detect("legacy"), metadata=bearer(TEAM_B))
                assert scored.summary.row_count == 64
                await refused(
                    inference.DeleteAnomalyDetector(
                        a.DeleteAnomalyDetectorRequest(detector="legacy"), metadata=bearer(TEAM_A)
                    ),
                    grpc.StatusCode.NOT_FOUND,
                )
                await inference.DeleteAnomalyDetector(
                    a.DeleteAnomalyDetectorRequest(detector="legacy", shared=True), metadata=bearer(ADMIN)
                )
        finally:
            await running.stop(grace=1.0)
    assert (tmp_path / "anomaly").is_dir() and not (tmp_path / "anomaly" / "legacy").exists()


# -- the gateway, standalone and in-process ------------------------------------------------------


async def test_the_gateway_answers_404_for_another_keys_and_403_for_shared_writes(gateway):
    classifier, detector = unique("gw-router"), unique("gw-meter")
    examples = [{"text": t, "label": label} for t, label in A_EXAMPLES]
    body = {"name": classifier, "embedding_model": EMBEDDER, "examples": examples}
    fitted = await gateway.post("/v1/classifiers", json=body, headers=headers(TEAM_A), timeout=120)
    assert fitted.status_code == 200 and fitted.json()["shared"] is False, fitted.text
    data = np.random.default_rng(0).normal(size=(64, 3)).tolist()
    fit = await gateway.post(
        "/v1/anomaly/fit", json={"detector": detector, "rows": data}, headers=headers(TEAM_A)
    )
    assert fit.status_code == 200 and fit.json()["shared"] is False, fit.text

    for key in OTHERS:
        listed = (await gateway.get("/v1/classifiers", headers=headers(key))).json()["data"]
        assert classifier not in [c["name"] for c in listed]
        detectors = (await gateway.get("/v1/anomaly/detectors", headers=headers(key))).json()["data"]
        assert detector not in [d["detector"] for d in detectors]
        for response, code in (
            (
                await gateway.post(
                    "/v1/classify", json={"model": classifier, "input": "x"}, headers=headers(key)
                ),
                "model_not_found",
            ),
            (
                await gateway.delete(f"/v1/classifiers/{classifier}", headers=headers(key)),
                "classifier_not_found",
            ),
            (
                await gateway.post(
                    "/v1/anomaly/detect", json={"detector": detector, "rows": data}, headers=headers(key)
                ),
                "detector_not_found",
            ),
            (
                await gateway.delete(f"/v1/anomaly/detectors/{detector}", headers=headers(key)),
                "detector_not_found",
            ),
        ):
            assert response.status_code == 404, response.text
            assert response.json()["error"]["code"] == code
    # Shared writes: 403 for a user key, done for an admin key, then used by every key.
    for key, status in ((TEAM_B, 403), (ADMIN, 200)):
        fitted = await gateway.post(
            "/v1/anomaly/fit", json={"detector": detector, "rows": data, "shared": True}, headers=headers(key)
        )
        assert fitted.status_code == status, fitted.text
        shared_body = {
            **body,
            "examples": [{"text": t, "label": label} for t, label in B_EXAMPLES],
            "shared": True,
        }
        fitted = await gateway.post("/v1/classifiers", json=shared_body, headers=headers(key), timeout=120)
        assert fitted.status_code == status, fitted.text
    assert fitted.json()["shared"] is True
    assert (
        await gateway.post("/v1/classifiers", json={**body, "shared": True}, headers=headers(TEAM_B))
    ).json()["error"]["code"] == "admin_role_required"
    used = await gateway.post(
        "/v1/classify", json={"model": classifier, "input": "The dog barks"}, headers=headers(TEAM_B)
    )
    assert used.status_code == 200 and used.json()["data"][0]["label"] == "dogs", used.text
    mine = await gateway.post(
        "/v1/classify", json={"model": classifier, "input": "Where is my parcel?"}, headers=headers(TEAM_A)
    )
    assert mine.json()["data"][0]["label"] == "shipping"  # A's own comes before the shared one
    for route in (
        f"/v1/classifiers/{classifier}?shared=true",
        f"/v1/anomaly/detectors/{detector}?shared=true",
    ):
        assert (await gateway.delete(route, headers=headers(TEAM_B))).status_code == 403
        assert (await gateway.delete(route, headers=headers(ADMIN))).status_code == 200
    for route in (f"/v1/classifiers/{classifier}", f"/v1/anomaly/detectors/{detector}"):
        assert (await gateway.delete(route, headers=headers(TEAM_A))).status_code == 200


@pytest.mark.parametrize("key", [TEAM_A, ADMIN])
async def test_a_fit_without_a_key_is_refused_before_anything(stubs, key):
    """Sanity: the keyed server refuses a call without a key (the owner is never "" with keys on)."""
    await refused(stubs.inference.FitAnomalyDetector(fit_detector("nobody")), grpc.StatusCode.UNAUTHENTICATED)
    assert await listed(stubs, key, "nobody") == []
