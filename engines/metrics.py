"""Prometheus metrics recorded inside engines (encoder batches, generation steps), on the default registry.

Names follow Prometheus conventions (``ur_`` prefix, base units in the name, ``_total`` added to
counters by the client) and the peers' choices mapped to ours: text-embeddings-inference's
``te_batch_next_size``, ``te_queue_duration`` and ``te_inference_duration`` become the three
encoder histograms below; vLLM's ``vllm:request_success_total{finished_reason}`` becomes
``ur_generation_sequences_finished_total{reason}``, and its per-step batch figures
``ur_generation_batch_size``. Metrics
read from state at scrape time (queue depth, sequences running, KV cells) are not recorded here:
``service.metrics`` collects them from the loaded engines when Prometheus scrapes, and
:class:`QueueDepthCollector` the fair queues' depths per key and class (``ur_queue_depth``;
their waits are ``ur_queue_wait_seconds``).

Recording can be switched off for the whole process (:func:`set_enabled`), which is how the
bench measures what metrics cost.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from engines.fair_share import Priority
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
QUEUE_WAIT = Histogram(
    "ur_queue_wait_seconds",
    "Time work waited in a model's or lane's fair queue before it was served (an encoder input's "
    "batch, a generation request's slot, a lane job's turn), by API key name and priority class.",
    ["model", "key", "priority"],
    buckets=LATENCY_BUCKETS,
)

# Whether the fair queues' series name API keys (the setting metrics_key_names; off: key="").
_key_names = False


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


def name_keys(on: bool) -> None:
    """Label the fair queues' series with API key names (the setting ``metrics_key_names``).

    Off (the default), their ``key`` label is empty: no series names a key unless the operator
    asked, as for ``ur_requests_by_api_key_total``. Key names come from the keys file, never from
    the client, so the label's values are bounded by the configured keys.
    """
    global _key_names
    _key_names = on


class QueueDepths(Protocol):
    """A queue whose depths per key and class are read at scrapes (:class:`engines.fair_queue.FairQueue`)."""

    name: str

    def depths(self) -> list[tuple[str, Priority, int]]:
        """``(key, priority, items queued)`` for each key and class with items queued."""


_queues: weakref.WeakSet[QueueDepths] = weakref.WeakSet()


def track_queue_depth(queue: QueueDepths) -> None:
    """Report ``queue``'s depths in ``ur_queue_depth`` while it lives (read at each scrape)."""
    _queues.add(queue)


class QueueDepthCollector(Collector):
    """``ur_queue_depth{model,key,priority}``: items queued in the live fair queues, read at scrape time.

    Nothing is recorded on the request path; a scrape sums each queue's per-key counts (the key
    label empty unless :func:`name_keys` is on, so those sum over keys).
    """

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the gauge (called by prometheus_client on each scrape, from its thread)."""
        family = GaugeMetricFamily(
            "ur_queue_depth",
            "Work queued for a model or lane, by API key name and priority class: encoder inputs, "
            "generation requests waiting for a slot, lane jobs waiting for their turn (the key "
            "label is empty unless metrics_key_names is on).",
            labels=["model", "key", "priority"],
        )
        totals: dict[tuple[str, str, str], int] = {}
        for queue in list(_queues):  # bounded by the live queues (models and lanes loaded)
            for key, priority, count in queue.depths():
                labels = (queue.name, key if _key_names else "", priority.name.lower())
                totals[labels] = totals.get(labels, 0) + count
        for labels, count in totals.items():
            family.add_metric(list(labels), count)
        yield family


REGISTRY.register(QueueDepthCollector())


def observe_fair_queue_wait(model: str, key: str, priority: Priority, seconds: float) -> None:
    """Record that an item of ``key`` and ``priority`` waited ``seconds`` in ``model``'s fair queue."""
    if _enabled:
        QUEUE_WAIT.labels(model, key if _key_names else "", priority.name.lower()).observe(seconds)
