"""StreamDetectAnomaly decodes and checks each message's rows on the anomaly CPU lane, not the event loop."""

from __future__ import annotations

import threading

from universal_runtime.v1 import anomaly_pb2 as pb

from engines.anomaly.types import FitConfig, StreamConfig
from engines.executor import DeviceExecutor
from service.tasks.anomaly import AnomalyStream


async def _one(request: pb.StreamDetectAnomalyRequest):
    yield request


async def test_stream_rows_are_decoded_and_checked_on_the_cpu_lane():
    executor = DeviceExecutor("cpu", "anomaly")
    threads: list[str] = []

    def decode(schema):
        threads.append(threading.current_thread().name)
        return [[1.0, 2.0], [3.0, 4.0]]

    stream = AnomalyStream(StreamConfig(fit=FitConfig(), window_size=20, min_samples=10), executor)
    try:
        step = await stream.add(decode)
        assert step.window_row_count == 2
        assert threads and threads[0].startswith("cpu-anomaly")
        assert threads[0] != threading.current_thread().name
    finally:
        await stream.close()
        executor.shutdown()
