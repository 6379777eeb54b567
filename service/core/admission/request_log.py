"""Step ``request_log``: the call's request id, its one log line and its RPC metrics.

Outermost, so every call has them, refused ones too. The id (the face's
:attr:`~service.core.context.CallContext.request_id`) goes back to the client: first in a
streamed answer's headers, in a unary answer's trailers (a unary call stays uncommitted until it
is answered, so a client's retry policy may still resend it elsewhere when this replica dies),
and with every error (the face's status). The log line has method, status code, duration, model
and ``key_name`` (the authenticating key's name, ``""`` without one; never the key).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from engines.errors import RuntimeServiceError
from service import metrics
from service.core.chain import AdmissionStep, StreamHandler, UnaryHandler
from service.core.context import CallContext, call_context_var
from service.request_context import REQUEST_ID_METADATA_KEY, model_var, request_id_var

log = logging.getLogger("universal_runtime.rpc")


def status_name(error: BaseException | None) -> str:
    """The gRPC status code name a call ends with: ``OK``, an error's own, ``CANCELLED`` or ``UNKNOWN``."""
    if error is None:
        return "OK"
    if isinstance(error, RuntimeServiceError):
        return error.status
    status = getattr(error, "status", None)  # a face's own answer (AnsweredByFace)
    if isinstance(status, str):
        return status
    if isinstance(error, asyncio.CancelledError):
        return "CANCELLED"
    return "UNKNOWN"


class RequestLog(AdmissionStep):
    """Sets the call's context variables, logs one line per call and counts it (see the module)."""

    name = "request_log"

    async def unary(self, ctx: CallContext, request: Any, call_next: UnaryHandler) -> Any:
        """Run the call, then log it; the request id goes in the answer's trailers."""
        started = self._start(ctx)
        ctx.trailers.append((REQUEST_ID_METADATA_KEY, ctx.request_id))
        try:
            response = await call_next(ctx, request)
        except BaseException as exc:
            self._finish(ctx, started, exc)
            raise
        self._finish(ctx, started, None)
        return response

    async def stream(self, ctx: CallContext, request: Any, call_next: StreamHandler) -> AsyncIterator[Any]:
        """Iterate the call, then log it; the request id is the first of the answer's headers."""
        started = self._start(ctx)
        ctx.headers.entries.insert(0, (REQUEST_ID_METADATA_KEY, ctx.request_id))
        error: BaseException | None = None
        try:
            async for item in call_next(ctx, request):
                await ctx.headers.send()  # sent as the operation started; here when none did
                yield item
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._finish(ctx, started, error)

    @staticmethod
    def _start(ctx: CallContext) -> float:
        call_context_var.set(ctx)
        request_id_var.set(ctx.request_id)
        model_var.set("")
        metrics.rpc_started(ctx.method.name)
        return time.perf_counter()

    @staticmethod
    def _finish(ctx: CallContext, started: float, error: BaseException | None) -> None:
        code = status_name(error)
        seconds = time.perf_counter() - started
        metrics.rpc_finished(ctx.method.name, code, seconds, ctx.caller.name)
        log.info(
            "rpc",
            extra={
                "request_id": ctx.request_id,
                "method": ctx.method.path,
                "code": code,
                "duration_ms": round(seconds * 1000, 2),
                "model": model_var.get(),
                "key_name": ctx.caller.name,
            },
        )
