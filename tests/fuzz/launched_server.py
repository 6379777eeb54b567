"""A real ``universal-runtime`` process (gRPC and gateway) for the fuzz cases that may crash it.

Inputs that reach native code (a JSON schema turned into a grammar, an image decoder) could end
the process with a signal before their fix lands. In the pytest process that would end the whole
test run; here a crash is one failed case: :meth:`LaunchedServer.ensure` starts a fresh process
before the next case, and :meth:`LaunchedServer.crash` says how the last one died.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import REPO_ROOT, child_server_env, free_port
from tests.fuzz.probe import StallProbe

#: Seconds a started process has to answer gRPC health and the gateway's /health.
READY_S = 90.0
#: Lines of the server's log quoted when it crashed.
LOG_TAIL_LINES = 30


class LaunchedServer:
    """One ``python -m service.cli`` child serving gRPC and the gateway on free ports.

    Args:
        catalog: Model catalog YAML the process serves.
        workdir: Folder of its data dir and logs (one log file per start).
        env: Extra ``UR_*`` settings.

    """

    def __init__(self, catalog: Path, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.catalog, self.workdir, self.env = catalog, workdir, dict(env or {})
        self.process: subprocess.Popen | None = None
        self.grpc_port = self.gateway_port = 0
        self.log: Path | None = None
        self.starts = 0
        #: The stall probe of the running process (a new one with each start).
        self.probe: StallProbe | None = None
        self.control: subprocess.Popen | None = None
        self.control_port = 0
        #: How each process that died on its own ended ("signal SIGSEGV", "exit 1").
        self.deaths: list[str] = []

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_base(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    def start(self) -> None:
        """Start the process and wait until both faces answer health checks.

        Raises:
            AssertionError: it exited or did not answer within :data:`READY_S` seconds.

        """
        self.starts += 1
        self.grpc_port, self.gateway_port = free_port(), free_port()
        self.log = self.workdir / f"server-{self.starts}.log"
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "service.cli",
                "--grpc-host", "127.0.0.1", "--grpc-port", str(self.grpc_port),
                "--gateway-host", "127.0.0.1", "--gateway-port", str(self.gateway_port),
                "--catalog", str(self.catalog), "--data-dir", str(self.workdir / "data"),
                "--metrics-port", "0", "--log-level", "WARNING",
            ],
            cwd=REPO_ROOT, stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
            env=child_server_env(UR_SHUTDOWN_GRACE_S="1", **self.env),
        )  # fmt: skip
        deadline = time.monotonic() + READY_S
        while not self._answers():
            assert self.process.poll() is None, f"the server exited at start:\n{self.log_tail()}"
            assert time.monotonic() < deadline, f"not ready in {READY_S} s:\n{self.log_tail()}"
            time.sleep(0.2)
        self.probe = StallProbe(self.grpc_target, self._control_target()).__enter__()

    def _control_target(self) -> str:
        """The stall probe's control process (:mod:`tests.fuzz.control_server`), started once."""
        if self.control is None or self.control.poll() is not None:
            self.control_port = free_port()
            self.control = subprocess.Popen(
                [sys.executable, "-m", "tests.fuzz.control_server", str(self.control_port)],
                cwd=REPO_ROOT,
                env=child_server_env(),
            )
            deadline = time.monotonic() + READY_S
            while True:
                try:
                    with grpc.insecure_channel(f"127.0.0.1:{self.control_port}") as channel:
                        health_pb2_grpc.HealthStub(channel).Check(
                            health_pb2.HealthCheckRequest(), timeout=1.0
                        )
                    break
                except grpc.RpcError:
                    assert self.control.poll() is None and time.monotonic() < deadline, (
                        "the control did not start"
                    )
                    time.sleep(0.1)
        return f"127.0.0.1:{self.control_port}"

    def _answers(self) -> bool:
        try:
            if httpx.get(f"{self.http_base}/health", timeout=1.0).status_code != 200:
                return False
            with grpc.insecure_channel(self.grpc_target) as channel:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=1.0
                )
            return reply.status == health_pb2.HealthCheckResponse.SERVING
        except (httpx.HTTPError, grpc.RpcError):
            return False

    def crash(self) -> str | None:
        """How the process ended, when it is no longer running ("signal SIGSEGV", "exit 1"), else None."""
        if self.process is None or self.process.poll() is None:
            return None
        code = self.process.returncode
        return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"

    def ensure(self) -> None:
        """Start the process when it is not running (first use, or after a crash)."""
        if self.process is not None and (ended := self.crash()) is not None:
            self.deaths.append(ended)
        if self.process is None or self.process.poll() is not None:
            self._stop_probe()
            self.start()

    def log_tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines() if self.log else []
        return "\n".join(lines[-LOG_TAIL_LINES:])

    def _stop_probe(self) -> None:
        if self.probe is not None:
            self.probe.__exit__(None, None, None)
            self.probe = None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 30 s (the control is killed)."""
        self._stop_probe()
        if self.control is not None:
            self.control.kill()
            self.control.wait()
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
