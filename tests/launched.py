"""Helpers for tests that start the real ``universal-runtime`` process and talk to it."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

#: Seconds a started server has to answer its gateway's /health, and to exit after SIGTERM.
READY_S, STOP_S = 60, 30


@contextlib.contextmanager
def serving(process: subprocess.Popen, log: Path, health_url: str, **get_options: Any) -> Iterator[None]:
    """Wait until ``health_url`` answers 200, run the block, then stop the server with SIGTERM.

    ``get_options`` go to ``httpx.get`` (e.g. ``verify`` for HTTPS). The server must exit with
    status 0 and no traceback in ``log``; a server still running when the block fails is killed.

    Raises:
        AssertionError: the process exited or did not answer within ``READY_S`` seconds (its log
            is the message), or it did not stop cleanly.

    """
    try:
        deadline = time.monotonic() + READY_S
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"not ready in {READY_S} s:\n{log.read_text()}"
            try:
                if httpx.get(health_url, timeout=1.0, **get_options).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=STOP_S) == 0
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
