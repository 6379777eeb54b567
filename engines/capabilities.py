"""What a loaded engine can do, as typed protocols: the only engine surface tasks call.

``ModelManager.acquire(name, Embedder)`` hands back the engine typed as an :class:`Embedder`,
so no caller needs ``hasattr`` or ``isinstance``. The pattern follows text-embeddings-inference's
``Backend`` trait and vLLM's ``EngineClient`` protocol: callers depend on a small interface, not on
the class behind it. Each protocol is ``runtime_checkable`` so the manager can refuse a catalog
entry whose engine lacks the capability its task needs (a misconfigured catalog, not a client
error it could fix).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from engines.encoder_types import (
    ClassificationRequest,
    ClassificationResult,
    EntityRequest,
    EntityResult,
    RerankRequest,
    RerankResult,
)
from engines.ocr.types import OcrLimits, OcrOptions, OcrPage
from engines.types import EmbeddingRequest, EmbeddingResult, GenerationDelta, GenerationRequest, Task

if TYPE_CHECKING:
    from engines.ocr.documents import Document, PdfFile


@runtime_checkable
class Embedder(Protocol):
    """Text → vectors (sentence-transformers bi-encoders)."""

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        """Vectors of shape (len(inputs), dimensions), float32, in input order.

        Raises:
            InvalidArgumentError, InputTooLongError, ResourceExhaustedError: see the engine.

        """
        ...


@runtime_checkable
class Reranker(Protocol):
    """Query + documents → documents sorted by relevance."""

    async def rerank(self, request: RerankRequest) -> RerankResult:
        """Documents sorted best first, with their index in the request."""
        ...


@runtime_checkable
class Classifier(Protocol):
    """Texts → labels with scores (trained heads, or zero-shot candidate labels)."""

    async def classify(self, request: ClassificationRequest) -> ClassificationResult:
        """One classification per input, in order."""
        ...


@runtime_checkable
class EntityExtractor(Protocol):
    """Texts → named entities with character offsets."""

    async def extract_entities(self, request: EntityRequest) -> EntityResult:
        """Entities of each input, in order of appearance."""
        ...


@runtime_checkable
class TextGenerator(Protocol):
    """Prompt or chat → streamed completion (continuous batching inside)."""

    def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        """Deltas of one completion; the last has ``finish_reason`` and ``usage``.

        Use with ``contextlib.aclosing`` so that a consumer that stops early frees its slot.
        """
        ...


@runtime_checkable
class OcrReader(Protocol):
    """Image or PDF bytes → pages of text, one page per job so other callers interleave."""

    def resolve_languages(self, languages: tuple[str, ...]) -> tuple[str, ...]:
        """The engine's codes for ISO 639-1 ``languages`` (cheap: call before any work).

        Raises:
            InvalidArgumentError: a language the engine cannot read (UNSUPPORTED_LANGUAGE).

        """
        ...

    async def open_document(self, data: bytes, mime_type: str, limits: OcrLimits) -> Document | PdfFile:
        """Open ``data`` within ``limits`` (pixels, pages, bytes; see ``OcrLimits``).

        Raises:
            InvalidArgumentError, ResourceExhaustedError: unreadable, or over a limit.

        """
        ...

    async def read_page(self, document: Document | PdfFile, page_number: int, options: OcrOptions) -> OcrPage:
        """Read one page (1-based) of an open document."""
        ...

    def close_document(self, document: Document | PdfFile) -> None:
        """Queue the document's release on the engine's thread (safe after a cancelled call)."""
        ...


Capability = TypeVar("Capability", Embedder, Reranker, Classifier, EntityExtractor, TextGenerator, OcrReader)

#: The catalog task each capability serves: a model must list it to be acquired as that capability.
CAPABILITY_TASKS: dict[type, Task] = {
    Embedder: Task.EMBED,
    Reranker: Task.RERANK,
    Classifier: Task.CLASSIFY,
    EntityExtractor: Task.EXTRACT_ENTITIES,
    TextGenerator: Task.GENERATE,
    OcrReader: Task.OCR,
}
