"""GGUF text generation with llama.cpp (llama-cpp-python's low-level API), continuously batched.

One llama.cpp context holds ``max_sequences`` sequences, each with its own KV cells (sequence
id) and its own sampler chain (temperature, top-k/p, min-p, penalties, logit bias, seed, and a
GBNF grammar for JSON output). Each :meth:`step` decodes one ``llama_batch`` that carries the
next token of every running sequence plus prompt chunks of newly admitted ones; a sequence's
cells are removed with ``llama_memory_seq_rm`` when it leaves. The chat template comes from the
GGUF metadata (``tokenizer.chat_template``), rendered with llama-cpp-python's sandboxed Jinja2
formatter as Hugging Face's ``apply_chat_template`` would.

KV memory comes in one of two layouts. By default each sequence has a KV stream of its own,
``n_ctx`` cells each (``kv_unified`` off): attention reads only the sequence's own cells, so
greedy output is bitwise the same whatever else runs, at the cost of ``max_sequences * n_ctx``
cells allocated up front. With ``kv_pool_tokens: N`` all sequences share one buffer of N cells
(``kv_unified`` on): memory by use, with admission by cells (each sequence reserves its prompt
plus ``max_new_tokens``, see :class:`~engines.generation.scheduler.ContinuousBatchScheduler`),
but attention then runs over the shared buffer with masks and its sums depend on where other
sequences' cells sit, so greedy output under concurrency may differ in the last bits.

Speculative decoding (catalog ``speculative``, or a request's ``speculative.enabled``;
:mod:`engines.generation.speculative`): a greedy sequence adds draft tokens after its next input
in the step's batch, all with logits; the longest prefix the model agrees with is emitted in that
one step, and the rejected drafts' cells are removed (``llama_memory_seq_rm``). The draft comes
from the sequence's own tokens (prompt lookup) or from a draft GGUF with the same vocabulary.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import ModelSpec
from engines.device import available_memory_bytes, cpu_threads
from engines.errors import InvalidArgumentError, ModelLoadError, kv_pool_exhausted
from engines.generation.base import GenerationEngine, SequenceState
from engines.generation.context_size import kv_bytes_per_token, plan_context
from engines.generation.ggml_devices import cuda_device_count, cuda_index, cuda_memory
from engines.generation.gguf_memory import llama_cpp_required_memory
from engines.generation.json_grammar import gbnf_grammar
from engines.generation.logprobs import token_logprobs
from engines.generation.options import LlamaCppOptions
from engines.generation.prompt_cache import PromptCache
from engines.generation.requantize import model_file
from engines.generation.scheduler import StepResult
from engines.generation.sequence import GenerationSequence
from engines.generation.speculative import (
    DraftModel,
    NgramDrafter,
    SpeculationState,
    accepted_prefix,
    batch_add,
    decode,
    equal_lengths,
    row_cost,
    step_row_cost,
)
from engines.generation.structured import output_constraint
from engines.memory_estimate import device_bytes
from engines.registry import register_backend
from engines.sources import resolve_source
from engines.stats import KvCacheStats
from engines.tokenization import Offsets, offsets_from_pieces, offsets_not_supported
from engines.types import MAX_DRAFT_TOKENS, GenerationRequest, MemoryUsage, SamplingParams

log = logging.getLogger(__name__)

KV_HEADROOM_BYTES = 1 << 30  # memory left for everything else when sizing the KV cache
PENALTY_LAST_N = 64  # tokens the repetition/presence/frequency penalties look back over
DEFAULT_DRAFT_TOKENS = 8  # draft tokens per step of a request that enables speculation on a model without it
DEFAULT_MIN_ACCEPTANCE_RATE = 0.3  # the same request's acceptance-rate cut-off
#: ggml type ids of the cache_type_k/cache_type_v names (ggml.h ``enum ggml_type``).
GGML_TYPES = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 6,
    "q5_1": 7,
    "q8_0": 8,
    "iq4_nl": 20,
    "bf16": 30,
}
#: Bytes per element of each KV cache type (block size / elements per block for the quantized ones).
KV_TYPE_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "iq4_nl": 18 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
}


@dataclass(eq=False)
class _SlotState(SequenceState):
    """llama.cpp-side state of one sequence: sampler, KV slot (sequence id), reserved cells.

    ``reserved_cells`` is its ``kv_cells_needed``, counted against a KV pool. A speculating
    sequence has ``speculation`` (its counts) and ``history`` (its prompt and output so far, with
    the n-gram index prompt lookup drafts from); ``generated`` counts the tokens it sampled.
    """

    seq_id: int | None = None
    reserved_cells: int = 0
    speculation: SpeculationState | None = None
    history: NgramDrafter | None = None
    generated: int = 0


def prefill_chunk_end(position: int, prompt_length: int, budget: int) -> int:
    """End (exclusive) of the next prompt chunk starting at ``position``.

    At most ``budget`` tokens, and never a single token when two or more remain: a chunk
    that would leave exactly one token behind is cut one shorter. Returns ``position`` when
    nothing is left, or when the budget does not allow a valid chunk this step.
    """
    remaining = prompt_length - position
    if remaining <= 0:
        return position
    take = min(remaining, budget)
    if remaining >= 2:
        if remaining - take == 1:
            take -= 1
        if take < 2:
            return position
    return position + take


class ArgmaxSampler:
    """Greedy decoding (temperature 0, no grammar, no penalties) straight from the logits.

    Picks what llama.cpp's ``logit_bias`` + ``greedy`` chain picks (the biases added in float32,
    then the first index of the largest logit) with one numpy pass over the row, about a tenth
    of the chain's cost (which copies the whole vocabulary into a candidate array per call; see
    docs/architecture/design-notes.md#other-costs-behind-bounds).
    """

    def __init__(self, vocab_size: int, logit_bias: dict[int, float]) -> None:
        self._vocab_size = vocab_size
        self._bias_ids = np.fromiter(logit_bias.keys(), dtype=np.int64, count=len(logit_bias))
        self._bias = np.fromiter(logit_bias.values(), dtype=np.float32, count=len(logit_bias))

    def sample(self, ctx: Any, index: int) -> int:
        """The token with the largest (biased) logit in row ``index`` of the last decode's output."""
        import llama_cpp

        logits = np.ctypeslib.as_array(
            llama_cpp.llama_get_logits_ith(ctx.ctx, index), shape=(self._vocab_size,)
        )
        if self._bias.size:
            logits = logits.copy()  # the context's buffer is left as decoded (logprobs read it)
            logits[self._bias_ids] += self._bias
        return int(logits.argmax())

    def close(self) -> None:
        """Nothing to free (the chain's counterpart owns a C sampler)."""


@register_backend
class LlamaCppGenerationEngine(GenerationEngine[LlamaCppOptions]):
    """Generation from a GGUF file with llama.cpp.

    Catalog options: :class:`~engines.generation.options.LlamaCppOptions`. The automatic ``n_ctx``
    comes from the training context and free memory (:mod:`engines.generation.context_size`);
    ``prompt_cache`` is :mod:`engines.generation.prompt_cache`, ``quantize`` is
    :mod:`engines.generation.requantize`. With ``kv_pool_tokens: N`` a sequence may use up to
    ``min(N, n_ctx or min(training context, max_context))`` tokens.
    """

    backend = "llama_cpp"
    _kv_pool: int | None = None  # cells of the shared KV pool once loaded (kv_pool_tokens), else None

    @classmethod
    def select_device(cls, preference: str) -> str:
        """CUDA only when llama.cpp was built with CUDA and sees the GPU; otherwise CPU.

        llama.cpp's own device list answers (:mod:`engines.generation.ggml_devices`), never torch's:
        asking torch would start its CUDA context in a process that may serve GGUF models only.
        ``auto`` is ``cuda`` (GPU 0) when llama.cpp sees one; ``mps`` and other non-CUDA devices
        run on the CPU.

        Raises:
            ValueError: ``cuda[:N]`` asked for a GPU that this llama.cpp build does not see.

        """
        import llama_cpp

        if preference == "cpu" or not llama_cpp.llama_supports_gpu_offload():
            return "cpu"
        if preference in ("", "auto"):
            return "cuda" if cuda_device_count() else "cpu"
        if preference.startswith("cuda"):
            cuda_index(preference)
            return preference
        return "cpu"

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """The base checks (:meth:`Engine.check_spec`: the options included) and a local file source.

        Raises:
            ModelLoadError: the source is not a local file (reason MODEL_SOURCE_INVALID).
            InvalidArgumentError: a bad option (reason INVALID_MODEL_OPTION).

        """
        super().check_spec(spec)
        cls._gguf_file(spec)
        speculative = spec.options.get("speculative")
        draft = speculative.get("draft_model") if isinstance(speculative, dict) else None
        if draft:
            cls._draft_file(spec.name, draft)

    @staticmethod
    def _gguf_file(spec: ModelSpec) -> Path:
        resolved = resolve_source(spec.source)
        if resolved.path is None or not resolved.path.is_file():
            raise ModelLoadError(
                f"llama_cpp needs a local .gguf file; {spec.source!r} is not one",
                reason="MODEL_SOURCE_INVALID",
                model=spec.name,
            )
        return resolved.path

    def _model_path(self) -> str:
        return str(model_file(self._gguf_file(self.spec), self.options))

    def estimated_load_bytes(self) -> int:
        """The part of :meth:`required_memory` on the engine's own device (RAM on the CPU)."""
        return device_bytes(self.required_memory(), self.device)

    def required_memory(self) -> MemoryUsage:
        """Weights, KV, output and compute buffers on RAM and VRAM (:mod:`engines.generation.gguf_memory`).

        With a draft model, its own (the file as it is, one KV stream per sequence) is added.
        """
        memory = llama_cpp_required_memory(
            self._gguf_file(self.spec), self.options, self.device, self.max_sequences
        )
        draft = self._draft_path()
        if draft is not None:
            plain = self.options.model_copy(
                update={"quantize": None, "cache_dir": None, "kv_pool_tokens": None}
            )
            extra = llama_cpp_required_memory(draft, plain, self.device, self.max_sequences)
            memory = MemoryUsage(memory.ram_bytes + extra.ram_bytes, memory.vram_bytes + extra.vram_bytes)
        return memory

    def _draft_path(self) -> Path | None:
        """The draft GGUF of ``speculative.draft_model`` (None: no draft model).

        Raises:
            ModelLoadError: the draft source is not a local file (reason MODEL_SOURCE_INVALID).

        """
        speculative = self.options.speculative
        if speculative is None or speculative.draft_model is None:
            return None
        return self._draft_file(self.spec.name, speculative.draft_model)

    @staticmethod
    def _draft_file(model: str, draft: str) -> Path:
        """The local GGUF file a ``speculative.draft_model`` source names.

        Raises:
            ModelLoadError: the source is missing (MODEL_SOURCE_MISSING, from
                :func:`~engines.sources.resolve_source`) or not a local file (MODEL_SOURCE_INVALID);
                the message names the option.

        """
        try:
            resolved = resolve_source(draft)
        except ModelLoadError as exc:
            raise ModelLoadError(
                f"speculative.draft_model of model {model!r}: {exc}", reason=exc.reason, model=model
            ) from None
        if resolved.path is None or not resolved.path.is_file():
            raise ModelLoadError(
                f"speculative.draft_model of model {model!r} must be a local .gguf file; {draft!r} is not "
                "one",
                reason="MODEL_SOURCE_INVALID",
                model=model,
            )
        return resolved.path

    def free_memory_bytes(self) -> int:
        """Free bytes of this model's device as llama.cpp sees it.

        The GPU's free memory on CUDA (:func:`~engines.generation.ggml_devices.cuda_memory`: no
        torch), host memory on the CPU.

        Raises:
            ValueError: the CUDA device is not one llama.cpp sees.

        """
        if self.device.startswith("cuda"):
            return cuda_memory(self.device).free_bytes
        return available_memory_bytes()

    def _free_for_kv_cache(self) -> int:
        """Bytes the KV cache may take once the weights are loaded (before the context is made).

        On a GPU the weights already sit in device memory, so its free memory is what is left; on
        the CPU they are memory-mapped and become resident as they are read, so they are taken off.
        """
        if self.device.startswith("cuda"):
            return self.free_memory_bytes()
        return self.free_memory_bytes() - int(self.model.size())

    # -- lifecycle ------------------------------------------------------------------------

    def load(self) -> None:
        """Load the weights, create the multi-sequence context and the chat formatter."""
        import llama_cpp
        from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llama_cpp.llama_backend_init()
        # llama.cpp logs through llama-cpp-python's logger; keep its chatter out of our log.
        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
        self._pieces: dict[int, bytes] = {}
        model_params = llama_cpp.llama_model_default_params()
        layers = self.options.n_gpu_layers
        on_gpu = self.device.startswith("cuda")
        if layers is None:  # unset: every layer on a CUDA device, none on the CPU
            layers = -1 if on_gpu else 0
        model_params.n_gpu_layers = layers
        load_mode = self._load_mode()
        if load_mode is not None:
            model_params.load_mode = load_mode
        if on_gpu:
            # The model stays on the device it was placed on (its lane's): llama.cpp's default would
            # split the layers over every visible GPU, outside the server's memory accounting.
            model_params.split_mode = llama_cpp.LLAMA_SPLIT_MODE_NONE
            model_params.main_gpu = cuda_index(self.device)
        self.model = LlamaModel(path_model=self._model_path(), params=model_params, verbose=False)
        metadata = self.model.metadata()
        pool = self.options.kv_pool_tokens
        plan = plan_context(
            n_ctx_train=self.model.n_ctx_train(),
            per_token_bytes=kv_bytes_per_token(metadata),
            # A pool's cells are shared: one sequence may take up to all of them.
            sequences=1 if pool else self.max_sequences,
            available_bytes=max(0, self._free_for_kv_cache() - KV_HEADROOM_BYTES),
            override=self.options.n_ctx or None,
            cap=self.options.max_context,
        )
        per_sequence = min(plan.per_sequence, pool) if pool else plan.per_sequence
        log.info(
            "context size",
            extra={"model": self.spec.name, "per_sequence": per_sequence, "reason": plan.reason},
        )
        threads = self.options.n_threads or cpu_threads()
        self._n_batch = self.options.n_batch
        self._step_prefill_tokens = self.options.step_prefill_tokens
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_seq_max = self.max_sequences
        ctx_params.n_ctx = pool or per_sequence * self.max_sequences
        ctx_params.n_batch = self._n_batch
        ctx_params.n_ubatch = self.options.n_ubatch or self._n_batch
        ctx_params.type_k = GGML_TYPES[self.options.cache_type_k]
        ctx_params.type_v = GGML_TYPES[self.options.cache_type_v]
        ctx_params.n_threads = threads
        ctx_params.n_threads_batch = threads
        # A KV stream per sequence: attention reads only the sequence's own cells, and a slot's
        # cached prompt keeps the cell layout of a cold prefill (see prompt_cache). A pool is one
        # buffer for all (memory by use; greedy output may then depend on what else runs).
        ctx_params.kv_unified = pool is not None
        # Flash attention off by default, as llama-cpp-python's own default, so greedy output
        # matches it token for token; "flash_attn: true" turns it on.
        ctx_params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if self.options.flash_attn
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        self.ctx = LlamaContext(model=self.model, params=ctx_params, verbose=False)
        self._batch = LlamaBatch(n_tokens=self._n_batch, embd=0, n_seq_max=1, verbose=False)
        self.context_length = min(per_sequence, int(llama_cpp.llama_n_ctx_seq(self.ctx.ctx)))
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(self.model.vocab))
        self._prompt_cache = PromptCache(self.max_sequences, enabled=self.options.prompt_cache)
        self._kv_total = int(llama_cpp.llama_n_ctx(self.ctx.ctx))
        # Admission by cells (the scheduler) and room for new sequences (_assign_slot) in a pool.
        self._kv_pool = self._kv_total if pool else None
        self.scheduler.kv_pool_cells = self._kv_pool
        self._slot_states: dict[int, _SlotState] = {}  # slots of running sequences (kv_cells)
        self._metadata = metadata
        template = self.options.chat_template or self._metadata.get("tokenizer.chat_template")
        self._bos_text = self._piece_text(self.model.token_bos(), special=True)
        self._eos_text = self._piece_text(self.model.token_eos(), special=True)
        self._set_chat_template(template)
        self._formatter = (
            Jinja2ChatFormatter(template=template, eos_token=self._eos_text, bos_token=self._bos_text)
            if template
            else None
        )
        self._setup_reasoning()
        # Speculation needs flash attention (see _speculation): only then is the row cost measured.
        # A verified row's cost for one sequence and for a full batch (stepped between by step_row_cost).
        self.row_costs = (1.0, 1.0)
        if self.options.flash_attn:
            self.row_costs = (
                row_cost(self._probe_decode, 1),
                row_cost(self._probe_decode, self.max_sequences),
            )
        log.info("speculation row cost", extra={"model": self.spec.name, "row_costs": self.row_costs})
        self._draft_model: DraftModel | None = None
        draft = self._draft_path()
        if draft is not None:
            self._draft_model = DraftModel(
                draft,
                self.model,
                model=self.spec.name,
                draft_source=str(self.options.speculative.draft_model),
                slots=self.max_sequences,
                per_sequence=per_sequence,
                n_batch=self._n_batch,
                threads=threads,
                n_gpu_layers=layers,
            )

    def _probe_decode(self, counts: list[int]) -> None:
        """Decode ``counts[s]`` tokens in slot ``s`` and remove them (for :func:`.speculative.row_cost`)."""
        import llama_cpp

        self._begin_batch()
        for slot, tokens in enumerate(counts):  # max_sequences slots, 1 + PROBE_DRAFT tokens at most
            for position in range(tokens):
                self._add(self.model.token_bos() if position == 0 else 100 + position, position, slot, True)
        self._decode()
        for slot in range(len(counts)):
            llama_cpp.llama_memory_seq_rm(self.ctx.memory, slot, 0, -1)

    def _load_mode(self) -> int | None:
        """llama.cpp's ``load_mode`` from ``use_mmap``/``use_mlock`` (None: both unset: llama.cpp's)."""
        import llama_cpp

        mmap, mlock = self.options.use_mmap, self.options.use_mlock
        if mmap is None and not mlock:
            return None
        if mlock:
            return llama_cpp.LLAMA_LOAD_MODE_MLOCK if mmap is False else llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK
        return llama_cpp.LLAMA_LOAD_MODE_MMAP if mmap else llama_cpp.LLAMA_LOAD_MODE_NONE

    def kv_cells(self) -> tuple[int, int] | None:
        """Cells in use and the context's cells (see :meth:`GenerationEngine.kv_cells`).

        In use: running sequences' positions so far, plus the prompts free slots keep cached.
        Total: every sequence's stream together, or the shared pool (``kv_pool_tokens``).
        """
        cells = self.kv_cache()
        return (cells.cells_used, cells.cells_total) if cells is not None else None

    def kv_cache(self) -> KvCacheStats | None:
        """The cells of :meth:`kv_cells`; ``cells_cached`` are the free slots' cached prompts."""
        if getattr(self, "ctx", None) is None:
            return None
        running = sum(state.n_past for state in list(self._slot_states.values()))
        cached = self._prompt_cache.cached_cells
        return KvCacheStats(cells_used=running + cached, cells_total=self._kv_total, cells_cached=cached)

    def max_new_tokens(self, request: GenerationRequest, prompt_tokens: int) -> int:
        """As :meth:`GenerationEngine.max_new_tokens`; with a KV pool, a ``max_tokens`` over it is refused.

        Raises:
            InputTooLongError: the prompt leaves no room in the context.
            ResourceExhaustedError: the prompt plus ``max_tokens`` need more cells than the whole
                pool (reason KV_POOL_EXHAUSTED): such a sequence could never be admitted.

        """
        new_tokens = super().max_new_tokens(request, prompt_tokens)
        asked = request.params.max_tokens
        if self._kv_pool is not None and asked and prompt_tokens + asked > self._kv_pool:
            raise kv_pool_exhausted(self.spec.name, self._kv_pool, prompt_tokens, asked)
        return new_tokens

    def unload(self) -> None:
        """Free the context, batch and model (context first: it points into the model)."""
        for name in ("_draft_model", "ctx", "_batch", "model"):
            obj = getattr(self, name, None)
            if obj is not None:
                obj.close()
            setattr(self, name, None)
        self._formatter = None

    def memory_usage(self) -> MemoryUsage:
        """Weights plus the KV cache (cache_type_k/v keys and values of every cell) and the draft model."""
        if getattr(self, "model", None) is None:
            return MemoryUsage()
        import llama_cpp

        cells = int(llama_cpp.llama_n_ctx(self.ctx.ctx))
        # kv_bytes_per_token(..., 1) is keys and values at one byte each: half of it per side.
        elements = kv_bytes_per_token(self._metadata, 1) / 2
        options = self.options
        per_cell = elements * (KV_TYPE_BYTES[options.cache_type_k] + KV_TYPE_BYTES[options.cache_type_v])
        total = int(self.model.size()) + int(cells * per_cell)
        if self._draft_model is not None:
            total += self._draft_model.size_bytes()
        if self.device.startswith("cuda"):
            return MemoryUsage(ram_bytes=0, vram_bytes=total)
        return MemoryUsage(ram_bytes=total)

    # -- vocabulary (TokenVocabulary) -------------------------------------------------------

    def is_end_of_generation(self, token_id: int) -> bool:
        """EOS and the vocabulary's other end-of-generation tokens (e.g. ``<|im_end|>``)."""
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self.model.vocab, token_id))

    def token_bytes(self, token_id: int) -> bytes:
        """Bytes of one token's piece (special tokens render as nothing)."""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self._piece(token_id, special=False)
        return piece

    def _piece(self, token_id: int, special: bool) -> bytes:
        import ctypes

        import llama_cpp

        size = 64
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(self.model.vocab, token_id, buffer, size, 0, special)
            if n >= 0:
                return buffer.raw[:n]
            size = -n  # a negative result is the size the piece needs

    def _piece_text(self, token_id: int, special: bool = False) -> str:
        if token_id < 0:
            return ""
        return self._piece(token_id, special).decode("utf-8", errors="replace")

    # -- requests ---------------------------------------------------------------------------

    def _render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list | None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        # The formatter reads the flag from itself; this runs on the lane only, one call at a time.
        self._formatter.add_generation_prompt = add_generation_prompt
        try:
            return self._formatter(messages=messages, tools=tools, **template_kwargs).prompt
        finally:
            self._formatter.add_generation_prompt = True

    def _tokenize(self, text: str, *, templated: bool, add_special: bool | None = None) -> list[int]:
        # A template that writes BOS itself must not get a second one. llama.cpp adds BOS (and EOS)
        # only where the model's metadata asks for them.
        add_bos = add_special
        if add_bos is None:
            add_bos = not (templated and self._bos_text and text.startswith(self._bos_text))
        return self.model.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def _token_strings(self, ids: list[int]) -> list[str]:
        import llama_cpp

        return [
            llama_cpp.llama_vocab_get_text(self.model.vocab, token).decode("utf-8", errors="replace")
            for token in ids
        ]

    def _offsets(self, text: str, ids: list[int], *, templated: bool, add_special: bool | None) -> Offsets:
        # llama.cpp reports no offsets: spans come from the bytes each token spells (special
        # tokens by their text, as the templated prompt writes them).
        spans = offsets_from_pieces(text, [self._piece(token, special=True) for token in ids])
        if spans is None:
            raise offsets_not_supported(self.spec.name, "its tokens do not spell the text byte for byte")
        return spans

    def _detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        import ctypes

        import llama_cpp

        tokens = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
        size = max(64, 16 * len(ids))
        while True:
            buffer = ctypes.create_string_buffer(size)
            # remove_special drops the BOS/EOS the model adds; unparse_special writes the text of
            # special tokens (left out when they are skipped).
            n = llama_cpp.llama_detokenize(
                self.model.vocab, tokens, len(ids), buffer, size, skip_special_tokens, not skip_special_tokens
            )
            if n >= 0:
                return buffer.raw[:n].decode("utf-8", errors="replace")
            size = -n  # a negative result is the size the text needs

    def _new_state(self, request: GenerationRequest) -> _SlotState:
        sampler = self._sampler(request)
        return _SlotState(
            sampler=sampler,
            logprobs=request.params.logprobs,
            top_logprobs=request.params.top_logprobs,
            speculation=self._speculation(request, sampler),
        )

    def _speculation(self, request: GenerationRequest, sampler: Any) -> SpeculationState | None:
        """A request's drafting settings, or None when it does not speculate.

        The request's ``speculative_enabled`` wins over the catalog's ``speculative`` block (a
        request may turn prompt lookup on for a model without one). Only greedy requests
        (:class:`ArgmaxSampler`: temperature 0, no grammar, no penalties) on a model with flash
        attention speculate: their verification needs no random draw and keeps the output token
        for token (see :mod:`engines.generation.speculative`; without flash attention a draft's
        row takes another attention kernel and near ties flip).
        """
        configured = self.options.speculative
        enabled = request.speculative_enabled
        if enabled is None:
            enabled = configured is not None and configured.enabled
        if not enabled or not isinstance(sampler, ArgmaxSampler) or not self.options.flash_attn:
            return None
        tokens = request.speculative_tokens or (configured.num_tokens if configured else DEFAULT_DRAFT_TOKENS)
        rate = configured.min_acceptance_rate if configured else DEFAULT_MIN_ACCEPTANCE_RATE
        return SpeculationState(num_tokens=min(tokens, MAX_DRAFT_TOKENS), min_acceptance_rate=rate)

    def _thinking_sampler(self, request: GenerationRequest) -> Any:
        return self._sampler(request, constrained=False)

    def _sampler(self, request: GenerationRequest, *, constrained: bool = True) -> Any:
        import llama_cpp
        from llama_cpp._internals import LlamaSampler

        params: SamplingParams = request.params
        constraint = output_constraint(request) if constrained else None
        penalized = params.repetition_penalty != 1.0 or params.presence_penalty or params.frequency_penalty
        if params.temperature == 0 and constraint is None and not penalized:
            return ArgmaxSampler(self.vocab_size, params.logit_bias)
        sampler = LlamaSampler()
        if constraint is not None:
            # Strict JSON and bounded before the native parser sees it (cached: the request's
            # validation built it already).
            grammar = gbnf_grammar(constraint)
            handle = llama_cpp.llama_sampler_init_grammar(self.model.vocab, grammar.encode(), b"root")
            if not handle:
                raise InvalidArgumentError(
                    "the JSON schema produced an invalid grammar", reason="INVALID_JSON_SCHEMA"
                )
            llama_cpp.llama_sampler_chain_add(sampler.sampler, handle)
        if penalized:
            sampler.add_penalties(
                self.vocab_size,
                PENALTY_LAST_N,
                params.repetition_penalty,
                params.frequency_penalty,
                params.presence_penalty,
            )
        if params.logit_bias:
            sampler.add_logit_bias(self.vocab_size, params.logit_bias)
        if params.temperature == 0:
            sampler.add_greedy()
            return sampler
        if params.top_k > 0:
            sampler.add_top_k(params.top_k)
        if params.top_p < 1.0:
            sampler.add_top_p(params.top_p, 1)
        if params.min_p > 0:
            sampler.add_min_p(params.min_p, 1)
        sampler.add_temp(params.temperature)
        sampler.add_dist(params.seed if params.seed is not None else random.randrange(2**31))
        return sampler

    # -- batching ---------------------------------------------------------------------------

    def _forward(self, running: list[GenerationSequence]) -> list[StepResult]:
        """Decode the next token of every decoding sequence, then prefill prompt chunks.

        Each prompt chunk gets a decode call of its own and at least two tokens: llama.cpp
        splits a batch that mixes KV streams into equal shares per stream, and a stream's
        share of a single query token takes another attention kernel than two or more, with
        results that differ in the last bits. Chunks of two or more tokens compute every
        token exactly as a whole-prompt prefill does, so greedy output does not depend on
        what else is running or on how much of the prompt came from the cache.
        """
        results: list[StepResult] = []
        decoding = [s for s in running if s.engine_state.next_input is not None]
        # In KV-stream order: llama.cpp gathers a batch's tokens per stream, and a batch whose
        # order differs from its streams' order steps much slower; once the prompt cache hands out
        # slots out of order, every batch after the first wave of requests would (see
        # docs/architecture/design-notes.md#batches-in-kv-stream-order).
        decoding.sort(key=lambda s: s.engine_state.seq_id)
        rows = 0
        if decoding:
            drafts = self._drafts(decoding)
            self._begin_batch()
            for sequence, draft in zip(decoding, drafts, strict=True):
                state: _SlotState = sequence.engine_state
                self._add(state.next_input, state.n_past, state.seq_id, True)
                for offset, token in enumerate(draft):  # at most MAX_DRAFT_TOKENS
                    self._add(token, state.n_past + 1 + offset, state.seq_id, True)
                state.n_past += 1
                state.next_input = None
            self._decode()
            for sequence, draft in zip(decoding, drafts, strict=True):
                results.extend(self._verify(sequence, draft, rows))
                rows += 1 + len(draft)
        budget = self._prefill_budget(running, rows)
        for sequence in running:
            state = sequence.engine_state
            prompt = sequence.prompt_tokens
            if state.seq_id is None:
                self._assign_slot(sequence)
            end = prefill_chunk_end(state.n_past, len(prompt), budget)
            if end <= state.n_past:
                continue  # prefilled already, or no budget left for a valid chunk this step
            start, state.n_past = state.n_past, end
            self._begin_batch()
            for position in range(start, end):
                # Logits only for the prompt's last token: the first sample comes from it.
                self._add(prompt[position], position, state.seq_id, position == len(prompt) - 1)
            self._decode()
            budget -= end - start
            if end == len(prompt):
                results.append(self._sample(sequence, end - start - 1))
        return results

    def _drafts(self, decoding: list[GenerationSequence]) -> list[list[int]]:
        """Each decoding sequence's draft tokens this step (empty for those that do not speculate).

        A draft is as long as its acceptance so far makes worth it (:meth:`SpeculationState.length`,
        at most ``num_tokens``), never longer than the tokens the sequence may still produce after
        its next input (so its cells stay within ``kv_cells_needed``), and all drafts together fit
        the batch beside every sequence's next input (``n_batch`` rows). The drafts of one step
        are cut to the shortest (:func:`~engines.generation.speculative.equal_lengths`).
        """
        room = self._n_batch - len(decoding)
        worth = step_row_cost(self.row_costs, len(decoding), self.max_sequences)
        limits: list[int] = []
        for sequence in decoding:
            state: _SlotState = sequence.engine_state
            spec = state.speculation
            if spec is None or not spec.active or room <= 0:
                limits.append(0)
                continue
            limit = max(0, min(spec.length(worth), sequence.max_new_tokens - state.generated - 1, room))
            room -= limit
            limits.append(limit)
        drafts: list[list[int]] = [[] for _ in decoding]
        if self._draft_model is None:
            for i, sequence in enumerate(decoding):
                if limits[i]:
                    drafts[i] = sequence.engine_state.history.draft(limits[i])
            return equal_lengths(drafts)
        wanted = [i for i, limit in enumerate(limits) if limit]
        if wanted:
            requests = []
            for i in wanted:
                state = decoding[i].engine_state
                tokens = state.history.tokens
                if state.speculation.draft_past >= len(tokens):  # at least the next input is new to it
                    state.speculation.draft_past = len(tokens) - 1
                    self._draft_model.forget(state.seq_id, state.speculation.draft_past)
                requests.append((state.seq_id, state.speculation, tokens, limits[i]))
            for i, draft in zip(wanted, self._draft_model.draft(requests), strict=True):
                drafts[i] = draft
        return equal_lengths(drafts)

    def _verify(self, sequence: GenerationSequence, draft: list[int], row: int) -> list[StepResult]:
        """Sample ``sequence``'s tokens from rows ``row ..`` of the last decode; keep the accepted draft.

        Row ``row`` scored the next input, row ``row + 1 + j`` the draft token ``draft[j]``. The
        model's token at each row is sampled in order until one differs from the draft (greedy
        acceptance, :func:`~engines.generation.speculative.accepted_prefix`): the accepted drafts
        and that token are emitted, and the cells of the rejected drafts are removed.
        """
        state: _SlotState = sequence.engine_state
        results = [self._sample(sequence, row)]
        for offset, proposed in enumerate(draft):  # at most MAX_DRAFT_TOKENS
            if results[-1][1] != proposed:
                break
            results.append(self._sample(sequence, row + 1 + offset))
        if not draft:
            return results
        accepted = accepted_prefix(draft, [result[1] for result in results])
        seen = state.n_past  # cells before this step's drafts (the next input included)
        state.n_past += accepted
        if accepted < len(draft):
            import llama_cpp

            llama_cpp.llama_memory_seq_rm(self.ctx.memory, state.seq_id, state.n_past, -1)
        spec = state.speculation
        spec.record(len(draft), accepted)
        if self._draft_model is not None and spec.draft_past > seen + accepted:
            spec.draft_past = seen + accepted
            self._draft_model.forget(state.seq_id, spec.draft_past)
        first = results[0]
        results[0] = (first[0], first[1], first[2], (len(draft), accepted))
        return results

    def _prefill_budget(self, running: list[GenerationSequence], decoding: int) -> int:
        """Prompt tokens this step may prefill (all prefilling sequences together).

        ``decoding`` is the rows the decoding sequences took (next inputs and draft tokens). A
        prompt alone in the batch is prefilled in chunks of ``n_batch``: nothing waits on it.
        Beside other sequences, at most ``step_prefill_tokens`` per step, so a long prompt adds at
        most one such chunk to the running streams' step time, and of several new prompts the
        first ones are answered (first token) before the later ones are prefilled.
        """
        capacity = self._n_batch - decoding
        if len(running) == 1:
            return capacity
        return min(capacity, self._step_prefill_tokens)

    def _begin_batch(self) -> None:
        self._batch.batch.n_tokens = 0

    def _add(self, token: int, position: int, seq_id: int, want_logits: bool) -> None:
        batch_add(self._batch.batch, token, position, seq_id, want_logits)

    def _decode(self) -> None:
        decode(self.ctx, self._batch, "llama_decode")

    def _sample(self, sequence: GenerationSequence, index: int) -> StepResult:
        """Sample ``sequence``'s next token from row ``index`` of the last decode call's batch."""
        import llama_cpp

        state: _SlotState = sequence.engine_state
        scored = None
        if state.logprobs:
            logits = np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(self.ctx.ctx, index), shape=(self.vocab_size,)
            )
            raw = logits.copy()  # sampling may modify the buffer in place
        token = self._choose_token(sequence, lambda sampler: sampler.sample(self.ctx, index))
        if state.logprobs:
            scored = token_logprobs(raw, token, state.top_logprobs, self._piece_text)
        state.next_input = token
        state.generated += 1
        if state.speculation is not None:
            if state.history is None:
                state.history = NgramDrafter()
                state.history.extend(sequence.prompt_tokens)
            state.history.extend([token])
        return sequence, token, scored

    def _assign_slot(self, sequence: GenerationSequence) -> None:
        """Give a new sequence a slot, keeping the cells of the prompt prefix the slot already holds."""
        import llama_cpp

        state: _SlotState = sequence.engine_state
        plan = self._prompt_cache.acquire(sequence.prompt_tokens)
        llama_cpp.llama_memory_seq_rm(self.ctx.memory, plan.slot, plan.reused, -1)
        state.seq_id = plan.slot
        state.n_past = plan.reused
        state.reserved_cells = sequence.kv_cells_needed
        self._slot_states[plan.slot] = state
        if self._draft_model is not None:
            self._draft_model.forget(plan.slot)  # the draft context keeps no prompt cache
        if self._kv_pool is not None:
            self._make_room()
        sequence.cached_prompt_tokens = plan.reused

    def _make_room(self) -> None:
        """Free cached prompts of free slots until they fit beside the running sequences' reservations.

        The scheduler admits a sequence only when its reservation fits beside the others', so
        dropping every cached prompt always makes room; the least recently released go first.
        """
        import llama_cpp

        reserved = sum(state.reserved_cells for state in self._slot_states.values())
        for slot in self._prompt_cache.evict(max(0, self._kv_pool - reserved)):
            llama_cpp.llama_memory_seq_rm(self.ctx.memory, slot, 0, -1)

    def _free(self, sequences: list[GenerationSequence]) -> None:
        """Free the sequences' samplers and slots; a slot keeps the cells of its prefilled prompt."""
        import llama_cpp

        for sequence in sequences:
            state: _SlotState = sequence.engine_state
            # After unload (the scheduler may still release sequences cancelled during the last
            # step) the context and its cells are gone already.
            if state.seq_id is not None and self.ctx is not None:
                # Only prompt cells are kept: cells written one token per decode step differ in
                # their last bits from a prefill of the same tokens, and reusing them would
                # change greedy output (see prompt_cache).
                prefilled = sequence.prompt_tokens[: min(state.n_past, len(sequence.prompt_tokens))]
                kept = self._prompt_cache.release(state.seq_id, prefilled)
                llama_cpp.llama_memory_seq_rm(self.ctx.memory, state.seq_id, kept, -1)
                self._slot_states.pop(state.seq_id, None)
                state.seq_id = None
            state.sampler.close()
            if state.thinking_sampler is not None:
                state.thinking_sampler.close()
