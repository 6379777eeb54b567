"""One backend process: started from the server's event loop, watched until it exits, stopped.

A backend process (``python -m service.backend``) holds one loaded model and serves it on a
Unix domain socket in a directory only the server's user can enter. It is one-shot, as
docker/model-runner's backend interface asks of ``Backend.Run``: it never restarts itself; the
model manager starts a new one. Its output (stdout and stderr, merged) is read line by line into
the server's log, each line prefixed with the model and pid, and the last
:data:`TAIL_LINES` are kept to say why it died. The child asks the kernel to kill it when the
server's thread that started it ends (``PR_SET_PDEATHSIG``), so no backend outlives its server:
it is started from the event loop's thread, which lives as long as the server.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import psutil

log = logging.getLogger("service.backend")

#: Lines of a backend's output kept to report why it exited.
TAIL_LINES = 20
#: Longest line of backend output read as one line (bytes); a longer one is logged in pieces.
MAX_LINE_BYTES = 16 * 1024
#: Seconds to wait after SIGTERM for a backend that did not end on Unload, before SIGKILL.
TERM_GRACE_S = 5.0


def describe_exit(returncode: int) -> str:
    """How a process ended, for statuses and messages: ``"signal 11"`` or ``"exit code 1"``.

    The signal's name is :func:`exit_label`'s (logs and metrics carry both).

    Args:
        returncode: ``Popen.returncode``: negative for a signal (``-11``), else the exit code.

    """
    return f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}"


def exit_label(returncode: int) -> str:
    """The ``reason`` label of a backend exit in metrics: ``SIGSEGV``, ``SIGKILL``, ``exit_1`` (bounded)."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return "signal_other"
    return f"exit_{returncode}" if 0 <= returncode <= 255 else "exit_other"


class BackendProcess:
    """A started backend process and the channel to its socket.

    Attributes:
        model: catalog name of the model it holds (for logs and metrics).
        socket_path: its Unix domain socket.
        channel: the gRPC channel to it (``unix:`` target), open from :meth:`start` to :meth:`close`.
        pid: its process id (0 before :meth:`start`).
        started_at: wall-clock seconds when it started.
        returncode: its exit status once it exited (negative: the signal), else None.

    """

    def __init__(self, model: str, socket_path: Path, argv: list[str], env: dict[str, str]) -> None:
        self.model = model
        self.socket_path = socket_path
        self._argv = argv
        self._env = env
        self.channel: grpc.aio.Channel | None = None
        self.pid = 0
        self.started_at = 0.0
        self.returncode: int | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._process: asyncio.subprocess.Process | None = None
        self._exited = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self._on_exit: list[Callable[[BackendProcess], None]] = []
        self._psutil: psutil.Process | None = None

    @property
    def exited(self) -> bool:
        """Whether the process has ended (its status is in :attr:`returncode`)."""
        return self._exited.is_set()

    @property
    def exit_description(self) -> str:
        """:func:`describe_exit` of its end, ``""`` while it runs."""
        return describe_exit(self.returncode) if self.returncode is not None else ""

    def on_exit(self, callback: Callable[[BackendProcess], None]) -> None:
        """Call ``callback(self)`` on the event loop once the process has ended (by itself or stopped)."""
        self._on_exit.append(callback)

    def forget_callbacks(self) -> None:
        """Drop the :meth:`on_exit` callbacks (once the server has ended the process itself)."""
        self._on_exit.clear()

    async def start(self, ready_timeout_s: float) -> None:
        """Start the process and wait until its socket answers.

        Raises:
            RuntimeError: it exited before its socket answered (its last output lines go to the log).
            TimeoutError: its socket did not answer within ``ready_timeout_s`` (the process is killed).

        """
        self._process = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self._env,
            limit=MAX_LINE_BYTES,
        )
        self.pid = self._process.pid
        self.started_at = time.time()
        with contextlib.suppress(psutil.Error):
            self._psutil = psutil.Process(self.pid)
        self._watcher = asyncio.create_task(self._watch(), name=f"backend-{self.model}")
        self.channel = grpc.aio.insecure_channel(
            f"unix:{self.socket_path}",
            options=[
                ("grpc.max_receive_message_length", -1),
                ("grpc.max_send_message_length", -1),
                # One backend, one connection: no reconnect storm after it dies.
                ("grpc.enable_retries", 0),
            ],
        )
        ready = asyncio.ensure_future(self.channel.channel_ready())
        exited = asyncio.ensure_future(self._exited.wait())
        try:
            done, _ = await asyncio.wait(
                {ready, exited}, timeout=ready_timeout_s, return_when="FIRST_COMPLETED"
            )
        finally:
            ready.cancel()
            exited.cancel()
        if ready in done and not ready.cancelled() and ready.exception() is None:
            return
        if self.exited:
            await self.close()
            log.error(
                "backend process exited before it served",
                extra={
                    "model": self.model,
                    "exit": self.exit_description,
                    "last_output": self.last_lines(),
                },
            )
            raise RuntimeError(
                f"it exited before it served ({self.exit_description}); the server log has its output"
            )
        await self.kill()
        raise TimeoutError(f"backend socket did not answer within {ready_timeout_s:g} s")

    def last_lines(self) -> str:
        """Its last output lines, joined with `` | `` (``"no output"`` when it wrote none)."""
        return " | ".join(self.tail) if self.tail else "no output"

    async def _watch(self) -> None:
        """Relay its output to the log until it closes, then record how it ended."""
        assert self._process is not None and self._process.stdout is not None
        prefix = f"[backend {self.model} pid {self.pid}]"
        stream = self._process.stdout
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line over MAX_LINE_BYTES: take what the buffer holds
                raw = await stream.read(MAX_LINE_BYTES)
            if not raw:
                break
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self.tail.append(line[:500])
                log.info("%s %s", prefix, line, extra={"model": self.model, "backend_pid": self.pid})
        self.returncode = await self._process.wait()
        self._exited.set()
        for callback in self._on_exit:
            try:
                callback(self)
            except Exception:
                log.exception("backend exit callback failed", extra={"model": self.model})

    async def wait_exited(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the process to end; whether it has."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._exited.wait(), timeout_s)
        return self.exited

    def send_kill(self) -> None:
        """SIGKILL the process without waiting; its exit is then handled as any other (:meth:`on_exit`)."""
        if self._process is not None and not self.exited:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    async def kill(self) -> None:
        """SIGKILL the process (if it runs), wait for its end, and close the channel."""
        if self._process is not None and not self.exited:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            await self.wait_exited(TERM_GRACE_S)
        await self.close()

    async def terminate(self, grace_s: float = TERM_GRACE_S) -> None:
        """SIGTERM the process, SIGKILL it if it has not ended after ``grace_s``, then close the channel."""
        if self._process is not None and not self.exited:
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()
            if not await self.wait_exited(grace_s):
                await self.kill()
        await self.close()

    async def close(self) -> None:
        """Close the channel and wait for the output relay to finish (the process has ended)."""
        if self.channel is not None:
            await self.channel.close()
        if self._watcher is not None and self.exited:
            await asyncio.gather(self._watcher, return_exceptions=True)

    def rss_bytes(self) -> int:
        """Resident memory of the process and its children (bytes; 0 once it has ended).

        Blocking (reads ``/proc``); cheap enough for a metrics scrape. Pages shared between the
        processes of the tree (a forkserver's) are counted in each.
        """
        if self._psutil is None or self.exited:
            return 0
        total = 0
        try:
            processes = [self._psutil, *self._psutil.children(recursive=True)]
        except psutil.Error:
            return 0
        for process in processes:
            with contextlib.suppress(psutil.Error):
                total += process.memory_info().rss
        return total


def backend_argv(socket_path: Path, settings_json: str) -> list[str]:
    """The command line of a backend process serving on ``socket_path`` for this server."""
    return [
        sys.executable,
        "-m",
        "service.backend",
        "--socket",
        str(socket_path),
        "--parent-pid",
        str(os.getpid()),
        "--settings-json",
        settings_json,
    ]
