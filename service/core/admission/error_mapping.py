"""Step ``error_mapping``: every failure leaves the core as a :class:`engines.errors.RuntimeServiceError`.

Innermost, so the steps outside it (and the faces) see one kind of error: a domain error passes
as it is (a RESOURCE_EXHAUSTED one is counted as rejected, an INTERNAL one logged with its
cause); anything unexpected becomes INTERNAL with a generic message naming the request id, its
trace in the log only. Cancellation, and a status the face already answered
(:class:`AnsweredByFace`), pass through. It also sends a stream's answer headers as
the operation starts: after every admission check (key, concurrency, quota), which may add to
them, and before any message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, NoReturn

from engines.errors import RuntimeServiceError
from engines.reasons import Reason
from service import metrics
from service.core.chain import AdmissionStep, StreamHandler, UnaryHandler
from service.core.context import CallContext

log = logging.getLogger("universal_runtime.rpc")

GENERIC_INTERNAL_MESSAGE = "internal error; see the server log for request id {request_id}"


class AnsweredByFace(Exception):
    """The face already answered the call with a status of its own (a gRPC-native handler's abort).

    Args:
        code: That status code's name (``NOT_FOUND``), for the log line and metrics.

    """

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.status = code


class InternalError(RuntimeServiceError, status="INTERNAL", reason=Reason.INTERNAL):
    """An unexpected failure, as the client sees it: a generic message and the request id."""


def mapped(error: Exception, ctx: CallContext) -> RuntimeServiceError:
    """``error`` as the :class:`RuntimeServiceError` the client gets (logged and counted here)."""
    extra = {"request_id": ctx.request_id, "method": ctx.method.path}
    if isinstance(error, RuntimeServiceError):
        if error.status == "RESOURCE_EXHAUSTED":
            metrics.rpc_rejected(ctx.method.name, error.reason)
        if error.status == "INTERNAL":
            log.error("rpc failed: %s", error.message, exc_info=error.__cause__ or error, extra=extra)
        return error
    log.exception("unhandled error in %s", ctx.method.path, exc_info=error, extra=extra)
    return InternalError(
        GENERIC_INTERNAL_MESSAGE.format(request_id=ctx.request_id), request_id=ctx.request_id
    )


def _raise_mapped(exc: Exception, ctx: CallContext) -> NoReturn:
    """Raise ``exc`` as :func:`mapped` makes it (itself when it is already a domain error)."""
    error = mapped(exc, ctx)
    if error is exc:
        raise exc
    raise error from exc


class ErrorMapping(AdmissionStep):
    """Maps the operation's failures (see the module)."""

    name = "error_mapping"

    async def unary(self, ctx: CallContext, request: Any, call_next: UnaryHandler) -> Any:
        """Run the call; its failure re-raised as a :class:`RuntimeServiceError`."""
        try:
            return await call_next(ctx, request)
        except (asyncio.CancelledError, AnsweredByFace):
            raise
        except Exception as exc:
            _raise_mapped(exc, ctx)

    async def stream(self, ctx: CallContext, request: Any, call_next: StreamHandler) -> AsyncIterator[Any]:
        """Send the headers, then iterate the call; a failure re-raised as a :class:`RuntimeServiceError`."""
        await ctx.headers.send()
        try:
            async for item in call_next(ctx, request):
                yield item
        except (asyncio.CancelledError, AnsweredByFace):
            raise
        except Exception as exc:
            _raise_mapped(exc, ctx)
