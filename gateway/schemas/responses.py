"""Request body of ``POST /v1/responses`` (OpenAI Responses API).

Source of the shapes: https://platform.openai.com/docs/api-reference/responses/create and the
openai Python SDK's ``openai.types.responses`` (``ResponseInputItemParam``, ``FunctionToolParam``,
``ResponseTextConfigParam``).

Bounds (each a 400 with the field's path when exceeded): at most :data:`MAX_INPUT_ITEMS` input
items, :data:`MAX_CONTENT_PARTS` content parts per message, :data:`MAX_TOOLS` tools, OpenAI's
metadata limits (:data:`MAX_METADATA_PAIRS` pairs, keys of :data:`MAX_METADATA_KEY_CHARS`
characters, values of :data:`MAX_METADATA_VALUE_CHARS`), names and ids of :data:`MAX_NAME_CHARS`
and :data:`MAX_ID_CHARS` characters. Texts (messages, instructions, tool arguments and outputs)
are bounded by the HTTP body limit (``max_message_bytes``) and then by the model's context, which
the server checks (a conversation over it is refused with ``context_length_exceeded``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Discriminator, Field, Tag, model_validator
from pydantic_core import PydanticCustomError

from gateway.schemas.base import Int32, JsonObject, OpenAIRequestModel, keep_alive_duration
from gateway.schemas.chat import JsonSchemaFormat
from gateway.schemas.generation import ReasoningEffortName

MAX_INPUT_ITEMS = 1024
"""Most items of ``input`` (messages, function calls and their outputs, reasoning items)."""

MAX_CONTENT_PARTS = 256
"""Most content parts of one message or one function call output."""

MAX_TOOLS = 128
"""Most entries of ``tools`` (OpenAI's own limit for function tools)."""

MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
MAX_NAME_CHARS = 64
"""Longest function name (OpenAI's limit; it also allows only ``[a-zA-Z0-9_-]``)."""

MAX_ID_CHARS = 256
"""Longest id of an item, a call or a previous response, and of ``user``."""

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=r"^[A-Za-z0-9_.:-]+$")]
ItemId = Annotated[str, Field(max_length=MAX_ID_CHARS)]
ItemStatus = Literal["in_progress", "completed", "incomplete"]
CallId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]

InputRole = Literal["user", "system", "developer", "assistant"]

# Part types that carry text: ``input_text`` from the user, ``output_text`` when an earlier
# answer is given back as an assistant message (the SDKs send output items back as they got them).
_TEXT_PART_TYPES = ("input_text", "output_text", "text")


class TextPart(OpenAIRequestModel):
    """A text content part: ``{"type": "input_text" | "output_text", "text": ...}``.

    ``annotations`` and ``logprobs`` of an ``output_text`` given back are accepted and not used.
    Other part types (``input_image``, ``input_file``, ``input_audio``, ``refusal``) are a 400
    naming the type: no model this server runs reads them.
    """

    type: Literal["input_text", "output_text", "text"]
    text: str
    annotations: Annotated[list[Any], Field(max_length=MAX_CONTENT_PARTS)] | None = None
    logprobs: list[Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _text_parts_only(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("type") not in _TEXT_PART_TYPES:
            kind = str(data.get("type"))[:64]
            raise PydanticCustomError(
                "unsupported_content_part",
                "content parts of type '{kind}' are not supported by this server: send input_text parts",
                {"kind": kind},
            )
        return data


TextContent = str | Annotated[list[TextPart], Field(max_length=MAX_CONTENT_PARTS)]


def _joined(content: TextContent) -> str:
    """The text of a string or a list of text parts, parts joined with newlines (as chat does)."""
    return content if isinstance(content, str) else "\n".join(part.text for part in content)


class MessageItem(OpenAIRequestModel):
    """An input message: ``{"type"?: "message", "role", "content"}``.

    ``content`` is a string or text parts; ``id`` and ``status`` of a message given back are
    accepted and not used.
    """

    type: Literal["message"] = "message"
    role: InputRole
    content: TextContent
    id: ItemId | None = None
    status: ItemStatus | None = None

    @property
    def text(self) -> str:
        """The content as one string."""
        return _joined(self.content)


class FunctionCallItem(OpenAIRequestModel):
    """A function call the model made earlier: ``{"type": "function_call", "call_id", "name", "arguments"}``.

    ``arguments`` is the JSON-encoded arguments object, as the model produced it.
    """

    type: Literal["function_call"]
    call_id: CallId
    name: Name
    arguments: str
    id: ItemId | None = None
    status: ItemStatus | None = None


class FunctionCallOutputItem(OpenAIRequestModel):
    """The result of a function call: ``{"type": "function_call_output", "call_id", "output"}``.

    ``call_id`` must answer a ``function_call`` earlier in the conversation (a 400 otherwise).
    """

    type: Literal["function_call_output"]
    call_id: CallId
    output: TextContent
    id: ItemId | None = None
    status: ItemStatus | None = None

    @property
    def text(self) -> str:
        """The output as one string."""
        return _joined(self.output)


class ReasoningText(OpenAIRequestModel):
    """A part of a reasoning item's ``content`` (``reasoning_text``) or ``summary`` (``summary_text``)."""

    type: Literal["reasoning_text", "summary_text"]
    text: str


class ReasoningItem(OpenAIRequestModel):
    """The model's earlier thinking given back: ``{"type": "reasoning", "id", "summary", "content"?}``.

    Its text (``content``, else ``summary``) becomes the next assistant turn's
    ``reasoning_content``; ``encrypted_content`` (OpenAI's opaque form) is not understood and
    is ignored.
    """

    type: Literal["reasoning"]
    id: ItemId | None = None
    summary: Annotated[list[ReasoningText], Field(max_length=MAX_CONTENT_PARTS)] = []
    content: Annotated[list[ReasoningText], Field(max_length=MAX_CONTENT_PARTS)] | None = None
    encrypted_content: str | None = None
    status: ItemStatus | None = None

    @property
    def text(self) -> str:
        """The thinking as one string (``content`` parts, else the summary's)."""
        parts = self.content if self.content else self.summary
        return "\n".join(part.text for part in parts)


def _type_tag(default: str | None, tags: dict[str, str]) -> Any:
    """A discriminator reading ``type`` (``default`` when absent) and naming its member's tag.

    Tags are class names: error locations then read ``input[0].content``, not
    ``input[0].message.content`` (:mod:`gateway.errors` leaves capitalized union tags out).
    """

    def tag(value: Any) -> str | None:
        kind = value.get("type", default) if isinstance(value, dict) else getattr(value, "type", None)
        return tags.get(kind) if isinstance(kind, str) else None

    return tag


InputItem = Annotated[
    Annotated[MessageItem, Tag("MessageItem")]
    | Annotated[FunctionCallItem, Tag("FunctionCallItem")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutputItem")]
    | Annotated[ReasoningItem, Tag("ReasoningItem")],
    Discriminator(
        # A message may leave out "type" (OpenAI's EasyInputMessage); an unknown type matches no tag.
        _type_tag(
            "message",
            {
                "message": "MessageItem",
                "function_call": "FunctionCallItem",
                "function_call_output": "FunctionCallOutputItem",
                "reasoning": "ReasoningItem",
            },
        ),
        custom_error_type="invalid_item_type",
        custom_error_message=(
            "input items must be of type message, function_call, function_call_output or reasoning"
        ),
    ),
]
"""One item of ``input``, chosen by its ``type`` (``message`` when absent)."""


class FunctionToolParam(OpenAIRequestModel):
    """A function tool in Responses' flat shape.

    ``{"type": "function", "name", "description"?, "parameters"?, "strict"?}``.

    Other tool types (``web_search``, ``file_search``, ``computer_use`` ...) are hosted by OpenAI
    and are a 400 here.
    """

    type: Literal["function"]
    name: Name
    description: str | None = None
    parameters: JsonObject | None = None
    strict: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _function_tools_only(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("type") != "function":
            kind = str(data.get("type"))[:64]
            raise PydanticCustomError(
                "unsupported_tool",
                "tools of type '{kind}' are not supported by this server: send function tools",
                {"kind": kind},
            )
        return data


class FunctionToolChoice(OpenAIRequestModel):
    """``tool_choice`` forcing one function: ``{"type": "function", "name"}``."""

    type: Literal["function"]
    name: Name


class TextFormatText(OpenAIRequestModel):
    """``text.format`` of plain text (the default)."""

    type: Literal["text"]


class TextFormatJsonObject(OpenAIRequestModel):
    """``text.format`` asking for any JSON object."""

    type: Literal["json_object"]


class TextFormatJsonSchema(JsonSchemaFormat):
    """``text.format`` asking for JSON that follows ``schema``.

    ``{"type": "json_schema", "name", "schema", "description"?, "strict"?}``.

    Unlike chat's ``response_format``, the fields sit on the format itself and ``name`` is required.
    """

    type: Literal["json_schema"]
    name: Name  # type: ignore[assignment]


TextFormat = Annotated[
    Annotated[TextFormatText, Tag("TextFormatText")]
    | Annotated[TextFormatJsonObject, Tag("TextFormatJsonObject")]
    | Annotated[TextFormatJsonSchema, Tag("TextFormatJsonSchema")],
    Discriminator(
        _type_tag(
            None,
            {
                "text": "TextFormatText",
                "json_object": "TextFormatJsonObject",
                "json_schema": "TextFormatJsonSchema",
            },
        ),
        custom_error_type="invalid_format_type",
        custom_error_message="text.format must be of type text, json_object or json_schema",
    ),
]


class TextConfig(OpenAIRequestModel):
    """``text``: the answer's ``format``; ``verbosity`` is accepted and has no effect here."""

    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(OpenAIRequestModel):
    """``reasoning``: ``effort`` maps to the contract's ``reasoning_effort`` (budgets from the catalog).

    ``summary`` is accepted; the model's thinking is returned whole, as ``reasoning_text``
    content, never summarized.
    """

    effort: ReasoningEffortName | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


def _bounded_metadata(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_METADATA_PAIRS:
        raise ValueError(f"at most {MAX_METADATA_PAIRS} metadata pairs, got {len(value)}")
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise ValueError(f"metadata keys are at most {MAX_METADATA_KEY_CHARS} characters")
        if len(item) > MAX_METADATA_VALUE_CHARS:
            raise ValueError(f"metadata values are at most {MAX_METADATA_VALUE_CHARS} characters")
    return value


Metadata = Annotated[dict[str, str], AfterValidator(_bounded_metadata)]
"""OpenAI's ``metadata``: at most 16 pairs, keys of 64 characters, values of 512."""


class ResponseRequest(OpenAIRequestModel):
    """Body of ``POST /v1/responses``.

    Attributes:
        model: Catalog name of the model.
        input: A string (one user message) or a list of items (see :data:`InputItem`), 1 to
            :data:`MAX_INPUT_ITEMS`.
        instructions: A system message put first (not carried to a later response that names
            this one as ``previous_response_id``, as in OpenAI's API).
        max_output_tokens: Most tokens to generate, thinking included.
        temperature: Sampling temperature, 0 means greedy.
        top_p: Nucleus sampling mass.
        tools: Function tools, at most :data:`MAX_TOOLS`.
        tool_choice: ``auto``, ``none``, ``required`` or ``{"type": "function", "name"}``.
        parallel_tool_calls: Whether the model may call several tools in one turn (echoed; the
            server's tool parser decides).
        text: The answer's format (``text``, ``json_object``, ``json_schema``).
        reasoning: ``effort`` of a reasoning model.
        metadata: Up to 16 string pairs kept with the response (keys 64, values 512 characters).
        user: The end user's id (echoed).
        store: Keep the response so that it can be fetched and chained (default true, as OpenAI).
        previous_response_id: Continue the conversation of a stored response.
        truncation: Only ``disabled``: a conversation over the context is refused, never cut.
        include: Extra output OpenAI can add (``reasoning.encrypted_content``, logprobs, hosted
            tools' results). The Agents SDK sends it, often empty; what it names is not produced
            (reasoning comes back whole as ``reasoning_text``, which needs no encrypted copy),
            and the route logs a non-empty list as not served.
        stream: Answer with typed server-sent events.
        keep_alive: How long the model stays loaded after this request (extension, as chat's).

    """

    model: str
    input: str | Annotated[list[InputItem], Field(min_length=1, max_length=MAX_INPUT_ITEMS)]
    instructions: str | None = None
    max_output_tokens: Annotated[Int32, Field(ge=1)] | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: Annotated[list[FunctionToolParam], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | FunctionToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    metadata: Metadata | None = None
    user: ItemId | None = None
    store: bool = True
    previous_response_id: ItemId | None = None
    truncation: Literal["disabled"] | None = None
    include: (
        Annotated[list[Annotated[str, Field(max_length=MAX_NAME_CHARS)]], Field(max_length=MAX_TOOLS)] | None
    ) = None
    stream: bool = False
    keep_alive: str | int | None = None

    @model_validator(mode="after")
    def _check(self) -> ResponseRequest:
        choice = self.tool_choice
        if isinstance(choice, FunctionToolChoice) and choice.name not in {t.name for t in self.tools or ()}:
            raise ValueError(f"tool_choice names function '{choice.name}', which is not in tools")
        return self

    @property
    def input_items(self) -> list[MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem]:
        """``input`` as items: a string is one user message."""
        if isinstance(self.input, str):
            return [MessageItem(role="user", content=self.input)]
        return list(self.input)

    @property
    def keep_alive_value(self) -> str:
        """``keep_alive`` as the server's duration string (``""`` when unset)."""
        return keep_alive_duration(self.keep_alive)

    @property
    def format_json(self) -> dict[str, Any]:
        """``text`` as the response echoes it: ``{"format": {...}}`` (``{"type": "text"}`` by default)."""
        fmt = self.text.format if self.text is not None else None
        if fmt is None:
            return {"format": {"type": "text"}}
        return {"format": json.loads(fmt.model_dump_json(by_alias=True, exclude_none=True))}
