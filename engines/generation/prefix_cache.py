"""Prompt-prefix reuse across the sequence slots of one llama.cpp context.

When a slot's sequence ends, the KV cells of its prompt stay in the context; a later prompt
that starts with the same tokens (a shared system prompt, a growing conversation) reuses them
instead of recomputing them, through ``llama_memory_seq_cp`` from any slot, running or free,
which in a unified KV cache only tags the cells with one more sequence id.

Reuse happens at multiples of ``block`` tokens, and with reuse on, prompts are prefilled one
block-aligned chunk per decode, so a token is always computed with the same neighbours whether
its prefix was cached or not. That is not enough for bitwise reproducibility: shared cells sit
elsewhere in the unified KV buffer than a cold prompt's, which changes the summation order in
attention and, rarely, a greedy token. Reuse is therefore off by default (catalog option
``prefix_cache_block``); turn it on where time to first token matters more than identical
output for identical requests (measured here: 14-22 ms instead of ~120 ms for a repeated
39-token chat prompt on SmolLM2-135M, 2 CPU cores).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """Where a new sequence goes and what it reuses.

    Attributes:
        slot: the sequence id it gets.
        reused: prompt tokens whose KV cells it starts with (a multiple of the block).
        source: the slot to copy those cells from, or None (reused in place, or nothing reused).

    """

    slot: int
    reused: int
    source: int | None


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PrefixCache:
    """Tracks which prompt tokens each slot holds and plans slot assignment.

    Args:
        slots: number of sequence slots (``n_seq_max`` of the context).
        block: reuse granularity in tokens; 0 disables reuse (every prompt starts cold).

    """

    def __init__(self, slots: int, block: int) -> None:
        self.block = block
        self.free: list[int] = list(range(slots))
        self.tokens: dict[int, list[int]] = {}

    def chunk_end(self, position: int, prompt_length: int, budget: int) -> int:
        """End (exclusive) of the next prefill chunk that starts at ``position``."""
        end = min(prompt_length, position + budget)
        if self.block:
            end = min(end, (position // self.block + 1) * self.block)
        return end

    def acquire(self, prompt: list[int]) -> SlotPlan:
        """Take a free slot for ``prompt`` and choose the prefix it reuses.

        Raises:
            RuntimeError: no free slot (the scheduler admits at most ``slots`` sequences).

        """
        if not self.free:
            raise RuntimeError("no free sequence slot")
        if not self.block:
            slot = self.free.pop()
            self.tokens.pop(slot, None)
            return SlotPlan(slot, 0, None)
        # At least one prompt token must be decoded to get logits for the first sampled token.
        limit = (len(prompt) - 1) // self.block * self.block

        def reusable(slot: int) -> int:
            held = self.tokens.get(slot)
            if not held:
                return 0
            return min(limit, common_prefix(held, prompt) // self.block * self.block)

        # The destination is the free slot whose cached prompt is least useful (the oldest
        # released among equals), so other cached prompts stay for later requests; the prefix
        # comes from the best slot anywhere, free or running. In a unified KV cache the copy only
        # tags cells with one more sequence id.
        slot = min(self.free, key=lambda s: (reusable(s), self.free.index(s)))
        source = max(self.tokens, key=reusable, default=None)
        self.free.remove(slot)
        if source is None or reusable(source) == 0:
            self.tokens.pop(slot, None)
            return SlotPlan(slot, 0, None)
        if source == slot:
            return SlotPlan(slot, reusable(slot), None)
        reused = reusable(source)
        self.tokens.pop(slot, None)
        return SlotPlan(slot, reused, source)

    def record(self, slot: int, tokens: list[int]) -> None:
        """Note the prompt tokens whose KV cells ``slot`` now holds."""
        self.tokens[slot] = tokens

    def release(self, slot: int, kept: list[int]) -> None:
        """Return ``slot``; ``kept`` are the prompt tokens left in its cells (empty: none)."""
        if self.block and kept:
            self.tokens[slot] = kept
        else:
            self.tokens.pop(slot, None)
        self.free.append(slot)
