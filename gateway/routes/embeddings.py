"""``POST /v1/embeddings``: OpenAI embeddings over ``Embed``."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from universal_runtime.v1 import encoders_pb2

from gateway.calls import CallSite, Rpc
from gateway.json_body import JsonBodyRoute, off_loop_if_large
from gateway.responses import JsonResponse
from gateway.schemas.embeddings import EmbeddingRequest, EmbeddingResponse
from gateway.token_ids import texts_from_token_ids
from gateway.translate.embeddings import embeddings_from_proto, to_embed_request

router = APIRouter(tags=["encoders"], route_class=JsonBodyRoute)


# The model documents the answer; the route returns it already encoded (see gateway.responses).
@router.post("/v1/embeddings", response_model=EmbeddingResponse)
async def create_embeddings(body: EmbeddingRequest, rpc: Rpc) -> JsonResponse:
    """Embed one or more texts; returns OpenAI's embeddings list (float lists or base64 strings).

    An input longer than the model's window is refused (400 ``context_length_exceeded``) unless
    the request or the gateway's ``embeddings_truncate`` setting asks to truncate it
    (:func:`gateway.translate.embeddings.truncation_policy`).

    Raises:
        GatewayError: 400 for token-id input that cannot be read (see :mod:`gateway.token_ids`).
        grpc.aio.AioRpcError: The server refused or failed the request (see :mod:`gateway.errors`).

    """
    return await answer_embeddings(rpc, body)


async def answer_embeddings(site: CallSite, body: EmbeddingRequest) -> JsonResponse:
    """The answer of :func:`create_embeddings` to ``body``, its calls made at ``site``.

    Raises:
        GatewayError: 400 for token-id input that cannot be read (see :mod:`gateway.token_ids`);
            the site's own bound (499: the HTTP client left).
        grpc.aio.AioRpcError: The server refused or failed the request (see :mod:`gateway.errors`).

    """
    if body.has_token_ids:
        # OpenAI's tokenizer ids back to text, off the event loop (bounded: MAX_TOKEN_IDS ids).
        body = body.model_copy(update={"input": await asyncio.to_thread(texts_from_token_ids, body.input)})
    site = site.for_model(body.model)
    message = to_embed_request(body, truncate_by_default=site.config.embeddings_truncate)
    response = await site.unary(site.clients.inference.Embed, message)
    # 2,048 vectors of 384 floats are 14 MB of JSON, long to build: off the event loop when large.
    return await off_loop_if_large(response.ByteSize(), _answer, response, body)


def _answer(response: encoders_pb2.EmbedResponse, body: EmbeddingRequest) -> JsonResponse:
    """The encoded answer (the JSON is built and encoded here, where this runs)."""
    return JsonResponse(
        embeddings_from_proto(response, requested_model=body.model, encoding_format=body.encoding_format)
    )
