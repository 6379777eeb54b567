"""The batched step over one llama.cpp context: slots, prompt chunks, decoding, speculation, sampling.

:class:`LlamaCppStepper` is what the engine's ``_forward`` and ``_free`` run: each step decodes
one ``llama_batch`` that carries the next token of every running sequence (with its draft tokens
when it speculates), then prompt chunks of newly admitted ones, and samples each sequence's
tokens from the logits rows. A sequence gets a slot (sequence id) when its prefill starts, keeping
the cells of the prompt prefix the slot still holds (:mod:`engines.generation.prompt_cache`);
when it leaves, its cells past the prefilled prompt are removed with ``llama_memory_seq_rm``.
:class:`SlotState` is a sequence's llama.cpp-side state; :func:`speculation_state` decides
whether a request drafts (:mod:`engines.generation.speculative`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from engines.generation.base import SequenceState
from engines.generation.llama_cpp_sampling import ArgmaxSampler
from engines.generation.logprobs import token_logprobs
from engines.generation.options import LlamaCppOptions
from engines.generation.prompt_cache import PromptCache
from engines.generation.scheduler import StepResult
from engines.generation.sequence import GenerationSequence
from engines.generation.speculative import (
    DraftModel,
    NgramDrafter,
    SpeculationState,
    accepted_prefix,
    batch_add,
    decode,
    equal_lengths,
    step_row_cost,
)
from engines.types import MAX_DRAFT_TOKENS, GenerationRequest

DEFAULT_DRAFT_TOKENS = 8  # draft tokens per step of a request that enables speculation on a model without it
DEFAULT_MIN_ACCEPTANCE_RATE = 0.3  # the same request's acceptance-rate cut-off

#: The engine's token choice: ``choose_token(sequence, sample)`` with ``sample(sampler) -> token``.
ChooseToken = Callable[[GenerationSequence, Callable[[Any], int]], int]


@dataclass(eq=False)
class SlotState(SequenceState):
    """llama.cpp-side state of one sequence: sampler, KV slot (sequence id), reserved cells.

    ``reserved_cells`` is its ``kv_cells_needed``, counted against a KV pool. A speculating
    sequence has ``speculation`` (its counts) and ``history`` (its prompt and output so far, with
    the n-gram index prompt lookup drafts from); ``generated`` counts the tokens it sampled.
    """

    seq_id: int | None = None
    reserved_cells: int = 0
    speculation: SpeculationState | None = None
    history: NgramDrafter | None = None
    generated: int = 0


def prefill_chunk_end(position: int, prompt_length: int, budget: int) -> int:
    """End (exclusive) of the next prompt chunk starting at ``position``.

    At most ``budget`` tokens, and never a single token when two or more remain: a chunk
    that would leave exactly one token behind is cut one shorter. Returns ``position`` when
    nothing is left, or when the budget does not allow a valid chunk this step.
    """
    remaining = prompt_length - position
    if remaining <= 0:
        return position
    take = min(remaining, budget)
    if remaining >= 2:
        if remaining - take == 1:
            take -= 1
        if take < 2:
            return position
    return position + take


def speculation_state(
    request: GenerationRequest, sampler: Any, options: LlamaCppOptions
) -> SpeculationState | None:
    """A request's drafting settings, or None when it does not speculate.

    The request's ``speculative_enabled`` wins over the catalog's ``speculative`` block (a
    request may turn prompt lookup on for a model without one). Only greedy requests
    (:class:`ArgmaxSampler`: temperature 0, no grammar, no penalties) on a model with flash
    attention speculate: their verification needs no random draw and keeps the output token
    for token (see :mod:`engines.generation.speculative`; without flash attention a draft's
    row takes another attention kernel and near ties flip).
    """
    configured = options.speculative
    enabled = request.speculative_enabled
    if enabled is None:
        enabled = configured is not None and configured.enabled
    if not enabled or not isinstance(sampler, ArgmaxSampler) or not options.flash_attn:
        return None
    tokens = request.speculative_tokens or (configured.num_tokens if configured else DEFAULT_DRAFT_TOKENS)
    rate = configured.min_acceptance_rate if configured else DEFAULT_MIN_ACCEPTANCE_RATE
    return SpeculationState(num_tokens=min(tokens, MAX_DRAFT_TOKENS), min_acceptance_rate=rate)


class LlamaCppStepper:
    """Steps of the running sequences over one llama.cpp context and its batch.

    Attributes:
        ctx: the llama-cpp-python ``LlamaContext`` (None once :meth:`detach` ran).
        batch: the ``LlamaBatch`` of ``n_batch`` rows every decode fills.
        slot_states: the states of running sequences by slot.
        row_costs: a verified row's cost for one sequence and for a full batch (see
            :func:`~engines.generation.speculative.step_row_cost`); (1.0, 1.0) until measured.
        draft_model: the draft GGUF's model that drafts for speculating sequences, else None
            (prompt lookup drafts).

    """

    def __init__(
        self,
        ctx: Any,
        batch: Any,
        *,
        vocab_size: int,
        max_sequences: int,
        n_batch: int,
        step_prefill_tokens: int,
        prompt_cache: PromptCache,
        kv_pool: int | None,
        piece_text: Callable[[int], str],
    ) -> None:
        """``kv_pool``: cells of the shared KV pool, None with a KV stream per sequence.

        ``piece_text`` names the alternatives of a sequence that asked for logprobs.
        """
        self.ctx = ctx
        self.batch = batch
        self._vocab_size = vocab_size
        self._max_sequences = max_sequences
        self._n_batch = n_batch
        self._step_prefill_tokens = step_prefill_tokens
        self._prompt_cache = prompt_cache
        self._kv_pool = kv_pool
        self._piece_text = piece_text
        self.slot_states: dict[int, SlotState] = {}
        self.row_costs = (1.0, 1.0)
        self.draft_model: DraftModel | None = None

    def detach(self) -> None:
        """Forget the context, batch and draft model (being freed): :meth:`free` then keeps no cells."""
        self.ctx = None
        self.batch = None
        self.draft_model = None

    def running_cells(self) -> int:
        """Cells the running sequences hold: their positions so far."""
        return sum(state.n_past for state in list(self.slot_states.values()))

    def probe_decode(self, counts: list[int], bos_token: int) -> None:
        """Decode ``counts[s]`` tokens in slot ``s`` and remove them (for :func:`.speculative.row_cost`)."""
        import llama_cpp

        self._begin_batch()
        for slot, tokens in enumerate(counts):  # max_sequences slots, 1 + PROBE_DRAFT tokens at most
            for position in range(tokens):
                self._add(bos_token if position == 0 else 100 + position, position, slot, True)
        self.decode()
        for slot in range(len(counts)):
            llama_cpp.llama_memory_seq_rm(self.ctx.memory, slot, 0, -1)

    def forward(self, running: list[GenerationSequence], choose_token: ChooseToken) -> list[StepResult]:
        """Decode the next token of every decoding sequence, then prefill prompt chunks.

        ``choose_token`` picks each sampled token (the engine's, for thinking budgets). Each
        prompt chunk gets a decode call of its own and at least two tokens: llama.cpp
        splits a batch that mixes KV streams into equal shares per stream, and a stream's
        share of a single query token takes another attention kernel than two or more, with
        results that differ in the last bits. Chunks of two or more tokens compute every
        token exactly as a whole-prompt prefill does, so greedy output does not depend on
        what else is running or on how much of the prompt came from the cache.
        """
        results: list[StepResult] = []
        decoding = [s for s in running if s.engine_state.next_input is not None]
        # In KV-stream order: llama.cpp gathers a batch's tokens per stream, and a batch whose
        # order differs from its streams' order steps much slower; once the prompt cache hands out
        # slots out of order, every batch after the first wave of requests would (see
        # docs/architecture/design-notes.md#batches-in-kv-stream-order).
        decoding.sort(key=lambda s: s.engine_state.seq_id)
        rows = 0
        if decoding:
            drafts = self._drafts(decoding)
            self._begin_batch()
            for sequence, draft in zip(decoding, drafts, strict=True):
                state: SlotState = sequence.engine_state
                self._add(state.next_input, state.n_past, state.seq_id, True)
                for offset, token in enumerate(draft):  # at most MAX_DRAFT_TOKENS
                    self._add(token, state.n_past + 1 + offset, state.seq_id, True)
                state.n_past += 1
                state.next_input = None
            self.decode()
            for sequence, draft in zip(decoding, drafts, strict=True):
                results.extend(self._verify(sequence, draft, rows, choose_token))
                rows += 1 + len(draft)
        budget = self._prefill_budget(running, rows)
        for sequence in running:
            state = sequence.engine_state
            prompt = sequence.prompt_tokens
            if state.seq_id is None:
                self._assign_slot(sequence)
            end = prefill_chunk_end(state.n_past, len(prompt), budget)
            if end <= state.n_past:
                continue  # prefilled already, or no budget left for a valid chunk this step
            start, state.n_past = state.n_past, end
            self._begin_batch()
            for position in range(start, end):
                # Logits only for the prompt's last token: the first sample comes from it.
                self._add(prompt[position], position, state.seq_id, position == len(prompt) - 1)
            self.decode()
            budget -= end - start
            if end == len(prompt):
                results.append(self._sample(sequence, end - start - 1, choose_token))
        return results

    def _drafts(self, decoding: list[GenerationSequence]) -> list[list[int]]:
        """Each decoding sequence's draft tokens this step (empty for those that do not speculate).

        A draft is as long as its acceptance so far makes worth it (:meth:`SpeculationState.length`,
        at most ``num_tokens``), never longer than the tokens the sequence may still produce after
        its next input (so its cells stay within ``kv_cells_needed``), and all drafts together fit
        the batch beside every sequence's next input (``n_batch`` rows). The drafts of one step
        are cut to the shortest (:func:`~engines.generation.speculative.equal_lengths`).
        """
        room = self._n_batch - len(decoding)
        worth = step_row_cost(self.row_costs, len(decoding), self._max_sequences)
        limits: list[int] = []
        for sequence in decoding:
            state: SlotState = sequence.engine_state
            spec = state.speculation
            if spec is None or not spec.active or room <= 0:
                limits.append(0)
                continue
            limit = max(0, min(spec.length(worth), sequence.max_new_tokens - state.generated - 1, room))
            room -= limit
            limits.append(limit)
        drafts: list[list[int]] = [[] for _ in decoding]
        if self.draft_model is None:
            for i, sequence in enumerate(decoding):
                if limits[i]:
                    drafts[i] = sequence.engine_state.history.draft(limits[i])
            return equal_lengths(drafts)
        wanted = [i for i, limit in enumerate(limits) if limit]
        if wanted:
            requests = []
            for i in wanted:
                state = decoding[i].engine_state
                tokens = state.history.tokens
                if state.speculation.draft_past >= len(tokens):  # at least the next input is new to it
                    state.speculation.draft_past = len(tokens) - 1
                    self.draft_model.forget(state.seq_id, state.speculation.draft_past)
                requests.append((state.seq_id, state.speculation, tokens, limits[i]))
            for i, draft in zip(wanted, self.draft_model.draft(requests), strict=True):
                drafts[i] = draft
        return equal_lengths(drafts)

    def _verify(
        self, sequence: GenerationSequence, draft: list[int], row: int, choose_token: ChooseToken
    ) -> list[StepResult]:
        """Sample ``sequence``'s tokens from rows ``row ..`` of the last decode; keep the accepted draft.

        Row ``row`` scored the next input, row ``row + 1 + j`` the draft token ``draft[j]``. The
        model's token at each row is sampled in order until one differs from the draft (greedy
        acceptance, :func:`~engines.generation.speculative.accepted_prefix`): the accepted drafts
        and that token are emitted, and the cells of the rejected drafts are removed.
        """
        state: SlotState = sequence.engine_state
        results = [self._sample(sequence, row, choose_token)]
        for offset, proposed in enumerate(draft):  # at most MAX_DRAFT_TOKENS
            if results[-1][1] != proposed:
                break
            results.append(self._sample(sequence, row + 1 + offset, choose_token))
        if not draft:
            return results
        accepted = accepted_prefix(draft, [result[1] for result in results])
        seen = state.n_past  # cells before this step's drafts (the next input included)
        state.n_past += accepted
        if accepted < len(draft):
            import llama_cpp

            llama_cpp.llama_memory_seq_rm(self.ctx.memory, state.seq_id, state.n_past, -1)
        spec = state.speculation
        spec.record(len(draft), accepted)
        if self.draft_model is not None and spec.draft_past > seen + accepted:
            spec.draft_past = seen + accepted
            self.draft_model.forget(state.seq_id, spec.draft_past)
        first = results[0]
        results[0] = (first[0], first[1], first[2], (len(draft), accepted))
        return results

    def _prefill_budget(self, running: list[GenerationSequence], decoding: int) -> int:
        """Prompt tokens this step may prefill (all prefilling sequences together).

        ``decoding`` is the rows the decoding sequences took (next inputs and draft tokens). A
        prompt alone in the batch is prefilled in chunks of ``n_batch``: nothing waits on it.
        Beside other sequences, at most ``step_prefill_tokens`` per step, so a long prompt adds at
        most one such chunk to the running streams' step time, and of several new prompts the
        first ones are answered (first token) before the later ones are prefilled.
        """
        capacity = self._n_batch - decoding
        if len(running) == 1:
            return capacity
        return min(capacity, self._step_prefill_tokens)

    def _begin_batch(self) -> None:
        self.batch.batch.n_tokens = 0

    def _add(self, token: int, position: int, seq_id: int, want_logits: bool) -> None:
        batch_add(self.batch.batch, token, position, seq_id, want_logits)

    def decode(self) -> None:
        """Run ``llama_decode`` over the batch as filled.

        Raises:
            RuntimeError: llama.cpp failed the decode (see :func:`~engines.generation.speculative.decode`).

        """
        decode(self.ctx, self.batch, "llama_decode")

    def _sample(self, sequence: GenerationSequence, index: int, choose_token: ChooseToken) -> StepResult:
        """Sample ``sequence``'s next token from row ``index`` of the last decode call's batch."""
        import llama_cpp

        state: SlotState = sequence.engine_state
        scored = None
        if state.logprobs:
            logits = np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(self.ctx.ctx, index), shape=(self._vocab_size,)
            )
            raw = logits.copy()  # sampling may modify the buffer in place
        token = choose_token(sequence, lambda sampler: sampler.sample(self.ctx, index))
        if state.logprobs:
            scored = token_logprobs(raw, token, state.top_logprobs, self._piece_text)
        state.next_input = token
        state.generated += 1
        if state.speculation is not None:
            if state.history is None:
                state.history = NgramDrafter()
                state.history.extend(sequence.prompt_tokens)
            state.history.extend([token])
        return sequence, token, scored

    def _assign_slot(self, sequence: GenerationSequence) -> None:
        """Give a new sequence a slot, keeping the cells of the prompt prefix the slot already holds."""
        import llama_cpp

        state: SlotState = sequence.engine_state
        plan = self._prompt_cache.acquire(sequence.prompt_tokens)
        llama_cpp.llama_memory_seq_rm(self.ctx.memory, plan.slot, plan.reused, -1)
        state.seq_id = plan.slot
        state.n_past = plan.reused
        state.reserved_cells = sequence.kv_cells_needed
        self.slot_states[plan.slot] = state
        if self.draft_model is not None:
            self.draft_model.forget(plan.slot)  # the draft context keeps no prompt cache
        if self._kv_pool is not None:
            self._make_room()
        sequence.cached_prompt_tokens = plan.reused

    def _make_room(self) -> None:
        """Free cached prompts of free slots until they fit beside the running sequences' reservations.

        The scheduler admits a sequence only when its reservation fits beside the others', so
        dropping every cached prompt always makes room; the least recently released go first.
        """
        import llama_cpp

        reserved = sum(state.reserved_cells for state in self.slot_states.values())
        for slot in self._prompt_cache.evict(max(0, self._kv_pool - reserved)):
            llama_cpp.llama_memory_seq_rm(self.ctx.memory, slot, 0, -1)

    def free(self, sequences: list[GenerationSequence]) -> None:
        """Free the sequences' samplers and slots; a slot keeps the cells of its prefilled prompt."""
        import llama_cpp

        for sequence in sequences:
            state: SlotState = sequence.engine_state
            # After unload (the scheduler may still release sequences cancelled during the last
            # step) the context and its cells are gone already.
            if state.seq_id is not None and self.ctx is not None:
                # Only prompt cells are kept: cells written one token per decode step differ in
                # their last bits from a prefill of the same tokens, and reusing them would
                # change greedy output (see prompt_cache).
                prefilled = sequence.prompt_tokens[: min(state.n_past, len(sequence.prompt_tokens))]
                kept = self._prompt_cache.release(state.seq_id, prefilled)
                llama_cpp.llama_memory_seq_rm(self.ctx.memory, state.seq_id, kept, -1)
                self.slot_states.pop(state.seq_id, None)
                state.seq_id = None
            state.sampler.close()
            if state.thinking_sampler is not None:
                state.thinking_sampler.close()
