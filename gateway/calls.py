"""How a route reaches the gRPC server: the stubs with this request's metadata, disconnect-aware.

Routes take one :data:`Rpc` parameter and make every call through it, so no call can skip the
metadata (request id, API key) or outlive a client that went away.

The work of a route that also runs without an HTTP request (a batch line,
:mod:`gateway.batch_lines`) is an ``answer_*`` function that takes a :class:`CallSite`: the
route passes its :class:`RpcContext`, the batch executor its own site, so both run the same
validation, translation and answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import Depends, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from gateway.dependencies import CallMetadata, get_call_metadata, get_clients, get_request_id
from gateway.grpc_clients import GrpcClients
from gateway.json_body import off_loop_for_body
from gateway.schemas.generation import SamplingRequest
from gateway.settings import GatewayConfig
from gateway.streaming import (
    OPENAI_CHUNKS,
    SseDialect,
    StreamTranslator,
    collect_stream,
    stream_generation,
    unary_call,
)
from gateway.translate.generation import GenerationApi

Result = TypeVar("Result")


class CallSite(Protocol):
    """Where a route's work calls the server, whatever carried the request.

    :class:`RpcContext` is an HTTP request's (a disconnect cancels its calls, their
    ``x-ratelimit-*`` headers reach the answer); ``gateway.batch_lines.LineSite`` a batch line's
    (bounded by the line's timeout).
    """

    @property
    def clients(self) -> GrpcClients:
        """The stubs to call (their channel decides who the calls run as)."""
        ...

    @property
    def config(self) -> GatewayConfig:
        """The gateway's settings the answers depend on (``embeddings_truncate``)."""
        ...

    @property
    def request_id(self) -> str:
        """The request's id, as sent to the server in ``x-request-id``."""
        ...

    def for_model(self, model: str) -> CallSite:
        """The site to use for a request naming ``model`` (model-affinity routing), or this one."""
        ...

    async def off_loop(self, fn: Callable[..., Result], *args: Any) -> Result:
        """``fn(*args)`` on the event loop for a small request body, in a worker thread for a large one."""
        ...

    async def unary(
        self, method: Callable[..., Any], message: Any, *, deadline_s: float | None = None
    ) -> Any:
        """A unary (or stream-unary, with an iterable of messages) call's response message.

        Raises:
            GatewayError: The request's own bound ended the call (499: the HTTP client left).
            grpc.aio.AioRpcError: The call failed.

        """
        ...

    async def collect(self, method: Callable[..., Any], messages: Iterable[Any] | Any) -> list[Any]:
        """A response-streaming call's answers, in order.

        ``messages`` are the request messages of a stream-stream method, or the one request of a
        unary-stream method.

        Raises:
            GatewayError: The request's own bound ended the call (499: the HTTP client left).
            grpc.aio.AioRpcError: The call failed.

        """
        ...


@dataclass(frozen=True, slots=True)
class RpcContext:
    """The gRPC stubs, bound to one HTTP request: its metadata and its disconnect.

    Attributes:
        request: The HTTP request; its disconnect cancels the call in flight.
        clients: The app's stubs (``inference``, ``models``, ``health``).
        metadata: The metadata sent with every call (see ``get_call_metadata``).

    """

    request: Request
    clients: GrpcClients
    metadata: CallMetadata

    @property
    def config(self) -> GatewayConfig:
        """The app's :class:`GatewayConfig`."""
        return self.request.app.state.config

    @property
    def request_id(self) -> str:
        """The request's id (:func:`gateway.dependencies.get_request_id`)."""
        return get_request_id(self.request)

    async def off_loop(self, fn: Callable[..., Result], *args: Any) -> Result:
        """``fn(*args)`` where the body was parsed (:func:`gateway.json_body.off_loop_for_body`)."""
        return await off_loop_for_body(self.request, fn, *args)

    def for_model(self, model: str) -> RpcContext:
        """The context to use for a request naming ``model``.

        With model-affinity routing (:mod:`gateway.routing`) and a replica that holds ``model``,
        a copy with that replica's stubs; else this context (round robin).
        """
        router = getattr(self.request.app.state, "router", None)
        clients = router.pick(model) if router is not None else None
        return self if clients is None else dataclasses.replace(self, clients=clients)

    async def unary(
        self, method: Callable[..., Any], message: Any, *, deadline_s: float | None = None
    ) -> Any:
        """Make a unary call with :func:`gateway.streaming.unary_call`; returns the response message.

        A stream-unary method works too, with an iterable of request messages as ``message``.

        Raises:
            GatewayError: 499 ``client_closed_request`` when the client disconnected first.
            grpc.aio.AioRpcError: The call failed.

        """
        return await unary_call(self.request, method, message, self.metadata, deadline_s=deadline_s)

    async def collect(self, method: Callable[..., Any], messages: Iterable[Any] | Any) -> list[Any]:
        """Make a response-streaming call with :func:`gateway.streaming.collect_stream`; returns its answers.

        Raises:
            GatewayError: 499 ``client_closed_request`` when the client disconnected first.
            grpc.aio.AioRpcError: The call failed.

        """
        return await collect_stream(self.request, method, messages, self.metadata)

    async def stream_generation(
        self,
        message: Any,
        translator: StreamTranslator,
        sse: SseDialect = OPENAI_CHUNKS,
        *,
        method: Callable[..., Any] | None = None,
    ) -> EventSourceResponse:
        """Relay ``GenerateStream(message)`` as SSE with :func:`gateway.streaming.stream_generation`.

        ``sse`` spells the events (OpenAI chunks unless the API has typed events); ``method`` is
        another server-streaming stub method whose messages ``translator`` reads (e.g.
        ``responses.CreateResponseStream``).

        Raises:
            GatewayError: 499 when the client disconnected before the first message.
            grpc.aio.AioRpcError: The call failed before its first message.

        """
        start = method or self.clients.inference.GenerateStream
        return await stream_generation(
            self.request, lambda: start(message, metadata=self.metadata), translator, sse
        )


async def get_rpc(request: Request) -> RpcContext:
    """Return the :class:`RpcContext` of this request.

    One dependency, not three: each dependency FastAPI resolves costs a pass of its solver per
    request, so the stubs and the metadata are looked up here directly.

    Raises:
        RuntimeError: The app's lifespan has not run (see :func:`gateway.dependencies.get_clients`).

    """
    return RpcContext(
        request=request, clients=await get_clients(request), metadata=await get_call_metadata(request)
    )


Rpc = Annotated[RpcContext, Depends(get_rpc)]
"""Route parameter type: this request's way to the gRPC server."""


async def generate(rpc: RpcContext, body: SamplingRequest, api: GenerationApi[Any]) -> Response:
    """Answer a chat or legacy completion request: an SSE stream with ``stream: true``, else JSON.

    Args:
        rpc: The request's :class:`RpcContext`.
        body: The parsed request body.
        api: How the endpoint's bodies and answers translate (``translate.chat.API`` ...).

    Raises:
        GatewayError: 499 when the client disconnected before the answer (or its first chunk).
        grpc.aio.AioRpcError: The server refused or failed the request (rendered as an OpenAI
            error with the matching HTTP status by :mod:`gateway.errors`).

    """
    if not body.stream:
        return JSONResponse(await answer_generation(rpc, body, api))
    rpc = rpc.for_model(body.model)
    translator = api.stream_translator(requested_model=body.model, include_usage=body.include_usage)
    # A long conversation is seconds of protobuf building: off the event loop, as its parse was.
    message = await rpc.off_loop(api.generate_stream_request, body)
    return await rpc.stream_generation(message, translator)


async def answer_generation(site: CallSite, body: SamplingRequest, api: GenerationApi[Any]) -> dict[str, Any]:
    """The JSON answer of a chat or legacy completion request that does not stream (``Generate``).

    Args:
        site: Where the call is made.
        body: The parsed request body (its ``stream`` is not read).
        api: How the endpoint's bodies and answers translate (``translate.chat.API`` ...).

    Returns:
        The endpoint's answer object (``chat.completion``, ``text_completion``).

    Raises:
        GatewayError: The site's own bound ended the call (499: the HTTP client left).
        grpc.aio.AioRpcError: The server refused or failed the request.

    """
    site = site.for_model(body.model)
    message = await site.off_loop(api.generate_request, body)
    response = await site.unary(site.clients.inference.Generate, message)
    return api.response_json(response, requested_model=body.model)
