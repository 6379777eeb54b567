"""Structured output: JSON constraints and OpenAI-style tool calls, shared by every engine.

Engines turn :func:`output_constraint` into their own constrained decoding (llama.cpp GBNF
grammar, a grammar library for transformers). Tools follow the generic scheme llama.cpp's
server uses for templates without native tool support: the tool list goes into the prompt
(through the chat template's ``tools`` variable when it has one, else a system message),
and the model answers ``{"name": ..., "arguments": {...}}``, which :class:`ToolCallExtractor`
turns into structured tool calls, streamed incrementally.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engines.types import (
    ChatMessage,
    FinishReason,
    GenerationDelta,
    GenerationRequest,
    ResponseFormatKind,
    ToolCallDelta,
    ToolChoiceMode,
)

TOOL_CALL_PREFIX = re.compile(
    r'^\s*(?:<tool_call>\s*)?\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*'
)


@dataclass(frozen=True, slots=True)
class OutputConstraint:
    """What the output must be: any JSON object (``schema`` None) or JSON valid against ``schema``."""

    schema: dict | None = None


def tools_active(request: GenerationRequest) -> bool:
    """Whether the model may call tools in this request."""
    return bool(request.tools) and request.tool_choice is not ToolChoiceMode.NONE


def _rebased(schema: object, base: str) -> object:
    """A copy of ``schema`` whose local ``$ref`` pointers (``#``, ``#/$defs/x``) start at ``base``."""
    if isinstance(schema, list):
        return [_rebased(item, base) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _rebased(value, base) for key, value in schema.items()}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        out["$ref"] = base + ref[1:]
    return out


def tool_call_schema(request: GenerationRequest) -> dict:
    """JSON Schema of one call to one of the request's tools (``name`` first, then ``arguments``).

    Each tool's parameters go under ``$defs/tool-<name>`` with their local ``$ref`` pointers
    rebased there (a pydantic model's ``#/$defs/Item`` would not resolve under ``arguments``);
    the depth of the copy is bounded by the request's JSON depth check.
    """
    tools = request.tools
    if request.tool_choice is ToolChoiceMode.FUNCTION:
        tools = [t for t in tools if t.name == request.tool_choice_function]
    defs = {f"tool-{tool.name}": _rebased(tool.parameters, f"#/$defs/tool-{tool.name}") for tool in tools}
    variants = [
        {
            "type": "object",
            "properties": {"name": {"const": tool.name}, "arguments": {"$ref": f"#/$defs/tool-{tool.name}"}},
            "required": ["name", "arguments"],
        }
        for tool in tools
    ]
    schema = variants[0] if len(variants) == 1 else {"oneOf": variants}
    return {**schema, "$defs": defs}


def output_constraint(request: GenerationRequest) -> OutputConstraint | None:
    """The constraint decoding must enforce, or None for free text."""
    if tools_active(request) and request.tool_choice in (ToolChoiceMode.REQUIRED, ToolChoiceMode.FUNCTION):
        return OutputConstraint(tool_call_schema(request))
    if request.response_format.kind is ResponseFormatKind.JSON_SCHEMA:
        return OutputConstraint(request.response_format.json_schema)
    if request.response_format.kind is ResponseFormatKind.JSON_OBJECT:
        return OutputConstraint(None)
    return None


def tool_instructions(request: GenerationRequest) -> str:
    """The system text that describes the tools and the answer format to the model."""
    lines = [
        "You can call functions. To call one, answer with only a JSON object of the form "
        '{"name": <function name>, "arguments": <arguments object>} and nothing else.',
        "Available functions:",
    ]
    for tool in request.tools:
        lines.append(
            json.dumps({"name": tool.name, "description": tool.description, "parameters": tool.parameters})
        )
    return "\n".join(lines)


def messages_with_tools(
    request: GenerationRequest, template_has_tools: bool, template_has_developer: bool = False
) -> tuple[list[ChatMessage], list | None]:
    """The messages to template and the ``tools`` value for templates that render tools themselves.

    A template that never mentions the ``developer`` role gets developer messages as ``system``
    ones (the contract: developer is treated like system by templates without it).
    """
    messages = [
        m if m.role != "developer" or template_has_developer else dataclasses.replace(m, role="system")
        for m in request.messages or []
    ]
    if not tools_active(request):
        return messages, None
    if template_has_tools:
        payload = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in request.tools
        ]
        return messages, payload
    instructions = tool_instructions(request)
    if messages and messages[0].role in ("system", "developer"):
        first = messages[0]
        messages[0] = ChatMessage(
            role=first.role, content=f"{first.content}\n\n{instructions}", name=first.name
        )
    else:
        messages.insert(0, ChatMessage(role="system", content=instructions))
    return messages, None


class ToolCallExtractor:
    """Turns generated text into streamed tool calls.

    ``forced`` (tool_choice required or a named function): the whole output is a tool call;
    the name is sent as soon as it is complete and the arguments stream as they arrive.
    Otherwise (auto) text that starts like a tool call is held until the end and parsed;
    anything else streams as text.
    """

    def __init__(self, forced: bool) -> None:
        self._forced = forced
        self._buffer = ""
        self._mode: str | None = "call" if forced else None  # None: undecided, "text", "call"
        self._call_id = f"call_{uuid.uuid4().hex[:24]}"
        self._header_sent = False
        self._args_sent = 0

    def __call__(self, delta: GenerationDelta) -> GenerationDelta:
        """Rewrite one delta: its text becomes tool-call fragments where it belongs to a call."""
        if self._mode == "text":
            return delta
        self._buffer += delta.text
        if self._mode is None:
            stripped = self._buffer.lstrip()
            if not stripped and delta.finish_reason is None:
                delta.text = ""
                return delta
            self._mode = "call" if stripped.startswith(("{", "<tool_call>")) else "text"
            if self._mode == "text":
                delta.text, self._buffer = self._buffer, ""
                return delta
        delta.text = ""
        if self._forced:
            delta.tool_calls = self._stream_forced(delta.finish_reason is not None)
        elif delta.finish_reason is not None:
            delta.tool_calls, text = self._parse_whole()
            delta.text = text
        if delta.finish_reason is FinishReason.STOP and delta.tool_calls is not None and self._header_sent:
            delta.finish_reason = FinishReason.TOOL_CALLS
        return delta

    def _stream_forced(self, final: bool) -> list[ToolCallDelta]:
        out: list[ToolCallDelta] = []
        match = TOOL_CALL_PREFIX.match(self._buffer)
        if match is None:
            return out
        if not self._header_sent:
            out.append(ToolCallDelta(index=0, id=self._call_id, name=json.loads(f'"{match.group(1)}"')))
            self._header_sent = True
        arguments = self._buffer[match.end() :]
        # The wrapper's closing brace (and whitespace) ends the text; hold it back until the end.
        if final:
            safe = re.sub(r"\s*\}\s*(?:</tool_call>\s*)?$", "", arguments)
        else:
            safe = arguments.rstrip()
            safe = safe[:-1] if safe.endswith("}") else safe
        if len(safe) > self._args_sent:
            piece = safe[self._args_sent :]
            self._args_sent = len(safe)
            if out:
                out[0].arguments_delta = piece
            else:
                out.append(ToolCallDelta(index=0, arguments_delta=piece))
        return out

    def _parse_whole(self) -> tuple[list[ToolCallDelta], str]:
        text = self._buffer.strip()
        text = text.removeprefix("<tool_call>").removesuffix("</tool_call>").strip()
        try:
            call = json.loads(text)
        except (json.JSONDecodeError, RecursionError):  # model text may nest brackets past the parser's limit
            return [], self._buffer
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or "arguments" not in call:
            return [], self._buffer
        self._header_sent = True
        arguments = call["arguments"]
        return [
            ToolCallDelta(
                index=0,
                id=self._call_id,
                name=call["name"],
                arguments_delta=arguments if isinstance(arguments, str) else json.dumps(arguments),
            )
        ], ""


def output_postprocessor(request: GenerationRequest) -> Callable[[GenerationDelta], GenerationDelta] | None:
    """The per-request delta rewriter (tool calls), or None when the text passes unchanged."""
    if not tools_active(request):
        return None
    return ToolCallExtractor(forced=request.tool_choice in (ToolChoiceMode.REQUIRED, ToolChoiceMode.FUNCTION))


def message_dict(message: ChatMessage, *, reasoning: bool = False) -> dict[str, Any]:
    """OpenAI-style message dict, the shape chat templates expect.

    ``reasoning``: include an assistant turn's ``reasoning_content`` (templates that render it, Qwen3's).
    """
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if reasoning and message.reasoning_content:
        out["reasoning_content"] = message.reasoning_content
    if message.name:
        out["name"] = message.name
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        out["tool_calls"] = message.tool_calls
    return out
