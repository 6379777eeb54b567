"""Embed, Rerank and ExtractEntities: one acquire and one engine call each."""

from __future__ import annotations

from engines.capabilities import Embedder, EntityExtractor, Reranker
from engines.encoder_types import EntityRequest, EntityResult, RerankRequest, RerankResult
from engines.types import EmbeddingRequest, EmbeddingResult
from service.model_manager import ModelManager


class EncoderTask:
    """Encoder-model calls whose batching happens inside the engines.

    Every method takes the catalog ``model``, an optional ``keep_alive`` override and a
    validated request, and raises the errors of :meth:`ModelManager.acquire` and of the engine.

    Args:
        manager: where engines are acquired.

    """

    def __init__(self, manager: ModelManager) -> None:
        self._manager = manager

    async def embed(self, model: str, keep_alive: str | None, request: EmbeddingRequest) -> EmbeddingResult:
        """Vectors in input order, shape (len(inputs), dimensions), float32."""
        async with self._manager.acquire(model, Embedder, keep_alive) as embedder:
            return await embedder.embed(request)

    async def rerank(self, model: str, keep_alive: str | None, request: RerankRequest) -> RerankResult:
        """Documents sorted by relevance, best first (cross-encoder, or bi-encoder cosine)."""
        async with self._manager.acquire(model, Reranker, keep_alive) as reranker:
            return await reranker.rerank(request)

    async def extract_entities(
        self, model: str, keep_alive: str | None, request: EntityRequest
    ) -> EntityResult:
        """Named entities of each input, in order of appearance."""
        async with self._manager.acquire(model, EntityExtractor, keep_alive) as extractor:
            return await extractor.extract_entities(request)
