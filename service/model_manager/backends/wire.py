"""Engine requests → InferenceService messages, and the backend's responses → engine results.

The server's proxy engine forwards each capability call (``Embedder.embed``, ``Reranker.rerank``,
``Classifier.classify``, ``EntityExtractor.extract_entities``, ``TextGenerator.stream``,
``Tokenizer.tokenize``/``detokenize``) to the model's backend process as the request message of
InferenceService's own RPC. The backend converts it with :mod:`service.convert` (message → engine
request), calls its engine and converts the result back (engine result → message). This module
is the inverse of both halves, so a call crosses the hop unchanged::

    convert.embedding_request(embed_request(model, r)) == r
    embedding_result(convert.embed_response(model, x)) == x

for the requests and results engines take and give, with these limits of the messages:

* Floats travel as float32 (sampling parameters, logit biases, thresholds, scores, logprobs).
  What a client sent arrived as float32 already and crosses exactly; a Python float made inside
  the server is rounded to the nearest float32.
* ``ClassificationRequest.threshold`` 0.0 cannot be sent (the message's 0 means 0.5): it goes
  as the smallest positive float32, which predicts the same labels unless a score is exactly 0.
* A quantized :class:`~engines.types.EmbeddingResult` comes back without its float vectors (the
  response holds only the quantized bytes): ``vectors`` is a read-only all-NaN array of the right
  shape, (inputs, dimensions), which is all the server reads of it.
* An empty string where the engine's field is optional comes back ``None`` (a chat message's
  ``name`` or ``tool_call_id``, a ranked document's text, a tokenize result's rendered prompt,
  an embedding prompt), as the forward converters read an unset string.
* ``GenerationRequest.request_id`` travels in the call's metadata, not in the message.
  ``ResponseFormat`` (the message) has a ``schema_name`` the engine does not hold; it stays
  empty. A stream message's ``timings``, ``id`` and ``index`` are the backend's and are not
  part of a :class:`~engines.types.GenerationDelta`.

Enum tables are derived from names, the contract's ``<ENUM>_<NAME>`` against the engine enums'
``<NAME>``, as :func:`service.convert.messages.enum_table` derives them: that module is above the
model manager in the service's layers and may not be imported here. An engine enum member
without a wire value fails at import.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from universal_runtime.v1 import common_pb2, encoders_pb2, generation_pb2, tokenization_pb2

from engines.encoder_types import (
    Classification,
    ClassificationRequest,
    ClassificationResult,
    Entity,
    EntityRequest,
    EntityResult,
    LabelScore,
    RankedDocument,
    RerankRequest,
    RerankResult,
)
from engines.types import (
    ChatMessage,
    DetokenizeRequest,
    EmbeddingEncoding,
    EmbeddingRequest,
    EmbeddingResult,
    FinishReason,
    GenerationDelta,
    GenerationRequest,
    GenerationUsage,
    ReasoningEffort,
    ResponseFormat,
    ResponseFormatKind,
    TokenizeRequest,
    TokenizeResult,
    TokenLogprob,
    TokenLogprobs,
    ToolCallDelta,
    ToolChoiceMode,
    Truncation,
)

__all__ = [
    "classification_result",
    "classify_request",
    "detokenize_request",
    "detokenize_text",
    "embed_request",
    "embedding_result",
    "entities_request",
    "entity_result",
    "generate_stream_request",
    "generation_delta",
    "rerank_request",
    "rerank_result",
    "tokenize_request",
    "tokenize_result",
]

E = TypeVar("E", bound=enum.Enum)


def _wire_values(wire: EnumTypeWrapper, prefix: str, values: type[E]) -> dict[E, int]:
    """``{engine member: wire value}``, every member matched to ``prefix + member.name``.

    Raises:
        ValueError: a member without a wire value (contract and engine out of step; at import).

    """
    return {member: wire.Value(prefix + member.name) for member in values}


def _engine_values(table: dict[E, int]) -> dict[int, E]:
    """The reverse of a :func:`_wire_values` table."""
    return {value: member for member, value in table.items()}


TRUNCATIONS = _wire_values(encoders_pb2.TruncationPolicy, "TRUNCATION_POLICY_", Truncation)
ENCODINGS = _wire_values(encoders_pb2.EmbeddingEncoding, "EMBEDDING_ENCODING_", EmbeddingEncoding)
# A response names its encoding; UNSPECIFIED is read as FLOAT, as the contract defines it.
_ENCODINGS_BACK = {
    **_engine_values(ENCODINGS),
    encoders_pb2.EMBEDDING_ENCODING_UNSPECIFIED: EmbeddingEncoding.FLOAT,
}
# numpy type of a quantized vector's bytes (see encoders.proto's EmbeddingEncoding), and whether
# its bytes hold one dimension each (INT8, UINT8) or eight sign bits (BINARY, UBINARY).
_QUANTIZED: dict[EmbeddingEncoding, tuple[type[np.integer], bool]] = {
    EmbeddingEncoding.INT8: (np.int8, False),
    EmbeddingEncoding.UINT8: (np.uint8, False),
    EmbeddingEncoding.BINARY: (np.int8, True),
    EmbeddingEncoding.UBINARY: (np.uint8, True),
}
# The engine's role strings are the lower-case names of the contract's ChatRole values.
ROLES: dict[str, int] = {
    name.removeprefix("CHAT_ROLE_").lower(): value
    for name, value in generation_pb2.ChatRole.items()
    if value != generation_pb2.CHAT_ROLE_UNSPECIFIED
}
RESPONSE_FORMATS = _wire_values(
    generation_pb2.ResponseFormatType, "RESPONSE_FORMAT_TYPE_", ResponseFormatKind
)
TOOL_CHOICES = _wire_values(generation_pb2.ToolChoiceMode, "TOOL_CHOICE_MODE_", ToolChoiceMode)
REASONING_EFFORTS = _wire_values(generation_pb2.ReasoningEffort, "REASONING_EFFORT_", ReasoningEffort)
FINISH_REASONS = _engine_values(_wire_values(generation_pb2.FinishReason, "FINISH_REASON_", FinishReason))

#: What a ClassificationRequest.threshold of 0.0 is sent as: the message's 0 means 0.5, and no
#: float32 score lies strictly between 0 and this.
ZERO_THRESHOLD = float(np.nextafter(np.float32(0), np.float32(1)))


def _json(value: object) -> str:
    """Compact JSON of a value the forward converter parsed from JSON (key order kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _check_indices(items: Sequence, what: str) -> None:
    """Require ``items[i].index == i`` (the backend lists results in input order).

    Raises:
        ValueError: an item out of place.

    """
    for i, item in enumerate(items):
        if item.index != i:
            raise ValueError(f"{what}[{i}] has index {item.index}; the backend must list them in order")


# -- requests: engine dataclass -> message --------------------------------------------------------


def embed_request(model: str, request: EmbeddingRequest) -> encoders_pb2.EmbedRequest:
    """The EmbedRequest that :func:`service.convert.embedding.embedding_request` reads back as ``request``.

    Args:
        model: catalog name of the model (the backend requires it set).
        request: the engine request; ``dimensions`` None (all) is sent as 0, an unset prompt or
            prompt name as ``""``.

    Raises:
        KeyError: a truncation or encoding that is not a member of the engine's enum.

    """
    return encoders_pb2.EmbedRequest(
        model=model,
        inputs=request.inputs,
        normalize=request.normalize,
        dimensions=request.dimensions or 0,
        truncation=TRUNCATIONS[request.truncation],
        prompt_name=request.prompt_name or "",
        prompt=request.prompt or "",
        encoding=ENCODINGS[request.encoding],
    )


def rerank_request(model: str, request: RerankRequest) -> encoders_pb2.RerankRequest:
    """The RerankRequest that :func:`service.convert.encoders.rerank_request` reads back as ``request``.

    ``top_n`` None (every document) is sent as 0.

    Raises:
        KeyError: a truncation that is not a member of :class:`~engines.types.Truncation`.

    """
    return encoders_pb2.RerankRequest(
        model=model,
        query=request.query,
        documents=request.documents,
        top_n=request.top_n or 0,
        return_documents=request.return_documents,
        truncation=TRUNCATIONS[request.truncation],
    )


def classify_request(model: str, request: ClassificationRequest) -> encoders_pb2.ClassifyRequest:
    """The ClassifyRequest that :func:`service.convert.encoders.classification_request` reads back.

    ``threshold`` travels as float32; 0.0, which the message cannot say (its 0 means 0.5), is sent
    as :data:`ZERO_THRESHOLD`.

    Raises:
        KeyError: a truncation that is not a member of :class:`~engines.types.Truncation`.

    """
    return encoders_pb2.ClassifyRequest(
        model=model,
        inputs=request.inputs,
        multi_label=request.multi_label,
        all_scores=request.all_scores,
        threshold=request.threshold or ZERO_THRESHOLD,
        candidate_labels=request.candidate_labels,
        truncation=TRUNCATIONS[request.truncation],
    )


def entities_request(model: str, request: EntityRequest) -> encoders_pb2.ExtractEntitiesRequest:
    """The ExtractEntitiesRequest that :func:`service.convert.encoders.entity_request` reads back.

    ``min_score`` travels as float32; ``labels`` as given (the converter drops empty ones).
    """
    return encoders_pb2.ExtractEntitiesRequest(
        model=model, inputs=request.inputs, min_score=request.min_score, labels=request.labels
    )


def _tool_call(call: dict) -> generation_pb2.ToolCall:
    """A chat message's tool call, OpenAI's ``{"id", "type", "function": {"name", "arguments"}}``."""
    function = call["function"]
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):  # parsed arguments: the contract carries their JSON text
        arguments = _json(arguments)
    return generation_pb2.ToolCall(id=call.get("id", ""), name=function["name"], arguments_json=arguments)


def _chat_message(message: ChatMessage) -> generation_pb2.ChatMessage:
    role = ROLES.get(message.role)
    if role is None:
        raise ValueError(f"chat role {message.role!r} has no wire value (one of {', '.join(ROLES)})")
    return generation_pb2.ChatMessage(
        role=role,
        content=message.content,
        name=message.name or "",
        tool_calls=[_tool_call(call) for call in message.tool_calls],
        tool_call_id=message.tool_call_id or "",
        reasoning_content=message.reasoning_content,
    )


def _fill_prompt_settings(
    target: generation_pb2.GenerationParameters | tokenization_pb2.TokenizeRequest,
    source: GenerationRequest | TokenizeRequest,
) -> None:
    """Fill the fields besides the messages that shape a rendered prompt.

    The inverse of :func:`service.convert.generation.prompt_settings`: tools (parameters as JSON),
    tool choice, reasoning budget (only when set) and effort (only when set).
    """
    target.tools.extend(
        generation_pb2.ToolDefinition(
            name=tool.name, description=tool.description, parameters_json_schema=_json(tool.parameters)
        )
        for tool in source.tools
    )
    target.tool_choice.mode = TOOL_CHOICES[source.tool_choice]
    target.tool_choice.function_name = source.tool_choice_function or ""
    if source.reasoning_budget is not None:
        target.reasoning_budget = source.reasoning_budget
    if source.reasoning_effort is not None:
        target.reasoning_effort = REASONING_EFFORTS[source.reasoning_effort]


def _response_format(fmt: ResponseFormat) -> generation_pb2.ResponseFormat:
    message = generation_pb2.ResponseFormat(type=RESPONSE_FORMATS[fmt.kind])
    if fmt.kind is ResponseFormatKind.JSON_SCHEMA:
        if fmt.json_schema is None:
            raise ValueError("a JSON_SCHEMA response format needs its schema")
        message.json_schema = _json(fmt.json_schema)
    return message


def _parameters(request: GenerationRequest) -> generation_pb2.GenerationParameters:
    params = request.params
    message = generation_pb2.GenerationParameters(
        # The float parameters are always sent, so the backend uses the server's values whatever
        # its defaults; they travel as float32.
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        min_p=params.min_p,
        repetition_penalty=params.repetition_penalty,
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
        stop=params.stop,
        logprobs=params.logprobs,
        top_logprobs=params.top_logprobs,
        logit_bias=[
            generation_pb2.LogitBias(token_id=token_id, bias=bias)
            for token_id, bias in params.logit_bias.items()
        ],
        response_format=_response_format(request.response_format),
        speculative=generation_pb2.SpeculativeDecoding(num_tokens=request.speculative_tokens),
    )
    if params.max_tokens is not None:
        message.max_tokens = params.max_tokens
    if params.seed is not None:
        message.seed = params.seed
    if request.speculative_enabled is not None:
        message.speculative.enabled = request.speculative_enabled
    _fill_prompt_settings(message, request)
    return message


def generate_stream_request(model: str, request: GenerationRequest) -> generation_pb2.GenerateStreamRequest:
    """The one-choice GenerateStreamRequest that ``convert.generation.generation_request`` reads back.

    :func:`service.convert.generation.generation_request` gives back ``request`` (with the
    ``request_id`` it is called with: that id goes in the call's metadata, not in the message).
    Everything else travels: ``prompt`` or ``messages`` (with their tool calls, tool results and
    reasoning), the sampling parameters (floats as float32; ``max_tokens`` and ``seed`` only when
    set), stop sequences, logprobs, logit biases, the response format (a JSON schema as compact
    JSON), tools (parameters as JSON), tool choice, reasoning budget and effort, and speculative
    decoding. ``n`` is left unset (one choice).

    Raises:
        ValueError: a chat role without a wire value; a JSON_SCHEMA response format without a schema.
        KeyError: a tool call without ``function`` or its ``name``; an enum value not of the
            engine's enum.

    """
    return generation_pb2.GenerateStreamRequest(
        model=model,
        prompt=request.prompt or "",
        messages=[_chat_message(m) for m in request.messages or ()],
        parameters=_parameters(request),
    )


def tokenize_request(model: str, request: TokenizeRequest) -> tokenization_pb2.TokenizeRequest:
    """The TokenizeRequest that :func:`service.convert.tokenization.tokenize_request` reads back.

    ``add_special_tokens`` is sent only when set (unset: as the model's own calls tokenize);
    ``add_generation_prompt`` always. Tools, tool choice and reasoning settings as in
    :func:`generate_stream_request`.

    Raises:
        ValueError, KeyError: as :func:`generate_stream_request`.

    """
    message = tokenization_pb2.TokenizeRequest(
        model=model,
        prompt=request.prompt or "",
        messages=[_chat_message(m) for m in request.messages or ()],
        add_generation_prompt=request.add_generation_prompt,
        return_token_strings=request.return_token_strings,
        return_offsets=request.return_offsets,
    )
    if request.add_special_tokens is not None:
        message.add_special_tokens = request.add_special_tokens
    _fill_prompt_settings(message, request)
    return message


def detokenize_request(model: str, request: DetokenizeRequest) -> tokenization_pb2.DetokenizeRequest:
    """The DetokenizeRequest that :func:`service.convert.tokenization.detokenize_request` reads back.

    Raises:
        ValueError: a token id outside int32 (the message's type).

    """
    return tokenization_pb2.DetokenizeRequest(
        model=model, token_ids=request.token_ids, skip_special_tokens=request.skip_special_tokens
    )


# -- results: message -> engine dataclass ---------------------------------------------------------


def embedding_result(response: encoders_pb2.EmbedResponse) -> EmbeddingResult:
    """The EmbeddingResult that :func:`service.convert.embedding.embed_response` was given.

    Returns:
        ``vectors`` float32 of shape (inputs, ``response.dimensions``). For a quantized encoding
        ``quantized`` holds the bytes, shape (inputs, dimensions) int8/uint8 for INT8/UINT8 or
        (inputs, ceil(dimensions / 8)) int8/uint8 for BINARY/UBINARY; its float vectors are not in
        the response, and ``vectors`` is then a read-only all-NaN array of shape (inputs,
        dimensions). ``prompt_tokens`` from the usage.

    Raises:
        ValueError: an unknown encoding, embeddings out of input order, or a vector whose
            length does not match the dimensions.

    """
    encoding = _ENCODINGS_BACK.get(response.encoding)
    if encoding is None:
        raise ValueError(f"unknown embedding encoding {response.encoding}")
    embeddings = response.embeddings
    _check_indices(embeddings, "embeddings")
    rows, dimensions = len(embeddings), response.dimensions
    prompt_tokens = response.usage.prompt_tokens
    if encoding is EmbeddingEncoding.FLOAT:
        vectors = np.empty((rows, dimensions), dtype=np.float32)
        for i, embedding in enumerate(embeddings):
            values = embedding.values
            if len(values) != dimensions:
                raise ValueError(f"embeddings[{i}] has {len(values)} values; expected {dimensions}")
            vectors[i] = values
        return EmbeddingResult(vectors=vectors, prompt_tokens=prompt_tokens)
    dtype, bits = _QUANTIZED[encoding]
    width = -(-dimensions // 8) if bits else dimensions
    packed = [embedding.packed_values for embedding in embeddings]
    for i, row in enumerate(packed):
        if len(row) != width:
            raise ValueError(f"embeddings[{i}] has {len(row)} bytes; expected {width}")
    quantized = np.frombuffer(bytearray(b"".join(packed)), dtype=dtype).reshape(rows, width)
    return EmbeddingResult(
        vectors=np.broadcast_to(np.float32(np.nan), (rows, dimensions)),
        prompt_tokens=prompt_tokens,
        quantized=quantized,
        encoding=encoding,
    )


def rerank_result(response: encoders_pb2.RerankResponse) -> RerankResult:
    """The RerankResult that :func:`service.convert.encoders.rerank_response` was given.

    Results keep the response's order (highest score first); an empty document text is ``None``
    (not returned); scores are float32 values.
    """
    return RerankResult(
        prompt_tokens=response.usage.prompt_tokens,
        results=[
            RankedDocument(index=r.index, relevance_score=r.relevance_score, document=r.document or None)
            for r in response.results
        ],
    )


def _label_scores(items) -> list[LabelScore]:
    return [LabelScore(label=item.label, score=item.score) for item in items]


def classification_result(response: encoders_pb2.ClassifyResponse) -> ClassificationResult:
    """The ClassificationResult that :func:`service.convert.encoders.classify_response` was given.

    One :class:`~engines.encoder_types.Classification` per input, in order; scores are float32 values.

    Raises:
        ValueError: classifications out of input order.

    """
    _check_indices(response.classifications, "classifications")
    return ClassificationResult(
        prompt_tokens=response.usage.prompt_tokens,
        classifications=[
            Classification(
                label=c.label,
                score=c.score,
                predicted_labels=_label_scores(c.predicted_labels),
                scores=_label_scores(c.scores),
            )
            for c in response.classifications
        ],
    )


def entity_result(response: encoders_pb2.ExtractEntitiesResponse) -> EntityResult:
    """The EntityResult that :func:`service.convert.encoders.entities_response` was given.

    One list per input, in order; offsets in code points (end exclusive); scores float32 values.

    Raises:
        ValueError: lists out of input order.

    """
    _check_indices(response.results, "results")
    return EntityResult(
        prompt_tokens=response.usage.prompt_tokens,
        entities=[
            [
                Entity(text=e.text, label=e.label, start=e.start, end=e.end, score=e.score)
                for e in item.entities
            ]
            for item in response.results
        ],
    )


def _logprob(entry: generation_pb2.TokenLogprob) -> TokenLogprob:
    return TokenLogprob(token_id=entry.token_id, token=entry.token, logprob=entry.logprob)


def _usage(usage: common_pb2.Usage) -> GenerationUsage:
    """The engine's counts (``total_tokens`` is derived, not read)."""
    return GenerationUsage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_prompt_tokens=usage.cached_prompt_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        draft_tokens=usage.draft_tokens,
        accepted_draft_tokens=usage.accepted_draft_tokens,
    )


def generation_delta(message: generation_pb2.GenerateStreamResponse) -> GenerationDelta:
    """The GenerationDelta that :func:`service.convert.generation.stream_response` sent as ``message``.

    ``usage`` is read when the message carries one (the stream's last message), else ``None``;
    ``finish_reason`` UNSPECIFIED is ``None`` (not finished); logprobs are float32 values. The
    message's ``id``, ``index`` and ``timings`` are the backend's and are not read.

    Raises:
        ValueError: an unknown finish reason.

    """
    finish = message.finish_reason
    if finish != generation_pb2.FINISH_REASON_UNSPECIFIED and finish not in FINISH_REASONS:
        raise ValueError(f"unknown finish reason {finish}")
    return GenerationDelta(
        text=message.text,
        reasoning=message.reasoning_content,
        token_ids=list(message.token_ids),
        finish_reason=FINISH_REASONS.get(finish),
        usage=_usage(message.usage) if message.HasField("usage") else None,
        logprobs=[
            TokenLogprobs(sampled=_logprob(s.sampled), top=tuple(_logprob(e) for e in s.top_logprobs))
            for s in message.logprobs
        ],
        tool_calls=[
            ToolCallDelta(index=c.index, id=c.id, name=c.name, arguments_delta=c.arguments_json_delta)
            for c in message.tool_calls
        ],
        stop_sequence=message.stop_sequence,
    )


def tokenize_result(response: tokenization_pb2.TokenizeResponse) -> TokenizeResult:
    """The TokenizeResult that :func:`service.convert.tokenization.tokenize_response` was given.

    ``offsets`` as ``(start, end)`` code-point pairs; an empty rendered prompt is ``None`` (a raw
    prompt was tokenized). ``count`` is ``len(token_ids)`` and is not read.
    """
    return TokenizeResult(
        token_ids=list(response.token_ids),
        max_context_tokens=response.max_context_tokens,
        token_strings=list(response.token_strings),
        offsets=[(o.start, o.end) for o in response.offsets],
        rendered_prompt=response.rendered_prompt or None,
    )


def detokenize_text(response: tokenization_pb2.DetokenizeResponse) -> str:
    """The text :func:`service.convert.tokenization.detokenize_response` was given."""
    return response.text
