"""Step ``concurrency``: the per-process limit on calls in flight (setting ``max_concurrent_requests``).

A call counts from admission until its answer is returned (unary) or its stream ends, fails or
is cancelled. A call over the limit is refused at once, RESOURCE_EXHAUSTED with reason
``OVERLOADED`` (HTTP 429 with ``Retry-After`` at the gateway) and metadata
``max_concurrent_requests``; it never queues. Public methods (health) are neither counted nor
refused, so probes still answer under load.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from engines.errors import ResourceExhaustedError
from engines.reasons import Reason
from service import metrics
from service.core.chain import AdmissionStep, StreamHandler, UnaryHandler
from service.core.context import CallContext


class ConcurrencyLimit(AdmissionStep):
    """Refuses a new call while ``max_in_flight`` calls are running (see the module).

    Args:
        max_in_flight: The most calls running at once (at least 1).

    Raises:
        ValueError: ``max_in_flight`` is below 1.

    """

    name = "concurrency"

    def __init__(self, max_in_flight: int) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.in_flight = 0

    def _admit(self, ctx: CallContext) -> None:
        # Check and increment with no await between them: admission is atomic on the event loop.
        if self.in_flight >= self.max_in_flight:
            metrics.rpc_rejected(ctx.method.name, Reason.OVERLOADED)
            raise ResourceExhaustedError(
                f"the server is running its limit of {self.max_in_flight} concurrent requests "
                "(setting max_concurrent_requests); retry later",
                max_concurrent_requests=self.max_in_flight,
            )
        self.in_flight += 1

    async def unary(self, ctx: CallContext, request: Any, call_next: UnaryHandler) -> Any:
        """Admit and count the call until it is answered."""
        if ctx.method.public:
            return await call_next(ctx, request)
        self._admit(ctx)
        try:
            return await call_next(ctx, request)
        finally:
            self.in_flight -= 1

    async def stream(self, ctx: CallContext, request: Any, call_next: StreamHandler) -> AsyncIterator[Any]:
        """Admit and count the call until its stream ends (released before the status goes out)."""
        if ctx.method.public:
            async for item in call_next(ctx, request):
                yield item
            return
        self._admit(ctx)
        try:
            async for item in call_next(ctx, request):
                yield item
        finally:
            self.in_flight -= 1
