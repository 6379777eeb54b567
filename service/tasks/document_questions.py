"""AskDocument, ExtractDocument, ClassifyDocument: composed on our own engines, or one document model.

Composed (the default, offline): the document is analysed into blocks (:class:`DocumentTask`),
then
- a question: the blocks are ranked against it by an embedding model (bi-encoder cosine, the
  ``rerank`` task) fused with a lexical ranking (:mod:`engines.documents.retrieval`), the best
  ``top_k`` go to a generation model in a prompt, and the answer is
  grounded back to the lines it came from (:func:`engines.documents.grounding.ground_answer`);
- a schema: the pages' Markdown goes to a generation model constrained to the JSON Schema (the
  ``json_schema`` response format), and each leaf value is looked up on the pages for its box;
- candidate labels: the document's text is classified zero-shot by an embedding model.

A catalog model serving ``document_qa``, ``extract_fields`` or ``classify_document`` (LayoutLMv3,
Donut) instead reads each page's image and OCR words itself.

Bounds: pages and pixels by the OCR limits; the prompt by :data:`CONTEXT_CHARS` characters of
blocks (each block clipped to :data:`BLOCK_CHARS`); the answer by ``max_tokens``; the blocks
ranked by the count the OCR limits allow (pages x blocks per page).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from PIL.Image import Image

from engines.capabilities import (
    CAPABILITY_TASKS,
    Capability,
    DocumentClassifier,
    DocumentFieldExtractor,
    DocumentQuestionAnswerer,
)
from engines.documents.grounding import flatten_fields, ground_answer, ground_value
from engines.documents.retrieval import fuse_rankings, lexical_ranking
from engines.documents.types import (
    Block,
    Citation,
    DocumentAnswer,
    DocumentField,
    DocumentLabel,
    RegionType,
    StructuredPage,
)
from engines.encoder_types import ClassificationRequest, RerankRequest
from engines.errors import InvalidArgumentError, TaskNotSupportedError
from engines.generation.json_grammar import compile_in_worker, gbnf_grammar
from engines.generation.structured import OutputConstraint
from engines.ocr.types import OcrPage
from engines.reasons import Reason
from engines.types import (
    ChatMessage,
    GenerationRequest,
    ResponseFormat,
    ResponseFormatKind,
    SamplingParams,
    Task,
)
from service.model_manager import ModelManager
from service.tasks.classifiers import ClassifierTask
from service.tasks.documents import DocumentReadJob, DocumentTask
from service.tasks.encoders import EncoderTask
from service.tasks.generation import GenerationTask

Result = TypeVar("Result")

CONTEXT_CHARS = 5000
"""Most characters of document text put in one prompt: about 1,300 tokens, which leaves room for
the instructions and the answer in a 2,048-token context (the default model's)."""
BLOCK_CHARS = 1500
"""Most characters of one block in a prompt or a ranking (a long table is cut, not dropped)."""

ANSWER_INSTRUCTIONS = (
    "Answer the question using only the document excerpts. "
    "Copy the answer exactly as written in the excerpts. If they do not hold it, say so."
)
EXTRACT_INSTRUCTIONS = "You read documents and fill in JSON. Use only values that appear in the document."


@dataclass(frozen=True, slots=True)
class AskJob:
    """A validated AskDocument call (``top_k`` 1..16, ``max_tokens`` 1..512).

    ``max_ranked_blocks`` bounds the blocks the embedding model ranks (the server's
    ``max_batch_inputs``, the Embed RPC's limit too).
    """

    read: DocumentReadJob
    question: str
    model: str
    embedding_model: str
    top_k: int
    max_tokens: int
    max_ranked_blocks: int


@dataclass(frozen=True, slots=True)
class ExtractJob:
    """A validated ExtractDocument call; ``json_schema`` is required for a generation model."""

    read: DocumentReadJob
    json_schema: dict | None
    model: str
    max_tokens: int


@dataclass(frozen=True, slots=True)
class ClassifyDocumentJob:
    """A validated ClassifyDocument call; ``candidate_labels`` is required for an embedding model."""

    read: DocumentReadJob
    model: str
    candidate_labels: tuple[str, ...]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit]


def _text_blocks(pages: Sequence[StructuredPage]) -> list[tuple[int, Block]]:
    """Every block with text, with its page number, in reading order."""
    return [(page.page_number, block) for page in pages for block in page.blocks if block.text.strip()]


def _page_markdown(pages: Sequence[StructuredPage]) -> str:
    """The pages' Markdown, headers and footers included (a vendor's name is often a header)."""
    parts = []
    for page in pages:
        running = [b.text for b in page.blocks if b.type in (RegionType.PAGE_HEADER, RegionType.PAGE_FOOTER)]
        parts.append("\n\n".join(filter(None, [*running, page.markdown])))
    return _clip("\n\n".join(parts), CONTEXT_CHARS)


COMPOSED_TASKS: dict[type[Capability], Task] = {
    DocumentQuestionAnswerer: Task.GENERATE,
    DocumentFieldExtractor: Task.GENERATE,
    DocumentClassifier: Task.CLASSIFY,
}
"""What a model that is not a document model must serve instead, per document capability."""


@dataclass(eq=False)
class DocumentQuestionTask:
    """Questions, fields and classes of documents.

    Attributes:
        manager: where document models are acquired and catalog entries looked up.
        documents: reads and analyses the pages.
        encoders: ranks blocks (``rerank``) for a generation model.
        generation: writes answers and JSON.
        classifiers: zero-shot classification of the document's text.

    """

    manager: ModelManager
    documents: DocumentTask
    encoders: EncoderTask
    generation: GenerationTask
    classifiers: ClassifierTask

    def _require(self, model: str, task: Task, also: Task | None = None) -> None:
        """Refuse ``model`` unless it serves ``task`` (``also``: another task that would have done).

        Raises:
            ModelNotFoundError, TaskNotSupportedError.

        """
        tasks = self.manager.get(model).spec.tasks
        if task not in tasks:
            wanted = f"{also.value} nor {task.value}" if also else task.value
            served = ", ".join(t.value for t in tasks)
            raise TaskNotSupportedError(
                f"model {model!r} cannot do {wanted}; it serves: {served}", model=model, task=task.value
            )

    async def _by_document_model(
        self,
        job: AskJob | ExtractJob | ClassifyDocumentJob,
        data: bytes,
        capability: type[Capability],
        call: Callable[[Capability, Image, OcrPage], Awaitable[Result]],
    ) -> list[Result] | None:
        """``call(engine, image, page)`` for each page read when ``job.model`` is a document model.

        A document model serves ``capability``'s task itself and reads each page (the engine
        held meanwhile); None when the model serves the task of :data:`COMPOSED_TASKS` instead
        (the composed path). Checked before any page is read, so a wrong model fails at once.

        Raises:
            ModelNotFoundError: no such catalog entry.
            TaskNotSupportedError: the model serves neither task.

        """
        document_task = CAPABILITY_TASKS[capability]
        if document_task not in self.manager.get(job.model).spec.tasks:
            self._require(job.model, COMPOSED_TASKS[capability], also=document_task)
            return None
        keep_alive = job.read.ocr.keep_alive
        async with (
            self.manager.acquire(job.model, capability, keep_alive) as engine,
            contextlib.aclosing(self.documents.read(job.read.ocr, data)) as pages,
        ):
            return [await call(engine, image, page) async for page, image in pages]

    async def _analyzed(self, read: DocumentReadJob, data: bytes) -> list[StructuredPage]:
        async with contextlib.aclosing(self.documents.analyze(read, data)) as pages:
            return [page async for page in pages]

    async def _generate(
        self,
        model: str,
        keep_alive: str | None,
        instructions: str,
        prompt: str,
        max_tokens: int,
        response_format: ResponseFormat | None = None,
    ) -> str:
        """The greedy answer of ``model`` to ``prompt`` under the system ``instructions``."""
        request = GenerationRequest(
            request_id=f"doc-{uuid.uuid4().hex}",
            messages=[
                ChatMessage(role="system", content=instructions),
                ChatMessage(role="user", content=prompt),
            ],
            params=SamplingParams(max_tokens=max_tokens, temperature=0.0),
            response_format=response_format or ResponseFormat(),
        )
        completion = await self.generation.complete(model, keep_alive, request)
        return completion.choices[0].text.strip()

    async def ask(self, job: AskJob, data: bytes) -> DocumentAnswer:
        """Answer ``job.question`` from the document, with citations.

        Raises:
            The errors of :meth:`DocumentTask.analyze` (or :meth:`DocumentTask.read` for a
            ``document_qa`` model), of the embedding and generation models, and of the document
            model.

        """
        keep_alive = job.read.ocr.keep_alive
        answers = await self._by_document_model(
            job,
            data,
            DocumentQuestionAnswerer,
            lambda model, image, page: model.answer_question(image, page, job.question),
        )
        if answers is not None:
            return max(answers, key=lambda answer: answer.score, default=DocumentAnswer(answer="", score=0.0))
        # The ranking model must rank: refused now, not after the pages are read.
        self._require(job.embedding_model, Task.RERANK)
        blocks = _text_blocks(await self._analyzed(job.read, data))
        if not blocks:
            return DocumentAnswer(answer="", score=0.0)
        texts = [_clip(block.text, BLOCK_CHARS) for _, block in blocks]
        lexical = lexical_ranking(job.question, texts)
        # The embedding model ranks at most max_ranked_blocks blocks: on a longer document, the
        # ones that share the most words with the question.
        candidates = lexical[: job.max_ranked_blocks]
        dense = await self.encoders.rerank(
            job.embedding_model,
            keep_alive,
            RerankRequest(query=job.question, documents=[texts[i] for i in candidates]),
        )
        dense_order = [candidates[ranked.index] for ranked in dense.results]  # best first
        similarity = {candidates[ranked.index]: ranked.relevance_score for ranked in dense.results}
        order = fuse_rankings(dense_order, lexical)
        chosen: list[int] = []
        used = 0
        for index in order[: job.top_k]:
            if chosen and used + len(texts[index]) > CONTEXT_CHARS:
                break
            chosen.append(index)
            used += len(texts[index])
        # Best first: the small default model leans on the first excerpt that looks like an answer.
        excerpts = "\n\n".join(texts[i] for i in chosen)
        answer = await self._generate(
            job.model,
            keep_alive,
            ANSWER_INSTRUCTIONS,
            f"Document excerpts:\n{excerpts}\n\nQuestion: {job.question}",
            job.max_tokens,
        )
        citations = ground_answer(answer, job.question, [blocks[i] for i in chosen])
        score = max(
            (
                similarity.get(i, 0.0)
                for i in chosen
                if any(c.page_number == blocks[i][0] and _inside(c, blocks[i][1]) for c in citations)
            ),
            default=0.0,
        )
        return DocumentAnswer(answer=answer, score=max(0.0, min(1.0, score)), citations=citations)

    async def extract(self, job: ExtractJob, data: bytes) -> tuple[object, list[DocumentField]]:
        """The extracted object and its leaf fields with citations.

        With a generation model, the object is valid against ``job.json_schema``; a field's
        confidence is 1 when its value is found on the pages as written, else 0 (likely made up).

        Raises:
            InvalidArgumentError: no ``json_schema`` for a generation model (field
                ``options.json_schema``); the generation model's output is not JSON.
            The errors of :meth:`ask`'s models.

        """
        keep_alive = job.read.ocr.keep_alive
        per_page = await self._by_document_model(
            job, data, DocumentFieldExtractor, lambda model, image, page: model.extract_fields(image, page)
        )
        if per_page is not None:
            fields = [item for page_fields in per_page for item in page_fields]
            grouped: dict[str, list[object]] = {}
            for item in fields:
                grouped.setdefault(item.name, []).append(item.value)
            return {
                name: values[0] if len(values) == 1 else values for name, values in grouped.items()
            }, fields
        if job.json_schema is None:
            raise InvalidArgumentError(
                "options.json_schema: required to extract with a generation model",
                field="options.json_schema",
            )
        # The schema's bounds before the pages are read: a schema too complex to enforce is
        # refused before any OCR or model work (and the grammar is cached for the engine).
        await compile_in_worker(gbnf_grammar, OutputConstraint(job.json_schema))
        pages = await self._analyzed(job.read, data)
        names = ", ".join(job.json_schema.get("properties", {}))
        text = await self._generate(
            job.model,
            keep_alive,
            EXTRACT_INSTRUCTIONS,
            f"Document:\n{_page_markdown(pages)}\n\nFields: {names}",
            job.max_tokens,
            ResponseFormat(kind=ResponseFormatKind.JSON_SCHEMA, json_schema=job.json_schema),
        )
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            # The grammar keeps the text valid JSON; only a cut at max_tokens ends it early.
            raise InvalidArgumentError(
                f"the extracted JSON was cut at max_tokens ({job.max_tokens}); raise options.max_tokens",
                reason=Reason.OUTPUT_TRUNCATED,
                field="options.max_tokens",
            ) from None
        lines = [(page.page_number, page_lines) for page in pages for page_lines in _lines(page)]
        fields = []
        for name, leaf in flatten_fields(value):
            citations = ground_value(leaf, lines)
            fields.append(
                DocumentField(
                    name=name, value=leaf, confidence=1.0 if citations else 0.0, citations=citations
                )
            )
        return value, fields

    async def classify(self, job: ClassifyDocumentJob, data: bytes) -> list[DocumentLabel]:
        """Every label with its score, best first; scores sum to 1.

        Raises:
            InvalidArgumentError: no candidate labels for an embedding model (field
                ``options.candidate_labels``); an empty document (EMPTY_DOCUMENT).

        """
        keep_alive = job.read.ocr.keep_alive
        per_page = await self._by_document_model(
            job, data, DocumentClassifier, lambda model, image, page: model.classify_document(image, page)
        )
        if per_page is not None:
            totals: dict[str, float] = {}
            for page_labels in per_page:
                for label in page_labels:
                    totals[label.label] = totals.get(label.label, 0.0) + label.score
            # The document's class: the mean of its pages' distributions.
            labels = [DocumentLabel(label, score / max(len(per_page), 1)) for label, score in totals.items()]
            return sorted(labels, key=lambda label: -label.score)
        if not job.candidate_labels:
            raise InvalidArgumentError(
                "options.candidate_labels: required to classify with an embedding model (zero-shot)",
                field="options.candidate_labels",
            )
        pages = await self._analyzed(job.read, data)
        text = _clip("\n".join(block.text for _, block in _text_blocks(pages)), CONTEXT_CHARS)
        if not text.strip():
            raise InvalidArgumentError("the document has no text to classify", reason=Reason.EMPTY_DOCUMENT)
        result = await self.classifiers.classify(
            job.model,
            keep_alive,
            ClassificationRequest(
                inputs=[text], all_scores=True, candidate_labels=list(job.candidate_labels)
            ),
        )
        return [DocumentLabel(label.label, label.score) for label in result.classifications[0].scores]


def _inside(citation: Citation, block: Block) -> bool:
    """Whether the citation's box lies within ``block``'s box (1 px tolerance)."""
    c, b = citation.box, block.box
    return (
        c.x >= b.x - 1
        and c.y >= b.y - 1
        and c.x + c.width <= b.x + b.width + 1
        and c.y + c.height <= b.y + b.height + 1
    )


def _lines(page: StructuredPage) -> list:
    """The page's OCR lines in reading order."""
    return [line for block in page.blocks for line in block.lines]
