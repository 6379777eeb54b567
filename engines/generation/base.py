"""Base class of generation engines: the async driver that steps sequences on the executor."""

from __future__ import annotations

import abc
import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from engines.base import Engine
from engines.errors import InputTooLongError
from engines.generation.sequence import GenerationSequence
from engines.types import FinishReason, GenerationDelta, GenerationRequest, Task

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FinishedSequence:
    """What a finished sequence did: for statistics and for tests that observe cancellation."""

    request_id: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: FinishReason


class GenerationEngine(Engine):
    """An engine for :attr:`Task.GENERATE`.

    Subclasses implement :meth:`open_sequence` (blocking: template, tokenize, set up sampling)
    and :attr:`context_length`. :meth:`stream` drives a sequence one step per executor job,
    so other work on the same device interleaves between tokens, and a cancelled caller
    stops its sequence at the next step.
    """

    tasks = frozenset({Task.GENERATE})

    #: Sequences that may run at once; engines without batching support one.
    max_concurrent_sequences: int = 1

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._slots = asyncio.Semaphore(self.max_concurrent_sequences)
        self.finished: deque[FinishedSequence] = deque(maxlen=256)

    @property
    @abc.abstractmethod
    def context_length(self) -> int:
        """Tokens the context holds (prompt plus completion)."""

    @abc.abstractmethod
    def open_sequence(self, request: GenerationRequest) -> GenerationSequence:
        """Prepare a sequence for ``request`` (blocking; runs on the executor).

        Raises:
            InputTooLongError: the prompt does not fit the context.
            InvalidArgumentError: the request cannot be templated (e.g. roles the template rejects).

        """

    def check_prompt_length(self, prompt_tokens: int) -> int:
        """Return the tokens left for the completion.

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
        return room

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        """Yield deltas for ``request``; the last has ``finish_reason`` and ``usage`` set.

        Use with ``contextlib.aclosing`` so that a consumer that stops early releases the slot.
        """
        async with self._slots:
            sequence = await self.executor.run(self.open_sequence, request)
            try:
                while sequence.finish_reason is None:
                    delta = await self.executor.run(sequence.step)
                    yield delta
            finally:
                if sequence.finish_reason is None:
                    # Cancelled between steps: no further step runs; release on the worker thread.
                    sequence.finish_reason = FinishReason.CANCELLED
                    self.executor.submit_detached(sequence.close)
                else:
                    self.executor.submit_detached(sequence.close)
                self.finished.append(
                    FinishedSequence(
                        request.request_id,
                        len(sequence.prompt_tokens),
                        len(sequence.completion_tokens),
                        sequence.finish_reason,
                    )
                )
