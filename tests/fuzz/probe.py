"""A stall probe: how long the server's event loop was held while one fuzz case ran.

The isolation bench's probe (``bench/isolation.py``) as a property. A thread sends gRPC health
checks to the launched server one after another, :data:`PAUSE_S` apart, each on its own short
deadline; a health check is answered on the server's event loop and touches no model, so its
round trip is the time that loop took to get to it. The gateway runs on the same loop, so HTTP
work that blocks it shows up here too. :meth:`StallProbe.window` returns the longest round trip
of the checks that overlapped a case: the longest time the loop was held while the case ran.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

#: Seconds between two probe checks (the bench's probe pause).
PAUSE_S = 0.01
#: Deadline of one probe check: a loop held longer than this reads as this long (the bound fails).
CHECK_DEADLINE_S = 30.0


class Window:
    """The probe's figure for one case: ``max_s``, set when the ``with`` block of :meth:`StallProbe.window` ends."""

    max_s: float = 0.0
    checks: int = 0


class StallProbe:
    """Health checks to ``target`` in a background thread, recorded as (start, end) monotonic times.

    Use as a context manager (starts and stops the thread); :meth:`window` measures one case.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self._calls: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-probe", daemon=True)

    def __enter__(self) -> StallProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=CHECK_DEADLINE_S + 5)

    def _run(self) -> None:
        channel = grpc.insecure_channel(self.target)
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest()
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                with contextlib.suppress(grpc.RpcError):  # a dead server reads as a long check
                    stub.Check(request, timeout=CHECK_DEADLINE_S)
                with self._lock:
                    self._calls.append((started, time.monotonic()))
                    del self._calls[:-10_000]  # a long run keeps only recent checks
                self._stop.wait(PAUSE_S)
        finally:
            channel.close()

    @contextlib.contextmanager
    def window(self) -> Iterator[Window]:
        """Measure the ``with`` block: afterwards ``window.max_s`` is the longest check that overlapped it.

        Waits (up to the check deadline) for a check that starts after the block, so a check
        still waiting on a held loop when the block ends is counted whole.
        """
        result = Window()
        started = time.monotonic()
        yield result
        ended = time.monotonic()
        deadline = ended + CHECK_DEADLINE_S + 1
        while time.monotonic() < deadline:
            with self._lock:
                if any(start > ended for start, _ in self._calls[-4:]):
                    break
            time.sleep(PAUSE_S)
        with self._lock:
            overlapping = [end - start for start, end in self._calls if end >= started and start <= ended]
        result.max_s = max(overlapping, default=0.0)
        result.checks = len(overlapping)
