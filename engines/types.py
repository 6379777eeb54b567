"""Plain dataclasses that engines take and return; the service converts protobuf to and from them."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np


class Task(enum.StrEnum):
    """Tasks a model can serve; values are the catalog's spelling."""

    GENERATE = "generate"
    EMBED = "embed"
    CLASSIFY = "classify"
    EXTRACT_ENTITIES = "extract_entities"
    RERANK = "rerank"
    OCR = "ocr"
    LAYOUT = "layout"
    DOCUMENT_QA = "document_qa"
    EXTRACT_FIELDS = "extract_fields"
    CLASSIFY_DOCUMENT = "classify_document"
    TRANSCRIBE = "transcribe"
    SYNTHESIZE_SPEECH = "synthesize_speech"
    GENERATE_IMAGE = "generate_image"


class FinishReason(enum.StrEnum):
    """Why a generated sequence ended (OpenAI ``finish_reason`` values plus ``cancelled``)."""

    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CANCELLED = "cancelled"


class Truncation(enum.StrEnum):
    """What to do with an input longer than the model's maximum sequence length."""

    ERROR = "error"
    END = "end"  # keep the first tokens
    START = "start"  # keep the last tokens


@dataclass(frozen=True, slots=True)
class MemoryUsage:
    """Memory held by a loaded model, in bytes."""

    ram_bytes: int = 0
    vram_bytes: int = 0


@dataclass(slots=True)
class ChatMessage:
    """One chat turn; ``role`` is an OpenAI role string (system, user, assistant, tool, developer)."""

    role: str
    content: str
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict] = field(default_factory=list)
    reasoning_content: str = ""  # an assistant turn's thinking, given back (see engines.generation.reasoning)


@dataclass(slots=True)
class SamplingParams:
    """Sampling options; ``None`` means the engine default. Ranges are validated by the service."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    logprobs: bool = False
    top_logprobs: int = 0
    logit_bias: dict[int, float] = field(default_factory=dict)


class ResponseFormatKind(enum.StrEnum):
    """Output constraint kinds (OpenAI ``response_format.type``)."""

    TEXT = "text"
    JSON_OBJECT = "json_object"
    JSON_SCHEMA = "json_schema"


@dataclass(slots=True)
class ResponseFormat:
    """Output constraint; ``json_schema`` is the parsed schema for JSON_SCHEMA."""

    kind: ResponseFormatKind = ResponseFormatKind.TEXT
    json_schema: dict | None = None


@dataclass(slots=True)
class ToolSpec:
    """A function the model may call (OpenAI ``tools[].function``); ``parameters`` is a JSON Schema."""

    name: str
    description: str = ""
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolChoiceMode(enum.StrEnum):
    """OpenAI ``tool_choice`` modes."""

    AUTO = "auto"
    NONE = "none"
    REQUIRED = "required"
    FUNCTION = "function"


@dataclass(slots=True)
class ToolCall:
    """A parsed tool call; ``arguments_json`` is a JSON object serialized to a string."""

    id: str
    name: str
    arguments_json: str


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """Natural-log probability of one token id (``token`` is its decoded text)."""

    token_id: int
    token: str
    logprob: float


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """The sampled token's log probability and the most likely alternatives, most likely first."""

    sampled: TokenLogprob
    top: tuple[TokenLogprob, ...] = ()


class ReasoningEffort(enum.StrEnum):
    """How long a reasoning model may think (OpenAI ``reasoning_effort``); the catalog gives each a budget."""

    NONE = "none"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


@dataclass(slots=True)
class GenerationRequest:
    """A generation job: exactly one of ``prompt`` and ``messages`` is set.

    ``reasoning_budget`` (tokens inside the think block, 0: thinking off) wins over
    ``reasoning_effort``; both None: the model's catalog default. Models that do not reason ignore them.
    """

    request_id: str
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    response_format: ResponseFormat = field(default_factory=ResponseFormat)
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: ToolChoiceMode = ToolChoiceMode.AUTO
    tool_choice_function: str | None = None
    reasoning_budget: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    speculative_enabled: bool | None = None  # speculative decoding on/off; None: the model's catalog setting
    speculative_tokens: int = 0  # draft tokens per step (1..16); 0: the model's catalog setting


#: Draft tokens one sequence may propose per speculative decoding step (each is one more row of the
#: verifying batch): the bound of a request's ``speculative_tokens`` and the catalog's ``num_tokens``.
MAX_DRAFT_TOKENS = 16


@dataclass(slots=True)
class GenerationDelta:
    """Output of one generation step: new text, the token ids behind it, and the end reason if done.

    ``reasoning`` is new thinking of a reasoning model (never part of ``text``).
    """

    text: str = ""
    reasoning: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    usage: GenerationUsage | None = None  # set on the final delta
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    stop_sequence: str = ""  # on the final delta: the stop sequence that ended it, if one did


@dataclass(slots=True)
class ToolCallDelta:
    """A streamed piece of a tool call: ``id`` and ``name`` on the first piece, then argument text."""

    index: int
    id: str = ""
    name: str = ""
    arguments_delta: str = ""


@dataclass(slots=True)
class GenerationUsage:
    """Token counts of one generation."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0  # of prompt_tokens, served from the prompt cache
    reasoning_tokens: int = 0  # of completion_tokens, spent thinking (forced closing tokens excluded)
    draft_tokens: int = 0  # speculative decoding: draft tokens proposed and verified
    accepted_draft_tokens: int = 0  # of draft_tokens, accepted by the model (part of completion_tokens)

    @property
    def total_tokens(self) -> int:
        """prompt_tokens + completion_tokens."""
        return self.prompt_tokens + self.completion_tokens


class EmbeddingEncoding(enum.StrEnum):
    """How vectors are returned; values are sentence-transformers' ``quantize_embeddings`` precisions."""

    FLOAT = "float32"
    INT8 = "int8"
    UINT8 = "uint8"
    BINARY = "binary"
    UBINARY = "ubinary"


@dataclass(slots=True)
class EmbeddingRequest:
    """An embedding job over ``inputs`` (non-empty strings)."""

    inputs: list[str]
    normalize: bool = True
    dimensions: int | None = None
    truncation: Truncation = Truncation.END
    prompt_name: str | None = None
    prompt: str | None = None
    encoding: EmbeddingEncoding = EmbeddingEncoding.FLOAT


@dataclass(slots=True)
class EmbeddingResult:
    """Vectors of shape (len(inputs), dimensions), float32, and the tokens consumed.

    ``quantized`` is set for an encoding other than FLOAT: shape (len(inputs), dimensions) int8
    or uint8 for INT8/UINT8, (len(inputs), ceil(dimensions / 8)) for BINARY/UBINARY.
    """

    vectors: np.ndarray
    prompt_tokens: int
    quantized: np.ndarray | None = None
    encoding: EmbeddingEncoding = EmbeddingEncoding.FLOAT


@dataclass(slots=True)
class TokenizeRequest:
    """A tokenize job: exactly one of ``prompt`` and ``messages`` is set.

    Attributes:
        prompt: text tokenized as it is.
        messages: a conversation rendered with the model's chat template first.
        add_special_tokens: add the tokenizer's special tokens; None: as the model's own calls do
            (a raw prompt gets them; templated text only what the template writes).
        add_generation_prompt: with messages, end with the assistant turn's opening.
        return_token_strings: fill :attr:`TokenizeResult.token_strings`.
        return_offsets: fill :attr:`TokenizeResult.offsets`.
        tools, tool_choice, tool_choice_function, reasoning_budget, reasoning_effort: as
            :class:`GenerationRequest`'s, which shape the prompt a generation model renders (tools
            written into it; thinking off closes a think block; a forced tool call with thinking
            on opens one). Models that do not render a chat prompt ignore them.

    """

    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    return_token_strings: bool = False
    return_offsets: bool = False
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: ToolChoiceMode = ToolChoiceMode.AUTO
    tool_choice_function: str | None = None
    reasoning_budget: int | None = None
    reasoning_effort: ReasoningEffort | None = None


@dataclass(slots=True)
class TokenizeResult:
    """Token ids of a text and what was asked with them.

    Attributes:
        token_ids: ids in order.
        max_context_tokens: the model's longest input in tokens.
        token_strings: vocabulary string per id (when asked).
        offsets: ``(start, end)`` character span per id in the tokenized text (when asked).
        rendered_prompt: with messages, the text the chat template rendered.

    """

    token_ids: list[int]
    max_context_tokens: int
    token_strings: list[str] = field(default_factory=list)
    offsets: list[tuple[int, int]] = field(default_factory=list)
    rendered_prompt: str | None = None


@dataclass(slots=True)
class DetokenizeRequest:
    """A detokenize job: token ids (unchecked) and whether special tokens are left out of the text."""

    token_ids: list[int]
    skip_special_tokens: bool = False
