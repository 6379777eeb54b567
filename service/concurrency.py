"""The per-process limit on concurrent RPCs (setting ``max_concurrent_requests``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from grpc_interceptor import AsyncServerInterceptor

from engines.errors import ResourceExhaustedError
from service import metrics
from service.interceptors import PUBLIC_METHOD_PREFIXES
from service.interceptors import _call as _next
from service.status import set_status, status_for_error


class ConcurrencyLimitInterceptor(AsyncServerInterceptor):
    """Refuses a new RPC at once while ``max_in_flight`` RPCs are running.

    A call counts from admission until its handler returns (unary responses) or its response
    stream ends, fails or is cancelled (streams). A refused call gets RESOURCE_EXHAUSTED with
    ErrorInfo reason ``OVERLOADED`` (HTTP 429 with ``Retry-After`` at the gateway) and metadata
    ``max_concurrent_requests``; it never queues.
    Health and reflection RPCs are neither counted nor refused, so probes still answer under load.
    Install it right after :class:`service.interceptors.RequestContextInterceptor`, so refused calls
    are logged, and outside the error mapping (it sets its own status).

    Args:
        max_in_flight: The most RPCs running at once (at least 1).

    Raises:
        ValueError: ``max_in_flight`` is below 1.

    """

    def __init__(self, max_in_flight: int) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.in_flight = 0

    async def intercept(
        self, method: Callable, request: Any, context: grpc.aio.ServicerContext, method_name: str
    ):
        """Admit the call and count it until it ends, or end it RESOURCE_EXHAUSTED (no message)."""
        if method_name.startswith(PUBLIC_METHOD_PREFIXES):
            return await _next(method, request, context)
        # Check and increment with no await between them: admission is atomic on the event loop.
        if self.in_flight >= self.max_in_flight:
            status = status_for_error(
                ResourceExhaustedError(
                    f"the server is running its limit of {self.max_in_flight} concurrent requests "
                    "(setting max_concurrent_requests); retry later",
                    max_concurrent_requests=self.max_in_flight,
                )
            )
            metrics.rpc_rejected(method_name.rpartition("/")[2], "OVERLOADED")
            set_status(context, status)
            return None
        slot = _Slot(self)
        # Safety net: a response stream that is never iterated never runs its finally below.
        context.add_done_callback(lambda _context: slot.release())
        try:
            result = await _next(method, request, context)
        except BaseException:
            slot.release()
            raise
        if hasattr(result, "__aiter__"):
            return self._stream(result, slot)
        slot.release()
        return result

    @staticmethod
    async def _stream(stream: AsyncIterator, slot: _Slot) -> AsyncIterator:
        try:
            async for item in stream:
                yield item
        finally:
            # Released before the status goes out, so a client that saw the end can call again.
            slot.release()


class _Slot:
    """One admitted call's place in the count, given back exactly once."""

    __slots__ = ("_limiter",)

    def __init__(self, limiter: ConcurrencyLimitInterceptor) -> None:
        limiter.in_flight += 1
        self._limiter: ConcurrencyLimitInterceptor | None = limiter

    def release(self) -> None:
        if self._limiter is not None:
            self._limiter.in_flight -= 1
            self._limiter = None
