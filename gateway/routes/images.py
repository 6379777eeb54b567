"""``POST /v1/images/generations`` over the server-streaming ``GenerateImage``.

The call's progress messages are read and dropped: the answer is every image at once, as
OpenAI's. A client that leaves cancels the call, which stops the running image at its next step.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gateway.calls import Rpc
from gateway.errors import GatewayError
from gateway.json_body import JsonBodyRoute
from gateway.responses import JsonResponse
from gateway.schemas.images import ImageGenerationRequest
from gateway.translate.images import image_request, images_body
from gateway.uploads import too_large_as_413

router = APIRouter(tags=["images"], route_class=JsonBodyRoute)


@router.post("/v1/images/generations", response_model=dict[str, Any])
async def create_images(body: ImageGenerationRequest, rpc: Rpc) -> JsonResponse:
    """Generate images from a prompt (OpenAI ``images.generate``); each comes back as ``b64_json``.

    Raises:
        GatewayError: 400 ``unsupported_response_format`` for ``url``; 413 for an image or a
            call over the server's limits (``image_too_large``).
        grpc.aio.AioRpcError: 404 unknown model, 400 for a size the model cannot make.

    """
    if body.response_format == "url":
        raise GatewayError(
            400,
            "response_format 'url' is not supported: the server keeps no images to link to; use 'b64_json'",
            code="unsupported_response_format",
            param="response_format",
        )
    site = rpc.for_model(body.model)
    with too_large_as_413():
        answers = await site.collect(site.clients.inference.GenerateImage, image_request(body))
    return JsonResponse(images_body(answers))
