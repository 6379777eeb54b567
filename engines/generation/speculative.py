"""Speculative decoding for the llama.cpp engine: drafting, acceptance and the draft model.

Each step a sequence may propose draft tokens ``d_1..d_k`` after its next input ``t_0``; the
target model scores ``t_0, d_1..d_k`` in the same ``llama_decode`` as every other sequence's next
token (one row per token, logits on), and the engine keeps the longest prefix of the draft that
the target itself would have produced (:func:`accepted_prefix`), plus the target's own token at
the first disagreement. Rejected draft cells are removed from the KV cache
(``llama_memory_seq_rm`` from the first rejected position), so later steps see exactly the
tokens the sequence produced.

This is the acceptance rule of Leviathan, Kalman and Matias 2023 ("Fast Inference from
Transformers via Speculative Decoding", ICML, Algorithm 1) and Chen et al. 2023 ("Accelerating
Large Language Model Decoding with Speculative Sampling"): accept draft token ``x`` with
probability ``min(1, p(x) / q(x))`` and, on rejection, sample from ``norm(max(0, p - q))``. Both
our draft sources are deterministic (``q`` is a point mass on ``x``): the rule becomes *accept
``x`` with probability ``p(x)``, else sample from ``p`` with ``x`` removed and renormalised*, and
for greedy decoding (``p`` a point mass on the argmax) *accept ``x`` exactly when it is the
argmax, else emit the argmax*. The engine speculates for greedy requests only (temperature 0, no
grammar, no penalties: :class:`~engines.generation.llama_cpp_sampling.ArgmaxSampler`), where that
rule needs no random draw and the output is the target's greedy output token for token; sampled
and constrained requests (llama.cpp sampler chains with state: grammar, penalties, the RNG)
decode one token per step as before.

Draft sources:

* :class:`NgramDrafter`, prompt lookup (Saxena 2023, "Prompt Lookup Decoding"; llama.cpp's
  ``ngram`` speculative mode): the longest recent n-gram (``MAX_NGRAM`` down to ``MIN_NGRAM``
  tokens) ending the sequence that occurred earlier in its prompt or output proposes the tokens
  that followed its latest earlier occurrence. No second model; it pays off where the answer
  copies from the context (document questions, field extraction, code edits).
* :class:`DraftModel`, a small GGUF with the target's vocabulary (:func:`check_vocabularies`),
  run greedily for ``num_tokens`` steps in a llama.cpp context of its own, one KV stream per slot.

How many tokens to draft: each verified row costs compute, which :func:`row_cost` measures at
load for one sequence and for a full batch, in a token's share of a step (on 2 CPU cores with
SmolLM2-135M about 0.2-0.5 for one sequence, by the machine's load, and 2 or more for 8; 0.9 or
more on one core, where decoding is bound by arithmetic). Draft token ``j`` is
proposed only while its chance of being reached and accepted (``a ** j``, ``a`` the sequence's
per-token acceptance so far) is at least that cost (:meth:`SpeculationState.length`), so where
rows cost a step or more nothing is drafted, and a step's drafts are cut to one length
(:func:`equal_lengths`: llama.cpp splits a multi-stream batch per distinct length).

A sequence whose acceptance rate (accepted / drafted, :class:`SpeculationState`) falls below
``min_acceptance_rate`` once it drafted ``MIN_DRAFTED_FOR_CUTOFF`` tokens stops drafting, so a
generation that does not copy pays for at most that many rejected rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engines.errors import FailedPreconditionError
from engines.reasons import Reason

MAX_NGRAM = 3  # longest n-gram prompt lookup matches (tokens)
MIN_NGRAM = 2  # shortest: single tokens match too often in free text to pay off
MIN_DRAFTED_FOR_CUTOFF = 16  # drafted tokens before the acceptance rate may stop a sequence drafting
#: Probe of :func:`row_cost`: a step of one token against one of ``1 + PROBE_DRAFT`` tokens.
PROBE_DRAFT = 8
PROBE_REPEATS = 3  # each timed this often; the fastest counts (other processes only slow it)
PRIOR_TRIALS = 4  # pseudo-observations of the acceptance estimate before a sequence's own
PRIOR_ACCEPTANCE = 0.8  # their acceptance: a new sequence drafts a few tokens at first


@dataclass(eq=False)
class SpeculationState:
    """One sequence's drafting settings and counts.

    Attributes:
        num_tokens: draft tokens proposed per step at most (1..16).
        min_acceptance_rate: the rate (accepted / drafted) under which drafting stops.
        drafted: draft tokens proposed so far (each one a verified row).
        accepted: of those, tokens the target agreed with (emitted without a step of their own).
        trials: draft tokens compared with the target's choice (the accepted ones, plus the first
            rejected one of each step): the per-token acceptance estimate's denominator.
        active: still drafting (false once the rate fell under ``min_acceptance_rate``).
        draft_past: tokens of this sequence in the draft model's KV cache (draft model only).

    """

    num_tokens: int
    min_acceptance_rate: float
    drafted: int = 0
    accepted: int = 0
    trials: int = 0
    active: bool = True
    draft_past: int = 0

    def record(self, drafted: int, accepted: int) -> None:
        """Count one step's verification; stop drafting when the acceptance rate is too low."""
        self.drafted += drafted
        self.accepted += accepted
        self.trials += accepted + (accepted < drafted)
        if self.drafted >= MIN_DRAFTED_FOR_CUTOFF and self.accepted < self.min_acceptance_rate * self.drafted:
            self.active = False

    def length(self, worth: float) -> int:
        """Draft tokens worth proposing this step: 0 to ``num_tokens``.

        The chance that draft token ``j`` is reached and accepted is ``a ** j`` for a per-token
        acceptance ``a`` (estimated from this sequence's verifications, with a prior of
        ``PRIOR_TRIALS`` at ``PRIOR_ACCEPTANCE``); tokens are proposed while it is at least
        ``worth``, the cost of one more verified row in one-token steps (:func:`row_cost`): an
        accepted token saves a step. Where rows cost a step or more, nothing is drafted.
        """
        rate = (self.accepted + PRIOR_ACCEPTANCE * PRIOR_TRIALS) / (self.trials + PRIOR_TRIALS)
        length, reach = 0, rate
        while length < self.num_tokens and reach >= worth:  # at most num_tokens (16)
            length += 1
            reach *= rate
        return length


def row_cost(decode_plan: Any, sequences: int) -> float:
    """What one more token of a sequence costs in a step of ``sequences``, in tokens' shares (blocking).

    ``decode_plan(counts)`` decodes ``counts[s]`` tokens in slot ``s`` (and removes them). With
    ``t0`` a step of one token per sequence and ``t1`` the same with ``PROBE_DRAFT`` more tokens in
    the last, the cost is what the drafted step and the plain step after it take beyond two plain
    steps (llama.cpp builds its graph again whenever a step's shape changes, as speculation's
    steps do), ``/ PROBE_DRAFT``, over a token's share of a step, ``t0 / sequences``: an
    accepted draft token saves that share. Each time is the fastest of ``PROBE_REPEATS``.
    Clamped to 0.01..2 (see docs/architecture/design-notes.md#what-a-draft-token-costs).
    """
    import time

    def timed(counts: list[int]) -> float:
        start = time.perf_counter()
        decode_plan(counts)
        return time.perf_counter() - start

    plain = [1] * sequences
    drafted = [*plain[:-1], 1 + PROBE_DRAFT]
    decode_plan(drafted)  # the first of a shape builds its graph
    base, more, back = [], [], []
    for _ in range(PROBE_REPEATS):  # 1 + 3 decodes each
        decode_plan(plain)
        base.append(timed(plain))  # the same shape again: llama.cpp reuses its graph
        more.append(timed(drafted))  # another shape: the graph is built again, as after a draft
        back.append(timed(plain))  # and once more going back
    extra = min(more) + min(back) - 2 * min(base)
    return min(2.0, max(0.01, extra / PROBE_DRAFT / max(min(base) / sequences, 1e-9)))


def step_row_cost(costs: tuple[float, float], decoding: int, max_sequences: int) -> float:
    """The row cost in a step of ``decoding`` sequences: ``costs`` (1 and ``max_sequences``) interpolated."""
    one, full = costs
    if max_sequences <= 1:
        return one
    share = (min(decoding, max_sequences) - 1) / (max_sequences - 1)
    return one + (full - one) * share


def equal_lengths(drafts: list[list[int]]) -> list[list[int]]:
    """The drafts cut to the shortest non-empty one (empty drafts stay empty).

    With a KV stream per sequence llama.cpp splits a batch into micro-batches holding the same
    number of tokens of each sequence (``split_equal``); every distinct draft length adds one
    more graph evaluation (all weights read again) to the step, which cost more than the longer
    drafts saved.
    """
    lengths = [len(draft) for draft in drafts if draft]
    if len(set(lengths)) <= 1:
        return drafts
    shortest = min(lengths)
    return [draft[:shortest] for draft in drafts]


def accepted_prefix(draft: list[int], sampled: list[int]) -> int:
    """Draft tokens accepted under greedy verification: the length of the common prefix.

    ``sampled[j]`` is the target's token at the row of ``draft[j]``'s position (its greedy choice
    after the tokens before it); acceptance stops at the first disagreement.
    """
    accepted = 0
    for proposed, chosen in zip(draft, sampled, strict=False):  # bounded by len(draft) <= 16
        if proposed != chosen:
            break
        accepted += 1
    return accepted


@dataclass(eq=False)
class NgramDrafter:
    """Prompt-lookup drafting over one sequence's tokens (prompt then output).

    Keeps, for each n in ``MIN_NGRAM..MAX_NGRAM``, the position that followed each n-gram's latest
    occurrence, updated as tokens arrive (O(MAX_NGRAM) per token), so a lookup is O(MAX_NGRAM)
    however long the context. Memory: about ``MAX_NGRAM - MIN_NGRAM + 1`` entries per token.
    """

    tokens: list[int] = field(default_factory=list)
    _follow: dict[tuple[int, ...], int] = field(default_factory=dict)

    def extend(self, new_tokens: list[int]) -> None:
        """Append tokens (the prompt once, then each emitted token); bounded by the context size."""
        for token in new_tokens:
            self.tokens.append(token)
            end = len(self.tokens) - 1  # the new token's position: it follows the n-grams ending before it
            for n in range(MIN_NGRAM, MAX_NGRAM + 1):
                if end - n >= 0:
                    self._follow[tuple(self.tokens[end - n : end])] = end

    def draft(self, limit: int) -> list[int]:
        """Up to ``limit`` tokens that followed the latest earlier occurrence of the longest suffix n-gram.

        Empty when no suffix of ``MIN_NGRAM`` or more tokens occurred before.
        """
        tokens = self.tokens
        if limit <= 0:
            return []
        for n in range(MAX_NGRAM, MIN_NGRAM - 1, -1):
            if len(tokens) <= n:
                continue
            follow = self._follow.get(tuple(tokens[-n:]))
            if follow is not None:
                return tokens[follow : follow + limit]
        return []


def vocabulary_of(model: Any) -> tuple[int, list[bytes], list[int], tuple[int, int]]:
    """(size, every token's text, every token's attributes, (BOS, EOS)) of a loaded llama.cpp model."""
    import llama_cpp

    vocab = model.vocab
    size = int(llama_cpp.llama_vocab_n_tokens(vocab))
    texts = [llama_cpp.llama_vocab_get_text(vocab, i) or b"" for i in range(size)]
    attrs = [int(llama_cpp.llama_vocab_get_attr(vocab, i)) for i in range(size)]
    special = (int(llama_cpp.llama_vocab_bos(vocab)), int(llama_cpp.llama_vocab_eos(vocab)))
    return size, texts, attrs, special


def check_vocabularies(target: Any, draft: Any, *, model: str, draft_source: str) -> None:
    """Refuse a draft model whose vocabulary differs from the target's.

    Same size, the same text and attributes (normal, control, user-defined...) for every id, and
    the same BOS and EOS: the draft's token ids are fed to the target as they are.

    Raises:
        FailedPreconditionError: reason DRAFT_VOCABULARY_MISMATCH, naming the first difference.

    """
    size, texts, attrs, special = vocabulary_of(target)
    d_size, d_texts, d_attrs, d_special = vocabulary_of(draft)
    problem = None
    if size != d_size:
        problem = f"it has {d_size} tokens, the target {size}"
    elif special != d_special:
        problem = f"its BOS/EOS ids are {d_special}, the target's {special}"
    else:
        for i in range(size):  # bounded by the vocabulary size
            if texts[i] != d_texts[i] or attrs[i] != d_attrs[i]:
                problem = f"token {i} is {d_texts[i]!r}, the target's {texts[i]!r}"
                break
    if problem is not None:
        raise FailedPreconditionError(
            f"draft model {draft_source!r} of model {model!r} does not share its vocabulary: {problem}",
            reason=Reason.DRAFT_VOCABULARY_MISMATCH,
            model=model,
        )


def batch_add(batch: Any, token: int, position: int, seq_id: int, logits: bool) -> None:
    """Append one token of sequence ``seq_id`` at ``position`` to a ``llama_batch`` (logits: score it)."""
    i = batch.n_tokens
    batch.token[i] = token
    batch.pos[i] = position
    batch.n_seq_id[i] = 1
    batch.seq_id[i][0] = seq_id
    batch.logits[i] = logits
    batch.n_tokens = i + 1


def decode(ctx: Any, batch: Any, what: str) -> None:
    """``llama_decode`` of ``batch`` (a ``LlamaBatch``) in ``ctx`` (a ``LlamaContext``).

    Raises:
        RuntimeError: llama.cpp returned an error status (``what`` names the call).

    """
    import llama_cpp

    status = llama_cpp.llama_decode(ctx.ctx, batch.batch)
    if status != 0:
        raise RuntimeError(f"{what} failed with status {status}")


class DraftModel:
    """A draft GGUF in a llama.cpp context of its own: one KV stream per target slot, greedy drafts.

    Args:
        path: the draft GGUF.
        target: the target's loaded ``LlamaModel`` (its vocabulary is checked against the draft's).
        model: catalog name of the target (for errors).
        draft_source: the ``draft_model`` option as written (for errors).
        slots: sequences (KV streams) of the draft context, the target's ``max_sequences``.
        per_sequence: KV cells per stream, the target's context per sequence.
        n_batch: tokens per decode call.
        threads: llama.cpp threads.
        n_gpu_layers: layers offloaded, as the target's.

    Raises:
        FailedPreconditionError: the vocabularies differ (DRAFT_VOCABULARY_MISMATCH).

    """

    def __init__(
        self,
        path: Path,
        target: Any,
        *,
        model: str,
        draft_source: str,
        slots: int,
        per_sequence: int,
        n_batch: int,
        threads: int,
        n_gpu_layers: int,
    ) -> None:
        import llama_cpp
        from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel

        # The vocabulary is checked before any weight is read (a vocab-only load).
        vocab_params = llama_cpp.llama_model_default_params()
        vocab_params.vocab_only = True
        vocabulary = LlamaModel(path_model=str(path), params=vocab_params, verbose=False)
        try:
            check_vocabularies(target, vocabulary, model=model, draft_source=draft_source)
        finally:
            vocabulary.close()
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        self.model = LlamaModel(path_model=str(path), params=params, verbose=False)
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_seq_max = slots
        ctx_params.n_ctx = per_sequence * slots
        ctx_params.n_batch = ctx_params.n_ubatch = n_batch
        ctx_params.n_threads = ctx_params.n_threads_batch = threads
        ctx_params.kv_unified = False
        self.ctx = LlamaContext(model=self.model, params=ctx_params, verbose=False)
        self._batch = LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)
        self._n_batch = n_batch
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(self.model.vocab))

    def size_bytes(self) -> int:
        """Bytes of the draft's weights plus its KV cache (f16 keys and values)."""
        import llama_cpp

        from engines.generation.context_size import kv_bytes_per_token

        cells = int(llama_cpp.llama_n_ctx(self.ctx.ctx))
        return int(self.model.size()) + cells * kv_bytes_per_token(self.model.metadata())

    def forget(self, slot: int, keep: int = 0) -> None:
        """Drop the slot's draft cells from position ``keep`` on."""
        import llama_cpp

        llama_cpp.llama_memory_seq_rm(self.ctx.memory, slot, keep, -1)

    def draft(self, requests: list[tuple[int, SpeculationState, list[int], int]]) -> list[list[int]]:
        """Greedy drafts for several sequences together.

        Args:
            requests: ``(slot, state, tokens, limit)`` per sequence: its KV stream, its counts
                (``draft_past`` cells already in the draft's cache, updated here), all its tokens
                so far (prompt and output, the next input last) and the most tokens to propose.

        Returns:
            each sequence's draft (``limit`` tokens or fewer), in the order of ``requests``.

        The first decode catches each stream up on the tokens it has not seen (in chunks of
        ``n_batch`` tokens), then ``limit - 1`` single-token decodes extend every draft at once.

        """
        drafts: list[list[int]] = [[] for _ in requests]
        rows: dict[int, int] = {}  # request index -> its row of the last decode
        pending = [(i, state.draft_past) for i, (_, state, _, _) in enumerate(requests)]
        # Catch-up: bounded by the tokens not seen yet, n_batch per decode call.
        while pending:
            self._batch.batch.n_tokens = 0
            still: list[tuple[int, int]] = []
            for i, start in pending:
                slot, state, tokens, _ = requests[i]
                room = self._n_batch - self._batch.batch.n_tokens
                end = min(len(tokens), start + room)
                for position in range(start, end):
                    self._add(tokens[position], position, slot, position == len(tokens) - 1)
                state.draft_past = end
                if end == len(tokens):
                    rows[i] = self._batch.batch.n_tokens - 1
                else:
                    still.append((i, end))
            self._decode()
            for i, row in list(rows.items()):
                drafts[i].append(self._argmax(row))
            rows.clear()
            pending = still
        # Extension: one token per sequence per decode, at most MAX_DRAFT_TOKENS - 1 decodes.
        growing = [i for i, (_, _, _, limit) in enumerate(requests) if limit > 1]
        while growing:
            self._batch.batch.n_tokens = 0
            for i in growing:
                slot, state, _, _ = requests[i]
                self._add(drafts[i][-1], state.draft_past, slot, True)
                state.draft_past += 1
            self._decode()
            for row, i in enumerate(growing):
                drafts[i].append(self._argmax(row))
            growing = [i for i in growing if len(drafts[i]) < requests[i][3]]
        return drafts

    def _add(self, token: int, position: int, slot: int, logits: bool) -> None:
        batch_add(self._batch.batch, token, position, slot, logits)

    def _decode(self) -> None:
        decode(self.ctx, self._batch, "the draft model's llama_decode")

    def _argmax(self, row: int) -> int:
        import llama_cpp

        row_logits = llama_cpp.llama_get_logits_ith(self.ctx.ctx, row)
        return int(np.ctypeslib.as_array(row_logits, shape=(self.vocab_size,)).argmax())

    def close(self) -> None:
        """Free the context, batch and model (context first)."""
        for name in ("ctx", "_batch", "model"):
            obj = getattr(self, name, None)
            if obj is not None:
                obj.close()
            setattr(self, name, None)
