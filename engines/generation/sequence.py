"""A generation sequence: the state of one request stepping token by token.

The engine-specific part is producing the next token id (:meth:`GenerationSequence.next_token`);
decoding bytes to text, stop sequences, ``max_tokens`` and usage are shared here so every
backend behaves the same.
"""

from __future__ import annotations

import abc
import codecs

from engines.generation.stop_matcher import StopMatcher
from engines.types import FinishReason, GenerationDelta, GenerationUsage, SamplingParams


class GenerationSequence(abc.ABC):
    """One request's generation state. Methods are blocking and run on the device executor.

    Args:
        request_id: id for logs and statistics.
        prompt_tokens: the tokenized prompt.
        params: sampling parameters; ``max_tokens`` already capped to the context left.
        max_new_tokens: the cap on generated tokens (context size minus prompt length, or max_tokens).

    """

    def __init__(
        self, request_id: str, prompt_tokens: list[int], params: SamplingParams, max_new_tokens: int
    ):
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.params = params
        self.max_new_tokens = max_new_tokens
        self.completion_tokens: list[int] = []
        self.finish_reason: FinishReason | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = StopMatcher(params.stop)
        self._length_capped_by_request = params.max_tokens is not None

    @abc.abstractmethod
    def next_token(self) -> int:
        """Run one forward step and sample the next token id."""

    @abc.abstractmethod
    def is_end_of_generation(self, token_id: int) -> bool:
        """Whether ``token_id`` ends generation (EOS or another end-of-generation token)."""

    @abc.abstractmethod
    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token decodes to (without special tokens)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release per-sequence resources (KV cells, samplers); called once when the sequence ends."""

    @property
    def usage(self) -> GenerationUsage:
        """Prompt and completion token counts so far."""
        return GenerationUsage(len(self.prompt_tokens), len(self.completion_tokens))

    def step(self) -> GenerationDelta:
        """Generate one token and return the text that became safe to emit.

        The final delta has ``finish_reason`` and ``usage`` set.
        """
        if self.finish_reason is not None:
            return GenerationDelta(finish_reason=self.finish_reason, usage=self.usage)
        token = self.next_token()
        if self.is_end_of_generation(token):
            return self._finish(FinishReason.STOP, [], self._decoder.decode(b"", final=True))
        self.completion_tokens.append(token)
        text, stopped = self._stops.push(self._decoder.decode(self.token_bytes(token)))
        if stopped:
            return self._finish(FinishReason.STOP, [token], text, flush=False)
        if len(self.completion_tokens) >= self.max_new_tokens:
            return self._finish(FinishReason.LENGTH, [token], text + self._decoder.decode(b"", final=True))
        return GenerationDelta(text=text, token_ids=[token])

    def _finish(
        self, reason: FinishReason, tokens: list[int], text: str, *, flush: bool = True
    ) -> GenerationDelta:
        if flush:
            tail, stopped = self._stops.push(text)
            text = tail if stopped else tail + self._stops.flush()
        self.finish_reason = reason
        return GenerationDelta(text=text, token_ids=tokens, finish_reason=reason, usage=self.usage)

    def cancel(self) -> None:
        """Mark the sequence cancelled (no further steps) and release it."""
        if self.finish_reason is None:
            self.finish_reason = FinishReason.CANCELLED
        self.close()
