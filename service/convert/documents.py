"""Document RPC messages → jobs, and structured pages, answers, fields and classes → responses."""

from __future__ import annotations

import json

from universal_runtime.v1 import documents_pb2 as pb

from engines.documents import types as doc
from engines.reasons import Reason
from service.convert.messages import MessageCopy, enum_table, wire_values
from service.convert.ocr import box_message as _box
from service.convert.ocr import line_message
from service.convert.ocr import read_job as ocr_read_job
from service.convert.validation import check_range, parse_json, require, validate_json_schema
from service.settings import Settings
from service.tasks.document_questions import AskJob, ClassifyDocumentJob, ExtractJob
from service.tasks.documents import DocumentReadJob

MAX_QUESTION_CHARS = 2000
"""Longest question accepted (characters): a question, not a document."""
MAX_CANDIDATE_LABELS = 64
MAX_LABEL_CHARS = 500

_BLOCK_TYPES = wire_values(enum_table(pb.BlockType, "BLOCK_TYPE_", doc.RegionType))


def read_job(
    options: pb.DocumentReadOptions, settings: Settings, prefix: str = "options.document"
) -> DocumentReadJob:
    """Validate how a document is read (see :func:`service.convert.ocr.read_job` for the errors)."""
    return DocumentReadJob(
        ocr=ocr_read_job(options, settings, model=options.ocr_model, prefix=prefix),
        layout_model=options.layout_model or settings.document_layout_model,
    )


def analyze_job(options: pb.AnalyzeDocumentOptions, settings: Settings) -> tuple[DocumentReadJob, bool]:
    """The read job and whether lines are returned, from the first AnalyzeDocumentRequest."""
    return read_job(options.document, settings), options.return_lines


def ask_job(options: pb.AskDocumentOptions, settings: Settings) -> AskJob:
    """Validate the first AskDocumentRequest's options.

    Raises:
        InvalidArgumentError: an empty or over-long question, top_k outside [0, 16], max_tokens
            outside [0, 512], and the read options' errors.

    """
    question = options.question.strip()
    require(bool(question), "options.question", "must not be empty")
    require(
        len(question) <= MAX_QUESTION_CHARS,
        "options.question",
        f"at most {MAX_QUESTION_CHARS} characters, got {len(question)}",
        reason=Reason.INPUT_TOO_LONG,
    )
    check_range(options.top_k, "options.top_k", 0, 16)
    check_range(options.max_tokens, "options.max_tokens", 0, 512)
    return AskJob(
        read=read_job(options.document, settings),
        question=question,
        model=options.model or settings.document_generation_model,
        embedding_model=options.embedding_model or settings.document_embedding_model,
        top_k=options.top_k or 3,
        max_tokens=options.max_tokens or 64,
        max_ranked_blocks=settings.max_batch_inputs,
    )


def extract_job(options: pb.ExtractDocumentOptions, settings: Settings) -> ExtractJob:
    """Validate the first ExtractDocumentRequest's options.

    Raises:
        InvalidArgumentError: a json_schema that is not valid JSON, not a schema, too deep or
            too long, or not an object schema; max_tokens outside [0, 1024]; the read options'.

    """
    check_range(options.max_tokens, "options.max_tokens", 0, 1024)
    schema = None
    if options.json_schema:
        field = "options.json_schema"
        schema = validate_json_schema(parse_json(options.json_schema, field), field)
        require(
            schema.get("type") == "object" and isinstance(schema.get("properties"), dict),
            field,
            'must be an object schema: {"type": "object", "properties": {...}}',
            reason=Reason.INVALID_JSON_SCHEMA,
        )
    return ExtractJob(
        read=read_job(options.document, settings),
        json_schema=schema,
        model=options.model or settings.document_generation_model,
        max_tokens=options.max_tokens or 256,
    )


def classify_job(options: pb.ClassifyDocumentOptions, settings: Settings) -> ClassifyDocumentJob:
    """Validate the first ClassifyDocumentRequest's options.

    Raises:
        InvalidArgumentError: more than 64 labels, an empty or over-long label; the read options'.

    """
    labels = tuple(label.strip() for label in options.candidate_labels)
    field = "options.candidate_labels"
    require(len(labels) <= MAX_CANDIDATE_LABELS, field, f"at most {MAX_CANDIDATE_LABELS} labels")
    for i, label in enumerate(labels):
        require(bool(label), f"{field}[{i}]", "must not be empty")
        require(len(label) <= MAX_LABEL_CHARS, f"{field}[{i}]", f"at most {MAX_LABEL_CHARS} characters")
    require(len(set(labels)) == len(labels), field, "labels must be distinct")
    return ClassifyDocumentJob(
        read=read_job(options.document, settings),
        model=options.model or settings.document_embedding_model,
        candidate_labels=labels,
    )


_CELL = MessageCopy(pb.TableCell, doc.TableCell, given=("box",))
_PAGE = MessageCopy(pb.AnalyzeDocumentResponse, doc.StructuredPage, given=("blocks",))


def _block_message(block: doc.Block, return_lines: bool) -> pb.DocumentBlock:
    message = pb.DocumentBlock(
        type=_BLOCK_TYPES[block.type], text=block.text, box=_box(block.box), confidence=block.confidence
    )
    if return_lines:
        message.lines.extend(line_message(line) for line in block.lines)
    if block.table is not None:
        message.table.CopyFrom(
            pb.Table(
                row_count=block.table.row_count,
                column_count=block.table.column_count,
                cells=[_CELL(cell, box=_box(cell.box)) for cell in block.table.cells],
            )
        )
    return message


def analyze_response(page: doc.StructuredPage, return_lines: bool) -> pb.AnalyzeDocumentResponse:
    """One page's response; blocks' lines only when ``return_lines``."""
    return _PAGE(
        page,
        blocks=[_block_message(block, return_lines) for block in page.blocks],
    )


def _citation(citation: doc.Citation) -> pb.DocumentCitation:
    return pb.DocumentCitation(page_number=citation.page_number, box=_box(citation.box), text=citation.text)


def ask_response(model: str, answer: doc.DocumentAnswer) -> pb.AskDocumentResponse:
    """The answer with its citations."""
    return pb.AskDocumentResponse(
        answer=answer.answer,
        score=answer.score,
        citations=[_citation(c) for c in answer.citations],
        model=model,
    )


def extract_response(
    model: str, extraction: tuple[object, list[doc.DocumentField]]
) -> pb.ExtractDocumentResponse:
    """The extracted object as JSON and its fields, each value as JSON (``extraction``: the two)."""
    value, fields = extraction
    return pb.ExtractDocumentResponse(
        json=json.dumps(value, ensure_ascii=False),
        fields=[
            pb.ExtractedField(
                name=item.name,
                value_json=json.dumps(item.value, ensure_ascii=False),
                confidence=item.confidence,
                citations=[_citation(c) for c in item.citations],
            )
            for item in fields
        ],
        model=model,
    )


def classify_response(model: str, labels: list[doc.DocumentLabel]) -> pb.ClassifyDocumentResponse:
    """Every label with its score, best first."""
    return pb.ClassifyDocumentResponse(
        labels=[pb.DocumentClass(label=label.label, score=label.score) for label in labels], model=model
    )
