"""GenerateImage: one acquire, the engine's progress and images passed on."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from engines.capabilities import ImageGenerator
from engines.images.types import ImageEvent, ImageLimits, ImageRequest
from service.model_manager import ModelManager


@dataclass(frozen=True, slots=True)
class ImageJob:
    """A validated GenerateImage call: which model, what to draw, and the server's limits."""

    model: str
    keep_alive: str | None
    request: ImageRequest
    limits: ImageLimits


class ImageTask:
    """Text to image.

    Args:
        manager: where image-generation models are acquired.

    """

    def __init__(self, manager: ModelManager) -> None:
        self._manager = manager

    async def generate(self, job: ImageJob) -> AsyncIterator[ImageEvent]:
        """Each image's progress while it denoises, then the image, for each image in turn.

        Bounded by ``job.limits`` (pixels, images, steps, pixel-steps), checked by the engine
        before any step runs; each image is one job on the model's lane.

        Raises:
            InvalidArgumentError, ResourceExhaustedError: see
                :meth:`engines.capabilities.ImageGenerator.generate`.
            Errors of :meth:`ModelManager.acquire`.

        """
        async with (
            self._manager.acquire(job.model, ImageGenerator, job.keep_alive) as generator,
            contextlib.aclosing(generator.generate(job.request, job.limits)) as events,
        ):
            async for event in events:
                yield event
