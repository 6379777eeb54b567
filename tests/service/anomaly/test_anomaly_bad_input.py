"""Every kind of bad anomaly request: a clear INVALID_ARGUMENT / NOT_FOUND, and the server stays healthy."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from universal_runtime.v1 import anomaly_pb2 as pb

from tests.conftest import error_info
from tests.service.anomaly.helpers import numeric_data, to_rows

INFERENCE_SERVICE = "universal_runtime.v1.InferenceService"
GOOD = to_rows(numeric_data()[:50])


def _fit(**kwargs) -> pb.FitAnomalyDetectorRequest:
    kwargs.setdefault("detector", "bad-input")
    kwargs.setdefault("rows", GOOD)
    return pb.FitAnomalyDetectorRequest(**kwargs)


BAD_FITS = {
    "ragged rows": (_fit(rows=[*GOOD[:20], pb.FeatureRow(values=GOOD[0].values[:3])]), "rows[20]"),
    "nan": (_fit(rows=[*GOOD[:20], to_rows([[1.0, float("nan"), 0.0, 0.0]])[0]]), "rows[20].values[1]"),
    "infinity": (_fit(rows=[*GOOD[:20], to_rows([[float("inf"), 1.0, 0.0, 0.0]])[0]]), "rows[20].values[0]"),
    "unknown backend": (_fit(backend=99), "backend"),
    "contamination too high": (_fit(contamination=0.6), "contamination"),
    "negative contamination": (_fit(contamination=-0.1), "contamination"),
    "path in name": (_fit(detector="../etc"), "detector"),
    "slash in name": (_fit(detector="a/b"), "detector"),
    "empty name": (_fit(detector=""), "detector"),
    "no rows": (_fit(rows=[]), "rows"),
    "too few rows": (_fit(rows=GOOD[:3]), "rows"),
    "empty cell": (
        _fit(rows=[*GOOD[:20], pb.FeatureRow(values=[pb.FeatureValue()] * 4)]),
        "rows[20].values[0]",
    ),
    "string in numeric column": (
        _fit(rows=[*GOOD[:20], to_rows([["x", 1.0, 2.0, 3.0]])[0]]),
        "rows[20].values[0]",
    ),
    "number in categorical column": (
        _fit(
            rows=to_rows([[1.0, 2.0]] * 20),
            schema=[pb.FeatureField(name="a"), pb.FeatureField(name="b", type=pb.FEATURE_TYPE_CATEGORICAL)],
        ),
        "rows[0].values[1]",
    ),
    "schema width differs": (_fit(schema=[pb.FeatureField(name="a")]), "rows[0]"),
    "duplicate feature names": (_fit(schema=[pb.FeatureField(name="a")] * 4), "schema"),
    "unknown encoding": (_fit(schema=[pb.FeatureField(name="a", encoding=17)] * 1), "schema[0].encoding"),
}


@pytest.mark.parametrize("case", list(BAD_FITS))
async def test_bad_fit_requests(inference, channel, case):
    request, field = BAD_FITS[case]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await inference.FitAnomalyDetector(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert error_info(err.value).metadata["field"] == field
    # The server is still healthy and still answers the service.
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", INFERENCE_SERVICE):
        checked = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert checked.status == health_pb2.HealthCheckResponse.SERVING, service
    listed = await inference.ListAnomalyDetectors(pb.ListAnomalyDetectorsRequest())
    assert request.detector not in [d.detector for d in listed.detectors]  # nothing saved


async def test_bad_detect_requests(inference):
    await inference.FitAnomalyDetector(_fit(detector="bad-detect"))
    cases = [
        (
            pb.DetectAnomalyRequest(detector="no-such-detector", rows=GOOD),
            grpc.StatusCode.NOT_FOUND,
            "detector",
        ),
        (
            pb.DetectAnomalyRequest(detector="../../x", rows=GOOD),
            grpc.StatusCode.INVALID_ARGUMENT,
            "detector",
        ),
        (pb.DetectAnomalyRequest(detector="bad-detect", rows=[]), grpc.StatusCode.INVALID_ARGUMENT, "rows"),
        (
            pb.DetectAnomalyRequest(detector="bad-detect", rows=to_rows([[1.0, 2.0]])),
            grpc.StatusCode.INVALID_ARGUMENT,
            "rows[0]",
        ),
        (
            pb.DetectAnomalyRequest(detector="bad-detect", rows=to_rows([[1.0, 2.0, float("nan"), 0.0]])),
            grpc.StatusCode.INVALID_ARGUMENT,
            "rows[0].values[2]",
        ),
        (
            pb.DetectAnomalyRequest(detector="bad-detect", rows=GOOD, threshold=1.5),
            grpc.StatusCode.INVALID_ARGUMENT,
            "threshold",
        ),
        (
            pb.DetectAnomalyRequest(detector="bad-detect", rows=GOOD, threshold=0.0),
            grpc.StatusCode.INVALID_ARGUMENT,
            "threshold",
        ),
        (
            pb.DetectAnomalyRequest(detector="bad-detect", rows=GOOD, backend=pb.ANOMALY_BACKEND_KNN),
            grpc.StatusCode.INVALID_ARGUMENT,
            "detector",
        ),
        (
            pb.DetectAnomalyRequest(rows=GOOD, contamination=0.75),
            grpc.StatusCode.INVALID_ARGUMENT,
            "contamination",
        ),
        (pb.DetectAnomalyRequest(rows=GOOD, backend=-3), grpc.StatusCode.INVALID_ARGUMENT, "backend"),
    ]
    for request, code, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await inference.DetectAnomaly(request)
        assert err.value.code() == code, (field, err.value.details())
        assert error_info(err.value).metadata["field"] == field
    for name in ("../x", "a\\b", ".hidden", "x" * 200):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await inference.DeleteAnomalyDetector(pb.DeleteAnomalyDetectorRequest(detector=name))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(err.value).reason == "INVALID_DETECTOR_NAME"
    response = await inference.DetectAnomaly(pb.DetectAnomalyRequest(detector="bad-detect", rows=GOOD))
    assert len(response.scores) == len(GOOD)
