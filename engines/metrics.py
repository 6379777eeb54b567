"""Prometheus metrics recorded inside engines (encoder batches, generation steps), on the default registry.

Names follow Prometheus conventions (``ur_`` prefix, base units in the name, ``_total`` added to
counters by the client) and the peers' choices mapped to ours: text-embeddings-inference's
``te_batch_next_size``, ``te_queue_duration`` and ``te_inference_duration`` become the three
encoder histograms below; vLLM's ``vllm:request_success_total{finished_reason}`` becomes
``ur_generation_sequences_finished_total{reason}``, and its per-step batch figures
``ur_generation_batch_size``. Metrics
read from state at scrape time (queue depth, sequences running, KV cells) are not recorded here:
``service.metrics`` collects them from the loaded engines when Prometheus scrapes.

Recording can be switched off for the whole process (:func:`set_enabled`), which is how the
bench measures what metrics cost.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from engines.types import FinishReason

_enabled = True

#: Items per batch: powers of two up to the largest batch limit a catalog entry is likely to set.
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: Seconds, from a millisecond to a minute (queue waits and forward passes of encoders).
#: Sequences per generation step: one bucket per size up to the default max_sequences (8), so
#: a scrape tells a step of 7 from one of 8; then coarser up to large GPU batches.
GENERATION_BATCH_SIZE_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 128, 256)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

ENCODER_BATCH_SIZE = Histogram(
    "ur_encoder_batch_size",
    "Inputs per forward pass of an encoder model's dynamic batcher.",
    ["model"],
    buckets=BATCH_SIZE_BUCKETS,
)
ENCODER_QUEUE_TIME = Histogram(
    "ur_encoder_queue_time_seconds",
    "Time an encoder input waited in its model's batch queue before its forward pass started.",
    ["model"],
    buckets=LATENCY_BUCKETS,
)
ENCODER_COMPUTE_TIME = Histogram(
    "ur_encoder_compute_time_seconds",
    "Time of one batched forward pass of an encoder model (on its lane).",
    ["model"],
    buckets=LATENCY_BUCKETS,
)

GENERATION_BATCH_SIZE = Histogram(
    "ur_generation_batch_size",
    "Sequences per forward pass of a generation model's continuous batch (prefilling ones included).",
    ["model"],
    buckets=GENERATION_BATCH_SIZE_BUCKETS,
)
SEQUENCES_FINISHED = Counter(
    "ur_generation_sequences_finished",
    "Sequences that left a generation model's batch, by finish reason: stop, length, tool_calls, "
    "or cancelled (the caller went away or its deadline passed, it waited past max_queue_wait_s, "
    "a step failed).",
    ["model", "reason"],
)
CANCELLED_TOKENS = Counter(
    "ur_generation_cancelled_tokens",
    "Tokens generated for sequences that were then cancelled (reason cancelled of "
    "ur_generation_sequences_finished_total): work spent on answers that did not finish.",
    ["model"],
)
SPECULATIVE_DRAFT_TOKENS = Counter(
    "ur_speculative_draft_tokens",
    "Draft tokens proposed by speculative decoding (prompt lookup or a draft model) and verified by "
    "the target model.",
    ["model"],
)
SPECULATIVE_ACCEPTED_TOKENS = Counter(
    "ur_speculative_accepted_tokens",
    "Of ur_speculative_draft_tokens_total, the tokens the target model accepted.",
    ["model"],
)


def set_enabled(enabled: bool) -> None:
    """Turn recording on or off for this process (exposition still works; values stop moving)."""
    global _enabled
    _enabled = enabled


def enabled() -> bool:
    """Whether metrics are recorded in this process."""
    return _enabled


def observe_encoder_batch(model: str, queue_times_s: list[float], compute_s: float) -> None:
    """Record one encoder batch: its size, each input's queue time and the pass's duration.

    Args:
        model: catalog name of the model.
        queue_times_s: seconds each input of the batch waited, one value per input.
        compute_s: seconds the forward pass took.

    """
    if not _enabled:
        return
    ENCODER_BATCH_SIZE.labels(model).observe(len(queue_times_s))
    queue = ENCODER_QUEUE_TIME.labels(model)
    for waited in queue_times_s:
        queue.observe(waited)
    ENCODER_COMPUTE_TIME.labels(model).observe(compute_s)


def observe_generation_step(model: str, sequences: int) -> None:
    """Record one generation step that advances ``sequences`` sequences of ``model``'s batch."""
    if _enabled:
        GENERATION_BATCH_SIZE.labels(model).observe(sequences)


def observe_sequence_finished(model: str, reason: FinishReason, completion_tokens: int) -> None:
    """Record a sequence that left ``model``'s batch.

    Args:
        model: catalog name of the model.
        reason: its finish reason (``stop``, ``length``, ``tool_calls``, ``cancelled``).
        completion_tokens: tokens it generated (counted in ``ur_generation_cancelled_tokens_total``
            when ``reason`` is ``cancelled``).

    """
    if not _enabled:
        return
    SEQUENCES_FINISHED.labels(model, reason).inc()
    if reason is FinishReason.CANCELLED:
        CANCELLED_TOKENS.labels(model).inc(completion_tokens)


def observe_speculation(model: str, drafted: int, accepted: int) -> None:
    """Count one step's draft tokens of a sequence of ``model`` and how many the target accepted."""
    if not _enabled or not drafted:
        return
    SPECULATIVE_DRAFT_TOKENS.labels(model).inc(drafted)
    SPECULATIVE_ACCEPTED_TOKENS.labels(model).inc(accepted)
