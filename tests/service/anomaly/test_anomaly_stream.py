"""StreamDetectAnomaly: collecting until min_samples, then scoring, refits at the interval."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from universal_runtime.v1 import anomaly_pb2 as pb

from tests.conftest import error_info
from tests.service.anomaly.helpers import to_rows


async def _requests(config: pb.StreamDetectorConfig, batches):
    for i, batch in enumerate(batches):
        yield pb.StreamDetectAnomalyRequest(config=config if i == 0 else None, rows=to_rows(batch))


async def test_stream_scores_after_min_samples_and_refits_at_the_interval(inference):
    rng = np.random.default_rng(2)
    batches = [rng.normal(size=(10, 3)).tolist() for _ in range(12)]
    batches[9][4] = [9.0, -9.0, 9.0]  # an outlier after the model is ready
    config = pb.StreamDetectorConfig(
        backend=pb.ANOMALY_BACKEND_ECOD, window_size=60, min_samples=50, refit_interval=30, contamination=0.05
    )
    replies = [r async for r in inference.StreamDetectAnomaly(_requests(config, batches))]
    assert len(replies) == len(batches)
    states = [pb.StreamDetectorState.Name(r.state).removeprefix("STREAM_DETECTOR_STATE_") for r in replies]
    # 40 rows: collecting; 50: first fit; 30 rows later (messages 8 and 11): refits.
    assert states == [
        "COLLECTING", "COLLECTING", "COLLECTING", "COLLECTING",
        "READY", "READY", "READY", "REFITTING",
        "READY", "READY", "REFITTING", "READY",
    ]  # fmt: skip
    assert [r.fit_count for r in replies] == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3]
    assert [r.window_row_count for r in replies] == [10, 20, 30, 40, 50, 60, 60, 60, 60, 60, 60, 60]
    assert all(not r.scores for r in replies[:4])
    assert all(len(r.scores) == 10 for r in replies[4:])
    assert [s.index for s in replies[5].scores] == list(range(10))
    assert replies[9].scores[4].is_anomaly
    assert replies[9].scores[4].normalized_score == max(s.normalized_score for s in replies[9].scores)


async def test_stream_bad_config_and_rows_are_invalid_argument(inference):
    bad_configs = [
        (pb.StreamDetectorConfig(min_samples=5), "config.min_samples"),
        (pb.StreamDetectorConfig(min_samples=50, window_size=20), "config.window_size"),
        (pb.StreamDetectorConfig(window_size=10_000_000), "config.window_size"),
        (pb.StreamDetectorConfig(contamination=0.9), "config.contamination"),
        (pb.StreamDetectorConfig(backend=42), "config.backend"),
        (pb.StreamDetectorConfig(refit_interval=-1), "config.refit_interval"),
    ]
    for config, field in bad_configs:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in inference.StreamDetectAnomaly(_requests(config, [[[1.0, 2.0]]])):
                pass
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert error_info(err.value).metadata["field"] == field
    # A row of another width in a later message ends the stream with INVALID_ARGUMENT.
    config = pb.StreamDetectorConfig(min_samples=10)
    replies = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for reply in inference.StreamDetectAnomaly(
            _requests(config, [[[1.0, 2.0]] * 3, [[1.0, 2.0, 3.0]]])
        ):
            replies.append(reply)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(replies) == 1


async def test_stream_with_no_messages_ends_cleanly(inference):
    async def nothing():
        return
        yield

    assert [r async for r in inference.StreamDetectAnomaly(nothing())] == []
