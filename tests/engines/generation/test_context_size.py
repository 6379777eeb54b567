"""The GGUF context calculator: training context, memory limits, overrides."""

from __future__ import annotations

from engines.generation.context_size import kv_bytes_per_token, plan_context

SMOLLM2 = {  # the metadata of SmolLM2-135M
    "general.architecture": "llama",
    "llama.block_count": "30",
    "llama.embedding_length": "576",
    "llama.attention.head_count": "9",
    "llama.attention.head_count_kv": "3",
}


def test_kv_bytes_per_token_uses_grouped_query_heads():
    # 2 (K, V) x 30 layers x (576 * 3 / 9 = 192 dims) x 2 bytes
    assert kv_bytes_per_token(SMOLLM2) == 2 * 30 * 192 * 2


def test_training_context_when_it_fits():
    plan = plan_context(n_ctx_train=2048, per_token_bytes=23040, sequences=8, available_bytes=10 << 30)
    assert plan.per_sequence == 2048 and plan.reason == "training context"


def test_capped_when_training_context_is_huge():
    plan = plan_context(n_ctx_train=131072, per_token_bytes=23040, sequences=8, available_bytes=100 << 30)
    assert plan.per_sequence == 4096


def test_limited_by_memory_and_aligned():
    # 100 MB for 8 sequences at 23040 bytes per token: 542 tokens fit → 512 after alignment.
    plan = plan_context(n_ctx_train=8192, per_token_bytes=23040, sequences=8, available_bytes=100_000_000)
    assert plan.per_sequence == 512
    assert "memory" in plan.reason


def test_override_wins():
    plan = plan_context(n_ctx_train=2048, per_token_bytes=23040, sequences=8, available_bytes=1, override=300)
    assert plan.per_sequence == 300 and plan.reason == "configured"
