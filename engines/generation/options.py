"""Typed catalog options of the generation backends (``llama_cpp``, ``transformers``).

Light on purpose: the catalog check and the catalog's JSON Schema import every backend's options,
so nothing here imports llama_cpp, torch or transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, field_validator, model_validator

from engines.generation.context_size import CONTEXT_ALIGNMENT, DEFAULT_CAP
from engines.options import (
    MAX_BATCH_OVERRIDE,
    MAX_TOKENS_OVERRIDE,
    OVERRIDE,
    THREADS_OVERRIDE,
    AtLeastOne,
    LoadOverride,
    NonEmptyStr,
    QueuedEngineOptions,
    TorchDtypeOptions,
    TorchEngineOptions,
)
from engines.types import MAX_DRAFT_TOKENS

#: KV cache element types llama.cpp accepts for ``cache_type_k``/``cache_type_v`` (its server's
#: ``--cache-type-k``/``--cache-type-v`` list, ``kv_cache_types`` in ``common/arg.cpp``).
KvCacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]

#: The ``quantize`` option's values: GGUF types whose batched matrix products llama.cpp speeds up on
#: CPU (their ``llama_ftype`` is in :data:`engines.generation.requantize.QUANTIZE_TYPES`).
QuantizeType = Literal["q4_0", "q8_0", "f16"]

# Prompt tokens prefilled per step beside running sequences: on 2 CPU cores about as long as a
# few decode steps of 8 sequences, so a long prompt slows running streams without stopping them.
DEFAULT_STEP_PREFILL_TOKENS = 128
DEFAULT_MAX_CONTEXT = 4096  # transformers: max_position_embeddings capped at this when unset
DEFAULT_PREFILL_TOKENS = 4096  # padded prompt tokens per prefill forward


def _cache_dir(copy: str) -> Any:
    """The ``cache_dir`` field of a backend that caches ``copy`` in the converted cache."""
    return Field(
        default=None,
        description=f"Folder of {copy}; unset: $XDG_CACHE_HOME/universal-runtime/converted, or "
        "~/.cache/universal-runtime/converted.",
    )


class ReasoningOptions(BaseModel):
    """The ``reasoning`` block of a generation model: think markers and thinking budgets.

    Budgets are in generated tokens spent inside the think block (see
    :mod:`engines.generation.reasoning`); when one is spent the engine closes the block itself.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: bool | None = None
    """The model reasons (its output is split into thinking and answer); unset: when start is set or the
    chat template names a known marker pair (the think tags, [THINK] and [/THINK], ...)."""
    start: NonEmptyStr | None = None
    """Marker that opens the think block; unset: the one the chat template names, else the think tag."""
    end: NonEmptyStr | None = None
    """Marker that closes the think block; unset: the one the chat template names, else the closing think
    tag."""
    template_opens: bool | None = None
    """The chat template opens the think block itself; unset: detected (its generation prompt ends with
    start)."""
    budget: NonNegativeInt | None = None
    """Thinking budget (tokens) of a request that names none; 0: thinking off; unset: unbounded within
    max_tokens."""
    low_budget: NonNegativeInt = 512
    """Thinking budget (tokens) of reasoning effort low."""
    medium_budget: NonNegativeInt = 2048
    """Thinking budget (tokens) of reasoning effort medium."""
    high_budget: NonNegativeInt = 8192
    """Thinking budget (tokens) of reasoning effort high."""

    @field_validator("budget", "low_budget", "medium_budget", "high_budget", mode="before")
    @classmethod
    def _no_bool(cls, value: Any) -> Any:
        # pydantic's lax mode reads true as 1; in a catalog that is always a mistake.
        if isinstance(value, bool):
            raise ValueError("true/false is not allowed here")
        return value


class GenerationOptions(QueuedEngineOptions):
    """Options every continuously batched generation backend reads (the scheduler's limits)."""

    max_sequences: Annotated[AtLeastOne, LoadOverride(at_most=256)] = 8
    """Sequences decoded together in one step (the model's KV slots)."""
    max_waiting: Annotated[NonNegativeInt, LoadOverride(at_most=4096)] = 64
    """Requests that may wait for a slot (being prepared or queued) beyond the max_sequences running; more
    are refused with RESOURCE_EXHAUSTED."""
    chat_template: str | None = None
    """Jinja2 chat template (text) used instead of the model's own (the GGUF's tokenizer.chat_template, or
    the tokenizer's)."""
    reasoning: ReasoningOptions | None = None
    """Reasoning model settings: think markers (start, end), template_opens, budget and the effort budgets
    (low_budget, medium_budget, high_budget), in tokens; unset: detected from the chat template."""


class SpeculativeOptions(BaseModel):
    """The ``speculative`` block of a ``llama_cpp`` model (docker/model-runner's SpeculativeDecodingConfig).

    Each step, a sequence proposes up to ``num_tokens`` draft tokens, verified by the target model
    in the same decode call as every other sequence's next token (see
    :mod:`engines.generation.speculative`). Without ``draft_model`` the draft comes from the
    sequence's own prompt and output (prompt lookup: no second model).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    draft_model: NonEmptyStr | None = None
    """Source of a draft GGUF (a path or pkg:// URI, as a catalog source) whose vocabulary matches the
    target's; unset: prompt lookup (n-gram drafting from the sequence's own tokens)."""
    num_tokens: Annotated[int, Field(ge=1, le=MAX_DRAFT_TOKENS)] = 8
    """Draft tokens a sequence proposes per step (1 to 16)."""
    min_acceptance_rate: Annotated[float, Field(ge=0, le=1)] = 0.3
    """A sequence whose share of accepted draft tokens falls below this (after 16 drafted) stops drafting."""
    enabled: bool = True
    """Speculate for requests that do not say; false: only requests that ask for it (speculative.enabled)."""

    @field_validator("num_tokens", mode="before")
    @classmethod
    def _no_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("true/false is not allowed here")
        return value


class LlamaCppOptions(GenerationOptions):
    """Options of the ``llama_cpp`` backend (a GGUF file served by llama.cpp)."""

    n_ctx: Annotated[NonNegativeInt | None, LoadOverride(at_most=MAX_TOKENS_OVERRIDE)] = None
    """Tokens one sequence can hold (prompt plus completion); unset or 0: the training context capped at
    max_context, smaller when memory is short."""
    max_context: Annotated[AtLeastOne, LoadOverride(at_most=MAX_TOKENS_OVERRIDE)] = DEFAULT_CAP
    """Cap (tokens) of the automatic context size when n_ctx is unset."""
    n_batch: Annotated[int, Field(ge=2), LoadOverride(at_most=MAX_BATCH_OVERRIDE)] = 512
    """Tokens one llama.cpp decode call carries (one per running sequence plus prompt chunks); at least
    max_sequences."""
    step_prefill_tokens: Annotated[int, Field(ge=2), LoadOverride(at_most=MAX_BATCH_OVERRIDE)] = (
        DEFAULT_STEP_PREFILL_TOKENS
    )
    """Prompt tokens prefilled per step beside running sequences: the longest a new prompt holds up running
    streams is one such chunk per step."""
    prompt_cache: Annotated[bool, OVERRIDE] = True
    """A free slot keeps its last prompt's KV cells, and a new prompt sharing their prefix prefills only
    the rest."""
    flash_attn: Annotated[bool, OVERRIDE] = False
    """llama.cpp's flash attention kernels; on by default when speculative is set (drafts then verify token
    for token)."""
    n_threads: Annotated[AtLeastOne | None, THREADS_OVERRIDE] = None
    """llama.cpp threads for decoding and prefill; unset: every core the process may use."""
    n_gpu_layers: Annotated[Annotated[int, Field(ge=-1)] | None, LoadOverride(at_most=4096)] = None
    """Layers offloaded to the GPU (-1: all); unset: all on a CUDA device, else 0."""
    quantize: Annotated[QuantizeType | None, OVERRIDE] = None
    """Serve the GGUF requantized to this type (case-insensitive), made once and cached; unset: the file as
    it is."""
    cache_dir: Path | None = _cache_dir("the requantized copy (with quantize)")
    kv_pool_tokens: Annotated[
        Annotated[int, Field(ge=CONTEXT_ALIGNMENT)] | None, LoadOverride(at_most=16 * MAX_TOKENS_OVERRIDE)
    ] = None
    """KV cells (tokens) of one buffer shared by all sequences, admitted by the cells they reserve; unset:
    a KV stream of n_ctx cells per sequence."""
    n_ubatch: Annotated[Annotated[int, Field(ge=1)] | None, LoadOverride(at_most=MAX_BATCH_OVERRIDE)] = None
    """Tokens llama.cpp computes per graph evaluation (physical batch, at most n_batch); unset: n_batch."""
    cache_type_k: Annotated[KvCacheType, OVERRIDE] = "f16"
    """Element type of the KV cache's keys (llama.cpp's --cache-type-k)."""
    cache_type_v: Annotated[KvCacheType, OVERRIDE] = "f16"
    """Element type of the KV cache's values (llama.cpp's --cache-type-v); a quantized type needs
    flash_attn."""
    use_mmap: Annotated[bool | None, OVERRIDE] = None
    """Memory-map the GGUF (pages read on demand); false: read it into memory at load; unset: llama.cpp's
    choice for the device."""
    use_mlock: bool = False
    """Lock the weights in RAM (no swapping out); needs the memlock limit to allow it."""
    speculative: SpeculativeOptions | None = None
    """Speculative decoding: draft_model (a GGUF source; unset: prompt lookup), num_tokens (1 to 16) and
    min_acceptance_rate; unset: no speculation."""

    @field_validator("quantize", mode="before")
    @classmethod
    def _lower_case_type(cls, value: Any) -> Any:
        # GGUF type names are written both ways (Q4_0 in file names); both were always accepted.
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _flash_attn_for_speculation(cls, data: Any) -> Any:
        # Without flash attention a token scored beside others of its sequence (a draft being
        # verified) takes another attention kernel than one scored alone, and greedy output drifts
        # in near ties; with it each query row is computed alone, and speculation changes no token
        # (see docs/architecture/design-notes.md#speculation-needs-flash-attention).
        if isinstance(data, dict) and data.get("speculative") is not None and "flash_attn" not in data:
            return {**data, "flash_attn": True}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> LlamaCppOptions:
        if self.n_batch < self.max_sequences:
            raise ValueError(
                f"n_batch ({self.n_batch}) must be at least max_sequences ({self.max_sequences}): "
                "each step decodes one token of every running sequence in one batch"
            )
        if self.kv_pool_tokens is not None and self.n_ctx and self.n_ctx > self.kv_pool_tokens:
            raise ValueError(
                f"n_ctx ({self.n_ctx}) must not exceed kv_pool_tokens ({self.kv_pool_tokens}): "
                "a sequence can never hold more than the shared pool"
            )
        if self.cache_dir is not None and self.quantize is None:
            raise ValueError("cache_dir is only used with quantize (where the requantized copy goes)")
        if self.speculative is not None and not self.flash_attn:
            raise ValueError(
                "speculative needs flash_attn (leave it unset or true): without it, verifying drafts "
                "changes greedy output in near ties"
            )
        if self.n_ubatch is not None and self.n_ubatch > self.n_batch:
            raise ValueError(f"n_ubatch ({self.n_ubatch}) must not exceed n_batch ({self.n_batch})")
        if self.cache_type_v not in ("f32", "f16", "bf16") and not self.flash_attn:
            # llama.cpp refuses the context otherwise ("V cache quantization requires flash_attn").
            raise ValueError(f"cache_type_v {self.cache_type_v!r} (quantized) needs flash_attn: true")
        return self


class TransformersGenerationOptions(GenerationOptions, TorchEngineOptions, TorchDtypeOptions):
    """Options of the ``transformers`` generation backend (a causal LM, or a GGUF dequantized)."""

    gguf_file: str | None = None
    """File name of a GGUF in the source folder to load (dequantized; the converted copy is cached); unset:
    the source is a transformers model."""
    cache_dir: Path | None = _cache_dir("the converted copy of gguf_file")
    max_context: Annotated[int | None, LoadOverride(at_most=MAX_TOKENS_OVERRIDE)] = Field(
        default=None,
        ge=1,
        description="Tokens one sequence can hold (prompt plus completion); unset: the model's "
        f"max_position_embeddings capped at {DEFAULT_MAX_CONTEXT}.",
    )
    prefill_tokens: Annotated[AtLeastOne, LoadOverride(at_most=MAX_BATCH_OVERRIDE)] = DEFAULT_PREFILL_TOKENS
    """Padded prompt tokens one prefill forward may carry (new prompts are prefilled together up to this)."""

    @field_validator("gguf_file")
    @classmethod
    def _bare_name(cls, value: str | None) -> str | None:
        if value and Path(value).name != value:
            raise ValueError("must be a file name in the source folder, not a path")
        return value

    @model_validator(mode="after")
    def _cache_dir_needs_gguf(self) -> TransformersGenerationOptions:
        if self.cache_dir is not None and not self.gguf_file:
            raise ValueError("cache_dir is only used with gguf_file (where its converted copy goes)")
        return self
