"""Text generation with a transformers causal LM, continuously batched by our own scheduler.

transformers ships a continuous-batching manager (``generate_batch`` / ``init_continuous_batching``),
but it runs its own background thread and owns the request queue, which does not fit the
service's model: all compute for a device runs as jobs on its one :class:`DeviceExecutor`
thread, so generation steps interleave fairly with embedding batches, and the shared
:class:`ContinuousBatchScheduler` owns admission and cancellation. So this engine implements
the hooks of :class:`~engines.generation.base.GenerationEngine` over a plain model forward:

* the running batch keeps one left-padded KV cache (:class:`~engines.generation.hf_batch_cache.BatchKVCache`);
  each step feeds the last token of every decoding sequence (``input_ids`` ``[B, 1]``), the
  padding mask (``[B, T + 1]``) and each sequence's own ``position_ids`` (``[B, 1]``);
* newly admitted sequences are prefilled in the same step (their prompts left-padded together,
  in groups of at most ``prefill_tokens`` padded tokens), their first token sampled, and their
  cache rows appended to the running batch;
* a sequence that leaves has its row dropped and the padding every remaining row shares trimmed.

Sampling (penalties, temperature, top-k/p, min-p, seeds) is per sequence in torch
(:mod:`engines.generation.torch_sampling`); JSON output is enforced with llguidance
(:mod:`engines.generation.grammar_constraint`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.base import ModelSpec
from engines.converted_cache import (
    CONVERTING,
    converted_root,
    mark_used,
    remove_superseded,
    source_fingerprint,
    source_identity,
)
from engines.device import torch_dtype_for, torch_module_memory
from engines.errors import ModelLoadError
from engines.generation.base import GenerationEngine, SequenceState
from engines.generation.gguf_info import gguf_parameter_count
from engines.generation.gguf_memory import read_gguf_header
from engines.generation.logprobs import token_logprobs
from engines.generation.options import DEFAULT_MAX_CONTEXT, TransformersGenerationOptions
from engines.generation.scheduler import StepResult
from engines.generation.sequence import GenerationSequence
from engines.generation.structured import output_constraint
from engines.hf_construction import hf_construction
from engines.memory_estimate import (
    TransformerShape,
    device_bytes,
    dtype_itemsize,
    encoder_activation_bytes,
    on_device,
    read_json,
    weight_bytes,
)
from engines.options import parse_options
from engines.reasons import Reason
from engines.registry import register_backend
from engines.sources import ResolvedSource, file_in_folder, resolve_source
from engines.tokenization import Offsets, hf_detokenize, hf_tokenize
from engines.types import GenerationRequest, MemoryUsage

if TYPE_CHECKING:
    import torch

    from engines.generation.grammar_constraint import GrammarTokenizer
    from engines.generation.hf_batch_cache import BatchKVCache
    from engines.generation.torch_sampling import SequenceSampler

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _SequenceState(SequenceState):
    """Engine-side state of one sequence: a :class:`SequenceSampler`, and whether it has a cache row."""

    sampler: SequenceSampler
    in_batch: bool = False


@register_backend
class TransformersGenerationEngine(GenerationEngine[TransformersGenerationOptions]):
    """Generation with ``AutoModelForCausalLM`` and ``AutoTokenizer`` (hub id or local folder).

    Only models whose cache is full attention in every layer (Llama, Qwen2, Phi-3, SmolLM…)
    are supported; sliding-window and linear-attention layers are refused at load. Remote
    code is never run.

    Catalog options: :class:`~engines.generation.options.TransformersGenerationOptions` (a
    ``gguf_file`` is loaded through transformers, dequantized, and a converted safetensors copy
    is cached in ``cache_dir``).
    """

    backend = "transformers"
    runs_in_backend_process = True
    runs_torch = True

    # -- loading -------------------------------------------------------------------------

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """The base checks; a ``gguf_file`` must be in the local source (see :meth:`Engine.check_spec`)."""
        super().check_spec(spec)
        options = parse_options(cls.options_model, spec.options, backend=cls.backend)
        cls._gguf_path(spec, resolve_source(spec.source), options.gguf_file)

    @staticmethod
    def _gguf_path(spec: ModelSpec, resolved: ResolvedSource, gguf_file: str | None) -> Path | None:
        """The ``gguf_file`` option's file in the local source folder, or None when unset.

        Raises:
            ModelLoadError: the source is not local or the file resolves outside it
                (MODEL_SOURCE_INVALID), or the file is not in it (MODEL_SOURCE_MISSING).

        """
        if not gguf_file:
            return None
        if resolved.path is None:
            raise ModelLoadError(
                "gguf_file needs a local source folder (download the file first)",
                reason=Reason.MODEL_SOURCE_INVALID,
                model=spec.name,
            )
        path = (
            file_in_folder(resolved.path, gguf_file, option="gguf_file", model=spec.name)
            if resolved.path.is_dir()
            else resolved.path
        )
        if not path.is_file():
            raise ModelLoadError(
                f"gguf_file {gguf_file!r} is not a file in {resolved.path}",
                reason=Reason.MODEL_SOURCE_MISSING,
                model=spec.name,
            )
        return path

    def _converted_dir(self, gguf: Path) -> Path:
        """Where the dequantized copy of ``gguf`` lives: keyed by path, size and content of the file."""
        # Keyed by the file, so catalog entries sharing it share the copy.
        return converted_root(self.options.cache_dir) / f"{gguf.stem}-{source_fingerprint(gguf)}"

    def converted_copy(self) -> Path | None:
        """The folder of the dequantized copy that ``gguf_file`` loads from, or None without one.

        Raises:
            ModelLoadError: see :meth:`_gguf_path`.

        """
        gguf = self._gguf_path(self.spec, resolve_source(self.spec.source), self.options.gguf_file)
        return None if gguf is None else self._converted_dir(gguf)

    def make_converted_copy(self) -> None:
        """Build the dequantized copy of ``gguf_file`` in the converted cache, if it is not there.

        Blocking, for seconds (``prepare`` runs it ahead of any server).

        Raises:
            ModelLoadError: see :meth:`_gguf_path`.

        """
        self._load_pretrained()

    def required_memory(self) -> MemoryUsage:
        """Weights at the load dtype, plus the KV cache and working memory of one full prefill.

        Weights: the GGUF's parameter count (its header) or the folder's safetensors headers, times
        the dtype's bytes. The KV cache grows with use
        (:class:`~engines.generation.hf_batch_cache.BatchKVCache`); counted here is what one
        prefill of ``prefill_tokens`` padded tokens allocates, ``prefill_tokens x 2 x layers x
        kv_heads x head_dim`` elements. Working memory of that prefill:
        :func:`~engines.memory_estimate.encoder_activation_bytes` with rows as long as the context
        allows (the attention scores are materialised: the padded batch carries a mask; only the
        last position's logits are computed). A hub id (no files here) is unknown (0).
        ``python -m bench.memory_estimate`` checks the estimate against the measured peak (see
        docs/architecture/design-notes.md#memory-estimates-against-measured-peaks).

        Raises:
            ModelLoadError: see :meth:`_gguf_path`.
            ValueError: an unreadable GGUF or safetensors header.

        """
        resolved = resolve_source(self.spec.source)
        gguf = self._gguf_path(self.spec, resolved, self.options.gguf_file)
        itemsize = dtype_itemsize(self.device, self.options.dtype)
        if gguf is not None:
            weights = gguf_parameter_count(gguf) * itemsize
            converted = self._converted_dir(gguf) / "config.json"
            config = read_json(converted)
            shape = (
                TransformerShape.from_config(config)
                if config
                else TransformerShape.from_gguf(read_gguf_header(gguf).metadata)
            )
        elif resolved.path is not None:
            weights = weight_bytes(resolved.path, itemsize)
            shape = TransformerShape.from_config(read_json(resolved.path / "config.json"))
        else:
            return MemoryUsage()
        tokens = self.options.prefill_tokens
        kv = tokens * shape.kv_bytes_per_token(itemsize)
        context = self.options.max_context or min(shape.max_positions, DEFAULT_MAX_CONTEXT)
        activations = encoder_activation_bytes(shape, tokens, min(tokens, context), itemsize)
        return on_device(weights + kv + activations, self.device)

    def estimated_load_bytes(self) -> int:
        """The part of :meth:`required_memory` on the engine's device."""
        return device_bytes(self.required_memory(), self.device)

    def _load_pretrained(self) -> tuple[Any, Any]:
        """(tokenizer, model) on the CPU, from the converted cache when there is one.

        Sets :attr:`loaded_from` to the folder, hub id or GGUF file the weights came from. Builds
        one model at a time in the process (:func:`~engines.hf_construction.hf_construction`).
        """
        with hf_construction():
            return self._build_pretrained()

    def _build_pretrained(self) -> tuple[Any, Any]:
        """:meth:`_load_pretrained`'s work, with the build lock held."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dtype = torch_dtype_for(self.device, self.options.dtype)
        resolved = resolve_source(self.spec.source)
        gguf = self._gguf_path(self.spec, resolved, self.options.gguf_file)
        if gguf is None:
            local = resolved.path is not None
            self.loaded_from = resolved.location
            tokenizer = AutoTokenizer.from_pretrained(resolved.location, local_files_only=local)
            model = AutoModelForCausalLM.from_pretrained(
                resolved.location, dtype=dtype, local_files_only=local
            )
            return tokenizer, model
        converted = self._converted_dir(gguf)
        if (converted / "config.json").is_file():
            mark_used(converted)
            self.loaded_from = str(converted)
            tokenizer = AutoTokenizer.from_pretrained(converted, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(converted, dtype=dtype, local_files_only=True)
            return tokenizer, model
        log.info("converting %s to transformers format (cached in %s)", gguf, converted)
        self.report_progress(CONVERTING)
        self.loaded_from = str(gguf)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        if self._save_converted(tokenizer, model, converted):
            remove_superseded(converted, f"{source_identity(gguf)}|transformers")
        return tokenizer, model.to(dtype)

    @staticmethod
    def _save_converted(tokenizer: Any, model: Any, target: Path) -> bool:
        """Save a dequantized GGUF model as safetensors, atomically (temp folder, then rename).

        Returns True when the copy was saved (False: packed weights, a lost race, a read-only cache).
        """
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:
            if getattr(quantizer, "packed_modules", None):
                log.info("GGUF weights stay packed; not caching a converted copy")
                return False
            quantizer.remove_quantization_config(model)  # dense weights: save as a plain model
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            os.replace(tmp, target)
            return True
        except OSError as exc:  # another process won the race, or the cache is not writable
            log.warning("could not cache converted model in %s: %s", target, exc)
            return False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def load(self) -> None:
        """Load tokenizer and model, check the cache layout, build the token piece table."""
        from engines.generation.hf_batch_cache import BatchKVCache
        from engines.generation.hf_vocab import token_piece_table

        tokenizer, model = self._load_pretrained()
        if not BatchKVCache.supports(model.config):
            raise ModelLoadError(
                f"model {self.spec.name!r} uses sliding-window or linear attention, which the transformers "
                "generation engine does not batch yet",
                model=self.spec.name,
            )
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        config = model.config.get_text_config(decoder=True)
        # Rows of the output layer: may exceed the tokenizer's vocabulary (padding rows).
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        limit = int(getattr(config, "max_position_embeddings", 0) or DEFAULT_MAX_CONTEXT)
        self.context_length = self.options.max_context or min(limit, DEFAULT_MAX_CONTEXT)
        self._prefill_tokens = self.options.prefill_tokens
        eos = model.generation_config.eos_token_id
        eos_ids = eos if isinstance(eos, list) else [eos]
        self._eos_ids = [int(i) for i in [*eos_ids, tokenizer.eos_token_id] if i is not None]
        self._end_ids = frozenset(self._eos_ids)
        self._pieces = token_piece_table(tokenizer, self.vocab_size)
        self._set_chat_template(self.options.chat_template or tokenizer.chat_template)
        self._grammar_tokenizer: GrammarTokenizer | None = None
        self._batch: BatchKVCache | None = None
        self._rows: list[GenerationSequence] = []
        self._setup_reasoning()

    def unload(self) -> None:
        """Drop model, tokenizer and cache; the manager then frees device memory."""
        self.model = None
        self.tokenizer = None
        self._batch = None
        self._rows = []
        self._grammar_tokenizer = None

    def memory_usage(self) -> MemoryUsage:
        """Parameters and buffers plus the KV cache buffers (their allocated capacity)."""
        if getattr(self, "model", None) is None:
            return MemoryUsage()
        ram, vram = torch_module_memory(self.model)
        cache = self._batch.allocated_bytes if self._batch is not None else 0
        if self.device == "cpu":
            return MemoryUsage(ram_bytes=ram + cache, vram_bytes=vram)
        return MemoryUsage(ram_bytes=ram, vram_bytes=vram + cache)

    # -- vocabulary (TokenVocabulary) ---------------------------------------------------------

    def is_end_of_generation(self, token_id: int) -> bool:
        """The generation config's EOS ids and the tokenizer's EOS (``<|im_end|>`` for ChatML models)."""
        return token_id in self._end_ids

    def token_bytes(self, token_id: int) -> bytes:
        """Raw bytes of the token (special tokens: nothing)."""
        return self._pieces[token_id] if 0 <= token_id < len(self._pieces) else b""

    def _token_text(self, token_id: int) -> str:
        return self.token_bytes(token_id).decode("utf-8", errors="replace")

    # -- requests -------------------------------------------------------------------------------

    def _render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list | None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            chat_template=self._chat_template,
            **template_kwargs,
        )

    def _tokenize(self, text: str, *, templated: bool, add_special: bool | None = None) -> list[int]:
        return self._encode(text, templated=templated, add_special=add_special)[0]

    def _encode(
        self, text: str, *, templated: bool, add_special: bool | None, offsets: bool = False
    ) -> tuple[list[int], Offsets]:
        # Rendered text carries its own special tokens (BOS where the template puts one); a raw
        # prompt gets the tokenizer's.
        ids, _, spans = hf_tokenize(
            self.tokenizer,
            text,
            add_special_tokens=not templated if add_special is None else add_special,
            return_token_strings=False,
            return_offsets=offsets,
            model=self.spec.name,
        )
        return ids, spans

    def _token_strings(self, ids: list[int]) -> list[str]:
        return [str(token) for token in self.tokenizer.convert_ids_to_tokens(ids)]

    def _offsets(self, text: str, ids: list[int], *, templated: bool, add_special: bool | None) -> Offsets:
        return self._encode(text, templated=templated, add_special=add_special, offsets=True)[1]

    def _detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        return hf_detokenize(self.tokenizer, ids, skip_special_tokens=skip_special_tokens)

    @property
    def tokenizer_vocabulary_size(self) -> int:
        """The tokenizer's ids (the output layer may have more rows, for padding)."""
        return len(self.tokenizer)

    def _new_state(self, request: GenerationRequest) -> _SequenceState:
        """Sampler of the sequence, with an llguidance constraint when JSON output is asked for."""
        from engines.generation.torch_sampling import SequenceSampler

        params = request.params
        spec = output_constraint(request)
        constraint = None
        if spec is not None:
            if self._grammar_tokenizer is None:
                from engines.generation.grammar_constraint import GrammarTokenizer

                self._grammar_tokenizer = GrammarTokenizer(self.tokenizer, self._eos_ids)
            constraint = self._grammar_tokenizer.constraint(spec)
        return _SequenceState(
            sampler=SequenceSampler(params, self.vocab_size, self.device, constraint),
            logprobs=params.logprobs,
            top_logprobs=params.top_logprobs,
        )

    def _thinking_sampler(self, request: GenerationRequest) -> Any:
        from engines.generation.torch_sampling import SequenceSampler

        return SequenceSampler(request.params, self.vocab_size, self.device)

    # -- batching ---------------------------------------------------------------------------------

    def _forward(self, running: list[GenerationSequence]) -> list[StepResult]:
        """Decode one token for the batch, and prefill newly admitted sequences."""
        import torch

        results: list[StepResult] = []
        with torch.inference_mode():
            if self._rows:
                results.extend(self._decode())
            joining = [s for s in running if not s.engine_state.in_batch and not s.engine_state.released]
            for group in self._prefill_groups(joining):
                results.extend(self._prefill(group))
        wanted = {id(s) for s in running}
        return [r for r in results if id(r[0]) in wanted]

    def _decode(self) -> list[StepResult]:
        """One forward over every row: each feeds its last sampled token."""
        import torch

        assert self._batch is not None
        states: list[_SequenceState] = [s.engine_state for s in self._rows]
        input_ids = torch.tensor([[st.next_input] for st in states], dtype=torch.long, device=self.device)
        positions = torch.tensor([[st.n_past] for st in states], dtype=torch.long, device=self.device)
        logits = self.model(
            input_ids=input_ids,
            attention_mask=self._batch.step_mask(1),
            position_ids=positions,
            past_key_values=self._batch,
            use_cache=True,
        ).logits[:, -1, :]
        for st in states:
            st.n_past += 1
        return self._sample(self._rows, logits)

    def _prefill_groups(self, joining: list[GenerationSequence]) -> list[list[GenerationSequence]]:
        """Split joining sequences so each group's padded prompt tokens stay within ``prefill_tokens``."""
        groups: list[list[GenerationSequence]] = []
        current: list[GenerationSequence] = []
        longest = 0
        for sequence in joining:
            length = len(sequence.prompt_tokens)
            if current and (len(current) + 1) * max(longest, length) > self._prefill_tokens:
                groups.append(current)
                current, longest = [], 0
            current.append(sequence)
            longest = max(longest, length)
        if current:
            groups.append(current)
        return groups

    def _prefill(self, group: list[GenerationSequence]) -> list[StepResult]:
        """Run the prompts of ``group`` (left-padded together), sample their first tokens, join the batch."""
        import torch

        from engines.generation.hf_batch_cache import BatchKVCache

        longest = max(len(s.prompt_tokens) for s in group)
        pad = self._eos_ids[0]
        input_ids = torch.tensor(
            [[pad] * (longest - len(s.prompt_tokens)) + s.prompt_tokens for s in group],
            dtype=torch.long,
            device=self.device,
        )
        mask = torch.tensor(
            [[0] * (longest - len(s.prompt_tokens)) + [1] * len(s.prompt_tokens) for s in group],
            dtype=torch.long,
            device=self.device,
        )
        # Each row counts positions from its first real token; padding gets position 0 (masked anyway).
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        cache = BatchKVCache()
        cache.mask = mask
        logits = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1, :]
        for sequence in group:
            state: _SequenceState = sequence.engine_state
            state.n_past = len(sequence.prompt_tokens)
            state.in_batch = True
        if self._batch is None:
            self._batch = cache
        else:
            self._batch.extend(cache)
        self._rows.extend(group)
        return self._sample(group, logits)

    def _sample(self, sequences: list[GenerationSequence], logits: torch.Tensor) -> list[StepResult]:
        """Next token of each sequence from its row of ``logits`` (``[len(sequences), vocab]``)."""
        results: list[StepResult] = []
        for sequence, row in zip(sequences, logits, strict=True):
            state: _SequenceState = sequence.engine_state
            token = self._choose_token(sequence, lambda sampler, row=row: _sample_and_accept(sampler, row))
            state.next_input = token
            scored = None
            if state.logprobs:
                scored = token_logprobs(
                    row.float().cpu().numpy(), token, state.top_logprobs, self._token_text
                )
            results.append((sequence, token, scored))
        return results

    def _free(self, sequences: list[GenerationSequence]) -> None:
        """Drop the sequences' cache rows (one copy of the remaining rows) and their sampling state."""
        leaving = set()
        for sequence in sequences:
            state: _SequenceState = sequence.engine_state
            if state.in_batch:
                leaving.add(id(sequence))
                state.in_batch = False
        if not leaving:
            return
        keep = [i for i, s in enumerate(self._rows) if id(s) not in leaving]
        self._rows = [self._rows[i] for i in keep]
        if not keep:
            self._batch = None
        elif self._batch is not None:
            self._batch.keep(keep)


def _sample_and_accept(sampler: Any, row: torch.Tensor) -> int:
    """Sample a token from ``row`` with ``sampler`` and record it there (penalties, constraint)."""
    token = sampler.sample(row)
    sampler.accept(token)
    return token
