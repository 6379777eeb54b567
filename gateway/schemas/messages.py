"""Request bodies of ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` (Anthropic Messages API).

Source of the shapes: https://docs.claude.com/en/api/messages and the ``anthropic`` SDK's param
types (``MessageCreateParams``, ``MessageCountTokensParams``). Fields the server does not act on
(``cache_control`` on blocks, ``service_tier``...) are accepted and logged, as the OpenAI routes
do; block types it cannot read (images, documents, server tools) are a 400 naming the block.

Bounds (each a 400 when passed): :data:`MAX_MESSAGES` messages, :data:`MAX_BLOCKS` blocks per
message or system prompt, :data:`MAX_TEXT_CHARS` characters per text, thinking or tool result
block, :data:`MAX_TOOLS` tools with names of at most :data:`MAX_NAME_CHARS` characters and
descriptions of at most :data:`MAX_DESCRIPTION_CHARS`, :data:`MAX_STOP_SEQUENCES` stop sequences
of at most :data:`MAX_STOP_CHARS` characters, ids of at most :data:`MAX_ID_CHARS`; JSON objects
(tool inputs and schemas) nest at most 64 levels. The body as a whole is bounded by the
gateway's request size limit, and the server bounds the prompt by the model's context.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, Discriminator, Field, StringConstraints, Tag, model_validator
from pydantic_core import PydanticCustomError

from gateway.schemas.base import Int32, JsonObject, OpenAIRequestModel, keep_alive_duration

MAX_MESSAGES = 4096
MAX_BLOCKS = 1024
MAX_TEXT_CHARS = 4 * 1024 * 1024
MAX_TOOLS = 128
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 16 * 1024
MAX_STOP_SEQUENCES = 16
MAX_STOP_CHARS = 1024
MAX_ID_CHARS = 256
MAX_USER_ID_CHARS = 256

Text = Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)]
#: Text that must say something: Anthropic refuses empty text blocks, and the server an empty turn.
NonEmptyText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT_CHARS)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]
BlockId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS)]


def _tagged(field: str, *models: type[BaseModel]) -> Any:
    """A union of ``models`` chosen by their ``Literal`` ``field`` (``type`` or ``role``).

    Each member is tagged by its class name, which :mod:`gateway.errors` leaves out of an error's
    field path (a plain discriminated union would name ``messages[0].user``); a value naming
    no member is one 400 listing the accepted values.
    """
    by_value = {
        value: model.__name__ for model in models for value in model.model_fields[field].annotation.__args__
    }
    accepted = ", ".join(repr(value) for value in by_value)

    def pick(data: Any) -> str | None:
        value = data.get(field) if isinstance(data, dict) else getattr(data, field, None)
        return by_value.get(value) if isinstance(value, str) else None

    members = tuple(Annotated[model, Tag(model.__name__)] for model in models)
    return Annotated[
        Union[members],  # noqa: UP007 (a runtime tuple of members)
        Discriminator(
            pick,
            custom_error_type="invalid_union_member",
            custom_error_message=f"{field} must be one of {accepted}",
        ),
    ]


class AnthropicModel(OpenAIRequestModel):
    """A part of an Anthropic request: unknown fields (``cache_control``...) accepted and logged."""


class TextBlock(AnthropicModel):
    """``{"type": "text", "text": str}`` (``citations`` and ``cache_control`` are ignored)."""

    type: Literal["text"]
    text: NonEmptyText


class ToolUseBlock(AnthropicModel):
    """An assistant's earlier tool call: ``{"type": "tool_use", "id", "name", "input": {...}}``."""

    type: Literal["tool_use"]
    id: BlockId
    name: Name
    input: JsonObject = Field(default_factory=dict)


class ToolResultBlock(AnthropicModel):
    """A user's answer to a tool call: ``{"type": "tool_result", "tool_use_id", "content", "is_error"}``.

    ``content`` is a string or a list of text blocks (joined with newlines), or absent (an empty
    result). ``tool_use_id`` must name a ``tool_use`` block of an earlier assistant message.
    """

    type: Literal["tool_result"]
    tool_use_id: BlockId
    content: Text | list[TextBlock] | None = Field(default=None, max_length=MAX_BLOCKS)
    is_error: bool = False

    @property
    def text(self) -> str:
        """The result as one string (text blocks joined with newlines)."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "\n".join(block.text for block in self.content)


class ThinkingBlock(AnthropicModel):
    """An assistant's earlier thinking given back: ``{"type": "thinking", "thinking", "signature"}``.

    The signature is accepted and not checked (this server signs nothing); the thinking goes to
    the model as the turn's ``reasoning_content``.
    """

    type: Literal["thinking"]
    thinking: Text
    signature: Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)] = ""


class RedactedThinkingBlock(AnthropicModel):
    """``{"type": "redacted_thinking", "data"}``: encrypted thinking no model here can read; dropped."""

    type: Literal["redacted_thinking"]
    data: Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)] = ""


UserBlock = _tagged("type", TextBlock, ToolResultBlock)
AssistantBlock = _tagged("type", TextBlock, ToolUseBlock, ThinkingBlock, RedactedThinkingBlock)


class _Turn(AnthropicModel):
    """A turn whose content blocks may only be of the ``blocks`` types (others: a 400 naming the type)."""

    blocks: ClassVar[tuple[str, ...]]

    @model_validator(mode="before")
    @classmethod
    def _known_blocks(cls, data: Any) -> Any:
        content = data.get("content") if isinstance(data, dict) else None
        for block in content if isinstance(content, list) else ():
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(kind, str) and kind not in cls.blocks:
                raise PydanticCustomError(
                    "unsupported_block",
                    "content blocks of type '{kind}' are not supported in {role} messages by this "
                    "server: send {allowed}",
                    {"kind": kind[:64], "role": data.get("role"), "allowed": ", ".join(cls.blocks)},
                )
        return data


class UserMessage(_Turn):
    """A ``user`` turn: a string or a list of ``text`` and ``tool_result`` blocks."""

    blocks = ("text", "tool_result")
    role: Literal["user"]
    content: NonEmptyText | list[UserBlock] = Field(min_length=1, max_length=MAX_BLOCKS)


class AssistantMessage(_Turn):
    """An ``assistant`` turn: a string or a list of ``text``, ``tool_use`` and ``thinking`` blocks."""

    blocks = ("text", "tool_use", "thinking", "redacted_thinking")
    role: Literal["assistant"]
    content: NonEmptyText | list[AssistantBlock] = Field(min_length=1, max_length=MAX_BLOCKS)


MessageParam = _tagged("role", UserMessage, AssistantMessage)


class ToolParam(AnthropicModel):
    """A client tool: ``{"name", "description"?, "input_schema": {JSON Schema}}``.

    ``type`` may be ``"custom"`` or absent; Anthropic's server tools (``bash_...``,
    ``web_search_...``) run on Anthropic's side and are refused.
    """

    type: Literal["custom"] | None = None
    name: Name
    description: Annotated[str, StringConstraints(max_length=MAX_DESCRIPTION_CHARS)] | None = None
    input_schema: JsonObject

    @model_validator(mode="before")
    @classmethod
    def _client_tools_only(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("type") not in (None, "custom"):
            raise PydanticCustomError(
                "unsupported_tool",
                "tools of type '{kind}' (Anthropic server tools) are not supported by this server: "
                "send client tools with name, description and input_schema",
                {"kind": str(data["type"])[:64]},
            )
        return data


class ToolChoiceAuto(AnthropicModel):
    """``{"type": "auto"}``: the model decides whether to call a tool."""

    type: Literal["auto"]
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(AnthropicModel):
    """``{"type": "any"}``: the model must call one of the tools."""

    type: Literal["any"]
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(AnthropicModel):
    """``{"type": "tool", "name"}``: the model must call the named tool."""

    type: Literal["tool"]
    name: Name
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(AnthropicModel):
    """``{"type": "none"}``: the model must not call a tool."""

    type: Literal["none"]


ToolChoice = _tagged("type", ToolChoiceAuto, ToolChoiceAny, ToolChoiceTool, ToolChoiceNone)


class ThinkingEnabled(AnthropicModel):
    """``{"type": "enabled", "budget_tokens": N}``: think for at most N tokens (N >= 1)."""

    type: Literal["enabled"]
    budget_tokens: Annotated[int, Field(ge=1, le=2**31 - 1)]


class ThinkingDisabled(AnthropicModel):
    """``{"type": "disabled"}``: no thinking (budget 0)."""

    type: Literal["disabled"]


class ThinkingAdaptive(AnthropicModel):
    """``{"type": "adaptive"}``: the model decides; here the catalog's default budget."""

    type: Literal["adaptive"]


ThinkingConfig = _tagged("type", ThinkingEnabled, ThinkingDisabled, ThinkingAdaptive)


class Metadata(AnthropicModel):
    """``metadata``: ``user_id`` (an opaque id of the end user; accepted, not used)."""

    user_id: Annotated[str, StringConstraints(max_length=MAX_USER_ID_CHARS)] | None = None


class JsonOutputFormat(AnthropicModel):
    """``output_config.format``: ``{"type": "json_schema", "schema": {...}}``, the answer's JSON Schema.

    The JSON key is ``schema``; the attribute is ``json_schema`` (``schema`` is a pydantic name).
    """

    type: Literal["json_schema"]
    json_schema: JsonObject = Field(alias="schema")


class OutputConfig(AnthropicModel):
    """``output_config``: the effort a reasoning model puts in, and the answer's JSON format.

    Attributes:
        effort: ``low``, ``medium`` or ``high`` map to the catalog's effort budgets; ``xhigh`` and
            ``max`` (Anthropic's levels above high) to the high budget. An explicit
            ``thinking.budget_tokens`` wins.
        format: The JSON Schema the answer must follow (applied to the answer, not the thinking).

    """

    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JsonOutputFormat | None = None


class MessagesPrompt(AnthropicModel):
    """What both routes read: the model, the system prompt, the conversation and the tools.

    Attributes:
        model: Catalog name of the model.
        system: A string or a list of text blocks (joined with newlines).
        messages: The conversation, at least one message.
        tools: Client tools the model may call.
        tool_choice: How the model may use them (``auto`` when tools are given).
        thinking: The thinking budget of a reasoning model.
        keep_alive: How long the model stays loaded after this request (extension, as on the
            OpenAI routes).

    """

    model: Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS)]
    system: Text | list[TextBlock] | None = Field(default=None, max_length=MAX_BLOCKS)
    messages: list[MessageParam] = Field(min_length=1, max_length=MAX_MESSAGES)
    tools: list[ToolParam] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    keep_alive: str | int | None = None

    @model_validator(mode="after")
    def _tool_results_answer_calls(self) -> MessagesPrompt:
        """Every ``tool_result`` names a ``tool_use`` of an earlier assistant message and says something.

        An empty result is refused here, naming the block: the server refuses an empty turn, and
        its error would name the turn's place among the translated messages, not the body's.
        """
        called: set[str] = set()
        for i, message in enumerate(self.messages):
            if isinstance(message.content, str):
                continue
            for j, block in enumerate(message.content):
                if isinstance(block, ToolUseBlock):
                    called.add(block.id)
                elif isinstance(block, ToolResultBlock) and block.tool_use_id not in called:
                    raise PydanticCustomError(
                        "unknown_tool_use_id",
                        "messages[{i}].content[{j}].tool_use_id: '{id}' answers no tool_use block of an "
                        "earlier assistant message",
                        {"i": i, "j": j, "id": block.tool_use_id[:64]},
                    )
                elif isinstance(block, ToolResultBlock) and not block.text:
                    raise PydanticCustomError(
                        "empty_tool_result",
                        "messages[{i}].content[{j}].content: an empty tool_result is not supported by this "
                        "server (its models need the result as text): send what the tool returned, or "
                        "say that it returned nothing",
                        {"i": i, "j": j},
                    )
        return self

    @model_validator(mode="after")
    def _assistant_turns_say_something(self) -> MessagesPrompt:
        """An assistant turn given as blocks has a text or a tool_use (thinking alone is no turn)."""
        for i, message in enumerate(self.messages):
            blocks = [] if isinstance(message.content, str) else message.content
            if (
                message.role == "assistant"
                and blocks
                and all(b.type not in ("text", "tool_use") for b in blocks)
            ):
                raise PydanticCustomError(
                    "empty_turn",
                    "messages[{i}].content: an assistant turn needs a text or tool_use block",
                    {"i": i},
                )
        return self

    @model_validator(mode="after")
    def _named_tool_exists(self) -> MessagesPrompt:
        if isinstance(self.tool_choice, ToolChoiceTool):
            names = {tool.name for tool in self.tools or ()}
            if self.tool_choice.name not in names:
                raise PydanticCustomError(
                    "unknown_tool",
                    "tool_choice.name: '{name}' is not one of the tools",
                    {"name": self.tool_choice.name},
                )
        return self

    @property
    def system_text(self) -> str:
        """The system prompt as one string (``""`` when there is none)."""
        if self.system is None or isinstance(self.system, str):
            return self.system or ""
        return "\n".join(block.text for block in self.system)

    @property
    def keep_alive_value(self) -> str:
        """``keep_alive`` as the server's duration string (``""`` when unset)."""
        return keep_alive_duration(self.keep_alive)


class MessagesRequest(MessagesPrompt):
    """Body of ``POST /v1/messages``.

    Attributes:
        max_tokens: Most tokens to generate (required, as in Anthropic's API; at least 1).
        temperature: Sampling temperature in [0, 1] (Anthropic's range; 0 is greedy).
        top_p: Nucleus sampling mass in [0, 1].
        top_k: Sample from the k most likely tokens only.
        stop_sequences: Strings that end the answer.
        metadata: ``user_id`` (accepted, not used).
        output_config: Effort and JSON output format (:class:`OutputConfig`).
        stream: Answer with Anthropic's server-sent events.

    """

    max_tokens: Annotated[int, Field(ge=1, le=2**31 - 1)]
    temperature: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    top_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    top_k: Annotated[Int32, Field(ge=0)] | None = None
    stop_sequences: (
        list[Annotated[str, StringConstraints(min_length=1, max_length=MAX_STOP_CHARS)]] | None
    ) = Field(default=None, max_length=MAX_STOP_SEQUENCES)
    metadata: Metadata | None = None
    output_config: OutputConfig | None = None
    stream: bool = False

    @model_validator(mode="after")
    def _ends_with_a_user_turn(self) -> MessagesRequest:
        """A last assistant turn (Anthropic's prefill) is refused, as Anthropic does on models without it.

        The server renders every turn closed and opens a new assistant turn, so the answer would
        not continue the prefilled text.
        """
        if self.messages[-1].role == "assistant":
            raise PydanticCustomError(
                "prefill_not_supported",
                "messages[{i}]: the conversation ends with an assistant turn (prefill), which this server "
                "does not continue: end with a user turn",
                {"i": len(self.messages) - 1},
            )
        return self

    @model_validator(mode="after")
    def _budget_below_max_tokens(self) -> MessagesRequest:
        if isinstance(self.thinking, ThinkingEnabled) and self.thinking.budget_tokens >= self.max_tokens:
            raise PydanticCustomError(
                "budget_too_large",
                "thinking.budget_tokens: must be less than max_tokens ({max_tokens}), got {budget}",
                {"max_tokens": self.max_tokens, "budget": self.thinking.budget_tokens},
            )
        return self


class CountTokensRequest(MessagesPrompt):
    """Body of ``POST /v1/messages/count_tokens``: the prompt part of a :class:`MessagesRequest`."""


class AnthropicErrorDetail(BaseModel):
    """Anthropic's error object: its kind and what went wrong."""

    type: str = Field(
        description="invalid_request_error, authentication_error, not_found_error, request_too_large, "
        "rate_limit_error, overloaded_error or api_error."
    )
    message: str = Field(description="What went wrong, for people.")


class AnthropicErrorResponse(BaseModel):
    """``{"type": "error", "error": {"type", "message"}, "request_id"}``: the Messages routes' errors."""

    type: Literal["error"] = "error"
    error: AnthropicErrorDetail
    request_id: str | None = Field(None, description="The request's id (also the x-request-id header).")


_ERROR_STATUSES: dict[int, str] = {
    400: "invalid_request_error: a malformed body, a value out of range, a tool_result without its tool_use.",
    401: "authentication_error: missing or wrong API key (`x-api-key` or `Authorization: Bearer`).",
    404: "not_found_error: unknown model.",
    413: "request_too_large: an input over the model's or the gateway's limit.",
    422: "Not sent: validation errors answer 400 (as Anthropic does); listed for the error schema.",
    429: "rate_limit_error: a limit of the caller was reached.",
    500: "api_error: internal error (details only in the server log, under the request id).",
    503: "api_error: the server is starting, shutting down, or unreachable.",
    504: "api_error: the request's deadline passed before it finished.",
    529: "overloaded_error: the model's queue is full; retry after the `Retry-After` seconds.",
}

#: ``responses=`` of the Messages router: every error status with :class:`AnthropicErrorResponse`.
ANTHROPIC_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": AnthropicErrorResponse, "description": description}
    for status, description in _ERROR_STATUSES.items()
}
