"""Continuous batching: sequences join the running batch at the next step and leave when done.

One scheduler per generation engine. Its loop runs one engine step per executor job: every
active sequence advances by one token (or by a chunk of its prompt while it is prefilling) in
a single forward pass. Requests that arrive while the batch is full wait in a bounded queue;
a sequence whose caller went away (cancel, deadline, closed connection) is dropped before the
next step and its KV cells are freed in that step's job.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engines.errors import ResourceExhaustedError
from engines.generation.sequence import GenerationSequence
from engines.types import GenerationDelta, GenerationRequest

if TYPE_CHECKING:
    from engines.generation.base import GenerationEngine

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Entry:
    sequence: GenerationSequence
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    postprocess: Callable[[GenerationDelta], GenerationDelta] | None = None


class ContinuousBatchScheduler:
    """Runs up to ``max_sequences`` sequences of one engine together.

    Args:
        engine: the engine whose blocking ``prepare``/``step`` run on its executor.
        max_sequences: sequences decoded together (the engine's KV slots).
        max_waiting: requests allowed to wait for a slot; more answer RESOURCE_EXHAUSTED.

    """

    def __init__(self, engine: GenerationEngine, *, max_sequences: int, max_waiting: int) -> None:
        self._engine = engine
        self._max_sequences = max_sequences
        self._max_waiting = max_waiting
        self._waiting: collections.deque[_Entry] = collections.deque()
        self._active: list[_Entry] = []
        self._task: asyncio.Task[None] | None = None
        self.batch_sizes: collections.deque[int] = collections.deque(maxlen=4096)

    @property
    def active_count(self) -> int:
        """Sequences in the running batch."""
        return len(self._active)

    async def stream(
        self,
        request: GenerationRequest,
        postprocess: Callable[[GenerationDelta], GenerationDelta] | None = None,
    ) -> AsyncIterator[GenerationDelta]:
        """Yield the deltas of ``request``; the last has ``finish_reason`` and ``usage``.

        Raises:
            ResourceExhaustedError: the wait queue is full (reason OVERLOADED).
            InputTooLongError, InvalidArgumentError: from the engine's ``prepare``.
            Exception: an engine step failed (every sequence of that step gets the error).

        """
        if len(self._waiting) >= self._max_waiting:
            raise ResourceExhaustedError(
                f"generation queue of model {self._engine.spec.name!r} is full "
                f"({self._max_waiting} waiting, {self._max_sequences} running)",
                model=self._engine.spec.name,
                max_waiting=self._max_waiting,
            )
        sequence = await self._engine.executor.run(self._engine.prepare, request)
        entry = _Entry(sequence, postprocess=postprocess)
        self._waiting.append(entry)
        self._ensure_loop()
        try:
            while True:
                item = await entry.queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    return
        finally:
            if sequence.finish_reason is None:
                # The caller went away: the loop drops the sequence before its next step.
                sequence.cancel()
                if entry in self._waiting:
                    self._waiting.remove(entry)
                    self._engine.record_finished(sequence)

    def _ensure_loop(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name=f"scheduler-{self._engine.spec.name}")

    async def _loop(self) -> None:
        while self._active or self._waiting:
            while self._waiting and len(self._active) < self._max_sequences:
                self._active.append(self._waiting.popleft())
            leaving = [e for e in self._active if e.sequence.finish_reason is not None]
            for entry in leaving:
                self._active.remove(entry)
            running = [e.sequence for e in self._active]
            released = [e.sequence for e in leaving]
            try:
                if not running:
                    if released:
                        await self._engine.executor.run(self._engine.release, released)
                    self._record(released)
                    continue
                self.batch_sizes.append(len(running))
                results = await self._engine.executor.run(self._engine.step, running, released)
            except Exception as exc:
                self._record(released)
                self._fail_all(exc)
                return
            self._record(released)
            by_sequence = {id(seq): (token, logprobs) for seq, token, logprobs in results}
            for entry in self._active:
                produced = by_sequence.get(id(entry.sequence))
                if produced is None or entry.sequence.finish_reason is not None:
                    continue  # cancelled while the step ran
                delta = entry.sequence.accept(*produced)
                if entry.postprocess is not None:
                    delta = entry.postprocess(delta)
                entry.queue.put_nowait(delta)

    def _record(self, released: list[GenerationSequence]) -> None:
        for sequence in released:
            self._engine.record_finished(sequence)

    def _fail_all(self, exc: Exception) -> None:
        """A failed step fails every caller: nobody is left waiting on a dead batch."""
        log.error(
            "generation step failed; failing %d sequences",
            len(self._active) + len(self._waiting),
            exc_info=exc,
        )
        entries = [*self._active, *self._waiting]
        self._active.clear()
        self._waiting.clear()
        sequences = [e.sequence for e in entries]
        for entry in entries:
            entry.sequence.cancel()
            entry.queue.put_nowait(exc)
        # Free the failed sequences' KV cells; the next step starts from a clean slate.
        self._engine.executor.submit_detached(lambda: self._engine.release(sequences))
        self._record(sequences)
