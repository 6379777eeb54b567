"""The explicit context of one call: who it is for, its ids, deadline and answer headers.

A face (the gRPC server, the gateway in process, the batch runner) makes one
:class:`CallContext` per call from what its transport carries, and the admission chain
(:mod:`service.core.chain`) fills in what admission decides (the caller, the rate-limit headers).
The running call's context is in :data:`call_context_var` for the code below the core (tasks,
logs); the caller's identity is one :class:`engines.fair_share.Caller`, which the chain also
sets in :data:`engines.fair_share.caller_var` for the engines' queues.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from engines.fair_share import DEFAULT_CALLER, Caller

Header = tuple[str, str]


@dataclass(frozen=True, slots=True)
class MethodInfo:
    """One operation of the contract, as the core knows it.

    Attributes:
        path: The full method name (``/universal_runtime.v1.InferenceService/Embed``).
        request_streaming: The request is a stream of messages (an async iterator).
        response_streaming: The answer is a stream of messages (an async iterator).
        public: Needs no API key (health checks); neither counted nor limited.
        known: A method the server has; an unknown one (a path a caller made up, refused before
            anything runs) is named ``unknown`` in the metrics, so callers cannot add series.

    """

    path: str
    request_streaming: bool = False
    response_streaming: bool = False
    public: bool = False
    known: bool = True

    @property
    def name(self) -> str:
        """The short name (``Embed``; ``unknown`` for an unknown method): the metrics' ``method`` label."""
        return self.path.rpartition("/")[2] if self.known else "unknown"


class AnswerHeaders:
    """A call's initial answer headers (gRPC initial metadata, HTTP headers): sent at most once.

    Admission adds entries (a stream's request id, a key's ``x-ratelimit-*`` state); the face
    sends them with :meth:`send` through the ``sender`` it gave, once: a stream's as its handler
    starts (after every admission check), a unary answer's with the answer.

    Args:
        sender: Sends the entries (``ServicerContext.send_initial_metadata``); ``None`` to only
            keep them (a face that reads :attr:`entries` itself).

    """

    __slots__ = ("_sender", "entries", "sent")

    def __init__(self, sender: Callable[[tuple[Header, ...]], Awaitable[None]] | None = None) -> None:
        self._sender = sender
        self.entries: list[Header] = []
        self.sent = False

    def add(self, entries: list[Header] | tuple[Header, ...]) -> None:
        """Add ``(key, value)`` entries; ignored once the headers are sent (too late for them)."""
        if not self.sent:
            self.entries.extend(entries)

    async def send(self) -> None:
        """Send the entries, unless already sent (then nothing); a gone client's failure is ignored."""
        if self.sent:
            return
        self.sent = True
        if self._sender is not None:
            try:
                await self._sender(tuple(self.entries))
            except Exception:  # a call already gone (client left) cannot take them
                return


@dataclass(slots=True, eq=False)
class CallContext:
    """Everything about one call that is not its request message.

    Made by a face; the fields under "decided by admission" are set by the chain.

    Attributes:
        method: The operation called.
        request_id: The call's id: the client's ``x-request-id`` (clipped) or a new one.
        credentials: The ``authorization`` values the call came with (``"Bearer <key>"``), as
            sent; the authentication step reads and then clears them.
        priority: The class the call asks for (``x-ur-priority``: ``batch`` or ``interactive``),
            ``None`` when it asks none.
        peer: The transport's address of the client (gRPC's ``ipv4:host:port``; ``in-process``).
        client_address: The HTTP client's address a gateway passed, ``""`` when none.
        deadline: Monotonic seconds when the call expires, ``None`` without a deadline.
        trusted_caller: A caller the face vouches for (the batch runner runs a line under the
            key that submitted it): admission takes it instead of checking credentials.
        headers: The answer's initial headers (:class:`AnswerHeaders`).
        trailers: Entries for the answer's trailers (the request id of a unary answer).
        caller: Decided by admission: who the call is for (:class:`engines.fair_share.Caller`).
        model: The model the request names, for the log line (set by the operation).
        span: The call's trace span when tracing is on (``None`` otherwise).

    """

    method: MethodInfo
    request_id: str
    credentials: tuple[str, ...] = ()
    priority: str | None = None
    peer: str = ""
    client_address: str = ""
    deadline: float | None = None
    trusted_caller: Caller | None = None
    headers: AnswerHeaders = field(default_factory=AnswerHeaders)
    trailers: list[Header] = field(default_factory=list)
    caller: Caller = DEFAULT_CALLER
    model: str = ""
    span: Any = None

    def time_remaining(self) -> float | None:
        """Seconds until :attr:`deadline` (may be negative), ``None`` without one."""
        return None if self.deadline is None else self.deadline - time.monotonic()


call_context_var: ContextVar[CallContext | None] = ContextVar("call_context", default=None)
"""The running call's :class:`CallContext` (``None`` outside a call), set by the chain."""


def current_call() -> CallContext | None:
    """The running call's :class:`CallContext`, ``None`` outside one."""
    return call_context_var.get()
