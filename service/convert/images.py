"""GenerateImage messages ↔ the image engines' dataclasses."""

from __future__ import annotations

from universal_runtime.v1 import images_pb2 as pb

from engines.errors import InvalidArgumentError
from engines.images.types import GeneratedImage, ImageEvent, ImageLimits, ImageProgress, ImageRequest
from service.convert.messages import MessageCopy
from service.convert.validation import require
from service.settings import Settings
from service.tasks.images import ImageJob


def image_job(request: pb.GenerateImageRequest, settings: Settings) -> ImageJob:
    """Validate a GenerateImage request; the limits come from ``settings`` (``image_max_*``).

    What depends on the model (its size step, its sizes, a negative prompt) is checked by the
    engine, still before any work.

    Raises:
        InvalidArgumentError: an empty prompt, negative n, width, height or steps; no model named
            and no ``image_default_model``.

    """
    require(bool(request.prompt.strip()), "prompt", "must not be empty")
    for name in ("n", "width", "height", "steps"):
        require(getattr(request, name) >= 0, name, "must be >= 0 (0 means the default)")
    model = request.model or settings.image_default_model
    if not model:
        raise InvalidArgumentError(
            "model: name an image-generation model (the server has no default: setting image_default_model)",
            field="model",
        )
    return ImageJob(
        model=model,
        keep_alive=request.keep_alive or None,
        request=ImageRequest(
            prompt=request.prompt,
            negative_prompt=request.negative_prompt,
            n=request.n or 1,
            width=request.width or None,
            height=request.height or None,
            steps=request.steps or None,
            guidance_scale=request.guidance_scale if request.HasField("guidance_scale") else None,
            seed=request.seed if request.HasField("seed") else None,
        ),
        limits=ImageLimits(
            max_pixels=settings.image_max_pixels,
            max_n=settings.image_max_n,
            max_steps=settings.image_max_steps,
            max_work=settings.image_max_work,
        ),
    )


_PROGRESS = MessageCopy(pb.ImageGenerationProgress, ImageProgress)
_IMAGE = MessageCopy(pb.GeneratedImage, GeneratedImage)


def image_response(event: ImageEvent) -> pb.GenerateImageResponse:
    """The message of one event: a step's progress, or a finished image."""
    if isinstance(event, ImageProgress):
        return pb.GenerateImageResponse(progress=_PROGRESS(event))
    return pb.GenerateImageResponse(image=_IMAGE(event))
