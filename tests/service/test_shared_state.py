"""Two servers sharing one state store on S3 (moto): what one fits, refits or deletes, the other sees."""

from __future__ import annotations

import asyncio
import time
import uuid

import grpc
import pytest
from universal_runtime.v1 import anomaly_pb2 as pb
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import inference_service_pb2_grpc

from service.server import start_server
from tests.conftest import EMBED_MODEL, error_info
from tests.moto_s3 import REFUSED_SECRET, moto_s3, refused_s3_options
from tests.service.anomaly.helpers import numeric_data, to_rows

EXAMPLES = [
    ("I forgot my password and cannot log in", "account"),
    ("My account is locked after too many attempts", "account"),
    ("I can't sign in to my profile", "account"),
    ("Where is my package? It has not arrived", "shipping"),
    ("When will my order be delivered?", "shipping"),
    ("My delivery is late by a week", "shipping"),
]


@pytest.fixture(scope="module")
def s3():
    with moto_s3() as (_, options):
        yield options


@pytest.fixture(scope="module")
async def replicas(settings, s3):
    """Stubs of two servers, A and B, over one S3 prefix."""
    shared = settings.model_copy(
        update={"grpc_port": 0, "state_url": f"s3://state/{uuid.uuid4().hex}", "state_storage_options": s3}
    )
    servers = [await start_server(shared), await start_server(shared)]
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") for s in servers]
    yield [inference_service_pb2_grpc.InferenceServiceStub(c) for c in channels]
    for channel in channels:
        await channel.close()
    for server in servers:
        await server.stop(grace=0.5)


async def _code(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code(), error_info(caught.value).reason


async def test_detector_fit_refit_and_delete_are_seen_by_the_other_replica(replicas):
    a, b = replicas
    rows, other = to_rows(numeric_data(0)), to_rows(numeric_data(1)[:200])
    first = await a.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="shared", rows=rows))
    seen = await b.DetectAnomaly(pb.DetectAnomalyRequest(detector="shared", rows=rows))
    assert seen.summary.threshold == first.threshold and len(seen.scores) == len(rows)

    second = await a.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="shared", rows=other))
    assert second.version > first.version and second.threshold != first.threshold
    seen = await b.DetectAnomaly(pb.DetectAnomalyRequest(detector="shared", rows=rows))
    assert seen.summary.threshold == second.threshold  # B had version 1 cached
    listed = await b.ListAnomalyDetectors(pb.ListAnomalyDetectorsRequest())
    assert [d.version for d in listed.detectors if d.detector == "shared"] == [second.version]

    await b.DeleteAnomalyDetector(pb.DeleteAnomalyDetectorRequest(detector="shared"))
    code, reason = await _code(a.DetectAnomaly(pb.DetectAnomalyRequest(detector="shared", rows=rows)))
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "DETECTOR_NOT_FOUND")


async def test_concurrent_fits_of_one_name_leave_a_readable_latest_version(replicas):
    a, b = replicas
    rows = to_rows(numeric_data(2)[:150])
    for _ in range(3):
        fits = await asyncio.gather(
            a.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="raced", rows=rows)),
            b.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="raced", rows=rows)),
        )
        assert fits[0].version != fits[1].version
        latest = max(f.version for f in fits)
        for stub in (a, b):
            listed = await stub.ListAnomalyDetectors(pb.ListAnomalyDetectorsRequest())
            assert [d.version for d in listed.detectors if d.detector == "raced"] == [latest]
            response = await stub.DetectAnomaly(pb.DetectAnomalyRequest(detector="raced", rows=rows))
            assert len(response.scores) == len(rows)


def fit_request(name: str, **kwargs) -> e.FitClassifierRequest:
    """A FitClassifierRequest of ``name`` on EXAMPLES (account or shipping), over EMBED_MODEL."""
    examples = [e.ClassifierExample(text=t, label=label) for t, label in EXAMPLES]
    return e.FitClassifierRequest(name=name, embedding_model=EMBED_MODEL, examples=examples, **kwargs)


@pytest.mark.slow
async def test_classifier_fitted_on_one_replica_classifies_on_the_other_until_deleted(replicas):
    a, b = replicas
    await a.FitClassifier(fit_request("shared-router"))
    response = await b.Classify(e.ClassifyRequest(model="shared-router", inputs=["my parcel is late"]))
    assert response.classifications[0].label == "shipping"
    # B refuses a second fit of the name without overwrite: it is taken in the shared store.
    code, reason = await _code(b.FitClassifier(fit_request("shared-router")))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CLASSIFIER_EXISTS")

    await b.DeleteClassifier(e.DeleteClassifierRequest(name="shared-router"))
    code, _ = await _code(a.Classify(e.ClassifyRequest(model="shared-router", inputs=["hello"])))
    assert code == grpc.StatusCode.NOT_FOUND  # A had it cached


async def test_a_store_that_is_down_is_unavailable_quickly_with_the_reason(settings):
    with refused_s3_options() as options:
        down = settings.model_copy(
            update={
                "grpc_port": 0,
                "state_url": "s3://state/down",
                "state_storage_options": options,
                "state_timeout_s": 2.0,
            }
        )
        server = await start_server(down)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
                rows = to_rows(numeric_data(0)[:100])
                calls = [
                    stub.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="d", rows=rows)),
                    stub.DetectAnomaly(pb.DetectAnomalyRequest(detector="d", rows=rows)),
                    stub.ListAnomalyDetectors(pb.ListAnomalyDetectorsRequest()),
                    stub.Classify(e.ClassifyRequest(model="some-custom", inputs=["x"])),
                    stub.ListClassifiers(e.ListClassifiersRequest()),
                ]
                for call in calls:
                    started = time.monotonic()
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await call
                    assert time.monotonic() - started < 8
                    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, caught.value.details()
                    assert error_info(caught.value).reason == "STATE_STORE_UNAVAILABLE"
                    assert "s3://state/down" in caught.value.details()
                    assert REFUSED_SECRET not in caught.value.details()
        finally:
            await server.stop(grace=0.5)
