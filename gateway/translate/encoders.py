"""Pieces shared by the encoder translators (embeddings, rerank, classify, NER)."""

from __future__ import annotations

from typing import Any, Protocol

from universal_runtime.v1 import common_pb2, encoders_pb2

from gateway.schemas.encoder_base import TextsRequestModel

TRUNCATION_POLICIES: dict[str | bool | None, int] = {
    # The request's ``truncation`` value (see the schemas) to the proto's TruncationPolicy.
    None: encoders_pb2.TRUNCATION_POLICY_UNSPECIFIED,
    True: encoders_pb2.TRUNCATION_POLICY_UNSPECIFIED,
    False: encoders_pb2.TRUNCATION_POLICY_ERROR,
    "end": encoders_pb2.TRUNCATION_POLICY_END,
    "start": encoders_pb2.TRUNCATION_POLICY_START,
    "error": encoders_pb2.TRUNCATION_POLICY_ERROR,
}


class EncoderResponse(Protocol):
    """What every encoder response carries: the model that answered and the token usage."""

    model: str
    usage: common_pb2.Usage


def texts_fields(request: TextsRequestModel) -> dict[str, Any]:
    """Return the request fields every texts-in body fills alike: ``model``, ``inputs``, ``keep_alive``."""
    return {"model": request.model, "inputs": request.inputs, "keep_alive": request.keep_alive_value}


def usage_json(usage: common_pb2.Usage) -> dict[str, int]:
    """Return an encoder answer's ``usage``: ``{"prompt_tokens", "total_tokens"}``."""
    return {"prompt_tokens": usage.prompt_tokens, "total_tokens": usage.total_tokens}


def list_json(response: EncoderResponse, *, requested_model: str, data: list[Any]) -> dict[str, Any]:
    """Return ``{"object": "list", "model", "data", "usage"}``.

    ``model`` is the one the server names, else ``requested_model``.
    """
    return {
        "object": "list",
        "model": response.model or requested_model,
        "data": data,
        "usage": usage_json(response.usage),
    }
