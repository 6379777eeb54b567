"""Body of ``POST /v1/images/generations`` (OpenAI Images API, plus the diffusion settings).

Source: https://platform.openai.com/docs/api-reference/images/create.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from gateway.schemas.base import Int32, Int64
from gateway.schemas.encoder_base import EncoderRequestModel

_SIZE = re.compile(r"(\d{1,5})x(\d{1,5})")


class ImageGenerationRequest(EncoderRequestModel):
    """OpenAI's image generation body, with ``negative_prompt``, ``steps``, ``guidance_scale`` and ``seed``.

    Attributes:
        model: image-generation model (catalog name); empty uses the server's default.
        prompt: what to draw.
        n: images to make (at most the server's ``image_max_n``).
        size: ``WIDTHxHEIGHT`` in pixels, or ``auto`` (the model's default).
        response_format: ``b64_json`` (the default here); ``url`` is refused: the server keeps no
            images to link to.
        output_format: ``png`` only.
        negative_prompt: what to steer away from.
        steps: denoising steps per image; unset is the model's default.
        guidance_scale: classifier-free guidance weight, 0 to 100.
        seed: seed of the first image (image i uses seed + i).

    """

    model: str = ""
    prompt: str = Field(min_length=1)
    n: int = Field(1, ge=1, le=64)
    size: str = "auto"
    response_format: Literal["b64_json", "url"] = "b64_json"
    output_format: Literal["png"] = "png"
    negative_prompt: str = ""
    steps: Int32 | None = Field(None, ge=1)
    guidance_scale: float | None = Field(None, ge=0.0, le=100.0)
    seed: Int64 | None = Field(None, ge=0)

    @field_validator("size")
    @classmethod
    def _size(cls, value: str) -> str:
        if value != "auto" and _SIZE.fullmatch(value) is None:
            raise ValueError("must be 'auto' or WIDTHxHEIGHT in pixels, e.g. '512x512'")
        return value

    @property
    def dimensions(self) -> tuple[int, int]:
        """``(width, height)`` in pixels; ``(0, 0)`` for ``auto``."""
        match = _SIZE.fullmatch(self.size)
        return (int(match.group(1)), int(match.group(2))) if match else (0, 0)
