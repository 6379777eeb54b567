"""A generation sequence: the state of one request as its tokens arrive.

Engines produce token ids (one per step, batched however they like); turning ids into text,
holding back stop sequences and incomplete UTF-8, enforcing ``max_tokens`` and counting usage
are shared here so every backend behaves the same.
"""

from __future__ import annotations

import codecs
from typing import Any, Protocol

from engines.generation.reasoning import SequenceReasoning
from engines.generation.stop_matcher import StopMatcher
from engines.types import (
    FinishReason,
    GenerationDelta,
    GenerationRequest,
    GenerationUsage,
    TokenLogprobs,
)


class TokenVocabulary(Protocol):
    """What a sequence needs to know about the model's vocabulary."""

    def is_end_of_generation(self, token_id: int) -> bool:
        """Whether ``token_id`` ends generation (EOS, EOT, ``<|im_end|>``…)."""

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token decodes to (special tokens decode to nothing)."""


class GenerationSequence:
    """One request's output state.

    Args:
        request: the request (for its id, parameters and output post-processing).
        prompt_tokens: the tokenized prompt.
        max_new_tokens: cap on generated tokens (``max_tokens`` or what the context leaves).
        vocabulary: the model's vocabulary.

    Attributes:
        engine_state: the engine's per-sequence data (KV slot, sampler, position…).
        reasoning: a reasoning model's output split and thinking budget (None: the model does not reason).
        cached_prompt_tokens: prompt tokens the engine took from its prompt cache.
        draft_tokens: speculative decoding's draft tokens verified for this sequence.
        accepted_draft_tokens: of those, the ones the model accepted (they are completion tokens).

    """

    def __init__(
        self,
        request: GenerationRequest,
        prompt_tokens: list[int],
        max_new_tokens: int,
        vocabulary: TokenVocabulary,
    ) -> None:
        self.request = request
        self.request_id = request.request_id
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.completion_tokens: list[int] = []
        self.finish_reason: FinishReason | None = None
        self.engine_state: Any = None
        self.reasoning: SequenceReasoning | None = None  # a reasoning model's split and budget
        self.cached_prompt_tokens = 0
        self.draft_tokens = 0
        self.accepted_draft_tokens = 0
        self._vocabulary = vocabulary
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = StopMatcher(request.params.stop)

    @property
    def kv_cells_needed(self) -> int:
        """KV cells this sequence can ever hold: its prompt plus ``max_new_tokens``.

        Every prompt token takes a cell, and so does every sampled token fed back (at most
        ``max_new_tokens``, the last one possibly by a step queued before it was seen to end).
        Prompt cells reused from a prompt cache are included: they become this sequence's cells.
        """
        return len(self.prompt_tokens) + self.max_new_tokens

    @property
    def usage(self) -> GenerationUsage:
        """Prompt, completion and thinking token counts so far."""
        return GenerationUsage(
            len(self.prompt_tokens),
            len(self.completion_tokens),
            self.cached_prompt_tokens,
            self.reasoning.thinking_tokens if self.reasoning is not None else 0,
            self.draft_tokens,
            self.accepted_draft_tokens,
        )

    def accept(self, token: int, logprobs: TokenLogprobs | None = None) -> GenerationDelta:
        """Take the next generated token; return the text (and thinking) that became safe to emit.

        A reasoning model's thinking goes to ``reasoning``, never to ``text``; stop sequences
        apply to the answer. The final delta has ``finish_reason`` and ``usage`` set.
        """
        if self.finish_reason is not None:
            return GenerationDelta(finish_reason=self.finish_reason, usage=self.usage)
        if self._vocabulary.is_end_of_generation(token):
            return self._finish(FinishReason.STOP, [], "", "", [])
        position = len(self.completion_tokens)
        self.completion_tokens.append(token)
        scored = [logprobs] if logprobs is not None else []
        thinking, answer = self._split(self._decoder.decode(self._vocabulary.token_bytes(token)), position)
        if len(self.completion_tokens) >= self.max_new_tokens:
            return self._finish(FinishReason.LENGTH, [token], thinking, answer, scored)
        text, stopped = self._stops.push(answer)
        if stopped:
            self.finish_reason = FinishReason.STOP
            return GenerationDelta(
                text=text,
                reasoning=thinking,
                token_ids=[token],
                finish_reason=self.finish_reason,
                usage=self.usage,
                logprobs=scored,
                stop_sequence=self._stops.matched or "",
            )
        return GenerationDelta(text=text, reasoning=thinking, token_ids=[token], logprobs=scored)

    def _split(self, text: str, position: int) -> tuple[str, str]:
        """(thinking, answer) of completion token ``position``'s text; all answer without reasoning."""
        if self.reasoning is None:
            return "", text
        return self.reasoning.split(text, position)

    def _finish(
        self,
        reason: FinishReason,
        tokens: list[int],
        thinking: str,
        answer: str,
        logprobs: list[TokenLogprobs],
    ) -> GenerationDelta:
        """The last delta: ``answer`` (not yet stop-matched) and everything held back, flushed."""
        tail = self._decoder.decode(b"", final=True)
        held_thinking, held = self.reasoning.flush(tail) if self.reasoning is not None else ("", tail)
        text, stopped = self._stops.push(answer + held)
        if not stopped:
            text += self._stops.flush()
        self.finish_reason = reason
        return GenerationDelta(
            text=text,
            reasoning=thinking + held_thinking,
            token_ids=tokens,
            finish_reason=reason,
            usage=self.usage,
            logprobs=logprobs,
            stop_sequence=self._stops.matched or "",
        )

    def cancel(self) -> None:
        """Mark the sequence cancelled; no further tokens are taken."""
        if self.finish_reason is None:
            self.finish_reason = FinishReason.CANCELLED
