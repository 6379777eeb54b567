"""Pieces shared by chat and legacy completions: sampling parameters, finish reasons, usage."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from universal_runtime.v1 import common_pb2, generation_pb2

from gateway import ids
from gateway.ids import system_fingerprint, unix_now
from gateway.schemas.generation import ReasoningEffortName, SamplingRequest
from gateway.translate.common import BodyFields

# CANCELLED maps to "stop": OpenAI has no cancelled reason, and the text produced so far is a
# valid (if short) answer.
_FINISH_REASONS: dict[int, str] = {
    generation_pb2.FINISH_REASON_STOP: "stop",
    generation_pb2.FINISH_REASON_LENGTH: "length",
    generation_pb2.FINISH_REASON_TOOL_CALLS: "tool_calls",
    generation_pb2.FINISH_REASON_CANCELLED: "stop",
}


# Optional sampling options whose body and proto fields share a name; unset ones are not sent.
# ``model`` and ``keep_alive`` go on the request (``GenerationApi``), ``max_tokens`` comes in as
# an argument (chat names it two ways); ``stream`` and ``stream_options`` choose the RPC and
# whether the gateway adds a usage chunk.
_SAMPLING = BodyFields(
    SamplingRequest,
    generation_pb2.GenerationParameters,
    (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "seed",
        "n",
    ),
    by_hand=("model", "keep_alive", "max_tokens", "stop", "logit_bias"),
    dropped=("stream", "stream_options"),
)


# OpenAI's effort names (openai SDK ``ReasoningEffort``) onto the contract's levels: ``minimal``
# has no level of its own and thinks least but still thinks, so it is LOW; ``xhigh`` and ``max``
# (newer OpenAI levels) take the most the catalog allows, HIGH.
REASONING_EFFORTS: dict[str, int] = {
    "none": generation_pb2.REASONING_EFFORT_NONE,
    "minimal": generation_pb2.REASONING_EFFORT_LOW,
    "low": generation_pb2.REASONING_EFFORT_LOW,
    "medium": generation_pb2.REASONING_EFFORT_MEDIUM,
    "high": generation_pb2.REASONING_EFFORT_HIGH,
    "xhigh": generation_pb2.REASONING_EFFORT_HIGH,
    "max": generation_pb2.REASONING_EFFORT_HIGH,
}


def set_reasoning(
    params: generation_pb2.GenerationParameters,
    *,
    effort: ReasoningEffortName | None = None,
    budget: int | None = None,
) -> generation_pb2.GenerationParameters:
    """Set the thinking controls of ``params`` and return it (shared by every generation API).

    Args:
        params: The parameters to fill (changed in place).
        effort: OpenAI's ``reasoning_effort`` name (``none`` .. ``max``, see
            :data:`REASONING_EFFORTS`), or ``None`` for the catalog's default.
        budget: Most thinking tokens (``>= 0``, 0 = thinking off), or ``None``; wins over
            ``effort`` on the server.

    """
    if effort is not None:
        params.reasoning_effort = REASONING_EFFORTS[effort]
    if budget is not None:
        params.reasoning_budget = budget
    return params


def finish_reason_label(value: int) -> str | None:
    """Return OpenAI's ``finish_reason`` for a proto ``FinishReason`` (``None`` while unfinished)."""
    return _FINISH_REASONS.get(value)


def compact_json(value: Any) -> str:
    """Serialize to JSON without insignificant whitespace, keeping key order (schemas are ordered)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def usage_dict(usage: common_pb2.Usage) -> dict[str, Any]:
    """Return OpenAI's ``usage`` object of chat and legacy completions.

    Shape: ``{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
    {"cached_tokens"}, "completion_tokens_details": {"reasoning_tokens"}}``; reasoning tokens are
    part of ``completion_tokens``, as in OpenAI's API (0 for models that do not think). A request
    that speculated (``Usage.draft_tokens`` > 0) also gets OpenAI's Predicted Outputs counts,
    ``accepted_prediction_tokens`` (draft tokens the model accepted) and
    ``rejected_prediction_tokens`` (the others), in ``completion_tokens_details``.
    """
    details: dict[str, int] = {"reasoning_tokens": usage.reasoning_tokens}
    if usage.draft_tokens:
        details["accepted_prediction_tokens"] = usage.accepted_draft_tokens
        details["rejected_prediction_tokens"] = usage.draft_tokens - usage.accepted_draft_tokens
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens},
        "completion_tokens_details": details,
    }


def timings_dict(timings: common_pb2.Timings) -> dict[str, float]:
    """Return the server's timings (an extension field, named as in the proto)."""
    return {
        "time_to_first_token_ms": timings.time_to_first_token_ms,
        "tokens_per_second": timings.tokens_per_second,
        "total_ms": timings.total_ms,
    }


def completion_id(server_id: str, prefix: str) -> str:
    """Return the answer's id as OpenAI spells it: ``<prefix>-<the server id's hex>``.

    OpenAI's ids are ``chatcmpl-…`` (chat completions, the same on every chunk of one stream) and
    ``cmpl-…`` (legacy completions); see :mod:`gateway.ids`, which this calls.

    Args:
        server_id: ``GenerateResponse.id`` or ``GenerateStreamResponse.id`` (may be empty).
        prefix: ``"chatcmpl"`` or ``"cmpl"``.

    """
    return ids.from_server_id(prefix, server_id)


def token_bytes(token: str) -> list[int]:
    """Return the UTF-8 bytes of a token's text (OpenAI's ``bytes`` field of a logprob)."""
    return list(token.encode("utf-8"))


def generation_parameters(
    request: SamplingRequest,
    *,
    max_tokens: int | None,
    logprobs: bool = False,
    top_logprobs: int = 0,
) -> generation_pb2.GenerationParameters:
    """Build ``GenerationParameters`` from the sampling fields shared by both completion APIs.

    Optional proto fields are only set when the request set them, so the server's defaults apply
    otherwise. Response format and tools are chat-only; the chat translator adds them.

    Args:
        request: The parsed request.
        max_tokens: The generation limit (the two APIs name it differently).
        logprobs: Whether to return per-token log probabilities.
        top_logprobs: Alternatives per token, with ``logprobs``.

    """
    params = generation_pb2.GenerationParameters(
        stop=request.stop_list,
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        logit_bias=[
            generation_pb2.LogitBias(token_id=token_id, bias=bias)
            for token_id, bias in (request.logit_bias or {}).items()
        ],
        **_SAMPLING.values(request),
    )
    if max_tokens is not None:
        params.max_tokens = max_tokens
    return params


def response_envelope(
    response: generation_pb2.GenerateResponse,
    requested_model: str,
    choices: list[dict[str, Any]],
    *,
    object_name: str,
    id_prefix: str,
) -> dict[str, Any]:
    """Return the envelope of a non-streamed answer around its ``choices``.

    Shape: ``{"id", "object": object_name, "created", "model", "system_fingerprint", "choices",
    "usage", "timings"?}``; ``timings`` (an extension) only when the server sent them.
    """
    model = response.model or requested_model
    body: dict[str, Any] = {
        "id": completion_id(response.id, id_prefix),
        "object": object_name,
        "created": unix_now(),
        "model": model,
        "system_fingerprint": system_fingerprint(model),
        "choices": choices,
        "usage": usage_dict(response.usage),
    }
    if response.HasField("timings"):
        body["timings"] = timings_dict(response.timings)
    return body


class StreamTranslator:
    """Shared state of the chunk translators: the stream's id, model, creation time and usage.

    Subclasses set ``object_name`` and ``id_prefix`` and implement :meth:`message_chunks`;
    :meth:`on_message` records what every message carries, :meth:`on_end` adds OpenAI's final
    usage chunk (empty ``choices``) when ``include_usage`` was asked for.

    Args:
        requested_model: Model name of the request, used until the server names its model.
        include_usage: Whether the client asked for ``stream_options.include_usage``.

    """

    object_name: str
    id_prefix: str

    def __init__(self, *, requested_model: str, include_usage: bool) -> None:
        self._model = requested_model
        self._include_usage = include_usage
        self._id: str | None = None
        self._created = unix_now()
        self._usage: dict[str, int] | None = None

    def _ensure_id(self, server_id: str) -> str:
        # The server sends the same id on every message; the first one fixes the stream's id.
        if self._id is None:
            self._id = completion_id(server_id, self.id_prefix)
        return self._id

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self._ensure_id(""),
            "object": self.object_name,
            "created": self._created,
            "model": self._model,
            "system_fingerprint": system_fingerprint(self._model),
            "choices": choices,
        }
        if self._include_usage:
            chunk["usage"] = None
        return chunk

    def on_message(self, message: generation_pb2.GenerateStreamResponse) -> list[dict[str, Any]]:
        """Return the chunks for one gRPC stream message (possibly none)."""
        self._ensure_id(message.id)
        if message.model:
            self._model = message.model
        if message.HasField("usage"):
            self._usage = usage_dict(message.usage)
        return self.message_chunks(message)

    def message_chunks(self, message: generation_pb2.GenerateStreamResponse) -> list[dict[str, Any]]:
        """The endpoint-specific chunks of one message."""
        raise NotImplementedError

    def on_end(self) -> list[dict[str, Any]]:
        """Return the usage chunk when requested (``usage`` null if the server sent none)."""
        if not self._include_usage:
            return []
        chunk = self._chunk([])
        chunk["usage"] = self._usage
        return [chunk]


BodyT = TypeVar("BodyT", bound=SamplingRequest)


@dataclass(frozen=True, slots=True)
class GenerationApi(Generic[BodyT]):
    """How one OpenAI generation API (chat or legacy completions) maps onto ``Generate*``.

    Both APIs send ``model`` and ``keep_alive`` the same way; they differ in the prompt, the
    parameters, the answer's JSON and the streamed chunks.

    Attributes:
        prompt_fields: The body's prompt as request fields: ``{"messages": [...]}`` or ``{"prompt": str}``.
        parameters: The body's ``GenerationParameters``.
        response_json: ``(GenerateResponse, *, requested_model)`` to the API's JSON answer.
        stream_translator: The class turning ``GenerateStream`` messages into the API's chunks.

    """

    prompt_fields: Callable[[BodyT], dict[str, Any]]
    parameters: Callable[[BodyT], generation_pb2.GenerationParameters]
    response_json: Callable[..., dict[str, Any]]
    stream_translator: type[StreamTranslator]

    def _request_fields(self, body: BodyT) -> dict[str, Any]:
        return {
            "model": body.model,
            **self.prompt_fields(body),
            "parameters": self.parameters(body),
            "keep_alive": body.keep_alive_value,
        }

    def generate_request(self, body: BodyT) -> generation_pb2.GenerateRequest:
        """Convert a non-streaming request body to ``GenerateRequest``."""
        return generation_pb2.GenerateRequest(**self._request_fields(body))

    def generate_stream_request(self, body: BodyT) -> generation_pb2.GenerateStreamRequest:
        """Convert a streaming request body to ``GenerateStreamRequest``."""
        return generation_pb2.GenerateStreamRequest(**self._request_fields(body))
