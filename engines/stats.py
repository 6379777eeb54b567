"""What a loaded engine reports about its own state: one frozen dataclass per capability.

:meth:`engines.base.Engine.stats` returns an :class:`EngineStats`; each capability an engine has
fills its part (a generation engine its scheduler's figures, a batched encoder its queue), the
rest stay None. The service reads nothing else of an engine's internals for the scrape-time
gauges (``service.metrics``) and ``GetModel`` (``service.convert.models``).

Every figure is Python-level bookkeeping, so :meth:`~engines.base.Engine.stats` may be called
from any thread (a metrics scrape) while the model's lane runs, and never waits for the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KvCacheStats:
    """KV cache cells (one per token) of a generation model's context.

    Attributes:
        cells_used: cells held by running sequences and by cached prompts.
        cells_total: cells of the context (the KV pool when one is shared).
        cells_cached: the part of ``cells_used`` held only by prompts that free slots keep for
            reuse; a new sequence may take them (a KV pool drops them when it needs the room).
            ``cells_used - cells_cached`` are the cells running sequences hold.

    """

    cells_used: int
    cells_total: int
    cells_cached: int = 0


@dataclass(frozen=True, slots=True)
class GenerationStats:
    """A continuous-batching generation model's scheduler.

    Attributes:
        running: sequences in the running batch.
        waiting: admitted requests not running yet (being prepared or queued for a slot).
        kv_cache: its KV cells, or None when the backend does not count them.

    """

    running: int
    waiting: int
    kv_cache: KvCacheStats | None = None


@dataclass(frozen=True, slots=True)
class EncoderStats:
    """A batched encoder model's dynamic batcher.

    Attributes:
        queue_depth: inputs queued, or held by requests still preparing them, not running yet.
        requests_running: requests with an input in the batch that runs on the model's lane now.
        requests_waiting: requests not running: preparing their inputs (tokenizing) or with inputs
            queued and none in the running batch.

    """

    queue_depth: int
    requests_running: int = 0
    requests_waiting: int = 0


@dataclass(frozen=True, slots=True)
class EngineStats:
    """An engine's figures, one field per capability (None: the engine has not that capability).

    Attributes:
        generation: the generation scheduler's figures.
        encoder: the encoder batcher's figures.

    """

    generation: GenerationStats | None = None
    encoder: EncoderStats | None = None
