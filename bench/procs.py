"""Child processes of the harness: servers on loopback ports, readiness checks, RSS, clean stops."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
#: What a server logs when a port picked by :func:`free_port` was taken before it could bind:
#: uvicorn and the OS say the first, grpc's ``add_insecure_port``/``add_secure_port`` the second.
BIND_FAILURES = ("address already in use", "failed to bind to address")


def bind_failed(log: str) -> bool:
    """Whether ``log`` says a server lost its port to another process (see :data:`BIND_FAILURES`).

    Compared without case: uvicorn writes "address already in use", Python's ``OSError`` (the
    metrics port) "Address already in use", gRPC "Failed to bind to address".
    """
    lowered = log.lower()
    return any(marker in lowered for marker in BIND_FAILURES)


#: The checkout: children run here so that ``python -m bench.*`` resolves without installing ``bench``.
REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it; a race with others is unlikely)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def base_env(**extra: str) -> dict[str, str]:
    """This environment, offline (no hub, no telemetry), plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        DO_NOT_TRACK="1",
        TOKENIZERS_PARALLELISM="false",
    )
    env.update(extra)
    return env


class ProcessFailedError(RuntimeError):
    """A child process exited or did not become ready; the message ends with its log's tail."""


class ManagedProcess:
    """A child process whose output goes to a log file; stopped with SIGTERM, then SIGKILL.

    Args:
        name: Label for messages and the log file name.
        argv: Command line.
        log_dir: Where ``<name>.log`` is written.
        env: Environment (default: :func:`base_env`).
        pipes: Give the child a stdin and stdout pipe for a JSON-lines conversation
            (:meth:`request`); its stderr still goes to the log.

    """

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_dir: Path,
        env: dict[str, str] | None = None,
        *,
        pipes: bool = False,
    ):
        self.name = name
        self.argv = argv
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE if pipes else self._log,
            stderr=self._log if pipes else subprocess.STDOUT,
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            text=pipes,
            env=env or base_env(),
            cwd=REPO_ROOT,
            start_new_session=True,  # a Ctrl-C of the harness must not reach it before we stop it
        )

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the child is still running."""
        return self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the child's output."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, probe: Callable[[], bool], timeout_s: float, interval_s: float = 0.25) -> float:
        """Poll ``probe`` until it returns True; return the seconds it took.

        Raises:
            ProcessFailedError: the child exited, or ``timeout_s`` passed.

        """
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if not self.alive():
                raise ProcessFailedError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if bind_failed(self.log_tail()):  # a server may keep running without the port it lost
                raise ProcessFailedError(f"{self.name} could not bind its port:\n{self.log_tail()}")
            with contextlib.suppress(Exception):
                if probe():
                    return time.monotonic() - start
            time.sleep(interval_s)
        raise ProcessFailedError(f"{self.name} not ready after {timeout_s:.0f}s:\n{self.log_tail()}")

    def request(self, command: dict[str, Any]) -> dict[str, Any]:
        """Send one JSON command line (``pipes=True``) and return the JSON line it answers.

        Raises:
            ProcessFailedError: the child closed its stdout (it exited or crashed).

        """
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            raise ProcessFailedError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
        return json.loads(line)

    def rss_bytes(self) -> int:
        """Resident set size of the child and all its descendants, in bytes."""
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0
        total = 0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                total += proc.memory_info().rss
        return total

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (the graceful path), SIGKILL after ``timeout_s``; return the exit code."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """Whether ``GET url`` answers 2xx."""
    import httpx

    return httpx.get(url, timeout=timeout_s).is_success


def grpc_serving(target: str, timeout_s: float = 2.0) -> bool:
    """Whether ``grpc.health.v1.Health/Check`` of the whole server answers SERVING."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=timeout_s
        )
    return response.status == health_pb2.HealthCheckResponse.SERVING


def status_name(exc: BaseException) -> str | None:
    """The gRPC status name of a failed call's exception (``"DEADLINE_EXCEEDED"``), else None."""
    code = getattr(exc, "code", None)
    if callable(code):
        try:
            return code().name
        except Exception:
            return None
    return None
