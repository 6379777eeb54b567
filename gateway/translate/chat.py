"""Chat completions: OpenAI chat request to ``Generate*Request``, and answers back to OpenAI objects.

Response shapes follow https://platform.openai.com/docs/api-reference/chat/object and
https://platform.openai.com/docs/api-reference/chat/streaming.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from universal_runtime.v1 import generation_pb2

from gateway.schemas.chat import AudioContentPart, ChatCompletionRequest, ChatMessageParam
from gateway.translate.generation import (
    GenerationApi,
    StreamTranslator,
    compact_json,
    finish_reason_label,
    generation_parameters,
    response_envelope,
    set_reasoning,
    token_bytes,
)

#: OpenAI role names to the contract's roles (the Responses API uses them too).
ROLES: dict[str, int] = {
    "system": generation_pb2.CHAT_ROLE_SYSTEM,
    "developer": generation_pb2.CHAT_ROLE_DEVELOPER,
    "user": generation_pb2.CHAT_ROLE_USER,
    "assistant": generation_pb2.CHAT_ROLE_ASSISTANT,
    "tool": generation_pb2.CHAT_ROLE_TOOL,
}

#: OpenAI format types (chat's ``response_format``, Responses' ``text.format``) to the contract's.
RESPONSE_FORMATS: dict[str, int] = {
    "text": generation_pb2.RESPONSE_FORMAT_TYPE_TEXT,
    "json_object": generation_pb2.RESPONSE_FORMAT_TYPE_JSON_OBJECT,
    "json_schema": generation_pb2.RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
}

#: OpenAI's ``tool_choice`` strings to the contract's modes (chat and Responses).
TOOL_CHOICE_MODES: dict[str, int] = {
    "auto": generation_pb2.TOOL_CHOICE_MODE_AUTO,
    "none": generation_pb2.TOOL_CHOICE_MODE_NONE,
    "required": generation_pb2.TOOL_CHOICE_MODE_REQUIRED,
}

OBJECT_COMPLETION = "chat.completion"
OBJECT_CHUNK = "chat.completion.chunk"
ID_PREFIX = "chatcmpl"


def _content_parts(message: ChatMessageParam) -> list[generation_pb2.ContentPart]:
    """The message's parts in order: text, and ``input_audio`` as audio the server transcribes."""
    parts = []
    for part in message.content or ():
        if isinstance(part, AudioContentPart):
            audio = generation_pb2.AudioInput(data=part.input_audio.data, format=part.input_audio.format)
            parts.append(generation_pb2.ContentPart(audio=audio))
        else:
            parts.append(generation_pb2.ContentPart(text=part.text))
    return parts


def chat_message_to_proto(message: ChatMessageParam) -> generation_pb2.ChatMessage:
    """Convert one OpenAI message to a ``ChatMessage`` (list content is joined into one string).

    Content with ``input_audio`` parts goes as ``content_parts`` instead, for the server to
    transcribe.

    An assistant message's ``reasoning_content`` goes to ``ChatMessage.reasoning_content``, never
    into ``content``.
    """
    return generation_pb2.ChatMessage(
        role=ROLES[message.role],
        content="" if message.has_audio else message.text,
        content_parts=_content_parts(message) if message.has_audio else (),
        reasoning_content=message.reasoning_content or "",
        name=message.name or "",
        tool_call_id=message.tool_call_id or "",
        tool_calls=[
            generation_pb2.ToolCall(
                id=call.id, name=call.function.name, arguments_json=call.function.arguments_json
            )
            for call in message.tool_calls or ()
        ],
    )


def chat_parameters(request: ChatCompletionRequest) -> generation_pb2.GenerationParameters:
    """Build ``GenerationParameters`` for a chat request: response format, tools and thinking included."""
    params = generation_parameters(
        request,
        max_tokens=request.token_limit,
        logprobs=bool(request.logprobs),
        top_logprobs=request.top_logprobs or 0,
    )
    set_reasoning(params, effort=request.reasoning_effort, budget=request.thinking_budget)
    if request.response_format is not None:
        fmt = request.response_format
        params.response_format.type = RESPONSE_FORMATS[fmt.type]
        if fmt.json_schema is not None:
            params.response_format.json_schema = compact_json(fmt.json_schema.json_schema)
            params.response_format.schema_name = fmt.json_schema.name or ""
    for tool in request.tools or ():
        params.tools.append(
            generation_pb2.ToolDefinition(
                name=tool.function.name,
                description=tool.function.description or "",
                parameters_json_schema=(
                    compact_json(tool.function.parameters) if tool.function.parameters is not None else ""
                ),
            )
        )
    choice = request.tool_choice
    if isinstance(choice, str):
        params.tool_choice.mode = TOOL_CHOICE_MODES[choice]
    elif choice is not None:
        params.tool_choice.mode = generation_pb2.TOOL_CHOICE_MODE_FUNCTION
        params.tool_choice.function_name = choice.function.name
    return params


def _messages(request: ChatCompletionRequest) -> dict[str, Any]:
    return {"messages": [chat_message_to_proto(message) for message in request.messages]}


def _logprob_entry(item: generation_pb2.TokenLogprob) -> dict[str, Any]:
    return {"token": item.token, "logprob": item.logprob, "bytes": token_bytes(item.token)}


def chat_logprobs(items: Iterable[generation_pb2.TokenLogprobs]) -> dict[str, Any] | None:
    """Return a choice's ``logprobs`` object ``{"content": [...], "refusal": None}``, or ``None`` if empty.

    Each content entry is ``{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}``.
    """
    content = [
        {**_logprob_entry(item.sampled), "top_logprobs": [_logprob_entry(top) for top in item.top_logprobs]}
        for item in items
    ]
    return {"content": content, "refusal": None} if content else None


def _tool_call_dict(call: generation_pb2.ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments_json},
    }


def chat_completion_from_proto(
    response: generation_pb2.GenerateResponse, *, requested_model: str
) -> dict[str, Any]:
    """Convert a ``GenerateResponse`` to an OpenAI ``chat.completion`` object.

    Shape: ``{"id", "object": "chat.completion", "created", "model", "system_fingerprint",
    "choices": [{"index", "message": {"role": "assistant", "content", "reasoning_content"?,
    "tool_calls"?}, "finish_reason", "logprobs"}], "usage", "timings"}``. ``content`` is null for
    a tool-call-only answer, as in OpenAI; ``reasoning_content`` (a reasoning model's thinking, as
    vLLM, llama.cpp's server and DeepSeek's API name it) only when the model thought;
    ``tool_calls`` only when the model called tools; ``timings`` is an extension.
    """
    choices = []
    for choice in response.choices:
        message: dict[str, Any] = {"role": "assistant", "content": choice.text}
        if choice.reasoning_content:
            message["reasoning_content"] = choice.reasoning_content
        if choice.tool_calls:
            message["tool_calls"] = [_tool_call_dict(call) for call in choice.tool_calls]
            if not choice.text:
                message["content"] = None
        choices.append(
            {
                "index": choice.index,
                "message": message,
                "finish_reason": finish_reason_label(choice.finish_reason),
                "logprobs": chat_logprobs(choice.logprobs),
            }
        )
    return response_envelope(
        response, requested_model, choices, object_name=OBJECT_COMPLETION, id_prefix=ID_PREFIX
    )


class ChatStreamTranslator(StreamTranslator):
    """Turns ``GenerateStreamResponse`` messages into ``chat.completion.chunk`` objects.

    Per choice: a first chunk with ``delta: {"role": "assistant", "content": ""}``, then a chunk
    per message with thinking (``delta.reasoning_content``), text (``delta.content``), tool call
    fragments (``delta.tool_calls``) or log probabilities, then a chunk with an empty delta and
    the ``finish_reason``. With ``include_usage``, every chunk has ``"usage": null`` and
    :meth:`on_end` adds a last chunk with empty ``choices`` and the usage, as OpenAI does.
    Arguments as for :class:`StreamTranslator`.
    """

    object_name = OBJECT_CHUNK
    id_prefix = ID_PREFIX

    def __init__(self, *, requested_model: str, include_usage: bool) -> None:
        super().__init__(requested_model=requested_model, include_usage=include_usage)
        self._started: set[int] = set()

    @staticmethod
    def _choice(index: int, delta: dict[str, Any], *, finish_reason: str | None = None, logprobs: Any = None):
        return {"index": index, "delta": delta, "finish_reason": finish_reason, "logprobs": logprobs}

    def message_chunks(self, message: generation_pb2.GenerateStreamResponse) -> list[dict[str, Any]]:
        """The chunks of one message."""
        chunks = []
        index = message.index
        if index not in self._started:
            self._started.add(index)
            chunks.append(self._chunk([self._choice(index, {"role": "assistant", "content": ""})]))
        delta: dict[str, Any] = {}
        if message.reasoning_content:
            delta["reasoning_content"] = message.reasoning_content
        if message.text:
            delta["content"] = message.text
        if message.tool_calls:
            delta["tool_calls"] = [_tool_call_delta_dict(call) for call in message.tool_calls]
        logprobs = chat_logprobs(message.logprobs)
        if delta or logprobs is not None:
            chunks.append(self._chunk([self._choice(index, delta, logprobs=logprobs)]))
        finish_reason = finish_reason_label(message.finish_reason)
        if finish_reason is not None:
            chunks.append(self._chunk([self._choice(index, {}, finish_reason=finish_reason)]))
        return chunks


def _tool_call_delta_dict(call: generation_pb2.ToolCallDelta) -> dict[str, Any]:
    """Return an OpenAI streamed tool call fragment; id, type and name only on the first one."""
    function: dict[str, Any] = {"arguments": call.arguments_json_delta}
    delta: dict[str, Any] = {"index": call.index, "function": function}
    if call.id:
        delta["id"] = call.id
        delta["type"] = "function"
    if call.name:
        function["name"] = call.name
    return delta


API = GenerationApi(
    prompt_fields=_messages,
    parameters=chat_parameters,
    response_json=chat_completion_from_proto,
    stream_translator=ChatStreamTranslator,
)
"""How ``/v1/chat/completions`` translates (see :func:`gateway.calls.generate`)."""
