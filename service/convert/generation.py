"""GenerateRequest / GenerateStreamRequest → GenerationRequest, and task results → responses."""

from __future__ import annotations

import re
from typing import Any

from universal_runtime.v1 import common_pb2, generation_pb2, tokenization_pb2

from engines.types import (
    MAX_DRAFT_TOKENS,
    ChatMessage,
    FinishReason,
    GenerationRequest,
    GenerationUsage,
    ReasoningEffort,
    ResponseFormat,
    ResponseFormatKind,
    SamplingParams,
    TokenLogprob,
    TokenLogprobs,
    ToolChoiceMode,
    ToolSpec,
)
from service.convert.messages import enum_table, wire_values
from service.convert.validation import check_range, parse_json, require, validate_json_schema
from service.tasks.generation import ChoiceDelta, Completion, Timings

ROLE_NAMES = {
    generation_pb2.CHAT_ROLE_SYSTEM: "system",
    generation_pb2.CHAT_ROLE_USER: "user",
    generation_pb2.CHAT_ROLE_ASSISTANT: "assistant",
    generation_pb2.CHAT_ROLE_TOOL: "tool",
    generation_pb2.CHAT_ROLE_DEVELOPER: "developer",
}

FINISH_REASONS = wire_values(enum_table(generation_pb2.FinishReason, "FINISH_REASON_", FinishReason))

MAX_STOP_SEQUENCES = 16

# Ranges of the float sampling parameters, as OpenAI's API documents them (repetition_penalty as
# Hugging Face's): (low, high, low end open). An unset field keeps SamplingParams' default.
SAMPLING_RANGES: dict[str, tuple[float, float, bool]] = {
    "temperature": (0.0, 2.0, False),
    "top_p": (0.0, 1.0, True),
    "min_p": (0.0, 1.0, False),
    "repetition_penalty": (0.0, 2.0, True),
    "presence_penalty": (-2.0, 2.0, False),
    "frequency_penalty": (-2.0, 2.0, False),
}
# Messages that carry the fields shaping a rendered prompt besides the messages, under the same names.
PromptSource = generation_pb2.GenerationParameters | tokenization_pb2.TokenizeRequest

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's function-name rule

# UNSPECIFIED: no effort asked (the catalog's default budget), kept apart from NONE (thinking off).
REASONING_EFFORTS: dict[int, ReasoningEffort | None] = {
    **enum_table(generation_pb2.ReasoningEffort, "REASONING_EFFORT_", ReasoningEffort),
    generation_pb2.REASONING_EFFORT_UNSPECIFIED: None,
}

TOOL_CHOICES = enum_table(
    generation_pb2.ToolChoiceMode, "TOOL_CHOICE_MODE_", ToolChoiceMode, ToolChoiceMode.AUTO
)


def chat_messages(request) -> list[ChatMessage]:
    """The validated chat messages of a request with a ``messages`` field (Generate, Tokenize).

    Raises:
        InvalidArgumentError: an unset role, or empty content (except an assistant turn that
            calls tools).

    """
    messages = []
    for i, message in enumerate(request.messages):
        role = ROLE_NAMES.get(message.role)
        require(role is not None, f"messages[{i}].role", "must be set to a chat role")
        require(
            len(message.content_parts) == 0,
            f"messages[{i}].content_parts",
            "audio parts are transcribed for Generate and GenerateStream only; send the text as content",
        )
        content = message.content  # read once (see generation_request)
        reasoning = message.reasoning_content
        require(
            not reasoning or role == "assistant",
            f"messages[{i}].reasoning_content",
            "is only for assistant turns",
        )
        require(
            bool(content) or (role == "assistant" and (len(message.tool_calls) > 0 or bool(reasoning))),
            f"messages[{i}].content",
            "must not be empty",
        )
        messages.append(
            ChatMessage(
                role=role,
                content=content,
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
                reasoning_content=reasoning,
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
    for name, (low, high, low_open) in SAMPLING_RANGES.items():
        if p.HasField(name):
            check_range(getattr(p, name), f"parameters.{name}", low, high, low_open=low_open)
            setattr(params, name, getattr(p, name))
    if p.HasField("top_k"):
        require(p.top_k >= 0, "parameters.top_k", f"must be >= 0, got {p.top_k}")
        params.top_k = p.top_k
    if p.HasField("seed"):
        params.seed = p.seed
    require(len(p.stop) <= MAX_STOP_SEQUENCES, "parameters.stop", f"at most {MAX_STOP_SEQUENCES} sequences")
    params.stop = [s for s in p.stop if s]
    if p.HasField("n"):
        check_range(p.n, "parameters.n", 1, max_choices)
    check_range(p.top_logprobs, "parameters.top_logprobs", 0, 20)
    require(p.logprobs or p.top_logprobs == 0, "parameters.top_logprobs", "needs logprobs to be true")
    params.logprobs = p.logprobs
    params.top_logprobs = p.top_logprobs
    for bias in p.logit_bias:
        check_range(bias.bias, "parameters.logit_bias", -100.0, 100.0)
        params.logit_bias[bias.token_id] = bias.bias
    return params


def _reasoning(
    source: PromptSource, prefix: str, cap: int, cap_name: str
) -> tuple[int | None, ReasoningEffort | None]:
    """The request's thinking budget (tokens, 0 to ``cap``) and effort level.

    A budget above the cap is refused rather than cut (see :func:`generation_request`).
    """
    budget = None
    if source.HasField("reasoning_budget"):
        field = f"{prefix}reasoning_budget"
        require(source.reasoning_budget >= 0, field, f"must be >= 0, got {source.reasoning_budget}")
        require(
            source.reasoning_budget <= cap,
            field,
            f"must be at most {cap_name} ({cap}), got {source.reasoning_budget}",
        )
        budget = source.reasoning_budget
    require(
        source.reasoning_effort in REASONING_EFFORTS, f"{prefix}reasoning_effort", "unknown reasoning effort"
    )
    return budget, REASONING_EFFORTS[source.reasoning_effort]


def _response_format(p: generation_pb2.GenerationParameters) -> ResponseFormat:
    kind = p.response_format.type
    if kind == generation_pb2.RESPONSE_FORMAT_TYPE_JSON_OBJECT:
        return ResponseFormat(ResponseFormatKind.JSON_OBJECT)
    if kind == generation_pb2.RESPONSE_FORMAT_TYPE_JSON_SCHEMA:
        field = "parameters.response_format.json_schema"
        require(bool(p.response_format.json_schema), field, "must be set for type JSON_SCHEMA")
        schema = validate_json_schema(parse_json(p.response_format.json_schema, field), field)
        return ResponseFormat(ResponseFormatKind.JSON_SCHEMA, schema)
    require(
        kind in (generation_pb2.RESPONSE_FORMAT_TYPE_UNSPECIFIED, generation_pb2.RESPONSE_FORMAT_TYPE_TEXT),
        "parameters.response_format.type",
        "unknown response format type",
    )
    return ResponseFormat()


def _tools(source: PromptSource, prefix: str) -> tuple[list[ToolSpec], ToolChoiceMode, str | None]:
    tools: list[ToolSpec] = []
    for i, tool in enumerate(source.tools):
        field = f"{prefix}tools[{i}]"
        require(
            bool(TOOL_NAME.fullmatch(tool.name)), f"{field}.name", "must be 1-64 characters of [A-Za-z0-9_-]"
        )
        require(
            tool.name not in {t.name for t in tools}, f"{field}.name", f"duplicate tool name {tool.name!r}"
        )
        parameters: object = {"type": "object", "properties": {}}
        if tool.parameters_json_schema:
            parameters = validate_json_schema(
                parse_json(tool.parameters_json_schema, f"{field}.parameters_json_schema"),
                f"{field}.parameters_json_schema",
            )
        tools.append(ToolSpec(tool.name, tool.description, parameters))  # type: ignore[arg-type]
    mode = TOOL_CHOICES.get(source.tool_choice.mode)
    require(mode is not None, f"{prefix}tool_choice.mode", "unknown tool choice mode")
    assert mode is not None
    if mode in (ToolChoiceMode.REQUIRED, ToolChoiceMode.FUNCTION):
        require(bool(tools), f"{prefix}tool_choice", f"tool_choice {mode.value} needs tools")
    function = None
    if mode is ToolChoiceMode.FUNCTION:
        function = source.tool_choice.function_name
        require(
            function in {t.name for t in tools},
            f"{prefix}tool_choice.function_name",
            f"{function!r} is not one of the tools",
        )
    return tools, mode, function


def prompt_settings(
    source: PromptSource, *, has_messages: bool, prefix: str, budget_cap: int, cap_name: str
) -> dict[str, Any]:
    """Validate and convert the fields besides the messages that shape a rendered prompt.

    ``source`` is a ``GenerationParameters`` (Generate, ``prefix`` ``"parameters."``) or a
    ``TokenizeRequest`` (``prefix`` ``""``): both carry ``tools``, ``tool_choice``,
    ``reasoning_budget`` and ``reasoning_effort`` under those names, so Tokenize renders and
    refuses exactly what Generate does. Bounds: a thinking budget of 0 to ``budget_cap``
    (``cap_name`` names it in the error); tools as :func:`_tools` checks them.

    Returns:
        The keyword arguments ``tools``, ``tool_choice``, ``tool_choice_function``,
        ``reasoning_budget`` and ``reasoning_effort`` of a ``GenerationRequest`` (and of the
        engine's ``TokenizeRequest``, which has the same fields).

    Raises:
        InvalidArgumentError: a bad tool or tool choice, tools with a raw prompt, a budget out of
            range, an unknown effort (metadata ``field`` names it, with ``prefix``).

    """
    tools, tool_choice, function = _tools(source, prefix)
    require(not tools or has_messages, f"{prefix}tools", "tools need chat messages, not a raw prompt")
    budget, effort = _reasoning(source, prefix, budget_cap, cap_name)
    return {
        "tools": tools,
        "tool_choice": tool_choice,
        "tool_choice_function": function,
        "reasoning_budget": budget,
        "reasoning_effort": effort,
    }


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

    """
    require(bool(request.model), "model", "must be set")
    # Read once: each read of a protobuf string decodes it anew, on the event loop.
    prompt = request.prompt
    has_prompt, has_messages = bool(prompt), len(request.messages) > 0
    require(has_prompt != has_messages, "messages", "exactly one of prompt and messages must be set")
    p = request.parameters
    params = _sampling(p, max_tokens_limit, max_choices)
    # The thinking counts in max_tokens (as OpenAI's reasoning tokens count in
    # max_completion_tokens), so a budget over it could never leave room for the answer.
    budget_cap = p.max_tokens if p.HasField("max_tokens") else max_tokens_limit
    cap_name = "parameters.max_tokens" if p.HasField("max_tokens") else "the server's max_tokens limit"
    settings = prompt_settings(
        p, has_messages=has_messages, prefix="parameters.", budget_cap=budget_cap, cap_name=cap_name
    )
    return GenerationRequest(
        request_id=request_id,
        prompt=None if has_messages else prompt,
        messages=chat_messages(request) if has_messages else None,
        params=params,
        response_format=_response_format(p),
        **settings,
        **_speculative(p),
    )


def _speculative(p: generation_pb2.GenerationParameters) -> dict[str, Any]:
    """``speculative_enabled`` and ``speculative_tokens`` of a GenerationRequest (``num_tokens`` 0..16).

    Raises:
        InvalidArgumentError: ``parameters.speculative.num_tokens`` out of range.

    """
    spec = p.speculative
    require(
        0 <= spec.num_tokens <= MAX_DRAFT_TOKENS,
        "parameters.speculative.num_tokens",
        f"must be 0 (the model's setting) to {MAX_DRAFT_TOKENS}, got {spec.num_tokens}",
    )
    return {
        "speculative_enabled": spec.enabled if spec.HasField("enabled") else None,
        "speculative_tokens": spec.num_tokens,
    }


def choice_count(request: generation_pb2.GenerateRequest | generation_pb2.GenerateStreamRequest) -> int:
    """Number of choices asked for (``n``, default 1; validated by :func:`generation_request`)."""
    return request.parameters.n if request.parameters.HasField("n") else 1


def usage_message(
    prompt_tokens: int,
    completion_tokens: int,
    cached_prompt_tokens: int = 0,
    reasoning_tokens: int = 0,
    draft_tokens: int = 0,
    accepted_draft_tokens: int = 0,
) -> common_pb2.Usage:
    """Usage proto with the total filled in."""
    return common_pb2.Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        cached_prompt_tokens=cached_prompt_tokens,
        reasoning_tokens=reasoning_tokens,
        draft_tokens=draft_tokens,
        accepted_draft_tokens=accepted_draft_tokens,
    )


def _logprob_message(entry: TokenLogprob) -> generation_pb2.TokenLogprob:
    return generation_pb2.TokenLogprob(token_id=entry.token_id, token=entry.token, logprob=entry.logprob)


def _logprobs_message(scored: TokenLogprobs) -> generation_pb2.TokenLogprobs:
    return generation_pb2.TokenLogprobs(
        sampled=_logprob_message(scored.sampled), top_logprobs=[_logprob_message(e) for e in scored.top]
    )


def _usage_and_timings(target, usage: GenerationUsage, timings: Timings) -> None:
    """Fill ``target.usage`` and ``target.timings`` (a stream's last message or a unary response)."""
    target.usage.CopyFrom(
        usage_message(
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_prompt_tokens,
            usage.reasoning_tokens,
            usage.draft_tokens,
            usage.accepted_draft_tokens,
        )
    )
    target.timings.CopyFrom(
        common_pb2.Timings(
            time_to_first_token_ms=timings.time_to_first_token_ms,
            tokens_per_second=timings.tokens_per_second,
            total_ms=timings.total_ms,
        )
    )


def stream_response(model: str, event: ChoiceDelta) -> generation_pb2.GenerateStreamResponse:
    """One GenerateStream message for one choice's delta (usage and timings on the last)."""
    delta = event.delta
    message = generation_pb2.GenerateStreamResponse(
        id=event.completion_id,
        model=model,
        index=event.index,
        text=delta.text,
        reasoning_content=delta.reasoning,
        stop_sequence=delta.stop_sequence,
        token_ids=delta.token_ids,
        logprobs=[_logprobs_message(s) for s in delta.logprobs],
        tool_calls=[
            generation_pb2.ToolCallDelta(
                index=c.index, id=c.id, name=c.name, arguments_json_delta=c.arguments_delta
            )
            for c in delta.tool_calls
        ],
    )
    if delta.finish_reason is not None:
        message.finish_reason = FINISH_REASONS[delta.finish_reason]
    if event.usage is not None and event.timings is not None:
        _usage_and_timings(message, event.usage, event.timings)
    return message


def generate_response(model: str, completion: Completion) -> generation_pb2.GenerateResponse:
    """The unary Generate response: choices in index order, usage and timings."""
    response = generation_pb2.GenerateResponse(id=completion.completion_id, model=model)
    for choice in completion.choices:
        message = response.choices.add(
            index=choice.index,
            text=choice.text,
            reasoning_content=choice.reasoning_content,
            stop_sequence=choice.stop_sequence,
            logprobs=[_logprobs_message(s) for s in choice.logprobs],
            tool_calls=[
                generation_pb2.ToolCall(id=c.id, name=c.name, arguments_json=c.arguments_json)
                for c in choice.tool_calls
            ],
        )
        if choice.finish_reason is not None:
            message.finish_reason = FINISH_REASONS[choice.finish_reason]
    _usage_and_timings(response, completion.usage, completion.timings)
    return response
