"""Prompt caching on a llama.cpp context: each sequence slot keeps the KV cells it last held.

Every slot has a KV stream of its own (``kv_unified`` off; with a shared KV pool, one unified
buffer, see :meth:`PromptCache.evict`). When a sequence leaves, the cells
of its prompt stay in its stream and the slot remembers their tokens. A new request takes a
free slot that shares a prefix with its prompt (the earlier turns of its conversation, a shared
system prompt; see :meth:`PromptCache.acquire` for the choice), drops the cells after that
prefix and prefills only the rest, as llama.cpp's own server does with its slots.

Reuse keeps greedy output bitwise reproducible, unlike sharing cells between sequences in a
unified cache: a reused cell holds exactly what a cold prefill computes for the same token at
the same position (llama.cpp's CPU kernels compute each prompt token's row on its own,
whatever else is in the batch, and however the prompt is split), at the same index of the
slot's own stream, so attention adds up the same values in the same order. Cells of
completion tokens are not kept: written one decode step at a time, they differ in their last
bits from a prefill of the same tokens (see
docs/architecture/design-notes.md#prompt-cache-keeps-prefilled-cells-only), which would change
greedy output. ``tests/engines/generation/test_prompt_cache.py``
checks reuse against cold prefills, alone, under concurrency and across conversation turns.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """Where a new sequence goes and what it keeps.

    Attributes:
        slot: the sequence id (and KV stream) it gets.
        reused: prompt tokens whose KV cells the slot already holds; prefill starts there.

    """

    slot: int
    reused: int


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PromptCache:
    """Tracks the tokens whose KV cells each slot holds and picks a slot for each new prompt.

    Args:
        slots: number of sequence slots (``n_seq_max`` of the context).
        enabled: False makes every prompt start cold (the slot's cells are all dropped).

    """

    def __init__(self, slots: int, *, enabled: bool = True) -> None:
        self.enabled = enabled
        # Free slots, least recently released first: among slots that share nothing with a new
        # prompt, the one released longest ago is overwritten first.
        self.free: list[int] = list(range(slots))
        self.tokens: dict[int, list[int]] = {}

    def acquire(self, prompt: list[int]) -> SlotPlan:
        """Take a free slot for ``prompt``, keeping as much reusable cache as possible.

        In order of preference: the slot whose whole cached prompt begins ``prompt`` (a
        conversation's next turn: extending it destroys nothing), longest first; else an
        empty slot (so that another prompt's cache survives for its next use); else the slot
        sharing the longest prefix, the least recently released among equals (a shared system
        prompt is reused, the oldest cached question is dropped).

        At most ``len(prompt) - 2`` tokens are reused: the rest is prefilled as a chunk of two
        or more tokens (the last one's logits give the first completion token), which computes
        exactly what a whole-prompt prefill does, unlike a lone token (see
        ``llama_cpp_step.prefill_chunk_end``).

        Raises:
            RuntimeError: no free slot (the scheduler admits at most ``slots`` sequences).

        """
        if not self.free:
            raise RuntimeError("no free sequence slot")
        shared = {slot: common_prefix(self.tokens.get(slot, []), prompt) for slot in self.free}
        extending = [s for s in self.free if shared[s] and shared[s] == len(self.tokens[s])]
        empty = [s for s in self.free if not self.tokens.get(s)]
        if extending:
            best = max(extending, key=shared.__getitem__)  # max keeps the first (oldest) of equals
        elif empty:
            best = empty[0]
        else:
            best = max(self.free, key=shared.__getitem__)
        reused = min(max(0, len(prompt) - 2), shared[best]) if self.enabled else 0
        self.free.remove(best)
        self.tokens[best] = prompt[:reused]
        return SlotPlan(best, reused)

    @property
    def cached_cells(self) -> int:
        """KV cells the free slots keep for their cached prompts (read from other threads too)."""
        return sum(len(self.tokens.get(slot, ())) for slot in list(self.free))

    def evict(self, limit: int) -> list[int]:
        """Drop free slots' cached prompts, least recently released first, till ``limit`` cells at most stay.

        For a shared KV pool, where cached prompts take cells that a new sequence needs.

        Returns:
            The slots whose cached prompt was dropped, in that order (the caller frees their cells).

        """
        evicted: list[int] = []
        cached = self.cached_cells
        for slot in self.free:
            if cached <= limit:
                break
            held = len(self.tokens.get(slot, ()))
            if held:
                self.tokens[slot] = []
                cached -= held
                evicted.append(slot)
        return evicted

    def release(self, slot: int, prefilled: list[int]) -> int:
        """Return ``slot``, whose cells hold the prefilled prompt tokens ``prefilled``.

        Returns:
            How many leading cells the slot keeps for later prompts: ``len(prefilled)``, or 0
            when the cache is disabled (the caller drops the cells after that).

        """
        kept = prefilled if self.enabled else []
        self.tokens[slot] = kept
        self.free.append(slot)
        return len(kept)
