"""Dynamic batching of concurrent encoder requests (see :mod:`engines.batching.batcher`)."""

from engines.batching.batcher import BatchingConfig, DynamicBatcher

__all__ = ["BatchingConfig", "DynamicBatcher"]
