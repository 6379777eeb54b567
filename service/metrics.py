"""Prometheus metrics of the server: per RPC, generation, model lifecycle, and state read at scrape time.

All metrics live on prometheus_client's default registry (one per process), with the ``ur_``
prefix, base units in their names (``_seconds``, ``_bytes``, ``_total``) and the labels
``method`` (RPC name), ``code`` (gRPC status name), ``model`` and ``reason``. The names map the
peers' to ours: vLLM's ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``
(formerly ``time_per_output_token``), ``vllm:e2e_request_latency_seconds``,
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, ``vllm:num_requests_running`` /
``_waiting`` and ``vllm:kv_cache_usage_perc``; TEI's ``te_request_count`` and
``te_request_duration``. docs/operate/observability.md lists every metric.

State that a scrape can read (models loaded, memory per model, sequences running and waiting,
KV cells, encoder queue depth) is not recorded on the request path: :class:`ModelStateCollector`
reads it from the model manager (:func:`register_model_state`) when Prometheus scrapes, so it
costs nothing between scrapes. From the same reading it sums the per-pod gauges of the Gateway
API Inference Extension's model-server protocol (proposal 003: requests queued and running,
KV-cache use as a fraction, the models loaded, the cache's block size), each under our ``ur_``
name and under the vLLM name that endpoint pickers read by default (:class:`PodLoad`).

Exposition: the gateway's ``GET /metrics`` (:mod:`gateway.metrics`, in the same process when
the gateway runs beside the server) and :mod:`service.metrics_server` (``UR_METRICS_PORT`` of the
gRPC server, for deployments without the gateway).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from engines.metrics import LATENCY_BUCKETS, enabled, name_keys
from engines.reasons import Reason
from engines.stats import EngineStats


class ModelManager(Protocol):
    """What the scrape-time gauges read of :class:`service.model_manager.ModelManager`."""

    def models(self) -> list[Any]:
        """Managed models, each with ``spec.name``, ``state``, ``engine`` and ``memory``.

        ``state`` is a ``ModelState``, read by its ``name`` (LOADING, READY...); ``engine`` is None
        when not loaded. A loaded engine's figures come from its ``stats()``
        (:class:`engines.stats.EngineStats`).
        """
        ...


#: Seconds, for whole requests (a long generation runs minutes).
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: Seconds between two tokens of one stream.
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)


def _per_model_histogram(name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
    return Histogram(name, documentation, ["model"], buckets=buckets)


REQUESTS = Counter("ur_requests", "RPCs finished, by method and gRPC status code.", ["method", "code"])
REQUEST_DURATION = Histogram(
    "ur_request_duration_seconds",
    "Time from an RPC's start to its last message (streams: to their end).",
    ["method"],
    buckets=REQUEST_BUCKETS,
)
REQUESTS_BY_KEY = Counter(
    "ur_requests_by_api_key",
    "RPCs finished by the name of the API key they came with (its name in the keys file); "
    "recorded only with the setting metrics_key_names.",
    ["api_key", "code"],
)
REQUESTS_IN_FLIGHT = Gauge("ur_requests_in_flight", "RPCs started and not finished.", ["method"])
REJECTIONS = Counter(
    "ur_rejected_requests",
    "RPCs refused with RESOURCE_EXHAUSTED, by reason: queue_full (OVERLOADED), no_memory "
    "(INSUFFICIENT_MEMORY), message_too_large, storage_quota_exceeded, ...",
    ["method", "reason"],
)
QUOTA_REFUSALS = Counter(
    "ur_quota_exceeded",
    "RPCs refused by their API key's quota (reason QUOTA_EXCEEDED), by the limit that refused them: "
    "requests_per_second, tokens_per_minute, inputs_per_minute, max_concurrent_streams; the key's "
    'name only with the setting metrics_key_names (else "").',
    ["api_key", "limit"],
)
TIME_TO_FIRST_TOKEN = _per_model_histogram(
    "ur_time_to_first_token_seconds",
    "Time from a generation request's start to its first token.",
    LATENCY_BUCKETS,
)
INTER_TOKEN_LATENCY = _per_model_histogram(
    "ur_inter_token_latency_seconds",
    "Time between two consecutive tokens of one generation stream.",
    TOKEN_BUCKETS,
)
E2E_LATENCY = _per_model_histogram(
    "ur_e2e_request_latency_seconds",
    "Time from a generation request's start to its last token (all choices).",
    REQUEST_BUCKETS,
)
PROMPT_TOKENS = Counter("ur_prompt_tokens", "Prompt tokens of finished generation requests.", ["model"])
GENERATION_TOKENS = Counter("ur_generation_tokens", "Tokens generated (all choices).", ["model"])
CACHED_PROMPT_TOKENS = Counter(
    "ur_prompt_tokens_cached", "Prompt tokens served from the prompt (KV) cache.", ["model"]
)
LOAD_DURATION = _per_model_histogram(
    "ur_model_load_duration_seconds",
    "Time to load a model (weights read and placed, lane set up).",
    REQUEST_BUCKETS,
)
UNLOADS = Counter(
    "ur_model_unloads",
    "Models unloaded, by reason: idle (keep-alive expired), explicit (UnloadModel), evicted (to make "
    "room for a load), shutdown.",
    ["model", "reason"],
)
BACKEND_STARTS = Counter(
    "ur_backend_starts", "Backend processes started, by model (the first and every restart).", ["model"]
)
BACKEND_EXITS = Counter(
    "ur_backend_exits",
    "Backend processes that exited while serving (not asked to), by model and reason: the signal "
    "(SIGSEGV, SIGABRT, SIGKILL) or exit_<code>.",
    ["model", "reason"],
)
EVICTIONS = Counter(
    "ur_model_evictions",
    "Idle models unloaded to make room for a load, by why: memory (it did not fit the budget) or "
    "max_loaded_models (the count limit).",
    ["model", "reason"],
)

BATCHES = Counter(
    "ur_batches",
    "Batches (Batch API) by status: validating (created here), then how they ended on this replica: "
    "failed, completed, expired, cancelled.",
    ["status"],
)
BATCH_LINES = Counter(
    "ur_batch_lines",
    "Batch lines run on this replica, by outcome: completed (answered 2xx) or failed (another status, "
    "or no answer).",
    ["outcome"],
)
BATCHES_RUNNING = Gauge("ur_batches_running", "Batches this replica is running now (holds the lease of).")

_REJECTION_REASONS = {
    Reason.OVERLOADED: "queue_full",
    Reason.QUEUE_WAIT_EXCEEDED: "queue_timeout",
    Reason.INSUFFICIENT_MEMORY: "no_memory",
}


def rpc_started(method: str) -> None:
    """Count an RPC in flight (``method``: its short name, ``Embed``)."""
    if enabled():
        REQUESTS_IN_FLIGHT.labels(method).inc()


# Whether RPCs are counted by API key name (setting metrics_key_names; off: no series names a key).
_by_key_name = False


def count_by_key_name(on: bool) -> None:
    """Name API keys in series (off by default), the setting ``metrics_key_names``.

    The series: ``ur_requests_by_api_key_total``, and the ``key`` label of the fair queues'
    ``ur_queue_depth`` and ``ur_queue_wait_seconds``. Key names are the operator's labels for
    clients; a metrics reader sees them only when asked.
    """
    global _by_key_name
    _by_key_name = on
    name_keys(on)


def rpc_finished(method: str, code: str, seconds: float, api_key_name: str = "") -> None:
    """Record a finished RPC: its status code name and duration in seconds.

    ``api_key_name`` is the name of the API key it came with (never the key; "" when keys are off
    or none matched), counted only when :func:`count_by_key_name` turned that on.
    """
    if enabled():
        REQUESTS_IN_FLIGHT.labels(method).dec()
        REQUESTS.labels(method, code).inc()
        REQUEST_DURATION.labels(method).observe(seconds)
        if api_key_name and _by_key_name:
            REQUESTS_BY_KEY.labels(api_key_name, code).inc()


def rpc_rejected(method: str, reason: str) -> None:
    """Record an RPC refused with RESOURCE_EXHAUSTED and its ErrorInfo ``reason``."""
    if enabled():
        REJECTIONS.labels(method, _REJECTION_REASONS.get(reason, reason.lower() or "unknown")).inc()


def quota_exceeded(api_key_name: str, limit: str) -> None:
    """Record a call refused by its key's quota: the key's name (with metrics_key_names) and the limit."""
    if enabled():
        QUOTA_REFUSALS.labels(api_key_name if _by_key_name else "", limit).inc()


def generation_token(model: str, since_previous_s: float | None, since_start_s: float) -> None:
    """Record a generated token's timing: the first one's TTFT, later ones' gap to the previous."""
    if not enabled():
        return
    if since_previous_s is None:
        TIME_TO_FIRST_TOKEN.labels(model).observe(since_start_s)
    else:
        INTER_TOKEN_LATENCY.labels(model).observe(since_previous_s)


def generation_finished(model: str, seconds: float, prompt: int, completion: int, cached: int) -> None:
    """Record a finished generation request: end-to-end seconds and its token counts."""
    if not enabled():
        return
    E2E_LATENCY.labels(model).observe(seconds)
    PROMPT_TOKENS.labels(model).inc(prompt)
    GENERATION_TOKENS.labels(model).inc(completion)
    CACHED_PROMPT_TOKENS.labels(model).inc(cached)


def model_loaded(model: str, seconds: float) -> None:
    """Record a model load that succeeded and how long it took."""
    if enabled():
        LOAD_DURATION.labels(model).observe(seconds)


def model_unloaded(model: str, reason: str) -> None:
    """Record an unload (``reason``: idle, explicit, evicted or shutdown)."""
    if enabled():
        UNLOADS.labels(model, reason).inc()


def backend_started(model: str) -> None:
    """Count a backend process started for ``model``."""
    if enabled():
        BACKEND_STARTS.labels(model).inc()


def backend_exited(model: str, reason: str) -> None:
    """Count a backend process of ``model`` that exited by itself (``reason``: SIGSEGV, exit_1 ...)."""
    if enabled():
        BACKEND_EXITS.labels(model, reason).inc()


def model_evicted(model: str, reason: str) -> None:
    """Record an eviction (``reason``: memory or max_loaded_models; see :mod:`service.memory_budget`)."""
    if enabled():
        EVICTIONS.labels(model, reason).inc()


def batch_status(status: str) -> None:
    """Count a batch created (``validating``) or ended (failed, completed, expired, cancelled)."""
    if enabled():
        BATCHES.labels(status).inc()


def batch_line(outcome: str) -> None:
    """Count a batch line run (``completed``: answered 2xx; ``failed``: otherwise)."""
    if enabled():
        BATCH_LINES.labels(outcome).inc()


def batches_running(change: int) -> None:
    """Move the count of batches this replica runs by ``change`` (+1 when one starts, -1 when it stops)."""
    if enabled():
        BATCHES_RUNNING.inc(change)


_managers: list[ModelManager] = []

#: Tokens per block that ``cache_config_info`` reports. llama.cpp holds KV per token (a cell is a
#: token, and the prompt cache reuses any common prefix), so every block size divides our cells;
#: the EPP reads this only to hash prompts for its prefix-cache index (blocks of 4 characters per
#: token) and sizes that index in blocks (``num_gpu_blocks``). 16 is vLLM's and the EPP's own
#: default: the index then covers the same tokens as with 1-token blocks at a sixteenth of the work.
PROTOCOL_BLOCK_SIZE = 16


@dataclass
class PodLoad:
    """The model-server protocol's per-pod totals over every loaded model (GIE proposal 003).

    Attributes:
        waiting: requests queued: generation requests admitted and not in a batch yet (being
            prepared or queued for a slot), plus batched-encoder requests preparing their inputs
            or with inputs queued and none in the batch that runs.
        running: requests being computed: generation sequences in a running batch, plus
            batched-encoder requests with an input in the batch on the lane now.
        kv_cells_held: KV cells that running sequences hold, over the generation models that count
            cells (llama.cpp); prompts cached in free slots are not counted (a new sequence may
            take their cells), as vLLM counts cached free blocks as free.
        kv_cells_total: KV cells of those models' contexts.
        loaded: names of the models loaded and serving (state Running), sorted.
        loading: names of the models loading now, sorted.
        models: models this pod can serve (the catalog's, with hub ids clients added).

    """

    waiting: int = 0
    running: int = 0
    kv_cells_held: int = 0
    kv_cells_total: int = 0
    loaded: list[str] = field(default_factory=list)
    loading: list[str] = field(default_factory=list)
    models: int = 0

    @property
    def kv_usage_ratio(self) -> float:
        """Held over total KV cells, 0 to 1; 0 when no loaded model counts cells."""
        return self.kv_cells_held / self.kv_cells_total if self.kv_cells_total else 0.0

    def add(self, stats: EngineStats) -> None:
        """Add one loaded engine's figures (:meth:`engines.base.Engine.stats`)."""
        if stats.generation is not None:
            self.waiting += stats.generation.waiting
            self.running += stats.generation.running
            cells = stats.generation.kv_cache
            if cells is not None:
                self.kv_cells_held += max(0, cells.cells_used - cells.cells_cached)
                self.kv_cells_total += cells.cells_total
        if stats.encoder is not None:
            self.waiting += stats.encoder.requests_waiting
            self.running += stats.encoder.requests_running


def _protocol_gauges(
    ours: str, vllm: str, text: str, labels: dict[str, str] | None = None, value: float = 1.0
) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
    """One gauge series named ours and the same named vLLM's (the names pickers read by default).

    One series per family, with no model label: the EPP takes one series of each protocol metric
    (the latest by timestamp, or by value for ``lora_requests_info``), so one series per model
    would hide all models but one.
    """
    families = []
    for name in (ours, vllm):
        family = GaugeMetricFamily(name, text, labels=list(labels or {}))
        family.add_metric(list((labels or {}).values()), value)
        families.append(family)
    return families[0], families[1]


class ModelStateCollector(Collector):
    """Gauges read from the model manager at each scrape.

    ``ur_models_loaded``; per loaded model ``ur_model_memory_bytes{model,memory="ram"|"vram"}``;
    per generation model ``ur_generation_sequences_running`` / ``_waiting`` and
    ``ur_kv_cache_cells_used`` / ``_total`` (llama.cpp); per encoder model
    ``ur_encoder_queue_depth``. Per pod, the model-server protocol (:class:`PodLoad`), each under
    our name and vLLM's: ``ur_requests_waiting`` / ``vllm:num_requests_waiting``,
    ``ur_requests_running`` / ``vllm:num_requests_running``, ``ur_kv_cache_usage_ratio`` /
    ``vllm:kv_cache_usage_perc`` (a fraction, 0 to 1, as vLLM's is), ``ur_lora_requests_info`` /
    ``vllm:lora_requests_info`` (labels ``running_lora_adapters``: models loaded,
    ``waiting_lora_adapters``: models loading, comma-joined; ``max_lora``: models the pod can
    serve; the value is the scrape's Unix time, the "last updated" time the EPP orders series
    by) and ``ur_cache_config_info`` / ``vllm:cache_config_info`` (labels ``block_size``:
    :data:`PROTOCOL_BLOCK_SIZE`, ``num_gpu_blocks``: the KV cells in such blocks; value 1).

    Every figure is each engine's :meth:`~engines.base.Engine.stats`, which reads Python-level
    state only (never calls into a runtime that a lane may be using), so a scrape never waits
    for a model.

    Args:
        manager: the manager to report; None (the process's collector): the latest one that
            :func:`register_model_state` registered and that still runs.

    """

    def __init__(self, manager: ModelManager | None = None) -> None:
        self._manager = manager

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the gauges (called by prometheus_client on each scrape)."""
        manager = self._manager or (_managers[-1] if _managers else None)
        if manager is None:
            return

        def family(name: str, text: str, labels: tuple[str, ...] = ("model",)) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=list(labels))

        loaded = family("ur_models_loaded", "Models loaded now.", ())
        memory = family(
            "ur_model_memory_bytes",
            "Host (ram) and accelerator (vram) bytes a loaded model holds.",
            ("model", "memory"),
        )
        running = family("ur_generation_sequences_running", "Sequences in a generation model's batch.")
        waiting = family(
            "ur_generation_sequences_waiting",
            "Generation requests admitted and not running yet (being prepared or queued).",
        )
        kv_used = family("ur_kv_cache_cells_used", "KV cells held by sequences and cached prompts.")
        kv_total = family("ur_kv_cache_cells_total", "KV cache cells of the context.")
        queue = family("ur_encoder_queue_depth", "Inputs queued or being prepared for batches.")
        backend_rss = family(
            "ur_backend_resident_memory_bytes",
            "Resident memory of a model's backend process and its children (read at most 1 s ago).",
        )
        pod = PodLoad()
        count = 0
        models = manager.models()
        pod.models = len(models)
        for managed in models:
            # ModelState by name: service.model_manager imports this module.
            if managed.state.name == "LOADING":
                pod.loading.append(managed.spec.name)
            engine = managed.engine
            if engine is None:
                continue
            count += 1
            name = managed.spec.name
            if managed.state.name == "READY":
                pod.loaded.append(name)
            usage = managed.memory  # measured at load (a backend process's: every second since)
            memory.add_metric([name, "ram"], usage.ram_bytes)
            memory.add_metric([name, "vram"], usage.vram_bytes)
            stats = engine.stats()
            pod.add(stats)
            if stats.generation is not None:
                running.add_metric([name], stats.generation.running)
                waiting.add_metric([name], stats.generation.waiting)
                cells = stats.generation.kv_cache
                if cells is not None:
                    kv_used.add_metric([name], cells.cells_used)
                    kv_total.add_metric([name], cells.cells_total)
            if stats.encoder is not None:
                queue.add_metric([name], stats.encoder.queue_depth)
            backend = managed.backend_process()
            if backend is not None:
                backend_rss.add_metric([name], backend.rss_bytes)
        loaded.add_metric([], count)
        yield from (loaded, memory, running, waiting, kv_used, kv_total, queue, backend_rss)
        yield from _protocol_families(pod, time.time())


def _protocol_families(pod: PodLoad, now: float) -> Iterator[GaugeMetricFamily]:
    """The model-server protocol's gauges for ``pod`` (``now``: Unix seconds, the LoRA info's value)."""
    yield from _protocol_gauges(
        "ur_requests_waiting",
        "vllm:num_requests_waiting",
        "Requests queued on this server: generation requests not in a batch yet, encoder requests "
        "with no input in the running batch.",
        value=pod.waiting,
    )
    yield from _protocol_gauges(
        "ur_requests_running",
        "vllm:num_requests_running",
        "Requests computed now: generation sequences in a batch, encoder requests in the running batch.",
        value=pod.running,
    )
    yield from _protocol_gauges(
        "ur_kv_cache_usage_ratio",
        "vllm:kv_cache_usage_perc",
        "Fraction (0 to 1) of the generation models' KV cells that running sequences hold.",
        value=pod.kv_usage_ratio,
    )
    adapters = {
        "running_lora_adapters": ",".join(sorted(pod.loaded)),
        "waiting_lora_adapters": ",".join(sorted(pod.loading)),
        "max_lora": str(pod.models),
    }
    yield from _protocol_gauges(
        "ur_lora_requests_info",
        "vllm:lora_requests_info",
        "Models loaded (running_lora_adapters) and loading (waiting_lora_adapters) on this server, "
        "models it can serve (max_lora); the value is the Unix time of the scrape.",
        adapters,
        now,
    )
    cache = {
        "block_size": str(PROTOCOL_BLOCK_SIZE),
        "num_gpu_blocks": str(pod.kv_cells_total // PROTOCOL_BLOCK_SIZE),
    }
    yield from _protocol_gauges(
        "ur_cache_config_info",
        "vllm:cache_config_info",
        "KV cache layout for prefix-aware pickers: tokens per block and the generation models' KV "
        "cells in such blocks.",
        cache,
    )


def register_model_state(manager: ModelManager) -> None:
    """Report ``manager``'s models in the scrape-time gauges.

    The latest registered manager still running is reported (tests start several servers in one
    process).
    """
    if not _managers:
        REGISTRY.register(_COLLECTOR)
    _managers.append(manager)


def unregister_model_state(manager: ModelManager) -> None:
    """Stop reporting ``manager``'s models (its server stopped)."""
    if manager in _managers:
        _managers.remove(manager)
        if not _managers:
            REGISTRY.unregister(_COLLECTOR)


_COLLECTOR = ModelStateCollector()
