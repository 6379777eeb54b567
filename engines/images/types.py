"""Plain dataclasses of the image-generation engines (no protobuf here). Sizes are pixels."""

from __future__ import annotations

from dataclasses import dataclass

MAX_SEED = (1 << 63) - 1
"""Largest seed of a request (and of ``seed + n - 1``): fits a signed 64-bit protobuf field."""


@dataclass(frozen=True, slots=True)
class ImageRequest:
    """One text-to-image call (OpenAI ``/v1/images/generations`` plus the usual diffusion knobs).

    Attributes:
        prompt: what to draw.
        negative_prompt: what to steer away from ("" for none); refused by pipelines without one.
        n: images to make, each with its own seed (1 or more).
        width: image width in pixels; None: the model's default size.
        height: image height in pixels; None: the model's default size.
        steps: denoising steps per image; None: the model's default.
        guidance_scale: classifier-free guidance weight (0 or more); None: the model's default.
        seed: seed of the first image (0 to :data:`MAX_SEED`); image ``i`` uses ``seed + i``.
            None: a random seed, reported back on each :class:`GeneratedImage`.

    """

    prompt: str
    negative_prompt: str = ""
    n: int = 1
    width: int | None = None
    height: int | None = None
    steps: int | None = None
    guidance_scale: float | None = None
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """Server-wide bounds on one call, checked before any compute.

    Attributes:
        max_pixels: largest ``width * height`` of one image.
        max_n: most images per call.
        max_steps: most denoising steps per image.
        max_work: most pixel-steps per call, ``width * height * steps * n``: the call's compute,
            roughly (a step's cost grows with the pixels).
        max_prompt_chars: longest prompt and negative prompt, in characters.

    """

    max_pixels: int
    max_n: int
    max_steps: int
    max_work: int
    max_prompt_chars: int = 32_000


@dataclass(frozen=True, slots=True)
class GeneratedImage:
    """One finished image.

    Attributes:
        png: the image encoded as PNG (RGB, 8 bits per channel).
        seed: the seed that made it (the same request with this seed and n=1 makes it again).
        width: pixels.
        height: pixels.

    """

    png: bytes
    seed: int
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class ImageProgress:
    """A denoising step finished.

    Attributes:
        step: steps done for this image, 1 to ``steps``.
        steps: the image's step count (a second-order scheduler's timesteps, where it runs more
            than the request's steps).
        image_index: which image of the call, 0-based.

    """

    step: int
    steps: int
    image_index: int


ImageEvent = ImageProgress | GeneratedImage
"""What :meth:`ImageGenerator.generate` yields."""
