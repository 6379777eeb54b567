"""StreamDetectAnomaly decodes and checks each message's rows on the CPU executor, not the event loop."""

from __future__ import annotations

import asyncio
import threading
import time

from universal_runtime.v1 import anomaly_pb2 as pb

from engines.anomaly.types import FitConfig, StreamConfig
from engines.executor import DeviceExecutor
from service.convert.anomaly import request_rows
from service.tasks.anomaly import AnomalyStream
from tests.anomaly.helpers import to_rows


async def _one(request: pb.StreamDetectAnomalyRequest):
    yield request


async def test_stream_rows_are_decoded_and_checked_on_the_cpu_executor():
    executor = DeviceExecutor("cpu")
    threads: list[str] = []

    def decode(schema):
        threads.append(threading.current_thread().name)
        return [[1.0, 2.0], [3.0, 4.0]]

    stream = AnomalyStream(StreamConfig(fit=FitConfig(), window_size=20, min_samples=10), executor)
    try:
        step = await stream.add(decode)
        assert step.window_row_count == 2
        assert threads and threads[0].startswith("device-cpu")
        assert threads[0] != threading.current_thread().name
    finally:
        await stream.close()
        executor.shutdown()


async def test_a_large_stream_message_does_not_stall_the_event_loop(inference):
    # 60,000 rows with a string cell take the general decode path (a few hundred ms of Python).
    rows = to_rows([[float(i), "x"] for i in range(60_000)])
    schema = [pb.FeatureField(name="n"), pb.FeatureField(name="c", type=pb.FEATURE_TYPE_CATEGORICAL)]
    config = pb.StreamDetectorConfig(schema=schema, min_samples=60_001, window_size=60_001)
    request = pb.StreamDetectAnomalyRequest(config=config, rows=rows)  # built before the clock runs
    started = time.perf_counter()
    request_rows(request, max_rows=200_000, max_features=8, allow_empty=True)
    decode_s = time.perf_counter() - started

    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker():
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    try:
        replies = [r async for r in inference.StreamDetectAnomaly(_one(request))]
    finally:
        done.set()
        await ticking
    assert [r.window_row_count for r in replies] == [60_000]
    assert replies[0].state == pb.STREAM_DETECTOR_STATE_COLLECTING
    # Decoding on the loop would stall it for the whole decode; off the loop the longest pause is
    # the transport's own (de)serialization of the message.
    assert max(gaps) < decode_s / 2, (max(gaps), decode_s)
