"""Embeddings: OpenAI embeddings request to ``EmbedRequest``, ``EmbedResponse`` to OpenAI's list.

Response shape: https://platform.openai.com/docs/api-reference/embeddings/object
"""

from __future__ import annotations

import array
import base64
import struct
from collections.abc import Sequence
from typing import Any

from universal_runtime.v1 import encoders_pb2

from gateway.schemas.embeddings import EmbeddingRequest
from gateway.translate.common import set_fields
from gateway.translate.encoders import TRUNCATION_POLICIES, list_json, texts_fields

#: ``encoding_format`` to the proto's EmbeddingEncoding: base64 is float32 bytes made here.
ENCODINGS: dict[str, int] = {
    "float": encoders_pb2.EMBEDDING_ENCODING_FLOAT,
    "base64": encoders_pb2.EMBEDDING_ENCODING_FLOAT,
    "int8": encoders_pb2.EMBEDDING_ENCODING_INT8,
    "uint8": encoders_pb2.EMBEDDING_ENCODING_UINT8,
    "binary": encoders_pb2.EMBEDDING_ENCODING_BINARY,
    "ubinary": encoders_pb2.EMBEDDING_ENCODING_UBINARY,
}
#: Encodings whose bytes are signed (two's complement).
SIGNED_ENCODINGS = frozenset({"int8", "binary"})


def to_embed_request(request: EmbeddingRequest) -> encoders_pb2.EmbedRequest:
    """Convert an OpenAI embeddings request of texts to ``EmbedRequest`` (``normalize`` defaults to true).

    Token-id ``input`` is decoded to texts before (:mod:`gateway.token_ids`).
    """
    return encoders_pb2.EmbedRequest(
        **texts_fields(request),
        **set_fields(request, "normalize", "dimensions", "prompt_name", "prompt"),
        truncation=TRUNCATION_POLICIES[request.truncation],
        encoding=ENCODINGS[request.encoding_format],
    )


def packed_integers(data: bytes, *, signed: bool) -> list[int]:
    """The integers of a quantized vector's bytes: -128..127 when ``signed``, else 0..255."""
    return array.array("b" if signed else "B", data).tolist()


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
    "usage": {"prompt_tokens", "total_tokens"}}``; ``embedding`` is a list of floats, a base64
    string when ``encoding_format`` is ``"base64"``, or a list of integers for the quantized ones.
    """
    data = []
    for item in response.embeddings:
        embedding: list[float] | list[int] | str
        if encoding_format == "base64":
            embedding = encode_base64(item.values)
        elif encoding_format == "float":
            embedding = list(item.values)
        else:
            embedding = packed_integers(item.packed_values, signed=encoding_format in SIGNED_ENCODINGS)
        data.append({"object": "embedding", "index": item.index, "embedding": embedding})
    return list_json(response, requested_model=requested_model, data=data)
