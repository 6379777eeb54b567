"""EmbedRequest → EmbeddingRequest, and EmbeddingResult → EmbedResponse."""

from __future__ import annotations

from universal_runtime.v1 import encoders_pb2

from engines.types import EmbeddingRequest, EmbeddingResult, Truncation
from service.convert.generation import usage_message
from service.convert.messages import enum_table
from service.convert.validation import require, require_texts
from service.convert.wire import merge_packed

TRUNCATIONS = enum_table(encoders_pb2.TruncationPolicy, "TRUNCATION_POLICY_", Truncation, Truncation.END)


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
            negative dimensions, both prompt and prompt_name.

    """
    require(bool(request.model), "model", "must be set")
    inputs = require_texts(request.inputs, "inputs", max_inputs)
    require(request.dimensions >= 0, "dimensions", f"must be >= 0, got {request.dimensions}")
    require(
        not (request.prompt and request.prompt_name), "prompt", "set at most one of prompt and prompt_name"
    )
    return EmbeddingRequest(
        inputs=inputs,
        normalize=request.normalize,
        dimensions=request.dimensions or None,
        truncation=truncation_policy(request.truncation),
        prompt_name=request.prompt_name or None,
        prompt=request.prompt or None,
    )


def embed_response(model: str, result: EmbeddingResult) -> encoders_pb2.EmbedResponse:
    """Build the response: one Embedding per input, in order."""
    response = encoders_pb2.EmbedResponse(
        model=model, dimensions=int(result.vectors.shape[1]), usage=usage_message(result.prompt_tokens, 0)
    )
    for i, row in enumerate(result.vectors):
        merge_packed(response.embeddings.add(index=i), values=row)
    return response
