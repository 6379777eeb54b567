"""OpenAI Responses API: a ``/v1/responses`` body to ``Generate*Request``, answers to ``response`` objects.

Shapes follow https://platform.openai.com/docs/api-reference/responses/object and the openai
Python SDK's ``openai.types.responses`` (``Response``, ``ResponseOutputMessage``,
``ResponseFunctionToolCall``, ``ResponseReasoningItem``, ``ResponseUsage``). The conversation is
``instructions`` (a system message), then the items of the previous response's chain, then the
request's ``input``; each becomes a ``ChatMessage`` of the one Generate contract. The gateway
translates ``instructions`` and ``input``; the server puts the chain between them
(``CreateResponse``, :mod:`gateway.translate.responses_store`). The model's
thinking (``reasoning_content``) travels as ``reasoning`` items, never inside the text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from universal_runtime.v1 import common_pb2, generation_pb2

from gateway import ids
from gateway.errors import GatewayError
from gateway.schemas.responses import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionToolChoice,
    MessageItem,
    ReasoningItem,
    ResponseRequest,
    TextFormatJsonSchema,
)
from gateway.translate.chat import RESPONSE_FORMATS, ROLES, TOOL_CHOICE_MODES
from gateway.translate.common import BodyFields
from gateway.translate.generation import compact_json, set_reasoning

Item = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem

# Sampling options copied as they are; the rest the translator maps itself (other names or
# shapes), or only steer the gateway (stream, store, chain) or are echoed (metadata, user).
_SAMPLING = BodyFields(
    ResponseRequest,
    generation_pb2.GenerationParameters,
    ("temperature", "top_p"),
    by_hand=(
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "tools",
        "tool_choice",
        "text",
        "reasoning",
        "keep_alive",
    ),
    dropped=(
        "parallel_tool_calls",
        "metadata",
        "user",
        "store",
        "previous_response_id",
        "truncation",
        "include",
        "stream",
    ),
)


def item_json(item: Item) -> dict[str, Any]:
    """An input item as the Responses API lists it (``GET /v1/responses/{id}/input_items``).

    Items without an ``id`` get one (``msg_…``, ``fc_…``, ``rs_…``; a function call output keeps
    none), messages a ``status``; string content becomes one
    ``input_text`` part (``output_text`` for an assistant's), as OpenAI lists them.
    """
    data = item.model_dump(mode="json", exclude_none=True)
    if isinstance(item, FunctionCallItem):
        data.setdefault("id", ids.function_call_id())
    elif isinstance(item, ReasoningItem):
        data.setdefault("id", ids.reasoning_id())
    elif isinstance(item, MessageItem):
        data.setdefault("id", ids.message_id())
        data.setdefault("status", "completed")
        if isinstance(item.content, str):
            kind = "output_text" if item.role == "assistant" else "input_text"
            data["content"] = [{"type": kind, "text": item.content}]
    return data


@dataclass
class _Conversation:
    """Builds the ``ChatMessage`` list; remembers the calls made so that outputs can be checked."""

    messages: list[generation_pb2.ChatMessage] = field(default_factory=list)
    call_names: dict[str, str] = field(default_factory=dict)
    reasoning: str = ""
    chained: bool = False

    def _assistant(self, *, new: bool) -> generation_pb2.ChatMessage:
        """The assistant message to add to: the last one unless a new turn starts."""
        last = self.messages[-1] if self.messages else None
        if new or last is None or last.role != generation_pb2.CHAT_ROLE_ASSISTANT:
            last = generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_ASSISTANT)
            self.messages.append(last)
        if self.reasoning:
            # Thinking given back belongs to the assistant turn that follows it.
            last.reasoning_content = self.reasoning
            self.reasoning = ""
        return last

    def add(self, item: Item, where: str) -> None:
        """Add one item; ``where`` names it in errors (``input[3]``).

        Raises:
            GatewayError: 400 for a ``function_call_output`` that answers no earlier call (unless
                ``chained``: then the server looks for it in the conversation continued).

        """
        if isinstance(item, ReasoningItem):
            self.reasoning = item.text
        elif isinstance(item, MessageItem):
            if item.role == "assistant":
                self._assistant(new=True).content = item.text
            else:
                self.messages.append(generation_pb2.ChatMessage(role=ROLES[item.role], content=item.text))
        elif isinstance(item, FunctionCallItem):
            # Calls of one turn (parallel calls, or calls after the turn's text) join one message.
            self._assistant(new=False).tool_calls.append(
                generation_pb2.ToolCall(id=item.call_id, name=item.name, arguments_json=item.arguments)
            )
            self.call_names[item.call_id] = item.name
        else:
            name = self.call_names.get(item.call_id)
            if name is None and self.chained:
                name = ""  # a call of the conversation continued: the server names it
            if name is None:
                raise GatewayError(
                    400,
                    f"No function call found for function_call_output with call_id '{item.call_id}'",
                    code="invalid_value",
                    param=f"{where}.call_id",
                )
            self.messages.append(
                generation_pb2.ChatMessage(
                    role=generation_pb2.CHAT_ROLE_TOOL,
                    content=item.text,
                    tool_call_id=item.call_id,
                    name=name,
                )
            )


def conversation(request: ResponseRequest, *, chained: bool = False) -> list[generation_pb2.ChatMessage]:
    """The chat messages of a request's own ``input`` (``instructions`` and a chain travel apart).

    Args:
        request: The parsed body.
        chained: The request continues ``previous_response_id``, whose conversation the server
            prepends: a ``function_call_output`` may then answer a call of that conversation, and
            the server names it (a tool message with an empty ``name``).

    Raises:
        GatewayError: 400 ``invalid_value`` with ``param`` ``input[i].call_id`` for a function
            call output that answers no function call before it (without ``chained``).

    """
    built = _Conversation(chained=chained)
    for index, item in enumerate(request.input_items):
        built.add(item, f"input[{index}]")
    return built.messages


def parameters(request: ResponseRequest) -> generation_pb2.GenerationParameters:
    """``GenerationParameters`` of a request: sampling, limit, format, tools, reasoning effort."""
    params = generation_pb2.GenerationParameters(**_SAMPLING.values(request))
    if request.max_output_tokens is not None:
        params.max_tokens = request.max_output_tokens
    fmt = request.text.format if request.text is not None else None
    if fmt is not None:
        params.response_format.type = RESPONSE_FORMATS[fmt.type]
        if isinstance(fmt, TextFormatJsonSchema):
            params.response_format.json_schema = compact_json(fmt.json_schema)
            params.response_format.schema_name = fmt.name
    for tool in request.tools or ():
        params.tools.append(
            generation_pb2.ToolDefinition(
                name=tool.name,
                description=tool.description or "",
                parameters_json_schema=compact_json(tool.parameters) if tool.parameters is not None else "",
            )
        )
    choice = request.tool_choice
    if isinstance(choice, FunctionToolChoice):
        params.tool_choice.mode = generation_pb2.TOOL_CHOICE_MODE_FUNCTION
        params.tool_choice.function_name = choice.name
    elif choice is not None:
        params.tool_choice.mode = TOOL_CHOICE_MODES[choice]
    return set_reasoning(params, effort=request.reasoning.effort if request.reasoning else None)


def _request_fields(request: ResponseRequest) -> dict[str, Any]:
    return {
        "model": request.model,
        "messages": conversation(request, chained=request.previous_response_id is not None),
        "parameters": parameters(request),
        "keep_alive": request.keep_alive_value,
    }


def generate_request(request: ResponseRequest) -> generation_pb2.GenerateRequest:
    """The new turn of a non-streamed request as a ``GenerateRequest`` (errors as :func:`conversation`)."""
    return generation_pb2.GenerateRequest(**_request_fields(request))


def generate_stream_request(request: ResponseRequest) -> generation_pb2.GenerateStreamRequest:
    """The new turn of a streamed request as a ``GenerateStreamRequest`` (errors as :func:`conversation`)."""
    return generation_pb2.GenerateStreamRequest(**_request_fields(request))


def usage_json(usage: common_pb2.Usage) -> dict[str, Any]:
    """The Responses API's ``usage`` of an answer.

    ``{"input_tokens", "input_tokens_details": {"cached_tokens", "cache_write_tokens": 0}, "output_tokens",
    "output_tokens_details": {"reasoning_tokens"}, "total_tokens"}``.
    Reasoning tokens are part of ``output_tokens``, as in OpenAI's API.
    """
    return {
        "input_tokens": usage.prompt_tokens,
        # No cache write is counted apart (the SDK's type needs the field): 0.
        "input_tokens_details": {"cached_tokens": usage.cached_prompt_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def reasoning_item(text: str, *, item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    """A ``reasoning`` output item carrying the thinking whole as one ``reasoning_text`` part."""
    return {
        "id": item_id or ids.reasoning_id(),
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    }


def output_text_part(text: str) -> dict[str, Any]:
    """An ``output_text`` content part (no annotations: the server cites nothing)."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(text: str, *, item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    """An assistant ``message`` output item with one ``output_text`` part."""
    return {
        "id": item_id or ids.message_id(),
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [output_text_part(text)],
    }


def function_call_item(
    *, call_id: str, name: str, arguments: str, item_id: str | None = None, status: str = "completed"
) -> dict[str, Any]:
    """A ``function_call`` output item (``id`` ``fc_…``; ``call_id`` answers it in a later request)."""
    return {
        "id": item_id or ids.function_call_id(),
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def is_cut(finish_reason: int) -> bool:
    """Whether the answer stopped at ``max_output_tokens`` (the response is then ``incomplete``)."""
    return finish_reason == generation_pb2.FINISH_REASON_LENGTH


def output_items(choice: generation_pb2.GenerateChoice, response_id: str) -> list[dict[str, Any]]:
    """The ``output`` of an answer: its reasoning item, its message, then its function calls.

    A message is always present unless the model only called functions, so ``output_text`` is
    defined for every answer. Item ids are fixed by ``response_id`` and place
    (:func:`gateway.ids.output_item_id`), so rendering a stored answer again gives the same ones.
    """
    status = "incomplete" if is_cut(choice.finish_reason) else "completed"
    output: list[dict[str, Any]] = []

    def item_id(prefix: str) -> str:
        return ids.output_item_id(prefix, response_id, len(output))

    if choice.reasoning_content:
        output.append(reasoning_item(choice.reasoning_content, item_id=item_id("rs"), status=status))
    if choice.text or not choice.tool_calls:
        output.append(message_item(choice.text, item_id=item_id("msg"), status=status))
    for call in choice.tool_calls:
        output.append(
            function_call_item(
                call_id=call.id or ids.tool_call_id(),
                name=call.name,
                arguments=call.arguments_json,
                item_id=item_id("fc"),
            )
        )
    return output


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    """What a response object repeats of its request, fixed before generation starts.

    Attributes:
        id: ``resp_…``.
        created_at: Unix seconds.
        request: The parsed body (echoed fields: instructions, tools, format, metadata ...).

    """

    id: str
    created_at: int
    request: ResponseRequest

    @classmethod
    def new(cls, request: ResponseRequest) -> ResponseHeader:
        """A header with a fresh id, created now."""
        return cls(id=ids.response_id(), created_at=ids.unix_now(), request=request)

    def template(self) -> dict[str, Any]:
        """The response before its answer (``in_progress``, no output): what the server stores for it."""
        return self.response(status="in_progress", model=self.request.model, output=[])

    def response(
        self,
        *,
        status: str,
        model: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The ``response`` object (OpenAI Responses API) in the given state.

        Args:
            status: ``in_progress``, ``completed``, ``incomplete`` (cut at ``max_output_tokens``:
                ``incomplete_details.reason`` says so) or ``failed`` (with ``error``).
            model: The model that answers (the server's name once known).
            output: The output items.
            usage: :func:`usage_json`, or ``None`` while in progress.
            error: ``{"code", "message"}`` of a failed response.

        """
        request = self.request
        choice = request.tool_choice
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "metadata": request.metadata or {},
            "model": model,
            "output": output,
            "parallel_tool_calls": request.parallel_tool_calls is not False,
            "previous_response_id": request.previous_response_id,
            "reasoning": {"effort": request.reasoning.effort if request.reasoning else None, "summary": None},
            "store": request.store,
            "temperature": request.temperature,
            "text": request.format_json,
            "tool_choice": choice.model_dump(mode="json")
            if isinstance(choice, FunctionToolChoice)
            else choice or "auto",
            "tools": [tool.model_dump(mode="json") for tool in request.tools or ()],
            "top_p": request.top_p,
            "truncation": "disabled",
            "usage": usage,
            "user": request.user,
        }


def render_response(
    template: dict[str, Any], response_id: str, answer: generation_pb2.GenerateResponse
) -> dict[str, Any]:
    """The ``response`` object of an answer, from the response before it (:meth:`ResponseHeader.template`).

    Its first choice only (Responses has no ``n``): status, model, output and usage come from
    the answer; a stored response renders again the same (:func:`output_items`).
    """
    choice = answer.choices[0] if answer.choices else generation_pb2.GenerateChoice()
    status = "incomplete" if is_cut(choice.finish_reason) else "completed"
    return {
        **template,
        "status": status,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "model": answer.model or template["model"],
        "output": output_items(choice, response_id),
        "usage": usage_json(answer.usage),
    }


def response_json(header: ResponseHeader, response: generation_pb2.GenerateResponse) -> dict[str, Any]:
    """The ``response`` object of a non-streamed answer (see :func:`render_response`)."""
    return render_response(header.template(), header.id, response)
