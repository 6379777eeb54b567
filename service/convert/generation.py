"""GenerateRequest / GenerateStreamRequest → GenerationRequest, and deltas → responses."""

from __future__ import annotations

from universal_runtime.v1 import common_pb2, generation_pb2

from engines.errors import NotImplementedYetError
from engines.types import ChatMessage, FinishReason, GenerationRequest, SamplingParams
from service.convert.validation import check_range, require

ROLE_NAMES = {
    generation_pb2.CHAT_ROLE_SYSTEM: "system",
    generation_pb2.CHAT_ROLE_USER: "user",
    generation_pb2.CHAT_ROLE_ASSISTANT: "assistant",
    generation_pb2.CHAT_ROLE_TOOL: "tool",
    generation_pb2.CHAT_ROLE_DEVELOPER: "developer",
}

FINISH_REASONS = {
    FinishReason.STOP: generation_pb2.FINISH_REASON_STOP,
    FinishReason.LENGTH: generation_pb2.FINISH_REASON_LENGTH,
    FinishReason.TOOL_CALLS: generation_pb2.FINISH_REASON_TOOL_CALLS,
    FinishReason.CANCELLED: generation_pb2.FINISH_REASON_CANCELLED,
}

MAX_STOP_SEQUENCES = 16


def _messages(request) -> list[ChatMessage]:
    messages = []
    for i, message in enumerate(request.messages):
        role = ROLE_NAMES.get(message.role)
        require(role is not None, f"messages[{i}].role", "must be set to a chat role")
        require(
            bool(message.content) or (role == "assistant" and len(message.tool_calls) > 0),
            f"messages[{i}].content",
            "must not be empty",
        )
        messages.append(
            ChatMessage(
                role=role,
                content=message.content,
                name=message.name or None,
                tool_call_id=message.tool_call_id or None,
                tool_calls=[
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments_json},
                    }
                    for c in message.tool_calls
                ],
            )
        )
    return messages


def _sampling(
    p: generation_pb2.GenerationParameters, max_tokens_limit: int, max_choices: int
) -> SamplingParams:
    params = SamplingParams()
    if p.HasField("max_tokens"):
        check_range(p.max_tokens, "parameters.max_tokens", 1, max_tokens_limit)
        params.max_tokens = p.max_tokens
    if p.HasField("temperature"):
        check_range(p.temperature, "parameters.temperature", 0.0, 2.0)
        params.temperature = p.temperature
    if p.HasField("top_p"):
        check_range(p.top_p, "parameters.top_p", 0.0, 1.0, low_open=True)
        params.top_p = p.top_p
    if p.HasField("top_k"):
        require(p.top_k >= 0, "parameters.top_k", f"must be >= 0, got {p.top_k}")
        params.top_k = p.top_k
    if p.HasField("min_p"):
        check_range(p.min_p, "parameters.min_p", 0.0, 1.0)
        params.min_p = p.min_p
    if p.HasField("repetition_penalty"):
        check_range(p.repetition_penalty, "parameters.repetition_penalty", 0.0, 2.0, low_open=True)
        params.repetition_penalty = p.repetition_penalty
    if p.HasField("presence_penalty"):
        check_range(p.presence_penalty, "parameters.presence_penalty", -2.0, 2.0)
        params.presence_penalty = p.presence_penalty
    if p.HasField("frequency_penalty"):
        check_range(p.frequency_penalty, "parameters.frequency_penalty", -2.0, 2.0)
        params.frequency_penalty = p.frequency_penalty
    if p.HasField("seed"):
        params.seed = p.seed
    require(len(p.stop) <= MAX_STOP_SEQUENCES, "parameters.stop", f"at most {MAX_STOP_SEQUENCES} sequences")
    params.stop = [s for s in p.stop if s]
    if p.HasField("n"):
        check_range(p.n, "parameters.n", 1, max_choices)
    check_range(p.top_logprobs, "parameters.top_logprobs", 0, 20)
    _reject_unbuilt(p)
    return params


def _reject_unbuilt(p: generation_pb2.GenerationParameters) -> None:
    """Options in the contract whose engine support is not built yet: refuse rather than ignore."""
    unbuilt = []
    if p.HasField("n") and p.n > 1:
        unbuilt.append("n > 1")
    if p.logprobs or p.top_logprobs:
        unbuilt.append("logprobs")
    if p.logit_bias:
        unbuilt.append("logit_bias")
    if p.response_format.type not in (
        generation_pb2.RESPONSE_FORMAT_TYPE_UNSPECIFIED,
        generation_pb2.RESPONSE_FORMAT_TYPE_TEXT,
    ):
        unbuilt.append("response_format")
    if p.tools:
        unbuilt.append("tools")
    if unbuilt:
        raise NotImplementedYetError(
            f"not implemented yet: {', '.join(unbuilt)}",
            reason="FEATURE_NOT_IMPLEMENTED",
            features=",".join(unbuilt),
        )


def generation_request(
    request: generation_pb2.GenerateRequest | generation_pb2.GenerateStreamRequest,
    request_id: str,
    *,
    max_tokens_limit: int,
    max_choices: int,
) -> GenerationRequest:
    """Validate and convert a Generate or GenerateStream request (they share field names).

    Raises:
        InvalidArgumentError: missing model, neither or both of prompt and messages, empty
            content, unset role, or a parameter out of range (metadata ``field`` names it).
        NotImplementedYetError: an option whose support is not built yet.

    """
    require(bool(request.model), "model", "must be set")
    has_prompt, has_messages = bool(request.prompt), len(request.messages) > 0
    require(has_prompt != has_messages, "messages", "exactly one of prompt and messages must be set")
    params = _sampling(request.parameters, max_tokens_limit, max_choices)
    if has_messages:
        return GenerationRequest(request_id=request_id, messages=_messages(request), params=params)
    return GenerationRequest(request_id=request_id, prompt=request.prompt, params=params)


def usage_message(prompt_tokens: int, completion_tokens: int) -> common_pb2.Usage:
    """Usage proto with the total filled in."""
    return common_pb2.Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
    )
