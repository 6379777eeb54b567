"""Context size for a GGUF model from its training context and the memory available.

As LlamaFarm's context calculator does: use the model's training context unless that would
not fit in memory, then the largest size that does, and always honour an explicit override.
The KV cache costs ``2 (K and V) * layers * kv_dim * bytes_per_element`` per token per sequence
(llama.cpp's f16 cache: 2 bytes per element).
"""

from __future__ import annotations

from dataclasses import dataclass

CONTEXT_ALIGNMENT = 256  # llama.cpp pads contexts to 256 cells
MIN_CONTEXT = 512
DEFAULT_CAP = 4096  # beyond this, small local models rarely benefit and memory grows linearly


@dataclass(frozen=True, slots=True)
class ContextPlan:
    """The chosen tokens per sequence and why."""

    per_sequence: int
    reason: str


def kv_bytes_per_token(metadata: dict[str, str], bytes_per_element: int = 2) -> int:
    """KV-cache bytes one token costs, from GGUF metadata (``<arch>.block_count`` etc.)."""
    arch = metadata.get("general.architecture", "llama")
    layers = int(metadata.get(f"{arch}.block_count", 0))
    embed = int(metadata.get(f"{arch}.embedding_length", 0))
    heads = int(metadata.get(f"{arch}.attention.head_count", 1)) or 1
    kv_heads = int(metadata.get(f"{arch}.attention.head_count_kv", heads))
    return 2 * layers * (embed * kv_heads // heads) * bytes_per_element


def plan_context(
    *,
    n_ctx_train: int,
    per_token_bytes: int,
    sequences: int,
    available_bytes: int,
    override: int | None = None,
    cap: int = DEFAULT_CAP,
) -> ContextPlan:
    """Tokens per sequence for a context shared by ``sequences`` sequences.

    Args:
        n_ctx_train: the model's training context (``<arch>.context_length``).
        per_token_bytes: KV bytes per token (:func:`kv_bytes_per_token`).
        sequences: sequences the context holds at once.
        available_bytes: memory the KV cache may use (free memory minus weights and headroom).
        override: an explicit size from the catalog; taken as given.
        cap: upper bound when no override is given.

    """
    if override:
        return ContextPlan(override, "configured")
    wanted = min(n_ctx_train or cap, cap)
    if per_token_bytes <= 0 or sequences <= 0:
        return ContextPlan(wanted, "training context")
    fits = available_bytes // (per_token_bytes * sequences)
    fits = max(MIN_CONTEXT, fits // CONTEXT_ALIGNMENT * CONTEXT_ALIGNMENT)
    if fits < wanted:
        return ContextPlan(fits, f"limited by memory ({available_bytes} bytes for the KV cache)")
    reason = "training context" if wanted == n_ctx_train else f"training context capped at {cap}"
    return ContextPlan(wanted, reason)
