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


@dataclass(slots=True)
class GenerationRequest:
    """A generation job: exactly one of ``prompt`` and ``messages`` is set."""

    request_id: str
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    params: SamplingParams = field(default_factory=SamplingParams)


@dataclass(slots=True)
class GenerationDelta:
    """Output of one generation step: new text, the token ids behind it, and the end reason if done."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    usage: GenerationUsage | None = None  # set on the final delta


@dataclass(slots=True)
class GenerationUsage:
    """Token counts of one generation."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """prompt_tokens + completion_tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class EmbeddingRequest:
    """An embedding job over ``inputs`` (non-empty strings)."""

    inputs: list[str]
    normalize: bool = True
    dimensions: int | None = None
    truncation: Truncation = Truncation.END
    prompt_name: str | None = None
    prompt: str | None = None


@dataclass(slots=True)
class EmbeddingResult:
    """Vectors of shape (len(inputs), dimensions), float32, and the tokens consumed."""

    vectors: np.ndarray
    prompt_tokens: int
