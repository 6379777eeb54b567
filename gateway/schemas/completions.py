"""Request body of ``POST /v1/completions`` (OpenAI legacy Completions API).

Source of the shapes: https://platform.openai.com/docs/api-reference/completions/create
"""

from __future__ import annotations

from pydantic import ValidationInfo, field_validator

from gateway.schemas.base import Int32
from gateway.schemas.generation import SamplingRequest

# OpenAI fields the runtime does not implement: accepted only at the values that change nothing,
# so a client relying on them gets a 400 naming the field instead of a silently different answer.
_ACCEPTED_ONLY_AS: dict[str, tuple[tuple[object, ...], str]] = {
    "echo": ((False,), "echo is not supported"),
    "suffix": ((None, ""), "suffix is not supported"),
    "best_of": ((None, 1), "best_of other than 1 is not supported"),
}


class CompletionRequest(SamplingRequest):
    """Body of ``POST /v1/completions``.

    Attributes:
        prompt: The prompt, or a list holding exactly one prompt (one prompt per request).
        logprobs: Return log probabilities with this many alternatives per token (0 to 20);
            0 returns only the sampled tokens' log probabilities.
        echo: Only ``false`` is supported (the prompt is not echoed back).
        suffix: Not supported; must be empty.
        best_of: Only 1 is supported.

    Unlike OpenAI (16), an unset ``max_tokens`` means the server default (until end of
    sequence or context).

    """

    prompt: str | list[str]
    logprobs: Int32 | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("prompt")
    @classmethod
    def _single_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("exactly one prompt per request is supported")
        return value

    @field_validator(*_ACCEPTED_ONLY_AS)
    @classmethod
    def _only_accepted_values(cls, value: object, info: ValidationInfo) -> object:
        accepted, message = _ACCEPTED_ONLY_AS[info.field_name]
        if value not in accepted:
            raise ValueError(message)
        return value

    @property
    def prompt_text(self) -> str:
        """Return the single prompt string."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]
