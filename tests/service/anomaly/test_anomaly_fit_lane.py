"""Anomaly fits run in a process lane: a fit cannot hold the server's GIL, and a fit
that is cancelled, past its deadline or past the server's fit time limit is stopped at once.

The slow fit is a one-class SVM on 30,000 rows: libsvm's time grows with the square of the rows
(minutes here), which the row limit alone does not bound.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import numpy as np
import pytest
from universal_runtime.v1 import anomaly_pb2 as pb

from engines.anomaly.store import DetectorNotFoundError, DetectorStore
from engines.anomaly.types import AnomalyBackend, FitConfig
from engines.errors import ResourceExhaustedError
from engines.executor import ExecutorPool
from engines.owners import OwnedStores
from engines.state_store import open_state_store
from service.tasks.anomaly import AnomalyTask

SLOW_ROWS = np.random.default_rng(0).normal(size=(30_000, 8))
FIT_LANE = "task:anomaly-fit"


async def no_fit_process(executors: ExecutorPool, within_s: float = 2.0) -> bool:
    """Whether the fit lane's child is gone within ``within_s`` (the server sees a deadline a
    little after the client does)."""
    lane = executors.process_lane(FIT_LANE)
    for _ in range(int(within_s / 0.02)):
        if lane.pid is None:
            return True
        await asyncio.sleep(0.02)
    return lane.pid is None


async def test_a_fit_past_its_deadline_stops_its_process(inference, server):
    request = pb.FitAnomalyDetectorRequest(
        detector="too-slow",
        backend=pb.ANOMALY_BACKEND_ONE_CLASS_SVM,
        numeric_rows=pb.NumericRows(column_count=8, values=SLOW_ROWS.ravel().tolist()),
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.FitAnomalyDetector(request, timeout=1.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert await no_fit_process(server.executors), "the fit kept running after its deadline"
    # Nothing was saved, and the next fit works (in a new process).
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await inference.DetectAnomaly(pb.DetectAnomalyRequest(detector="too-slow", rows=[]))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    small = SLOW_ROWS[:200]
    fitted = await inference.FitAnomalyDetector(
        pb.FitAnomalyDetectorRequest(
            detector="after-the-slow-one",
            backend=pb.ANOMALY_BACKEND_ISOLATION_FOREST,
            numeric_rows=pb.NumericRows(column_count=8, values=small.ravel().tolist()),
        ),
        timeout=60,
    )
    assert fitted.row_count == 200


async def test_a_fit_over_the_time_limit_is_refused_as_too_slow(tmp_path):
    executors = ExecutorPool()
    stores = OwnedStores(open_state_store(tmp_path), "anomaly", DetectorStore)
    store = stores.shared  # a call without a key (as on a server without keys) fits here
    task = AnomalyTask(
        stores,
        executors.lane("cpu", "task:anomaly"),
        executors.process_lane(FIT_LANE, preload=("engines.anomaly.store",)),
        max_window=1000,
        fit_timeout_s=0.5,
    )
    config = FitConfig(backend=AnomalyBackend.ONE_CLASS_SVM)
    try:
        started = time.monotonic()
        with pytest.raises(ResourceExhaustedError) as caught:
            await task.fit("too-slow", config, lambda schema: SLOW_ROWS)
        assert time.monotonic() - started < 5
        assert caught.value.reason == "FIT_TOO_SLOW"
        assert caught.value.metadata == {"rows": "30000", "fit_timeout_s": "0.5"}
        assert await no_fit_process(executors)
        with pytest.raises(DetectorNotFoundError):
            store.load("too-slow")
        # One-shot detection is under the same limit.
        with pytest.raises(ResourceExhaustedError):
            await task.detect_once(config, lambda schema: SLOW_ROWS, threshold=None, explain=False)
    finally:
        executors.shutdown()


async def test_a_fit_in_the_process_lane_scores_like_one_in_the_server(tmp_path, inference):
    """The detector that comes back from the child scores the rows as a fit here would."""
    from engines.anomaly.detector import fit_detector

    rows = np.random.default_rng(1).normal(size=(500, 4))
    rows[::50] += 8
    request = pb.DetectAnomalyRequest(
        numeric_rows=pb.NumericRows(column_count=4, values=rows.ravel().tolist()),
        backend=pb.ANOMALY_BACKEND_ISOLATION_FOREST,
    )
    response = await inference.DetectAnomaly(request, timeout=60)
    local = fit_detector(rows, FitConfig()).score(rows)
    assert [s.score for s in response.scores] == pytest.approx(local.raw.tolist())
    assert [s.is_anomaly for s in response.scores] == local.flags.tolist()
