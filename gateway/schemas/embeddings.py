"""Request body of ``POST /v1/embeddings`` (OpenAI Embeddings API plus runtime extensions).

Source of the shapes: https://platform.openai.com/docs/api-reference/embeddings/create
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, field_validator, model_validator

from gateway.schemas.base import Int32
from gateway.schemas.encoder_base import TextsRequestModel


class EmbeddingRequest(TextsRequestModel):
    """Body of ``POST /v1/embeddings``.

    Attributes:
        model: Catalog name of the embedding model.
        input: One text or a list of texts, or token ids as OpenAI takes them (a list of ints, or
            a list of such lists): ids of tiktoken's cl100k_base, decoded to texts by the gateway
            (:mod:`gateway.token_ids`).
        encoding_format: ``"float"`` (lists of numbers), ``"base64"`` (little-endian float32
            bytes, base64-encoded, as OpenAI encodes them), or quantized as sentence-transformers'
            ``quantize_embeddings`` does: ``"int8"``/``"uint8"`` (one integer per dimension, ranges
            calibrated per model), ``"binary"``/``"ubinary"`` (sign bits packed 8 per integer,
            ``ceil(dimensions / 8)`` of them, as int8 or uint8); null means ``"float"``.
        dimensions: Keep only the first ``dimensions`` values (Matryoshka truncation).
        normalize: Extension: scale vectors to unit length (default true, like OpenAI's vectors).
        truncation: Extension: handling of inputs longer than the model's window: ``"end"`` (drop
            the end), ``"start"`` (drop the start), ``"error"`` (refuse: 400
            ``context_length_exceeded``); ``true`` means the server's default policy (drop the
            end), ``false`` means ``"error"``. Unset: the gateway's ``embeddings_truncate``
            setting decides, which by default refuses, as OpenAI, vLLM and TEI do.
        truncate: Extension, as in Hugging Face TEI: ``true`` drops what is over the window (at
            the side ``truncation_direction`` names), ``false`` refuses; unset as for
            ``truncation``. At most one of ``truncate`` and ``truncation``.
        truncation_direction: Extension, as in TEI: with ``truncate: true``, ``"Right"`` drops the
            end (default), ``"Left"`` drops the start (lower case accepted too).
        prompt_name: Extension: name of a prompt configured on the model, e.g. ``"query"``.
        prompt: Extension: literal instruction prefixed to every input (exclusive with prompt_name).
        keep_alive: Extension: keep-alive override, as in chat completions.

    """

    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64", "int8", "uint8", "binary", "ubinary"] = "float"
    dimensions: Int32 | None = None
    normalize: bool = True
    truncation: Literal["end", "start", "error"] | bool | None = None
    truncate: bool | None = None
    truncation_direction: Literal["Left", "Right", "left", "right"] | None = None
    prompt_name: str | None = None
    prompt: str | None = None

    @field_validator("encoding_format", mode="before")
    @classmethod
    def _null_means_default(cls, value: object) -> object:
        # LiteLLM sends "encoding_format": null, which OpenAI's API takes as the default.
        return "float" if value is None else value

    @model_validator(mode="after")
    def _one_truncation_field(self) -> EmbeddingRequest:
        if self.truncate is not None and self.truncation is not None:
            raise ValueError("set truncate (TEI's) or truncation, not both")
        return self

    @property
    def has_token_ids(self) -> bool:
        """Whether ``input`` holds token ids rather than texts."""
        return isinstance(self.input, list) and any(not isinstance(item, str) for item in self.input)


class EmbeddingObject(BaseModel):
    """One vector of an embeddings response."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | list[int] | str


class EmbeddingUsage(BaseModel):
    """Token usage of an embeddings response."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    """Response of ``POST /v1/embeddings`` (OpenAI's shape).

    The route's documented ``response_model``; the route itself returns the answer already
    encoded (:class:`gateway.responses.JsonResponse`), so it is never validated a second time.
    """

    object: Literal["list"] = "list"
    data: list[EmbeddingObject]
    model: str
    usage: EmbeddingUsage
