"""Rows without values (so no columns) are INVALID_ARGUMENT naming the field, never INTERNAL.

With no schema the first row gives the width; an empty one would give zero columns, and encoding
them would fail in ``np.hstack`` of nothing (INTERNAL).
"""

from __future__ import annotations

import grpc
import pytest
from universal_runtime.v1 import anomaly_pb2 as pb

from tests.conftest import error_info
from tests.service.anomaly.helpers import to_rows

EMPTY_ROWS = [pb.FeatureRow() for _ in range(30)]


async def _stream(config: pb.StreamDetectorConfig, batches: list[list[pb.FeatureRow]]):
    for i, rows in enumerate(batches):
        yield pb.StreamDetectAnomalyRequest(config=config if i == 0 else None, rows=rows)


async def _invalid(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    return caught.value


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="no-values", rows=EMPTY_ROWS)),
        lambda s: s.DetectAnomaly(pb.DetectAnomalyRequest(rows=EMPTY_ROWS)),
    ],
    ids=["fit", "one-shot detect"],
)
async def test_rows_without_values_are_invalid_argument(inference, call):
    err = await _invalid(call(inference))
    info = error_info(err)
    assert info.metadata["field"] == "rows[0].values"
    assert "at least one value" in err.details()
    listed = await inference.ListAnomalyDetectors(pb.ListAnomalyDetectorsRequest())
    assert "no-values" not in [d.detector for d in listed.detectors]


async def test_an_empty_first_row_is_named_even_when_later_rows_have_values(inference):
    rows = [pb.FeatureRow(), *to_rows([[1.0, 2.0]] * 29)]
    err = await _invalid(inference.DetectAnomaly(pb.DetectAnomalyRequest(rows=rows)))
    assert error_info(err).metadata["field"] == "rows[0].values"


async def test_a_stream_of_rows_without_values_is_invalid_argument(inference):
    config = pb.StreamDetectorConfig(min_samples=10)
    stream = inference.StreamDetectAnomaly(_stream(config, [EMPTY_ROWS[:5]]))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stream:
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert error_info(caught.value).metadata["field"] == "rows[0].values"
