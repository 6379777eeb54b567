"""A stall probe: how long the server's event loop was held while one fuzz case ran.

The isolation bench's probe (``bench/isolation.py``) as a property. A thread sends gRPC health
checks to the launched server one after another, :data:`PAUSE_S` apart, each on its own short
deadline; a health check is answered on the server's event loop and touches no model, so its
round trip is the time that loop took to get to it. The gateway runs on the same loop, so HTTP
work that blocks it shows up here too. :meth:`StallProbe.window` returns the longest round trip
of the checks that overlapped a case: the longest time the loop was held while the case ran.

A second thread probes a control process that serves health alone
(:mod:`tests.fuzz.control_server`): on a machine busy with other work every process waits for a
core, and the control's longest check in the same window says how much of the figure that was.
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
    """The probe's figures for one case, set when the ``with`` block of :meth:`StallProbe.window`
    ends: the longest check to the server (``max_s``) and to the control (``control_max_s``)."""

    max_s: float = 0.0
    control_max_s: float = 0.0
    checks: int = 0

    @property
    def stall_s(self) -> float:
        """How long the server's loop was held beyond what the machine made the control wait."""
        return max(0.0, self.max_s - self.control_max_s)


class StallProbe:
    """Health checks to ``target`` and ``control`` in background threads, recorded as (start, end)
    monotonic times.

    Use as a context manager (starts and stops the threads); :meth:`window` measures one case.
    """

    def __init__(self, target: str, control: str) -> None:
        self._calls: dict[str, list[tuple[float, float]]] = {target: [], control: []}
        self.target, self.control = target, control
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(name,), name=f"stall-probe-{name}", daemon=True)
            for name in (target, control)
        ]

    def __enter__(self) -> StallProbe:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=CHECK_DEADLINE_S + 5)

    def _run(self, target: str) -> None:
        channel = grpc.insecure_channel(target)
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest()
        calls = self._calls[target]
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                with contextlib.suppress(grpc.RpcError):  # a dead server reads as a long check
                    stub.Check(request, timeout=CHECK_DEADLINE_S)
                with self._lock:
                    calls.append((started, time.monotonic()))
                    del calls[:-10_000]  # a long run keeps only recent checks
                self._stop.wait(PAUSE_S)
        finally:
            channel.close()

    def _longest(self, target: str, started: float, ended: float) -> list[float]:
        return [end - start for start, end in self._calls[target] if end >= started and start <= ended]

    @contextlib.contextmanager
    def window(self) -> Iterator[Window]:
        """Measure the ``with`` block: afterwards ``window`` holds the longest checks that overlapped it.

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
                if all(any(start > ended for start, _ in calls[-4:]) for calls in self._calls.values()):
                    break
            time.sleep(PAUSE_S)
        with self._lock:
            overlapping = self._longest(self.target, started, ended)
            result.control_max_s = max(self._longest(self.control, started, ended), default=0.0)
        result.max_s = max(overlapping, default=0.0)
        result.checks = len(overlapping)
