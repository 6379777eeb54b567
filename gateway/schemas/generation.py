"""Request fields shared by chat completions and legacy completions (OpenAI sampling options)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from gateway.schemas.base import Int32, Int64, OpenAIRequestModel, keep_alive_duration

#: OpenAI's ``reasoning_effort`` values (openai SDK ``ReasoningEffort``: ``none`` to ``max``).
ReasoningEffortName = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]

#: A thinking budget in tokens: 0 (thinking off) up to the contract's int32 bound.
ReasoningBudget = Annotated[int, Field(ge=0, le=2**31 - 1)]


class StreamOptions(OpenAIRequestModel):
    """OpenAI ``stream_options``.

    Attributes:
        include_usage: Send a last chunk with empty ``choices`` and the token ``usage``.

    """

    include_usage: bool = False


class SamplingRequest(OpenAIRequestModel):
    """Fields common to ``/v1/chat/completions`` and ``/v1/completions``.

    Unset (``None``) options are not sent, so the server applies its defaults. Ranges are checked
    by the server, which answers INVALID_ARGUMENT (HTTP 400) naming the field.

    Attributes:
        model: Catalog name of the model.
        max_tokens: Maximum number of tokens to generate.
        temperature: Sampling temperature, 0 means greedy.
        top_p: Nucleus sampling mass.
        top_k: Keep the k most likely tokens (extension, as in vLLM / llama.cpp).
        min_p: Minimum probability relative to the top token (extension).
        repetition_penalty: Multiplicative repeat penalty (extension).
        presence_penalty: OpenAI presence penalty.
        frequency_penalty: OpenAI frequency penalty.
        seed: Random seed for reproducible sampling.
        stop: One stop string or a list of them.
        n: Number of choices.
        logit_bias: Map of token id (a decimal string, as JSON object keys are strings) to a bias.
        stream: Answer with server-sent events.
        stream_options: Streaming options.
        keep_alive: How long the model stays loaded after this request: a Go-style duration
            (``"5m"``), ``"0"`` (unload when idle) or ``"-1"`` (never); an integer counts seconds
            (Ollama's convention).

    """

    model: str
    max_tokens: Int32 | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: Int32 | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: Int64 | None = None
    stop: str | list[str] | None = None
    n: Int32 | None = None
    # Keys arrive as JSON strings; pydantic parses them as ints and rejects non-numeric ones.
    logit_bias: dict[Int32, float] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    keep_alive: str | int | None = None

    @property
    def stop_list(self) -> list[str]:
        """Return ``stop`` as a list (a single string becomes a one-element list)."""
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def keep_alive_value(self) -> str:
        """Return ``keep_alive`` as the server's duration string (``""`` when unset)."""
        return keep_alive_duration(self.keep_alive)

    @property
    def include_usage(self) -> bool:
        """Whether a streamed answer ends with a usage chunk."""
        return self.stream_options is not None and self.stream_options.include_usage
