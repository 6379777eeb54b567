"""The anomaly ``schema`` list is bounded by ``anomaly_max_features``, refused from its length alone,
and a large valid fit does not stall other calls (a 2 MB schema converted on the loop would)."""

from __future__ import annotations

import asyncio
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from universal_runtime.v1 import anomaly_pb2 as pb

from engines.errors import InvalidArgumentError
from service.convert.anomaly import schema_from_pb
from tests.conftest import error_info
from tests.service.anomaly.helpers import to_rows

ROWS = to_rows(np.random.default_rng(0).normal(size=(50, 4)))


def _schema(count: int) -> list[pb.FeatureField]:
    return [pb.FeatureField(name=f"feature_{i}") for i in range(count)]


class _Unreadable:
    """A list of ``count`` fields whose items must not be read (only its length)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        raise AssertionError("a field was read before the length was checked")

    def __iter__(self):
        raise AssertionError("the fields were read before the length was checked")


def test_the_length_is_checked_before_any_field_is_read():
    with pytest.raises(InvalidArgumentError) as err:
        schema_from_pb(_Unreadable(100_000), "schema", max_features=1024)
    assert err.value.reason == "TOO_MANY_FEATURES"
    assert err.value.metadata["max_features"] == "1024"
    assert "at most 1024 features" in err.value.message
    assert len(schema_from_pb(_schema(1024), max_features=1024)) == 1024


@pytest.mark.parametrize("count", [1025, 100_000])
async def test_an_oversized_schema_is_invalid_argument_naming_the_limit(inference, settings, count):
    schema = _schema(count)
    limit = settings.anomaly_max_features
    calls = {
        "schema": inference.FitAnomalyDetector(
            pb.FitAnomalyDetectorRequest(detector="wide", rows=ROWS, schema=schema)
        ),
        "schema ": inference.DetectAnomaly(pb.DetectAnomalyRequest(rows=ROWS, schema=schema)),
    }
    for field, call in calls.items():
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        info = error_info(err.value)
        assert info.reason == "TOO_MANY_FEATURES"
        assert info.metadata["field"] == field.strip()
        assert info.metadata["max_features"] == str(limit) and info.metadata["features"] == str(count)

    async def stream():
        yield pb.StreamDetectAnomalyRequest(config=pb.StreamDetectorConfig(schema=schema), rows=ROWS)

    with pytest.raises(grpc.aio.AioRpcError) as err:
        [_ async for _ in inference.StreamDetectAnomaly(stream())]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(err.value).metadata["field"] == "config.schema"


async def _probe_gaps(channel, until: asyncio.Future) -> list[float]:
    """Latencies (s) of health checks sent back to back until ``until`` is done."""
    health = health_pb2_grpc.HealthStub(channel)
    gaps = []
    while not until.done():
        started = time.perf_counter()
        await health.Check(health_pb2.HealthCheckRequest())
        gaps.append(time.perf_counter() - started)
        await asyncio.sleep(0.005)
    return gaps


async def test_a_probe_is_not_stalled_by_large_fits_or_refused_schemas(inference, channel, settings):
    """Large requests (a widest valid fit; 2 MB schemas refused) leave the event loop to the probe.

    Relative: no probe waits more than a fifth of the time the large requests took in all (without
    the bound, a 2 MB schema would hold the loop while it is converted, the probe with it).
    """
    width = settings.anomaly_max_features
    wide = pb.FitAnomalyDetectorRequest(
        detector="widest",
        schema=_schema(width),
        numeric_rows=pb.NumericRows(
            column_count=width, values=np.random.default_rng(1).normal(size=200 * width).tolist()
        ),
    )
    refused = pb.FitAnomalyDetectorRequest(detector="wide", rows=ROWS, schema=_schema(100_000))

    async def large_requests():
        await inference.FitAnomalyDetector(wide)
        for _ in range(3):
            with pytest.raises(grpc.aio.AioRpcError):
                await inference.FitAnomalyDetector(refused)

    await inference.FitAnomalyDetector(wide)  # warm: the fit lane's process has started
    started = time.perf_counter()
    work = asyncio.ensure_future(large_requests())
    gaps = await _probe_gaps(channel, work)
    await work
    total = time.perf_counter() - started
    assert len(gaps) >= 3
    assert max(gaps) < total / 5, (max(gaps), total)
