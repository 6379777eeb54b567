"""EmbedRequest → EmbeddingRequest, and EmbeddingResult → EmbedResponse."""

from __future__ import annotations

from universal_runtime.v1 import encoders_pb2

from engines.types import EmbeddingEncoding, EmbeddingRequest, EmbeddingResult, Truncation
from service.convert.generation import usage_message
from service.convert.messages import enum_table, wire_values
from service.convert.validation import require, require_texts
from service.convert.wire import merge_packed

TRUNCATIONS = enum_table(encoders_pb2.TruncationPolicy, "TRUNCATION_POLICY_", Truncation, Truncation.END)
ENCODINGS = enum_table(
    encoders_pb2.EmbeddingEncoding, "EMBEDDING_ENCODING_", EmbeddingEncoding, EmbeddingEncoding.FLOAT
)
ENCODING_VALUES = wire_values(ENCODINGS)


def truncation_policy(value: int) -> Truncation:
    """The engine's truncation policy for a ``TruncationPolicy`` value (unspecified: drop the end).

    Raises:
        InvalidArgumentError: an unknown enum value (field ``truncation``).

    """
    require(value in TRUNCATIONS, "truncation", "unknown truncation policy")
    return TRUNCATIONS[value]


def embedding_request(request: encoders_pb2.EmbedRequest, *, max_inputs: int) -> EmbeddingRequest:
    """Validate and convert an EmbedRequest.

    Raises:
        InvalidArgumentError: no model, no inputs, more than ``max_inputs``, an empty input,
            negative dimensions, both prompt and prompt_name, an unknown encoding.

    """
    require(bool(request.model), "model", "must be set")
    inputs = require_texts(request.inputs, "inputs", max_inputs)
    require(request.dimensions >= 0, "dimensions", f"must be >= 0, got {request.dimensions}")
    require(
        not (request.prompt and request.prompt_name), "prompt", "set at most one of prompt and prompt_name"
    )
    require(request.encoding in ENCODINGS, "encoding", f"unknown embedding encoding {request.encoding}")
    return EmbeddingRequest(
        inputs=inputs,
        normalize=request.normalize,
        dimensions=request.dimensions or None,
        truncation=truncation_policy(request.truncation),
        prompt_name=request.prompt_name or None,
        prompt=request.prompt or None,
        encoding=ENCODINGS[request.encoding],
    )


def embed_response(model: str, result: EmbeddingResult) -> encoders_pb2.EmbedResponse:
    """Build the response: one Embedding per input, in order.

    FLOAT vectors fill ``values``; quantized ones fill ``packed_values`` with their raw bytes (an
    int8 value as its two's-complement byte).
    """
    response = encoders_pb2.EmbedResponse(
        model=model,
        dimensions=int(result.vectors.shape[1]),
        usage=usage_message(result.prompt_tokens, 0),
        encoding=ENCODING_VALUES[result.encoding],
    )
    if result.quantized is not None:
        for i, row in enumerate(result.quantized):
            response.embeddings.add(index=i, packed_values=row.tobytes())
        return response
    for i, row in enumerate(result.vectors):
        merge_packed(response.embeddings.add(index=i), values=row)
    return response
