"""Embeddings: OpenAI embeddings request to ``EmbedRequest``, ``EmbedResponse`` to OpenAI's list.

Response shape: https://platform.openai.com/docs/api-reference/embeddings/object
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Any

from universal_runtime.v1 import encoders_pb2

from gateway.schemas.embeddings import EmbeddingRequest

TRUNCATION_POLICIES: dict[str | bool | None, int] = {
    # The request's ``truncation`` value (see the schemas) to the proto's TruncationPolicy.
    None: encoders_pb2.TRUNCATION_POLICY_UNSPECIFIED,
    True: encoders_pb2.TRUNCATION_POLICY_UNSPECIFIED,
    False: encoders_pb2.TRUNCATION_POLICY_ERROR,
    "end": encoders_pb2.TRUNCATION_POLICY_END,
    "start": encoders_pb2.TRUNCATION_POLICY_START,
    "error": encoders_pb2.TRUNCATION_POLICY_ERROR,
}


def to_embed_request(request: EmbeddingRequest) -> encoders_pb2.EmbedRequest:
    """Convert an OpenAI embeddings request to ``EmbedRequest`` (``normalize`` defaults to true)."""
    return encoders_pb2.EmbedRequest(
        model=request.model,
        inputs=request.inputs,
        normalize=request.normalize,
        dimensions=request.dimensions or 0,
        truncation=TRUNCATION_POLICIES[request.truncation],
        prompt_name=request.prompt_name or "",
        prompt=request.prompt or "",
        keep_alive=request.keep_alive_value,
    )


def encode_base64(values: Sequence[float]) -> str:
    """Encode a vector as OpenAI does: little-endian float32 values, base64 (standard alphabet).

    Decode with ``numpy.frombuffer(base64.b64decode(s), dtype="<f4")``.
    """
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


def embeddings_from_proto(
    response: encoders_pb2.EmbedResponse, *, requested_model: str, encoding_format: str
) -> dict[str, Any]:
    """Convert an ``EmbedResponse`` to OpenAI's embeddings list.

    Shape: ``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
    "usage": {"prompt_tokens", "total_tokens"}}``; ``embedding`` is a list of floats, or a base64
    string when ``encoding_format`` is ``"base64"``.
    """
    data = []
    for item in response.embeddings:
        values = list(item.values)
        embedding: list[float] | str = encode_base64(values) if encoding_format == "base64" else values
        data.append({"object": "embedding", "index": item.index, "embedding": embedding})
    return {
        "object": "list",
        "data": data,
        "model": response.model or requested_model,
        "usage": {
            "prompt_tokens": response.usage.prompt_tokens,
            "total_tokens": response.usage.total_tokens,
        },
    }
