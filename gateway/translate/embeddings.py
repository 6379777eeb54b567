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
from gateway.translate.common import BodyFields
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


def truncation_policy(request: EmbeddingRequest, *, truncate_by_default: bool) -> int:
    """The ``TruncationPolicy`` of an embeddings request.

    OpenAI (like vLLM and TEI) refuses an input longer than the model's window, so an unset
    policy refuses (``TRUNCATION_POLICY_ERROR``: 400 ``context_length_exceeded``) unless the
    gateway truncates by default (``truncate_by_default``, the ``embeddings_truncate`` setting).
    The runtime's ``truncation`` wins when set; else TEI's ``truncate`` and
    ``truncation_direction`` (``"Left"`` drops the start, ``"Right"``, the default, the end).
    The request is never left UNSPECIFIED, so the gRPC default (truncate) does not apply here.
    """
    if request.truncation is not None:
        return TRUNCATION_POLICIES[request.truncation]
    truncate = truncate_by_default if request.truncate is None else request.truncate
    if not truncate:
        return encoders_pb2.TRUNCATION_POLICY_ERROR
    if (request.truncation_direction or "right").lower() == "left":
        return encoders_pb2.TRUNCATION_POLICY_START
    return encoders_pb2.TRUNCATION_POLICY_END


_EMBED = BodyFields(
    EmbeddingRequest,
    encoders_pb2.EmbedRequest,
    ("normalize", "dimensions", "prompt_name", "prompt"),
    by_hand=(
        "model",
        "input",
        "keep_alive",
        "encoding_format",
        "truncation",
        "truncate",
        "truncation_direction",
    ),
)


def to_embed_request(
    request: EmbeddingRequest, *, truncate_by_default: bool = False
) -> encoders_pb2.EmbedRequest:
    """Convert an OpenAI embeddings request of texts to ``EmbedRequest`` (``normalize`` defaults to true).

    Token-id ``input`` is decoded to texts before (:mod:`gateway.token_ids`); the truncation
    policy is :func:`truncation_policy`'s.
    """
    return encoders_pb2.EmbedRequest(
        **texts_fields(request),
        **_EMBED.values(request),
        truncation=truncation_policy(request, truncate_by_default=truncate_by_default),
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
