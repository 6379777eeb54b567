"""OpenAI image generation bodies ↔ ``GenerateImage`` messages."""

from __future__ import annotations

import base64
import time
from typing import Any

from universal_runtime.v1 import images_pb2

from gateway.schemas.images import ImageGenerationRequest


def image_request(body: ImageGenerationRequest) -> images_pb2.GenerateImageRequest:
    """The ``GenerateImage`` request of a ``/v1/images/generations`` body."""
    width, height = body.dimensions
    message = images_pb2.GenerateImageRequest(
        model=body.model,
        prompt=body.prompt,
        negative_prompt=body.negative_prompt,
        n=body.n,
        width=width,
        height=height,
        steps=body.steps or 0,
        keep_alive=body.keep_alive_value,
    )
    if body.guidance_scale is not None:
        message.guidance_scale = body.guidance_scale
    if body.seed is not None:
        message.seed = body.seed
    return message


def images_body(answers: list[images_pb2.GenerateImageResponse]) -> dict[str, Any]:
    """OpenAI's images response: ``created`` and each image as ``b64_json`` (our ``seed`` beside it)."""
    images = [a.image for a in answers if a.HasField("image")]
    return {
        "created": int(time.time()),
        "data": [
            {"b64_json": base64.b64encode(i.png).decode("ascii"), "revised_prompt": None, "seed": i.seed}
            for i in images
        ],
        "output_format": "png",
        "size": f"{images[0].width}x{images[0].height}" if images else None,
    }
