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

from engines.documents.types import DocumentAnswer, DocumentField, DocumentLabel, StructuredPage
from engines.encoder_types import (
    ClassificationRequest,
    ClassificationResult,
    EntityRequest,
    EntityResult,
    RerankRequest,
    RerankResult,
)
from engines.images.types import ImageEvent, ImageLimits, ImageRequest
from engines.ocr.types import OcrLimits, OcrOptions, OcrPage
from engines.speech.types import (
    AudioFormat,
    AudioLimits,
    SpeechAudio,
    SpeechOptions,
    TranscriptionEvent,
    TranscriptionOptions,
    Voice,
)
from engines.types import (
    DetokenizeRequest,
    EmbeddingRequest,
    EmbeddingResult,
    GenerationDelta,
    GenerationRequest,
    Task,
    TokenizeRequest,
    TokenizeResult,
)

if TYPE_CHECKING:
    from PIL.Image import Image

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

    async def read_page_and_image(
        self, document: Document | PdfFile, page_number: int, options: OcrOptions
    ) -> tuple[OcrPage, Image]:
        """Read one page (1-based) like :meth:`read_page`, and also return its RGB image.

        For a PDF page read from its text layer, the image is the page rendered at
        ``options.pdf_dpi``.
        """
        ...

    def close_document(self, document: Document | PdfFile) -> None:
        """Queue the document's release on the engine's thread (safe after a cancelled call)."""
        ...


@runtime_checkable
class LayoutAnalyzer(Protocol):
    """A page image and its OCR → a structured page (regions, reading order, tables, Markdown)."""

    async def analyze_page(self, image: Image, page: OcrPage) -> StructuredPage:
        """Detect the layout of ``image`` and structure ``page``'s lines into it (one lane job).

        ``page`` is the OCR of ``image`` (same pixel coordinates).
        """
        ...


@runtime_checkable
class DocumentQuestionAnswerer(Protocol):
    """A page and a question → an answer with its source (DocVQA models: LayoutLMv3, Donut)."""

    async def answer_question(self, image: Image, page: OcrPage, question: str) -> DocumentAnswer:
        """The answer found on the page, with a citation box where the model gives one.

        Raises:
            InvalidArgumentError: an empty question; InputTooLongError: a question over the
                model's limit.

        """
        ...


@runtime_checkable
class DocumentFieldExtractor(Protocol):
    """A page → typed fields (token classification such as FUNSD/CORD labels, or Donut parsing)."""

    async def extract_fields(self, image: Image, page: OcrPage) -> list[DocumentField]:
        """Fields found on the page, in reading order, each with its source box."""
        ...


@runtime_checkable
class DocumentClassifier(Protocol):
    """A page → document classes with scores (RVL-CDIP-style models)."""

    async def classify_document(self, image: Image, page: OcrPage) -> list[DocumentLabel]:
        """Every label of the model with its score, best first; scores sum to 1."""
        ...


@runtime_checkable
class Transcriber(Protocol):
    """Encoded audio → its text in timed segments (speech to text)."""

    def resolve_language(self, language: str | None) -> str | None:
        """The engine's code for ISO 639-1 ``language``; None lets the engine detect it (cheap).

        Raises:
            InvalidArgumentError: a language the model cannot hear (UNSUPPORTED_LANGUAGE), or
                translation asked of a model that cannot translate.

        """
        ...

    def transcribe(
        self, data: bytes, limits: AudioLimits, options: TranscriptionOptions
    ) -> AsyncIterator[TranscriptionEvent]:
        """A :class:`~engines.speech.types.TranscriptionInfo`, then each segment as it is recognized.

        ``data`` is an encoded audio file (WAV, FLAC, MP3, OGG/Opus, M4A...), decoded on the
        engine's lane within ``limits``; speech is cut into windows by voice activity, one lane
        job each, so other callers' work interleaves between windows. Use with
        ``contextlib.aclosing``.

        Raises:
            InvalidArgumentError: empty or undecodable audio (EMPTY_FILE, UNSUPPORTED_FORMAT).
            ResourceExhaustedError: over ``limits`` (FILE_TOO_LARGE, AUDIO_TOO_LONG).

        """
        ...


@runtime_checkable
class SpeechSynthesizer(Protocol):
    """Text → encoded speech audio, streamed a sentence at a time (text to speech)."""

    async def voices(self) -> tuple[Voice, ...]:
        """The voices the model speaks with, its default first."""
        ...

    def synthesize(
        self, text: str, options: SpeechOptions, audio_format: AudioFormat
    ) -> AsyncIterator[SpeechAudio]:
        """The speech of ``text`` encoded as ``audio_format``, in pieces to concatenate in order.

        Each sentence is one lane job, so other callers' work interleaves between sentences and
        the first audio comes before the whole text is spoken. Use with ``contextlib.aclosing``.

        Raises:
            InvalidArgumentError: an unknown voice (UNKNOWN_VOICE), empty text.

        """
        ...


@runtime_checkable
class ImageGenerator(Protocol):
    """Prompt → images (text to image, OpenAI ``/v1/images/generations``)."""

    def generate(self, request: ImageRequest, limits: ImageLimits) -> AsyncIterator[ImageEvent]:
        """Each image's progress events while it denoises, then the image, for ``n`` images in turn.

        The request is checked against the model and ``limits`` before any work, so nothing runs
        for a refused one. Each image is one lane job, so other callers' work interleaves between
        images; closing the iterator (use ``contextlib.aclosing``) or cancelling the consumer stops
        the running job at its next denoising step.

        Raises:
            InvalidArgumentError: a size that is not a multiple of the model's size step or not
                one of its sizes, n or steps out of range, a bad guidance scale or seed; a prompt
                over ``limits.max_prompt_chars`` (INPUT_TOO_LONG).
            ResourceExhaustedError: an image over ``limits.max_pixels``, or the call over
                ``limits.max_work`` pixel-steps (IMAGE_TOO_LARGE; metadata ``limit`` names which).

        """
        ...


@runtime_checkable
class Tokenizer(Protocol):
    """Text or chat → token ids, and ids → text, with the model's own tokenizer.

    No catalog task names it: every model whose engine has a tokenizer offers it (see
    :data:`TASKLESS_CAPABILITIES`).
    """

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        """Token ids of the prompt, or of the messages rendered by the chat template.

        Raises:
            InputTooLongError: the text is over the model's character limit (see
                :func:`engines.batching.tokens.character_limit`).
            InvalidArgumentError: messages for a model without a chat template (NO_CHAT_TEMPLATE),
                or that the template rejects (CHAT_TEMPLATE_ERROR).
            FailedPreconditionError: offsets the tokenizer cannot give (OFFSETS_NOT_SUPPORTED).

        """
        ...

    async def detokenize(self, request: DetokenizeRequest) -> str:
        """The text of the token ids.

        Raises:
            InvalidArgumentError: an id outside the vocabulary (TOKEN_OUT_OF_VOCABULARY), or too
                many ids (INPUT_TOO_LONG; see :func:`engines.tokenization.check_token_ids`).

        """
        ...


Capability = TypeVar(
    "Capability",
    Embedder,
    Reranker,
    Classifier,
    EntityExtractor,
    TextGenerator,
    OcrReader,
    LayoutAnalyzer,
    DocumentQuestionAnswerer,
    DocumentFieldExtractor,
    DocumentClassifier,
    Transcriber,
    SpeechSynthesizer,
    ImageGenerator,
    Tokenizer,
)

#: The catalog task each capability serves: a model must list it to be acquired as that capability.
CAPABILITY_TASKS: dict[type, Task] = {
    Embedder: Task.EMBED,
    Reranker: Task.RERANK,
    Classifier: Task.CLASSIFY,
    EntityExtractor: Task.EXTRACT_ENTITIES,
    TextGenerator: Task.GENERATE,
    OcrReader: Task.OCR,
    LayoutAnalyzer: Task.LAYOUT,
    DocumentQuestionAnswerer: Task.DOCUMENT_QA,
    DocumentFieldExtractor: Task.EXTRACT_FIELDS,
    DocumentClassifier: Task.CLASSIFY_DOCUMENT,
    Transcriber: Task.TRANSCRIBE,
    SpeechSynthesizer: Task.SYNTHESIZE_SPEECH,
    ImageGenerator: Task.GENERATE_IMAGE,
}

#: Capabilities a model offers whenever its engine has them, whatever tasks its catalog entry lists,
#: by the name errors give them.
TASKLESS_CAPABILITIES: dict[type, str] = {Tokenizer: "tokenize"}
