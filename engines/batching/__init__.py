"""Dynamic batching of concurrent encoder requests (see :mod:`engines.batching.batcher`)."""

from engines.batching.batcher import BatchingConfig, BatchStats, DynamicBatcher

__all__ = ["BatchStats", "BatchingConfig", "DynamicBatcher"]
