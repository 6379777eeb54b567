"""Prometheus metrics recorded inside engines (encoder batches), on the process's default registry.

Names follow Prometheus conventions (``ur_`` prefix, base units in the name) and the peers'
choices mapped to ours: text-embeddings-inference's ``te_batch_next_size``,
``te_queue_duration`` and ``te_inference_duration`` become the three histograms below. Metrics
read from state at scrape time (queue depth, sequences running, KV cells) are not recorded here:
``service.metrics`` collects them from the loaded engines when Prometheus scrapes.

Recording can be switched off for the whole process (:func:`set_enabled`), which is how the
bench measures what metrics cost.
"""

from __future__ import annotations

from prometheus_client import Histogram

_enabled = True

#: Items per batch: powers of two up to the largest batch limit a catalog entry is likely to set.
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: Seconds, from a millisecond to a minute (queue waits and forward passes of encoders).
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
