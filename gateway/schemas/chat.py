"""Request body of ``POST /v1/chat/completions`` (OpenAI Chat Completions API).

Source of the shapes: https://platform.openai.com/docs/api-reference/chat/create
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Base64Bytes, BeforeValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from gateway.schemas.base import Int32, JsonObject, OpenAIRequestModel
from gateway.schemas.generation import ReasoningBudget, ReasoningEffortName, SamplingRequest

ChatRoleName = Literal["system", "developer", "user", "assistant", "tool"]


#: Content part types a chat message may hold.
CONTENT_PART_TYPES = ("text", "input_audio")


class TextContentPart(OpenAIRequestModel):
    """A ``{"type": "text", "text": ...}`` content part."""

    type: Literal["text"]
    text: str


class InputAudio(OpenAIRequestModel):
    """The audio of an ``input_audio`` part: the file in base64 and its format."""

    data: Base64Bytes
    format: str = Field("wav", max_length=16)


class AudioContentPart(OpenAIRequestModel):
    """An ``{"type": "input_audio", "input_audio": {"data", "format"}}`` part: speech to transcribe."""

    type: Literal["input_audio"]
    input_audio: InputAudio


def _known_part(part: Any) -> Any:
    """Refuse a part of a type no model here reads (``image_url``, ``file``), naming it."""
    kind = part.get("type", "text") if isinstance(part, dict) else "text"
    if kind not in CONTENT_PART_TYPES:
        raise PydanticCustomError(
            "unsupported_content_part",
            "content parts of type '{kind}' are not supported by this server: send text or input_audio parts",
            {"kind": str(kind)[:64]},
        )
    if isinstance(part, dict) and "type" not in part:
        return {**part, "type": "text"}
    return part


ContentPart = Annotated[
    TextContentPart | AudioContentPart, Field(discriminator="type"), BeforeValidator(_known_part)
]


class FunctionCall(OpenAIRequestModel):
    """The function of an assistant tool call: its name and JSON-encoded arguments.

    ``arguments`` is a JSON string in OpenAI's API; an object is accepted too and re-encoded.
    """

    name: str
    arguments: str | JsonObject = ""

    @property
    def arguments_json(self) -> str:
        """Return the arguments as a JSON string."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"), ensure_ascii=False)


class ToolCallParam(OpenAIRequestModel):
    """A tool call made by an earlier assistant message, sent back as conversation history."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessageParam(OpenAIRequestModel):
    """One message of the conversation.

    Attributes:
        role: ``system``, ``developer``, ``user``, ``assistant`` or ``tool``.
        content: A string, a list of text parts (joined with newlines), or null (assistant
            messages that only call tools).
        name: Optional participant name.
        tool_call_id: For ``tool`` messages, the id of the call answered.
        tool_calls: For ``assistant`` messages, the tool calls made.
        reasoning_content: For ``assistant`` messages, the thinking that came before
            ``content`` (the field vLLM, llama.cpp's server and DeepSeek's API return), given
            back so the chat template can render it; on another role it is a 400.

    """

    role: ChatRoleName
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCallParam] | None = None
    reasoning_content: str | None = None

    @model_validator(mode="after")
    def _reasoning_on_assistant_only(self) -> ChatMessageParam:
        if self.reasoning_content and self.role != "assistant":
            raise ValueError(f"reasoning_content is only accepted on assistant messages, not {self.role}")
        return self

    @property
    def text(self) -> str:
        """Return the content as one string; text parts are joined with newlines (as vLLM does).

        Audio parts are left out (see :attr:`has_audio`).
        """
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content if isinstance(part, TextContentPart))

    @property
    def has_audio(self) -> bool:
        """Whether the content has ``input_audio`` parts (sent as content parts to be transcribed)."""
        return isinstance(self.content, list) and any(isinstance(p, AudioContentPart) for p in self.content)


class FunctionDefinition(OpenAIRequestModel):
    """A callable function: name, description and JSON Schema of its arguments object."""

    name: str
    description: str | None = None
    parameters: JsonObject | None = None


class ToolParam(OpenAIRequestModel):
    """An entry of ``tools``; only function tools exist."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(OpenAIRequestModel):
    """The function a named ``tool_choice`` forces."""

    name: str


class NamedToolChoice(OpenAIRequestModel):
    """``tool_choice`` forcing one function: ``{"type": "function", "function": {"name": ...}}``."""

    type: Literal["function"] = "function"
    function: NamedFunction


class JsonSchemaFormat(OpenAIRequestModel):
    """``response_format.json_schema``: the schema the output must follow.

    The JSON key is ``schema``; the attribute is ``json_schema`` because ``schema`` is a reserved
    pydantic name.
    """

    name: str | None = None
    description: str | None = None
    json_schema: JsonObject = Field(alias="schema")
    strict: bool | None = None


class ResponseFormatParam(OpenAIRequestModel):
    """OpenAI ``response_format``: ``text``, ``json_object``, or ``json_schema`` with its schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_present(self) -> ResponseFormatParam:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type json_schema needs a json_schema object")
        return self


class ChatCompletionRequest(SamplingRequest):
    """Body of ``POST /v1/chat/completions``.

    Besides the shared sampling fields: ``messages`` (at least one), ``max_completion_tokens``
    (OpenAI's newer name of ``max_tokens``; the two must agree when both are given),
    ``logprobs`` / ``top_logprobs``, ``response_format``, ``tools`` and ``tool_choice``.

    Reasoning models: ``reasoning_effort`` (OpenAI's levels ``none`` .. ``high``; ``minimal`` is
    ``low``, ``xhigh`` and ``max`` are ``high``; the catalog maps levels to budgets) and an
    explicit thinking budget in tokens, ``reasoning_budget`` (llama.cpp's name) or
    ``thinking_token_budget`` (vLLM's; the two must agree when both are given), 0 to 2**31-1,
    0 turning thinking off. The budget wins over the effort.
    """

    messages: list[ChatMessageParam] = Field(min_length=1)
    max_completion_tokens: Int32 | None = None
    logprobs: bool | None = None
    top_logprobs: Int32 | None = None
    response_format: ResponseFormatParam | None = None
    tools: list[ToolParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    reasoning_effort: ReasoningEffortName | None = None
    reasoning_budget: ReasoningBudget | None = None
    thinking_token_budget: ReasoningBudget | None = None

    @model_validator(mode="after")
    def _aliases_agree(self) -> ChatCompletionRequest:
        # Each pair names one setting two ways (OpenAI's old and new name; llama.cpp's and vLLM's).
        for first, second in (
            ("max_tokens", "max_completion_tokens"),
            ("reasoning_budget", "thinking_token_budget"),
        ):
            one, other = getattr(self, first), getattr(self, second)
            if one is not None and other is not None and one != other:
                raise ValueError(f"{first} and {second} are both set and differ; send one")
        return self

    @property
    def thinking_budget(self) -> int | None:
        """Return the explicit thinking budget in tokens (``reasoning_budget``, else vLLM's name)."""
        return self.reasoning_budget if self.reasoning_budget is not None else self.thinking_token_budget

    @property
    def token_limit(self) -> int | None:
        """Return the generation limit: ``max_completion_tokens``, else ``max_tokens``."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
