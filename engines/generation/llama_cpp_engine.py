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

The engine composes the parts that do each job: :mod:`~engines.generation.llama_cpp_load` (files
and llama.cpp parameters), :mod:`~engines.generation.llama_cpp_memory` (memory),
:mod:`~engines.generation.llama_cpp_vocab` (tokens), :mod:`~engines.generation.llama_cpp_chat`
(chat template), :mod:`~engines.generation.llama_cpp_sampling` (samplers) and
:mod:`~engines.generation.llama_cpp_step` (the batched step).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from engines.base import ModelSpec
from engines.device import cpu_threads
from engines.errors import kv_pool_exhausted
from engines.generation.base import GenerationEngine
from engines.generation.context_size import kv_bytes_per_token, plan_context
from engines.generation.ggml_devices import cuda_device_count, cuda_index
from engines.generation.gguf_memory import llama_cpp_required_memory
from engines.generation.llama_cpp_chat import LlamaCppChatTemplate
from engines.generation.llama_cpp_load import (
    context_params,
    draft_file,
    draft_path,
    gguf_file,
    model_params,
)
from engines.generation.llama_cpp_memory import (
    KV_HEADROOM_BYTES,
    free_bytes,
    loaded_memory,
    with_draft_model,
)
from engines.generation.llama_cpp_sampling import new_sampler
from engines.generation.llama_cpp_step import LlamaCppStepper, SlotState, speculation_state
from engines.generation.llama_cpp_vocab import LlamaCppVocabulary
from engines.generation.options import LlamaCppOptions
from engines.generation.prompt_cache import PromptCache
from engines.generation.requantize import model_file
from engines.generation.scheduler import StepResult
from engines.generation.sequence import GenerationSequence
from engines.generation.speculative import DraftModel, row_cost
from engines.memory_estimate import device_bytes
from engines.registry import register_backend
from engines.stats import KvCacheStats
from engines.tokenization import Offsets
from engines.types import GenerationRequest, MemoryUsage

log = logging.getLogger(__name__)


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
    runs_in_backend_process = True
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
        gguf_file(spec)
        speculative = spec.options.get("speculative")
        draft = speculative.get("draft_model") if isinstance(speculative, dict) else None
        if draft:
            draft_file(spec.name, draft)

    def estimated_load_bytes(self) -> int:
        """The part of :meth:`required_memory` on the engine's own device (RAM on the CPU)."""
        return device_bytes(self.required_memory(), self.device)

    def required_memory(self) -> MemoryUsage:
        """Weights, KV, output and compute buffers on RAM and VRAM (:mod:`engines.generation.gguf_memory`).

        With a draft model, its own (the file as it is, one KV stream per sequence) is added.
        """
        memory = llama_cpp_required_memory(
            gguf_file(self.spec), self.options, self.device, self.max_sequences
        )
        draft = draft_path(self.spec.name, self.options)
        return with_draft_model(memory, draft, self.options, self.device, self.max_sequences)

    def free_memory_bytes(self) -> int:
        """Free bytes of this model's device as llama.cpp sees it.

        The GPU's free memory on CUDA (:func:`~engines.generation.ggml_devices.cuda_memory`: no
        torch), host memory on the CPU.

        Raises:
            ValueError: the CUDA device is not one llama.cpp sees.

        """
        return free_bytes(self.device)

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

        llama_cpp.llama_backend_init()
        # llama.cpp logs through llama-cpp-python's logger; keep its chatter out of our log.
        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
        params, layers = model_params(self.options, self.device)
        path = str(model_file(gguf_file(self.spec), self.options))
        self.model = LlamaModel(path_model=path, params=params, verbose=False)
        self._vocab = LlamaCppVocabulary(self.model)
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
        n_batch = self.options.n_batch
        ctx_params = context_params(
            self.options, max_sequences=self.max_sequences, per_sequence=per_sequence, threads=threads
        )
        self.ctx = LlamaContext(model=self.model, params=ctx_params, verbose=False)
        self._batch = LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)
        self.context_length = min(per_sequence, int(llama_cpp.llama_n_ctx_seq(self.ctx.ctx)))
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(self.model.vocab))
        self._prompt_cache = PromptCache(self.max_sequences, enabled=self.options.prompt_cache)
        self._kv_total = int(llama_cpp.llama_n_ctx(self.ctx.ctx))
        # Admission by cells (the scheduler) and room for new sequences (the stepper) in a pool.
        self._kv_pool = self._kv_total if pool else None
        self.scheduler.kv_pool_cells = self._kv_pool
        self._stepper = LlamaCppStepper(
            self.ctx,
            self._batch,
            vocab_size=self.vocab_size,
            max_sequences=self.max_sequences,
            n_batch=n_batch,
            step_prefill_tokens=self.options.step_prefill_tokens,
            prompt_cache=self._prompt_cache,
            kv_pool=self._kv_pool,
            piece_text=self._vocab.piece_text,
        )
        self._metadata = metadata
        template = self.options.chat_template or self._metadata.get("tokenizer.chat_template")
        self._set_chat_template(template)
        self._chat = (
            LlamaCppChatTemplate(template, bos_text=self._vocab.bos_text, eos_text=self._vocab.eos_text)
            if template
            else None
        )
        self._setup_reasoning()
        # Speculation needs flash attention (see speculation_state): only then is the row cost measured.
        # A verified row's cost for one sequence and for a full batch (stepped between by step_row_cost).
        if self.options.flash_attn:
            probe = functools.partial(self._stepper.probe_decode, bos_token=self.model.token_bos())
            self.row_costs = (row_cost(probe, 1), row_cost(probe, self.max_sequences))
        log.info("speculation row cost", extra={"model": self.spec.name, "row_costs": self.row_costs})
        self._draft_model: DraftModel | None = None
        draft = draft_path(self.spec.name, self.options)
        if draft is not None:
            self._draft_model = DraftModel(
                draft,
                self.model,
                model=self.spec.name,
                draft_source=str(self.options.speculative.draft_model),
                slots=self.max_sequences,
                per_sequence=per_sequence,
                n_batch=n_batch,
                threads=threads,
                n_gpu_layers=layers,
            )
        self._stepper.draft_model = self._draft_model

    @property
    def row_costs(self) -> tuple[float, float]:
        """A verified row's cost for one sequence and for a full batch (measured at load with flash_attn)."""
        return self._stepper.row_costs

    @row_costs.setter
    def row_costs(self, costs: tuple[float, float]) -> None:
        self._stepper.row_costs = costs

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
        running = self._stepper.running_cells()
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
        # The stepper and the vocabulary outlive the unload (the scheduler may still release
        # sequences cancelled during the last step), without the freed context and model.
        if getattr(self, "_stepper", None) is not None:
            self._stepper.detach()
        if getattr(self, "_vocab", None) is not None:
            self._vocab.close()
        self._chat = None

    def memory_usage(self) -> MemoryUsage:
        """Weights plus the KV cache (cache_type_k/v keys and values of every cell) and the draft model."""
        if getattr(self, "model", None) is None:
            return MemoryUsage()
        import llama_cpp

        cells = int(llama_cpp.llama_n_ctx(self.ctx.ctx))
        draft = self._draft_model.size_bytes() if self._draft_model is not None else 0
        return loaded_memory(int(self.model.size()), self._metadata, cells, self.options, self.device, draft)

    # -- vocabulary (TokenVocabulary) -------------------------------------------------------

    def is_end_of_generation(self, token_id: int) -> bool:
        """EOS and the vocabulary's other end-of-generation tokens (e.g. ``<|im_end|>``)."""
        return self._vocab.is_end_of_generation(token_id)

    def token_bytes(self, token_id: int) -> bytes:
        """Bytes of one token's piece (special tokens render as nothing)."""
        return self._vocab.token_bytes(token_id)

    # -- requests ---------------------------------------------------------------------------

    def _render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list | None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        return self._chat.render(messages, tools, add_generation_prompt, **template_kwargs)

    def _tokenize(self, text: str, *, templated: bool, add_special: bool | None = None) -> list[int]:
        return self._vocab.tokenize(text, templated=templated, add_special=add_special)

    def _token_strings(self, ids: list[int]) -> list[str]:
        return self._vocab.token_strings(ids)

    def _offsets(self, text: str, ids: list[int], *, templated: bool, add_special: bool | None) -> Offsets:
        return self._vocab.offsets(text, ids, self.spec.name)

    def _detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        return self._vocab.detokenize(ids, skip_special_tokens)

    def _new_state(self, request: GenerationRequest) -> SlotState:
        sampler = new_sampler(request, self.model.vocab, self.vocab_size)
        return SlotState(
            sampler=sampler,
            logprobs=request.params.logprobs,
            top_logprobs=request.params.top_logprobs,
            speculation=speculation_state(request, sampler, self.options),
        )

    def _thinking_sampler(self, request: GenerationRequest) -> Any:
        return new_sampler(request, self.model.vocab, self.vocab_size, constrained=False)

    # -- batching (LlamaCppStepper) ---------------------------------------------------------

    def _forward(self, running: list[GenerationSequence]) -> list[StepResult]:
        return self._stepper.forward(running, self._choose_token)

    def _free(self, sequences: list[GenerationSequence]) -> None:
        self._stepper.free(sequences)
