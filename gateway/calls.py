"""How a route reaches the gRPC server: the stubs with this request's metadata, disconnect-aware.

Routes take one :data:`Rpc` parameter and make every call through it, so no call can skip the
metadata (request id, API key) or outlive a client that went away.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from gateway.dependencies import CallMetadata, get_call_metadata, get_clients
from gateway.grpc_clients import GrpcClients
from gateway.json_body import off_loop_for_body
from gateway.schemas.generation import SamplingRequest
from gateway.streaming import (
    OPENAI_CHUNKS,
    SseDialect,
    StreamTranslator,
    collect_stream,
    stream_generation,
    unary_call,
)
from gateway.translate.generation import GenerationApi


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

    async def collect(self, method: Callable[..., Any], messages: Iterable[Any]) -> list[Any]:
        """Make a stream-stream call with :func:`gateway.streaming.collect_stream`; returns its responses.

        Raises:
            GatewayError: 499 ``client_closed_request`` when the client disconnected first.
            grpc.aio.AioRpcError: The call failed.

        """
        return await collect_stream(self.request, method, messages, self.metadata)

    async def stream_generation(
        self, message: Any, translator: StreamTranslator, sse: SseDialect = OPENAI_CHUNKS
    ) -> EventSourceResponse:
        """Relay ``GenerateStream(message)`` as SSE with :func:`gateway.streaming.stream_generation`.

        ``sse`` spells the events (OpenAI chunks unless the API has typed events).

        Raises:
            GatewayError: 499 when the client disconnected before the first message.
            grpc.aio.AioRpcError: The call failed before its first message.

        """
        inference = self.clients.inference
        return await stream_generation(
            self.request, lambda: inference.GenerateStream(message, metadata=self.metadata), translator, sse
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
    rpc = rpc.for_model(body.model)
    # A long conversation is seconds of protobuf building: off the event loop, as its parse was.
    if body.stream:
        translator = api.stream_translator(requested_model=body.model, include_usage=body.include_usage)
        message = await off_loop_for_body(rpc.request, api.generate_stream_request, body)
        return await rpc.stream_generation(message, translator)
    message = await off_loop_for_body(rpc.request, api.generate_request, body)
    response = await rpc.unary(rpc.clients.inference.Generate, message)
    return JSONResponse(api.response_json(response, requested_model=body.model))
