"""Anthropic Messages API: bodies to ``Generate*Request`` / ``TokenizeRequest``, answers to Anthropic objects.

Shapes follow https://docs.claude.com/en/api/messages (the ``Message`` object) and
https://docs.claude.com/en/docs/build-with-claude/streaming (the stream's events), as the
``anthropic`` SDK's types spell them.

How a conversation maps onto the gRPC contract's chat messages:

- ``system`` becomes a first SYSTEM message;
- a ``user`` turn's text blocks become a USER message, each ``tool_result`` block a TOOL message
  (``tool_call_id`` = its ``tool_use_id``; an ``is_error`` result is prefixed ``Error: ``), in
  block order;
- an ``assistant`` turn becomes one ASSISTANT message: its text blocks as ``content``, its
  ``tool_use`` blocks as ``tool_calls``, its ``thinking`` blocks as ``reasoning_content``
  (``redacted_thinking`` is dropped: no model here can read it).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from universal_runtime.v1 import common_pb2, generation_pb2, tokenization_pb2

from gateway.ids import message_id, tool_use_id
from gateway.schemas.messages import (
    AssistantMessage,
    MessagesPrompt,
    MessagesRequest,
    TextBlock,
    ThinkingDisabled,
    ThinkingEnabled,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from gateway.translate.generation import compact_json

logger = logging.getLogger(__name__)

#: ``stop_reason`` per gRPC finish reason; a choice ended by one of the body's stop sequences
#: (``stop_sequence`` set on the contract) is ``stop_sequence`` instead. A cancelled answer (the
#: client is gone) is complete as far as it went.
_STOP_REASONS: dict[int, str] = {
    generation_pb2.FINISH_REASON_STOP: "end_turn",
    generation_pb2.FINISH_REASON_LENGTH: "max_tokens",
    generation_pb2.FINISH_REASON_TOOL_CALLS: "tool_use",
    generation_pb2.FINISH_REASON_CANCELLED: "end_turn",
}

#: ``output_config.effort`` to the contract's levels; Anthropic's levels above ``high`` get the
#: catalog's high budget, the largest it names.
_EFFORTS: dict[str, int] = {
    "low": generation_pb2.REASONING_EFFORT_LOW,
    "medium": generation_pb2.REASONING_EFFORT_MEDIUM,
    "high": generation_pb2.REASONING_EFFORT_HIGH,
    "xhigh": generation_pb2.REASONING_EFFORT_HIGH,
    "max": generation_pb2.REASONING_EFFORT_HIGH,
}

#: The ``signature`` of the thinking blocks this server returns. Anthropic signs thinking so it
#: can check it when a client gives it back; nothing here is signed or checked, and the SDK's
#: type needs a string.
THINKING_SIGNATURE = ""


def _user_messages(message: UserMessage) -> list[generation_pb2.ChatMessage]:
    if isinstance(message.content, str):
        return [generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_USER, content=message.content)]
    out: list[generation_pb2.ChatMessage] = []
    texts: list[str] = []

    def flush_texts() -> None:
        if texts:
            out.append(
                generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_USER, content="\n".join(texts))
            )
            texts.clear()

    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
            continue
        assert isinstance(block, ToolResultBlock)
        flush_texts()
        content = f"Error: {block.text}" if block.is_error else block.text
        out.append(
            generation_pb2.ChatMessage(
                role=generation_pb2.CHAT_ROLE_TOOL, content=content, tool_call_id=block.tool_use_id
            )
        )
    flush_texts()
    return out


def _assistant_message(message: AssistantMessage) -> generation_pb2.ChatMessage:
    if isinstance(message.content, str):
        return generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_ASSISTANT, content=message.content)
    texts, thoughts, calls = [], [], []
    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            calls.append(
                generation_pb2.ToolCall(
                    id=block.id, name=block.name, arguments_json=compact_json(block.input)
                )
            )
        elif block.type == "thinking":
            thoughts.append(block.thinking)
    return generation_pb2.ChatMessage(
        role=generation_pb2.CHAT_ROLE_ASSISTANT,
        content="\n".join(texts),
        tool_calls=calls,
        reasoning_content="\n".join(thoughts),
    )


def chat_messages(body: MessagesPrompt) -> list[generation_pb2.ChatMessage]:
    """The conversation of a Messages body as the contract's chat messages (see the module docstring)."""
    messages: list[generation_pb2.ChatMessage] = []
    system = body.system_text
    if system:
        messages.append(generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_SYSTEM, content=system))
    for message in body.messages:
        if isinstance(message, UserMessage):
            messages.extend(_user_messages(message))
        else:
            messages.append(_assistant_message(message))
    return messages


def _tools(
    body: MessagesPrompt, params: generation_pb2.GenerationParameters | tokenization_pb2.TokenizeRequest
) -> None:
    for tool in body.tools or ():
        params.tools.append(
            generation_pb2.ToolDefinition(
                name=tool.name,
                description=tool.description or "",
                parameters_json_schema=compact_json(tool.input_schema),
            )
        )
    choice = body.tool_choice
    if isinstance(choice, ToolChoiceNone):
        params.tool_choice.mode = generation_pb2.TOOL_CHOICE_MODE_NONE
    elif isinstance(choice, ToolChoiceAny):
        params.tool_choice.mode = generation_pb2.TOOL_CHOICE_MODE_REQUIRED
    elif isinstance(choice, ToolChoiceTool):
        params.tool_choice.mode = generation_pb2.TOOL_CHOICE_MODE_FUNCTION
        params.tool_choice.function_name = choice.name
    elif choice is not None:
        params.tool_choice.mode = generation_pb2.TOOL_CHOICE_MODE_AUTO


def _shape_prompt(
    body: MessagesPrompt, target: generation_pb2.GenerationParameters | tokenization_pb2.TokenizeRequest
) -> None:
    """Set on ``target`` the fields that shape the prompt itself: the tools and the thinking budget.

    ``GenerationParameters`` and ``TokenizeRequest`` name them alike, so ``/v1/messages`` and
    ``count_tokens`` render the same prompt. A reasoning model's template may write a closed think
    block when thinking is off.
    """
    if isinstance(body.thinking, ThinkingEnabled):
        target.reasoning_budget = body.thinking.budget_tokens
    elif isinstance(body.thinking, ThinkingDisabled):
        target.reasoning_budget = 0
    _tools(body, target)


def parameters(body: MessagesRequest) -> generation_pb2.GenerationParameters:
    """``GenerationParameters`` of a Messages body; unset sampling options keep the server's defaults.

    ``thinking`` sets ``reasoning_budget``: ``enabled`` its ``budget_tokens``, ``disabled`` 0,
    ``adaptive`` (or none) leaves it unset (the catalog's budget). ``output_config.effort`` sets
    ``reasoning_effort`` (the server lets an explicit budget win), ``output_config.format`` a JSON
    Schema ``response_format``.
    """
    params = generation_pb2.GenerationParameters()
    _shape_prompt(body, params)
    params.max_tokens = body.max_tokens
    params.stop.extend(body.stop_sequences or ())
    for name in ("temperature", "top_p", "top_k"):
        value = getattr(body, name)
        if value is not None:
            setattr(params, name, value)
    config = body.output_config
    if config is not None and config.effort is not None:
        params.reasoning_effort = _EFFORTS[config.effort]
    if config is not None and config.format is not None:
        params.response_format.type = generation_pb2.RESPONSE_FORMAT_TYPE_JSON_SCHEMA
        params.response_format.json_schema = compact_json(config.format.json_schema)
    return params


def _request_fields(body: MessagesRequest) -> dict[str, Any]:
    return {
        "model": body.model,
        "messages": chat_messages(body),
        "parameters": parameters(body),
        "keep_alive": body.keep_alive_value,
    }


def generate_request(body: MessagesRequest) -> generation_pb2.GenerateRequest:
    """The ``GenerateRequest`` of a non-streamed Messages body."""
    return generation_pb2.GenerateRequest(**_request_fields(body))


def generate_stream_request(body: MessagesRequest) -> generation_pb2.GenerateStreamRequest:
    """The ``GenerateStreamRequest`` of a streamed Messages body."""
    return generation_pb2.GenerateStreamRequest(**_request_fields(body))


def tokenize_request(body: MessagesPrompt) -> tokenization_pb2.TokenizeRequest:
    """The ``TokenizeRequest`` that counts a prompt as ``Generate`` renders and tokenizes it.

    The messages are rendered by the model's chat template with the assistant turn's opening, with
    the tools, tool choice and thinking budget ``/v1/messages`` would send (they change the
    prompt: tools are written into it, thinking off closes a think block), and special tokens are
    added as ``Generate`` adds them (the field's default). So the count equals the answer's
    ``input_tokens`` plus ``cache_read_input_tokens`` for the same body, without a generation.
    """
    request = tokenization_pb2.TokenizeRequest(
        model=body.model, messages=chat_messages(body), keep_alive=body.keep_alive_value
    )
    _shape_prompt(body, request)
    return request


def stop_reason(finish_reason: int, stop_sequence: str = "") -> str | None:
    """Anthropic's ``stop_reason`` for a gRPC finish reason (``None`` while unfinished).

    ``stop_sequence`` when the contract names the stop sequence that ended the choice.
    """
    if stop_sequence and finish_reason:
        return "stop_sequence"
    return _STOP_REASONS.get(finish_reason)


def usage(proto: common_pb2.Usage) -> dict[str, Any]:
    """Anthropic's ``usage``: ``input_tokens`` (not from the prompt cache), ``output_tokens``, cache counts.

    Anthropic counts cached input apart: the prompt's size is ``input_tokens +
    cache_read_input_tokens`` (``cache_creation_input_tokens`` is always 0: the server's prefix
    cache fills itself). ``output_tokens_details.thinking_tokens`` is there when the model thought.
    """
    cached = proto.cached_prompt_tokens
    out: dict[str, Any] = {
        "input_tokens": max(0, proto.prompt_tokens - cached),
        "output_tokens": proto.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }
    if proto.reasoning_tokens:
        out["output_tokens_details"] = {"thinking_tokens": proto.reasoning_tokens}
    return out


def tool_input(arguments_json: str) -> dict[str, Any]:
    """A tool call's arguments as the ``input`` object; anything but a JSON object becomes ``{}`` (logged)."""
    try:
        value = json.loads(arguments_json) if arguments_json else {}
    except ValueError:
        value = None
    if not isinstance(value, dict):
        logger.warning("tool call arguments are not a JSON object; sent as {}: %.200s", arguments_json)
        return {}
    return value


def tool_use_block(name: str, arguments_json: str) -> dict[str, Any]:
    """A ``tool_use`` content block with a fresh ``toolu_`` id."""
    return {"type": "tool_use", "id": tool_use_id(), "name": name, "input": tool_input(arguments_json)}


def thinking_block(thinking: str) -> dict[str, Any]:
    """A ``thinking`` content block (its ``signature`` is :data:`THINKING_SIGNATURE`)."""
    return {"type": "thinking", "thinking": thinking, "signature": THINKING_SIGNATURE}


def message_from_proto(
    response: generation_pb2.GenerateResponse, *, requested_model: str, single_tool_use: bool = False
) -> dict[str, Any]:
    """Convert a ``GenerateResponse`` to Anthropic's ``Message`` object.

    Shape: ``{"id": "msg_…", "type": "message", "role": "assistant", "model", "content": [thinking?,
    text?, tool_use*], "stop_reason", "stop_sequence", "usage"}``. An empty text is left out;
    ``stop_sequence`` is the stop sequence that ended the answer, else null.

    Args:
        response: The server's answer (one choice: the Messages API has no ``n``).
        requested_model: The body's model name, used when the server names none.
        single_tool_use: ``disable_parallel_tool_use``: keep only the first tool call.

    """
    choice = response.choices[0] if response.choices else generation_pb2.GenerateChoice()
    content: list[dict[str, Any]] = []
    if choice.reasoning_content:
        content.append(thinking_block(choice.reasoning_content))
    if choice.text:
        content.append({"type": "text", "text": choice.text})
    calls = list(choice.tool_calls)[: 1 if single_tool_use else None]
    content.extend(tool_use_block(call.name, call.arguments_json) for call in calls)
    return {
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": response.model or requested_model,
        "content": content,
        "stop_reason": stop_reason(choice.finish_reason, choice.stop_sequence) or "end_turn",
        "stop_sequence": choice.stop_sequence or None,
        "usage": usage(response.usage),
    }


class MessageStreamTranslator:
    r"""Turns ``GenerateStreamResponse`` messages into Anthropic's stream events (dicts with ``type``).

    Order: ``message_start`` (``content: []``, ``stop_reason: null``, ``usage`` zeros: the
    contract reports usage only on its last message), then per content block
    ``content_block_start`` / ``content_block_delta``\* / ``content_block_stop`` with indices
    0, 1, …: a ``thinking`` block for ``reasoning_content`` (``thinking_delta``), a ``text``
    block for ``text`` (``text_delta``), a ``tool_use`` block per tool call (``input_json_delta``
    of its arguments); a change of kind closes the open block. At the end ``message_delta``
    (``stop_reason``, ``stop_sequence``, the cumulative ``usage``, input counts included) and
    ``message_stop``.

    Args:
        requested_model: The body's model name, used until the server names its model.
        single_tool_use: ``disable_parallel_tool_use``: tool calls after the first are dropped.

    """

    def __init__(self, *, requested_model: str, single_tool_use: bool = False) -> None:
        self._model = requested_model
        self._single_tool_use = single_tool_use
        self._started = False
        self._open: tuple[str, int] | None = None  # kind of the open block and its tool call index
        self._index = -1  # index of the last block started
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        self._usage: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0}

    def _start(self, kind: str, tool_index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._close()
        self._index += 1
        self._open = (kind, tool_index)
        events.append({"type": "content_block_start", "index": self._index, "content_block": block})
        return events

    def _close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": self._index}]

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self._index, "delta": delta}

    def _message_start(self, message: generation_pb2.GenerateStreamResponse) -> dict[str, Any]:
        self._model = message.model or self._model
        return {
            "type": "message_start",
            "message": {
                "id": message_id(),
                "type": "message",
                "role": "assistant",
                "model": self._model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            },
        }

    def _tool_events(self, call: generation_pb2.ToolCallDelta) -> list[dict[str, Any]]:
        if self._single_tool_use and call.index > 0:
            return []
        events: list[dict[str, Any]] = []
        if self._open != ("tool_use", call.index):
            block = {"type": "tool_use", "id": tool_use_id(), "name": call.name, "input": {}}
            events.extend(self._start("tool_use", call.index, block))
        if call.arguments_json_delta:
            events.append(
                self._delta({"type": "input_json_delta", "partial_json": call.arguments_json_delta})
            )
        return events

    def on_message(self, message: generation_pb2.GenerateStreamResponse) -> list[dict[str, Any]]:
        """The events of one gRPC message (the first also opens the message)."""
        events: list[dict[str, Any]] = []
        if not self._started:
            self._started = True
            events.append(self._message_start(message))
        if message.index != 0:
            return events  # the Messages API has one choice; the body cannot ask for more
        if message.reasoning_content:
            if self._open is None or self._open[0] != "thinking":
                events.extend(self._start("thinking", -1, thinking_block("")))
            events.append(self._delta({"type": "thinking_delta", "thinking": message.reasoning_content}))
        if message.text:
            if self._open is None or self._open[0] != "text":
                events.extend(self._start("text", -1, {"type": "text", "text": ""}))
            events.append(self._delta({"type": "text_delta", "text": message.text}))
        for call in message.tool_calls:
            events.extend(self._tool_events(call))
        if message.finish_reason:
            self._stop_reason = stop_reason(message.finish_reason, message.stop_sequence)
            self._stop_sequence = message.stop_sequence or None
        if message.HasField("usage"):
            self._usage = usage(message.usage)
        return events

    def on_end(self) -> list[dict[str, Any]]:
        """The closing events: the open block's stop, ``message_delta`` and ``message_stop``."""
        events = self._close()
        if not self._started:  # a stream that ended before its first message still opens the message
            self._started = True
            events.append(self._message_start(generation_pb2.GenerateStreamResponse()))
        events.append(
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": self._stop_reason or "end_turn",
                    "stop_sequence": self._stop_sequence,
                },
                "usage": self._usage,
            }
        )
        events.append({"type": "message_stop"})
        return events
