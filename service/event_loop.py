"""The event loop ``universal-runtime`` runs on: uvloop when installed (setting ``event_loop``).

The gRPC server and the gateway share one loop in one process (:func:`service.cli.serve`).
``asyncio.run`` would make asyncio's own loop whatever uvicorn is told, so the command line builds
the loop itself. uvloop runs asyncio's callbacks, sockets and timers in C (libuv): each gateway
call goes through the loop several times (HTTP read and write, the gRPC call's completion, the
disconnect watcher), which is where it saves. ``grpc.aio`` supports any asyncio loop
(tests/service/server/test_event_loop.py runs the real process on uvloop).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable
from typing import Literal

log = logging.getLogger(__name__)

EventLoopName = Literal["uvloop", "asyncio"]
"""Values of the ``event_loop`` setting (``UR_EVENT_LOOP``)."""


class EventLoopError(RuntimeError):
    """The event loop asked for cannot be used (uvloop named explicitly but not installed)."""


def loop_factory(choice: EventLoopName, *, explicit: bool = True) -> Callable[[], asyncio.AbstractEventLoop]:
    """The function that makes the process's event loop, for ``asyncio.Runner(loop_factory=...)``.

    Args:
        choice: ``"uvloop"`` or ``"asyncio"`` (asyncio's own loop).
        explicit: Whether the operator set ``choice`` (``UR_EVENT_LOOP``); when not (the default
            ``"uvloop"``) and uvloop is not installed, asyncio's loop is used with a warning.

    Raises:
        EventLoopError: ``choice`` is ``"uvloop"``, set explicitly, and uvloop cannot be imported.
        ValueError: ``choice`` is neither of the two.

    """
    if choice == "asyncio":
        return asyncio.new_event_loop
    if choice != "uvloop":
        raise ValueError(f"event_loop must be 'uvloop' or 'asyncio', got {choice!r}")
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if explicit:
            raise EventLoopError(
                "UR_EVENT_LOOP=uvloop but uvloop is not installed: pip install uvloop, "
                "or set UR_EVENT_LOOP=asyncio"
            ) from None
        log.warning("uvloop is not installed; running on asyncio's own event loop")
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def loop_name(loop: asyncio.AbstractEventLoop) -> EventLoopName:
    """Which kind ``loop`` is: ``"uvloop"`` for uvloop's ``Loop``, else ``"asyncio"``."""
    return "uvloop" if type(loop).__module__.partition(".")[0] == "uvloop" else "asyncio"
