"""``POST /tokenize`` and ``POST /detokenize`` (vLLM's routes) over ``Tokenize`` and ``Detokenize``.

A body's translation to protobuf and its answer's to JSON run where its parse ran
(:func:`gateway.json_body.off_loop_for_body`), as for every other route: thousands of chat
messages are a second of Python.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gateway.calls import Rpc
from gateway.json_body import JsonBodyRoute, off_loop_for_body
from gateway.schemas.tokenize import DetokenizeRequest, TokenizeRequest
from gateway.translate.tokenize import to_detokenize_request, to_tokenize_request, tokenize_from_proto

router = APIRouter(tags=["tokenization"], route_class=JsonBodyRoute)


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, rpc: Rpc) -> dict[str, Any]:
    """Token ids of a prompt, or of chat messages with the model's chat template applied.

    Raises:
        grpc.aio.AioRpcError: 400 for messages to a model without a chat template or a text that
            cannot fit the model, 404 for an unknown model, 400 (FAILED_PRECONDITION) for a model
            without a tokenizer (OCR, spaCy), 413 for a request over the text limit; others as
            mapped by :mod:`gateway.errors`.

    """
    rpc = rpc.for_model(body.model)
    request = await off_loop_for_body(rpc.request, to_tokenize_request, body)
    response = await rpc.unary(rpc.clients.inference.Tokenize, request)
    return await off_loop_for_body(rpc.request, tokenize_from_proto, response, body)


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, rpc: Rpc) -> dict[str, Any]:
    """The text of token ids, as ``{"prompt": text}``.

    Raises:
        grpc.aio.AioRpcError: 400 for an id outside the vocabulary or too many ids, 404 for an
            unknown model; others as mapped by :mod:`gateway.errors`.

    """
    rpc = rpc.for_model(body.model)
    request = await off_loop_for_body(rpc.request, to_detokenize_request, body)
    response = await rpc.unary(rpc.clients.inference.Detokenize, request)
    return {"prompt": response.text}
