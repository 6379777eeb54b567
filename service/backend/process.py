"""Process setup of a backend: die with the server, log one line per record, stop on SIGTERM.

Standard library only (the package's own imports stay light until this has run): the first thing
``python -m service.backend`` does is :func:`die_with_parent`, before any model runtime is
imported, so that a server killed at any moment leaves no backend behind.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
from collections.abc import Callable

log = logging.getLogger("service.backend")

#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1

#: Exit status of a backend whose server was gone before it could watch it (nothing was served).
ORPHANED_EXIT_CODE = 3


def set_parent_death_signal(signum: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``signum`` to this process when the thread that forked it ends (Linux).

    ``prctl(PR_SET_PDEATHSIG, signum)`` through the C library. The signal is tied to the parent
    *thread*: a server must start backends from a thread that lives as long as it does (its main
    thread or the event loop's).

    Args:
        signum: The signal to receive (SIGKILL by default: no handler, no clean-up, no way to block it).

    Returns:
        True when the kernel took it; False off Linux or when ``prctl`` failed (logged by the
        caller's choice; the parent-pid check of :func:`orphaned` still applies).

    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def orphaned(parent_pid: int) -> bool:
    """Whether the server that started this process (``parent_pid``) is no longer its parent.

    Checked right after :func:`set_parent_death_signal`: a server that died before the call
    sent no signal, and the process was handed to another parent (init or a subreaper).
    """
    return os.getppid() != parent_pid


def die_with_parent(parent_pid: int) -> None:
    """Arrange to be killed when the server dies; exit at once if it already has.

    Raises:
        SystemExit: with :data:`ORPHANED_EXIT_CODE` when :func:`orphaned` (nothing written, no
            clean-up: nothing was started yet).

    """
    set_parent_death_signal()
    if orphaned(parent_pid):
        raise SystemExit(ORPHANED_EXIT_CODE)


def configure_backend_logging(level: str) -> None:
    """Log to stderr, one JSON object per line and record (tracebacks inside the line).

    The server reads the backend's stderr line by line and logs each line again under its own
    name (:func:`service.logging_setup.configure_logging`'s format, so a line parses as JSON).
    """
    from service.logging_setup import configure_logging

    configure_logging(level)
    logging.captureWarnings(True)


def on_stop_signals(loop, stop: Callable[[str], None]) -> None:
    """Call ``stop(signal name)`` on the event loop ``loop`` for SIGTERM and SIGINT.

    Args:
        loop: The running asyncio event loop (``loop.add_signal_handler``; Unix only).
        stop: Starts a graceful stop (drain, unload, exit 0); called again on a second signal.

    """
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signal.Signals(signum).name)
