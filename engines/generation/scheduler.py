"""Continuous batching: sequences join the running batch at the next step and leave when done.

One scheduler per generation engine. Its loop runs one engine step per executor job: every
active sequence advances by one token (or by a chunk of its prompt while it is prefilling) in
a single forward pass. Requests that arrive while the batch is full wait in a bounded queue;
a sequence whose caller went away (cancel, deadline, closed connection) is dropped before the
next step and its KV cells are freed in that step's job.

Admission is counted in places: ``max_sequences + max_waiting`` of them. A request takes one
when it arrives, before its prompt is tokenized, and gives it back when its stream ends however
it ends (prepare error, cancellation, failure or finish). A request being prepared therefore
holds a place like one waiting in the queue, so a burst of simultaneous requests cannot all pass
the check while their prompts are still being tokenized: the first ``max_sequences +
max_waiting`` are admitted and the rest are refused at once, with no work done for them.

With a shared KV pool (``kv_pool_cells``, the llama.cpp engine's ``kv_pool_tokens``) a waiting
sequence also needs room: it joins the running batch only when the KV cells it can ever hold
(:attr:`GenerationSequence.kv_cells_needed`) fit beside what the running ones reserved. The
sequence next in the queue's order that does not fit yet holds back the ones behind it, so a
long request is not starved by a stream of short ones.

The waiting queue is a :class:`~engines.fair_queue.FairQueue`: waiting requests join
the batch in priority-class order (every interactive request before any batch one), then by
start-time fair queuing between API keys (one admission each, weighted by the key's share),
first in first out within a key. So one key's hundred queued requests delay another key's single
request by about one admission, not a hundred. Running sequences are never preempted: only the
order in which waiting ones take free slots changes. The share is read when the request arrives
(:func:`~engines.fair_share.current_share`, in the caller's context). When every place is taken,
a request of a key with fewer requests waiting (per weight), or of a higher class, takes the place
of the newest waiting request of the key with the most (longest queue drop), which is refused
OVERLOADED as if it had come when the queue was full; a key never pushes out its own requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from engines import metrics, tracing
from engines.errors import ResourceExhaustedError, kv_pool_exhausted, queue_wait_exceeded
from engines.executor import DeviceExecutor
from engines.fair_queue import FairQueue
from engines.fair_share import current_share
from engines.generation.sequence import GenerationSequence
from engines.types import FinishReason, GenerationDelta, GenerationRequest, TokenLogprobs

log = logging.getLogger(__name__)

#: (sequence, next token id, its log probabilities or None) for each token a sequence produced. A
#: speculating engine may return several for one sequence, in order; the first of them may carry a
#: fourth item, ``(drafted, accepted)``: the step's draft tokens and how many the model accepted.
StepResult = (
    tuple[GenerationSequence, int, TokenLogprobs | None]
    | tuple[GenerationSequence, int, TokenLogprobs | None, tuple[int, int]]
)


class StepModel(Protocol):
    """What the scheduler drives: a model that advances a batch of sequences one step at a time.

    ``prepare``, ``step`` and ``release`` are blocking and run as jobs on :attr:`executor`.
    """

    @property
    def model_name(self) -> str:
        """Catalog name of the model, for error messages and the loop task's name."""

    @property
    def executor(self) -> DeviceExecutor:
        """The model's lane (executor) that runs the blocking methods, one job at a time."""

    def prepare(self, request: GenerationRequest) -> GenerationSequence:
        """Build the sequence of ``request``.

        Raises:
            InputTooLongError: the prompt does not fit the context.
            InvalidArgumentError: the request cannot be templated or constrained.
            ResourceExhaustedError: with a KV pool, the sequence needs more cells than the
                whole pool (reason KV_POOL_EXHAUSTED).

        """

    def step(self, running: list[GenerationSequence], released: list[GenerationSequence]) -> list[StepResult]:
        """Free ``released``, then advance each sequence of ``running`` by one forward pass.

        Returns one result per token a sequence produced this step, in order (a sequence still
        prefilling its prompt produces none; a speculating one may produce several).
        """

    def release(self, sequences: list[GenerationSequence]) -> None:
        """Free the state of ``sequences`` (idempotent)."""


@dataclass(eq=False)
class _Entry:
    sequence: GenerationSequence
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    postprocess: Callable[[GenerationDelta], GenerationDelta] | None = None
    scheduled_ns: int = 0  # when it joined the running batch (epoch ns, for its spans)
    admitted_at: float = 0.0  # time.monotonic() at admission (the queue wait limit)
    place_passed: bool = False  # pushed out: its place went to another key's request


class ContinuousBatchScheduler:
    """Runs up to ``max_sequences`` sequences of one model together.

    Args:
        model: the model whose blocking ``prepare``/``step``/``release`` run on its executor.
        max_sequences: sequences decoded together (the model's KV slots).
        max_waiting: requests allowed to wait for a slot (being prepared or queued) beyond the
            ``max_sequences`` running; more answer RESOURCE_EXHAUSTED.
        max_queue_wait_s: the longest a request may wait from admission for a slot; one that
            waited longer gets RESOURCE_EXHAUSTED (QUEUE_WAIT_EXCEEDED) instead of a late answer.
            0: no limit.
        kv_pool_cells: KV cells shared by all sequences, or None (each sequence has its own
            cells: admission by places only). A sequence joins only when its
            ``kv_cells_needed`` fit in the cells the running ones have not reserved; the model's
            ``prepare`` must refuse one that needs more than the whole pool.

    """

    def __init__(
        self,
        model: StepModel,
        *,
        max_sequences: int,
        max_waiting: int,
        max_queue_wait_s: float = 0.0,
        kv_pool_cells: int | None = None,
    ) -> None:
        self._model = model
        self.kv_pool_cells = kv_pool_cells
        self._max_sequences = max_sequences
        self._max_waiting = max_waiting
        self._max_queue_wait_s = max_queue_wait_s
        self._waiting: FairQueue[_Entry] = FairQueue(model.model_name)
        self._active: list[_Entry] = []
        # Requests holding a place (preparing, waiting or running), counted before any await.
        self._admitted = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def active_count(self) -> int:
        """Sequences in the running batch."""
        return len(self._active)

    @property
    def waiting_count(self) -> int:
        """Admitted requests not in the running batch yet (being prepared or queued for a slot)."""
        return max(0, self._admitted - len(self._active))

    @property
    def kv_reserved_cells(self) -> int:
        """KV cells reserved by the sequences in the running batch (``kv_cells_needed`` each).

        Counted until a sequence is taken out of the batch, in the same step job that frees its
        cells, so a sequence admitted meanwhile never finds them still in use.
        """
        return sum(entry.sequence.kv_cells_needed for entry in self._active)

    @property
    def admitted_count(self) -> int:
        """Requests holding a place: preparing, waiting or running (at most max_sequences + max_waiting)."""
        return self._admitted

    async def stream(
        self,
        request: GenerationRequest,
        postprocess: Callable[[GenerationDelta], GenerationDelta] | None = None,
    ) -> AsyncIterator[GenerationDelta]:
        """Yield the deltas of ``request``; the last has ``finish_reason`` and ``usage``.

        Raises:
            ResourceExhaustedError: every place is taken, ``max_sequences + max_waiting``
                requests being prepared, waiting or running (reason OVERLOADED); raised before
                any work is done for ``request``. Unless a waiting request of a less entitled
                key (a lower class, or more requests waiting per weight) gives its place up:
                that one is refused instead (the fair queue's ``push_out_victims``), with the same
                error, while it waits.
            InputTooLongError, InvalidArgumentError: from the model's ``prepare``.
            ResourceExhaustedError: with a KV pool, the sequence needs more cells than the whole
                pool (reason KV_POOL_EXHAUSTED), from ``prepare`` or before it would wait.
            Exception: a step failed (every sequence of that step gets the error).

        """
        share = current_share()
        # Taken before the first await: no other request can pass the check meanwhile.
        if self._admitted < self._max_sequences + self._max_waiting:
            self._admitted += 1
        else:
            victims = self._waiting.push_out_victims(share)
            if victims is None:
                raise self._full_error()
            self._push_out(victims[0])  # its place is this request's now
        admitted_ns, admitted_at = time.time_ns(), time.monotonic()
        first_ns = 0
        entry: _Entry | None = None
        try:
            sequence = await self._model.executor.run(self._model.prepare, request)
            entry = _Entry(sequence, postprocess=postprocess, admitted_at=admitted_at)
            self._waiting.push(entry, share, cost=1.0, now=admitted_at)  # one admission each
            self._ensure_loop()
            try:
                while True:
                    item = await entry.queue.get()
                    if isinstance(item, BaseException):
                        raise item
                    first_ns = first_ns or time.time_ns()
                    if item.finish_reason is not None:
                        self._record_spans(entry, admitted_ns, first_ns)
                    yield item
                    if item.finish_reason is not None:
                        return
            finally:
                if sequence.finish_reason is None:
                    # The caller went away: the loop drops the sequence before its next step.
                    sequence.cancel()
                    if self._waiting.discard(entry):
                        self._record([sequence])
        finally:
            if entry is None or not entry.place_passed:
                self._admitted -= 1

    def _full_error(self, pushed_out: bool = False) -> ResourceExhaustedError:
        """OVERLOADED: every place is taken (``pushed_out``: this waiting request gave its place up)."""
        why = "; this request gave its place to another key's (fair share)" if pushed_out else ""
        return ResourceExhaustedError(
            f"generation queue of model {self._model.model_name!r} is full "
            f"({self._max_waiting} waiting, {self._max_sequences} running){why}",
            model=self._model.model_name,
            max_waiting=self._max_waiting,
        )

    def _push_out(self, entry: _Entry) -> None:
        """Refuse the waiting ``entry`` (OVERLOADED) and pass its place on (see :meth:`stream`)."""
        self._waiting.discard(entry)
        entry.place_passed = True
        entry.sequence.cancel()
        self._record([entry.sequence])
        entry.queue.put_nowait(self._full_error(pushed_out=True))

    def _record_spans(self, entry: _Entry, admitted_ns: int, first_ns: int) -> None:
        """Record a finished request's phases as child spans of the caller's span.

        Queue wait (admitted to running, tokenizing included), prefill (to the first token) and
        decode (to the last).
        """
        if not tracing.enabled():
            return
        model, end_ns = self._model.model_name, time.time_ns()
        scheduled_ns = entry.scheduled_ns or admitted_ns
        tokens = len(entry.sequence.completion_tokens)
        tracing.record_span("ur.generation.queue", admitted_ns, scheduled_ns, model=model)
        prompt = len(entry.sequence.prompt_tokens)
        tracing.record_span(
            "ur.generation.prefill", scheduled_ns, first_ns, model=model, prompt_tokens=prompt
        )
        tracing.record_span("ur.generation.decode", first_ns, end_ns, model=model, completion_tokens=tokens)

    async def drained(self) -> None:
        """Return once the batch loop has stopped: no sequence running, waiting or unreleased.

        A caller that went away leaves its sequence for the loop to release at its next step;
        the loop stops when nothing is left, so this also waits for those releases.
        """
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task})

    def _ensure_loop(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name=f"scheduler-{self._model.model_name}")

    async def _loop(self) -> None:
        """Run steps until no sequence is running, waiting or unreleased.

        One step is queued on the lane behind the one being awaited, so the lane goes from a
        step straight into the next one instead of idling while this loop hands the tokens out
        (see docs/architecture/design-notes.md#a-second-job-waits-on-the-lane). The queued
        step's batch is fixed before the running step's tokens are seen, so a sequence that
        finishes in one step may still be advanced in the next; that token is dropped (the
        sequence has a ``finish_reason``) and its cells are freed a step later.
        """
        ahead: asyncio.Task[list[StepResult]] | None = None
        while self._active or self._waiting or ahead is not None:
            current = ahead or self._submit_step()
            ahead = self._submit_step() if self._active else None
            try:
                results = await current
            except Exception as exc:
                if ahead is not None:
                    ahead.cancel()
                    await asyncio.gather(ahead, return_exceptions=True)
                self._fail_all(exc)
                return
            self._deliver(results)

    def _submit_step(self) -> asyncio.Task[list[StepResult]]:
        """Admit waiting requests, take finished sequences out, and queue the next step's job.

        The job frees the finished sequences and advances the running ones (or only frees, when
        none is running); it records the finished ones once it has run, failed or not.
        """
        if self._max_queue_wait_s:
            self._expire_waiting()
        self._refuse_over_pool()
        # Bounded by max_sequences: each pass fills a free slot (the fair queue's order).
        while (head := self._waiting.peek()) is not None and len(self._active) < self._max_sequences:
            if not self._fits(head):
                break  # it holds back the ones behind it until its cells fit
            entry = self._waiting.pop()
            entry.scheduled_ns = time.time_ns()
            self._active.append(entry)
        leaving = [e for e in self._active if e.sequence.finish_reason is not None]
        for entry in leaving:
            self._active.remove(entry)
        running = [e.sequence for e in self._active]
        released = [e.sequence for e in leaving]
        if running:
            metrics.observe_generation_step(self._model.model_name, len(running))
        return asyncio.create_task(self._run_step(running, released))

    def _fits(self, entry: _Entry) -> bool:
        """Whether ``entry``'s KV cells fit in the pool beside the running batch's (always without a pool)."""
        if self.kv_pool_cells is None:
            return True
        return self.kv_reserved_cells + entry.sequence.kv_cells_needed <= self.kv_pool_cells

    async def _run_step(
        self, running: list[GenerationSequence], released: list[GenerationSequence]
    ) -> list[StepResult]:
        try:
            if not running:
                if released:
                    await self._model.executor.run(self._model.release, released)
                return []
            return await self._model.executor.run(self._model.step, running, released)
        finally:
            self._record(released)

    def _deliver(self, results: list[StepResult]) -> None:
        """Hand each running sequence's new tokens to its caller (a delta each), in order.

        Tokens after the one that finished a sequence (speculation's accepted drafts past an end
        of generation or a stop sequence) are dropped.
        """
        by_sequence: dict[int, list[StepResult]] = {}
        for result in results:
            by_sequence.setdefault(id(result[0]), []).append(result)
        model = self._model.model_name
        for entry in self._active:
            produced = by_sequence.get(id(entry.sequence), ())
            for result in produced:  # bounded: 1 + the engine's draft tokens per step
                sequence = entry.sequence
                if sequence.finish_reason is not None:
                    break  # cancelled or finished while the step ran, or by an earlier token
                if len(result) > 3:
                    drafted, accepted = result[3]
                    sequence.draft_tokens += drafted
                    sequence.accepted_draft_tokens += accepted
                    metrics.observe_speculation(model, drafted, accepted)
                delta = sequence.accept(result[1], result[2])
                if entry.postprocess is not None:
                    delta = entry.postprocess(delta)
                entry.queue.put_nowait(delta)

    def _expire_waiting(self) -> None:
        """Fail the waiting requests (oldest first) that waited past ``max_queue_wait_s``.

        They hold no slot yet, so nothing needs releasing; their callers get the error at once.
        """
        now = time.monotonic()
        for entry in self._waiting.expire(now, self._max_queue_wait_s):  # bounded by the queue
            entry.sequence.cancel()
            self._record([entry.sequence])
            waited = now - entry.admitted_at
            error = queue_wait_exceeded(self._model.model_name, waited, self._max_queue_wait_s)
            entry.queue.put_nowait(error)

    def _refuse_over_pool(self) -> None:
        """Fail waiting sequences that need more cells than the whole pool (they would block the queue).

        The model's ``prepare`` refuses them first; this keeps a model that does not from
        stalling every request behind one that can never run.
        """
        pool = self.kv_pool_cells
        if pool is None:
            return
        for entry in self._waiting.remove_where(lambda e: e.sequence.kv_cells_needed > pool):
            sequence = entry.sequence
            sequence.cancel()
            self._record([sequence])
            error = kv_pool_exhausted(
                self._model.model_name, pool, len(sequence.prompt_tokens), sequence.max_new_tokens
            )
            entry.queue.put_nowait(error)

    def _record(self, sequences: list[GenerationSequence]) -> None:
        """Count sequences that left the batch (finished, cancelled or failed) in the metrics."""
        for sequence in sequences:
            reason = sequence.finish_reason or FinishReason.CANCELLED
            metrics.observe_sequence_finished(self._model.model_name, reason, len(sequence.completion_tokens))

    def _fail_all(self, exc: Exception) -> None:
        """A failed step fails every caller: nobody is left waiting on a dead batch."""
        log.error(
            "generation step failed; failing %d sequences",
            len(self._active) + len(self._waiting),
            exc_info=exc,
        )
        entries = [*self._active, *self._waiting.clear()]
        self._active.clear()
        sequences = [e.sequence for e in entries]
        for entry in entries:
            entry.sequence.cancel()
            entry.queue.put_nowait(exc)
        # Free the failed sequences' KV cells; the next step starts from a clean slate.
        self._model.executor.submit_detached(lambda: self._model.release(sequences))
        self._record(sequences)
