"""Image engine calls → GenerateImage messages, and the backend's answers → engine events.

The inverse of :mod:`service.convert.images` for what crosses to a backend process (as
:mod:`.wire` is for the text RPCs). The server's limits travel in the backend's settings, not in
the message: the backend checks a request against the same ``image_max_*`` values.
"""

from __future__ import annotations

from universal_runtime.v1 import images_pb2

from engines.images.types import GeneratedImage, ImageEvent, ImageProgress, ImageRequest


def image_request(model: str, request: ImageRequest) -> images_pb2.GenerateImageRequest:
    """The GenerateImage request of one ``ImageGenerator.generate`` call."""
    message = images_pb2.GenerateImageRequest(
        model=model,
        prompt=request.prompt,
        negative_prompt=request.negative_prompt,
        n=request.n,
        width=request.width or 0,
        height=request.height or 0,
        steps=request.steps or 0,
    )
    if request.guidance_scale is not None:
        message.guidance_scale = request.guidance_scale
    if request.seed is not None:
        message.seed = request.seed
    return message


def image_event(message: images_pb2.GenerateImageResponse) -> ImageEvent:
    """The engine event of one GenerateImage answer: a step's progress, or a finished image."""
    if message.HasField("progress"):
        p = message.progress
        return ImageProgress(step=p.step, steps=p.steps, image_index=p.image_index)
    image = message.image
    return GeneratedImage(png=image.png, seed=image.seed, width=image.width, height=image.height)
