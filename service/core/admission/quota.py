"""Step ``quota``: each call held to its API key's quotas (:mod:`service.quotas`; per process).

Before the operation runs, :meth:`service.quotas.Quotas.admit` takes one request from the key's
bucket and counts the request's encoder inputs and a streaming call's slot; a refused call ends
RESOURCE_EXHAUSTED, reason ``QUOTA_EXCEEDED``, with a retry delay when one is known (HTTP 429
with ``Retry-After`` and ``x-ratelimit-*`` at the gateway). When the call ends (answered, failed
or cancelled) its tokens (the answer's ``usage``: a stream's last message with one) are charged
and its slot freed. An admitted call of a key with a request rate or ``tokens_per_minute``
carries OpenAI's ``x-ratelimit-*`` headers: a stream's as it starts (its request taken, its
tokens not yet known), a unary answer's once it is answered (its tokens charged). Public
methods are neither counted nor refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from service import metrics
from service.core.chain import AdmissionStep, StreamHandler, UnaryHandler
from service.core.context import CallContext
from service.quotas import QUOTA_EXCEEDED, Admission, QuotaRefusal, Quotas, encoder_inputs, usage_tokens


class Quota(AdmissionStep):
    """Admits each call within its key's quota and charges it when it ends (see the module).

    Args:
        quotas: The keys' quota state.

    """

    name = "quota"

    def __init__(self, quotas: Quotas) -> None:
        self.quotas = quotas

    def _admit(self, ctx: CallContext, request: Any) -> Admission:
        method = ctx.method
        inputs = 0 if method.request_streaming else encoder_inputs(method.path, request)
        stream = method.request_streaming or method.response_streaming
        admission = self.quotas.admit(ctx.caller.name, inputs=inputs, stream=stream)
        if isinstance(admission, QuotaRefusal):
            metrics.rpc_rejected(method.name, QUOTA_EXCEEDED)
            raise admission.error()
        return admission

    def _tell_rate_limits(self, ctx: CallContext) -> None:
        ctx.headers.add(self.quotas.rate_limit_metadata(ctx.caller.name))

    async def unary(self, ctx: CallContext, request: Any, call_next: UnaryHandler) -> Any:
        """Admit the call, run it, charge its tokens; the rate limits go in its answer's headers."""
        if ctx.method.public:
            return await call_next(ctx, request)
        admission = self._admit(ctx, request)
        response = None
        try:
            response = await call_next(ctx, request)
        finally:
            admission.finish(usage_tokens(response))
        self._tell_rate_limits(ctx)  # after the charge: the answer's headers count its own tokens
        return response

    async def stream(self, ctx: CallContext, request: Any, call_next: StreamHandler) -> AsyncIterator[Any]:
        """Admit the call and iterate it; its tokens are charged and its slot freed when it ends."""
        if ctx.method.public:
            async for item in call_next(ctx, request):
                yield item
            return
        admission = self._admit(ctx, request)
        self._tell_rate_limits(ctx)  # before the headers go out, as the operation starts
        tokens = 0
        try:
            async for item in call_next(ctx, request):
                tokens = usage_tokens(item) or tokens
                yield item
        finally:
            admission.finish(tokens)
