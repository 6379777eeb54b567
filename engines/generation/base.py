"""Base class of generation engines: prepare, step and release, driven by the scheduler."""

from __future__ import annotations

import abc
import logging
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from engines.base import Engine
from engines.errors import InputTooLongError
from engines.generation.scheduler import ContinuousBatchScheduler
from engines.generation.sequence import GenerationSequence
from engines.generation.structured import output_postprocessor
from engines.types import FinishReason, GenerationDelta, GenerationRequest, Task, TokenLogprobs

log = logging.getLogger(__name__)

#: (sequence, next token id, its log probabilities or None) for each sequence that produced a token.
StepResult = tuple[GenerationSequence, int, TokenLogprobs | None]


@dataclass(frozen=True, slots=True)
class FinishedSequence:
    """What a finished sequence did: for statistics and for tests that observe cancellation."""

    request_id: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: FinishReason


class GenerationEngine(Engine):
    """An engine for :attr:`Task.GENERATE` with continuous batching.

    Subclasses implement three blocking methods, all called on the device executor:
    :meth:`prepare` (template, tokenize, per-sequence sampling state), :meth:`step` (one
    forward pass over every running sequence, returning the next token of each), and
    :meth:`release` (free a sequence's KV cells). :meth:`stream` is the async entry point.

    Catalog options read here: ``max_sequences`` (sequences batched together, default 8) and
    ``max_waiting`` (requests queued for a slot, default 64).
    """

    tasks = frozenset({Task.GENERATE})

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.finished: deque[FinishedSequence] = deque(maxlen=256)
        self.scheduler = ContinuousBatchScheduler(
            self, max_sequences=self.max_sequences, max_waiting=int(self.option("max_waiting", 64))
        )

    @property
    def max_sequences(self) -> int:
        """Sequences decoded together in one step."""
        return int(self.option("max_sequences", 8))

    @property
    @abc.abstractmethod
    def context_length(self) -> int:
        """Tokens one sequence can hold (prompt plus completion)."""

    @abc.abstractmethod
    def prepare(self, request: GenerationRequest) -> GenerationSequence:
        """Build the sequence for ``request`` (blocking).

        Raises:
            InputTooLongError: the prompt does not fit the context.
            InvalidArgumentError: the request cannot be templated or constrained.

        """

    @abc.abstractmethod
    def step(self, running: list[GenerationSequence], released: list[GenerationSequence]) -> list[StepResult]:
        """Free ``released``, then advance every sequence of ``running`` by one forward pass (blocking)."""

    @abc.abstractmethod
    def release(self, sequences: list[GenerationSequence]) -> None:
        """Free the KV cells and sampling state of ``sequences`` (blocking; idempotent)."""

    def max_new_tokens(self, request: GenerationRequest, prompt_tokens: int) -> int:
        """Tokens the completion may have: ``max_tokens`` capped by the room left in the context.

        Raises:
            InputTooLongError: the prompt leaves no room (message states both lengths).

        """
        room = self.context_length - prompt_tokens
        if room <= 0:
            raise InputTooLongError(
                f"prompt is {prompt_tokens} tokens but the context of model {self.spec.name!r} "
                f"holds {self.context_length} tokens",
                prompt_tokens=prompt_tokens,
                context_length=self.context_length,
            )
        return min(room, request.params.max_tokens or room)

    def record_finished(self, sequence: GenerationSequence) -> None:
        """Note a sequence that left the batch."""
        self.finished.append(
            FinishedSequence(
                sequence.request_id,
                len(sequence.prompt_tokens),
                len(sequence.completion_tokens),
                sequence.finish_reason or FinishReason.CANCELLED,
            )
        )

    def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        """Yield deltas for ``request``; the last has ``finish_reason`` and ``usage`` set.

        Use with ``contextlib.aclosing`` so that a consumer that stops early frees its slot.
        """
        return self.scheduler.stream(request, output_postprocessor(request))
