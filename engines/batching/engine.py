"""Base class of the batched encoder engines (embeddings, cross-encoders, classifiers, token classifiers)."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from engines.base import Engine, ModelSpec
from engines.batching.batcher import DynamicBatcher
from engines.batching.memory import encoder_required_memory
from engines.batching.options import EncoderOptions, exported_runtime
from engines.batching.tokens import TokenCounter
from engines.device import cpu_threads, torch_dtype_for, torch_module_memory
from engines.encoder_runtime import ExportedModel, export_encoder
from engines.hf_construction import hf_construction
from engines.memory_estimate import device_bytes
from engines.options import parse_options
from engines.sources import resolve_source
from engines.stats import EncoderStats, EngineStats
from engines.tokenization import no_chat_template
from engines.types import DetokenizeRequest, MemoryUsage, TokenizeRequest, TokenizeResult

log = logging.getLogger(__name__)

# Traced by the export: two texts of different lengths, so padding and the attention mask are exercised.
EXPORT_SAMPLE_TEXTS = ("A short one.", "A somewhat longer sentence, so that the batch needs padding.")


EncoderOptionsT = TypeVar("EncoderOptionsT", bound=EncoderOptions)


class BatchedEncoderEngine(Engine[EncoderOptionsT]):
    """An engine whose torch model is ``self.model`` and whose forward passes go through ``self.batcher``.

    Subclasses implement :meth:`load`, which sets ``self.model`` and ``self.tokens`` and calls
    :meth:`make_batcher`; size estimate, memory accounting, unloading (batcher closed first, so
    queued callers get UNAVAILABLE instead of waiting) and Tokenize/Detokenize are shared.
    Their options model extends :class:`~engines.batching.options.EncoderOptions` (torch only) or
    :class:`~engines.batching.options.ExportableEncoderOptions` (``runtime``/``quantize`` too).
    """

    options_model: ClassVar[type[EncoderOptions]] = EncoderOptions
    model: Any = None
    batcher: DynamicBatcher | None = None
    tokens: TokenCounter
    runs_torch = True
    runtime_bytes = 0
    """Bytes of the exported model a runtime other than torch holds (its files' size)."""
    exported_path: Path | None = None
    """The converted-cache folder the exported model was read from (None: the model runs in torch)."""

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """The base checks (options included) plus the chosen runtime's packages being installed.

        Raises:
            ModelLoadError: see :meth:`Engine.check_spec`.
            InvalidArgumentError: an invalid option (INVALID_MODEL_OPTION).
            FailedPreconditionError: the runtime's packages are not installed (RUNTIME_NOT_INSTALLED).

        """
        super().check_spec(spec)
        exported = exported_runtime(parse_options(cls.options_model, spec.options, backend=cls.backend))
        if exported is not None:
            exported.runtime_choice.check_installed()

    def load_pretrained(self, model_class: Any) -> tuple[Any, Any]:
        """The source's tokenizer and its ``model_class`` model (a transformers ``AutoModelFor...``).

        The model is in the ``dtype`` option's dtype (unset: by device), on ``self.device``, in
        evaluation mode; a local source never reaches the hub. Blocking (call it from :meth:`load`).

        Raises:
            Exception: the tokenizer or the weights cannot be read (the load fails).

        """
        from transformers import AutoTokenizer

        resolved = resolve_source(self.spec.source)
        local = resolved.path is not None
        dtype = torch_dtype_for(self.device, self.options.dtype)
        with hf_construction():  # one build at a time: engines/hf_construction.py
            tokenizer = AutoTokenizer.from_pretrained(resolved.location, local_files_only=local)
            model = model_class.from_pretrained(resolved.location, dtype=dtype, local_files_only=local)
        return tokenizer, model.to(self.device).eval()

    def export_for_runtime(self, model: Any, tokenizer: Any, output: str) -> ExportedModel | None:
        """``model`` exported for the catalog's ``runtime``/``quantize``, or None to keep it in torch.

        Torch is kept for ``runtime: torch`` and on devices other than the CPU (ONNX Runtime's and
        OpenVINO's builds here are CPU ones), with a warning in that second case.

        Args:
            model: the transformers model (float32 on the CPU) the engine would call.
            tokenizer: its tokenizer (the export traces its output for two sample texts).
            output: the output field the engine reads (``last_hidden_state``, ``logits``).

        Raises:
            FailedPreconditionError: the runtime's packages are not installed (RUNTIME_NOT_INSTALLED).
            Exception: the export failed.

        """
        options = exported_runtime(self.options)
        if options is None:
            return None
        choice = options.runtime_choice
        if self.device != "cpu":
            log.warning(
                "runtime %s runs on the CPU only; model %s stays in torch on %s",
                choice.runtime,
                self.spec.name,
                self.device,
            )
            return None
        exported = export_encoder(
            model,
            tokenizer(list(EXPORT_SAMPLE_TEXTS), padding=True, return_tensors="pt"),
            output,
            choice=choice,
            source=resolve_source(self.spec.source).location,
            cache_dir=options.cache_dir,
            threads=self.options.threads or cpu_threads(),
            progress=self.report_progress,  # the model's status reads "Installing: converting"
        )
        self.runtime_bytes = exported.nbytes
        self.exported_path = exported.path
        return exported

    def swap_transformer(self, module: Any) -> None:
        """Run the transformers model inside sentence-transformers ``module`` with the catalog's runtime.

        ``module`` is a sentence-transformers ``Transformer`` (the first module of a
        ``SentenceTransformer`` or ``CrossEncoder``); its model is replaced in place, so the
        library's tokenization, pooling and activation stay as they are. A no-op for torch.
        """
        output = module.modality_config["text"]["method_output_name"]
        exported = self.export_for_runtime(module.model, module.tokenizer, output)
        if exported is not None:
            del module.model  # a registered submodule; an attribute that is no module takes its place
            module.model = exported

    def stats(self) -> EngineStats:
        """The batcher's queue depth and requests (none before :meth:`load` made the batcher)."""
        batcher = self.batcher
        if batcher is None:
            return EngineStats()
        running, waiting = batcher.request_counts()
        return EngineStats(
            encoder=EncoderStats(
                queue_depth=batcher.queue_depth, requests_running=running, requests_waiting=waiting
            )
        )

    def required_memory(self) -> MemoryUsage:
        """Weights at the load dtype (or the exported runtime's copy) plus a full batch's working memory.

        :func:`engines.batching.memory.encoder_required_memory` for a local source folder; a hub id
        (no files here yet) is unknown (0).

        Raises:
            FileNotFoundError: the source folder is missing.
            ValueError: an unreadable ``config.json`` or safetensors header.

        """
        resolved = resolve_source(self.spec.source)
        if resolved.path is None:
            return MemoryUsage()
        return encoder_required_memory(resolved.path, self.options, self.device)

    def estimated_load_bytes(self) -> int:
        """The part of :meth:`required_memory` on the engine's device."""
        return device_bytes(self.required_memory(), self.device)

    def make_batcher(self, run_batch: Callable[[list[Any]], Sequence[Any]]) -> DynamicBatcher:
        """A batcher running ``run_batch`` (a method of this engine) with the catalog entry's limits.

        The batcher holds the method weakly, so an unloaded engine ends when its last reference
        goes (no cycle for a full garbage collection to find: ``service.garbage_collector``).
        """
        method = weakref.WeakMethod(run_batch)  # type: ignore[arg-type]
        name = self.spec.name  # not ``self``: the closure must not hold the engine

        def run(items: list[Any]) -> Sequence[Any]:
            bound = method()
            if bound is None:  # unreachable while the engine runs batches: it owns the batcher
                raise RuntimeError(f"model {name!r} was unloaded")
            return bound(items)

        return DynamicBatcher(run, self.executor, self.options, name=name)

    def unload(self) -> None:
        """Close the batcher and drop the model (and anything :meth:`release` drops)."""
        if self.batcher is not None:
            self.batcher.close()
        self.model = None
        self.release()

    def release(self) -> None:
        """Drop references besides ``self.model`` (override: tokenizers, pipelines)."""

    def memory_usage(self) -> MemoryUsage:
        """Parameter and buffer bytes of ``self.model`` by device, plus an exported model's files."""
        if self.model is None:
            return MemoryUsage()
        ram, vram = torch_module_memory(self.model) if hasattr(self.model, "parameters") else (0, 0)
        return MemoryUsage(ram_bytes=ram + self.runtime_bytes, vram_bytes=vram)

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        """The model tokenizer's ids of ``request.prompt``, untruncated, on the model's lane.

        ``max_context_tokens`` is the model's maximum sequence length; special tokens ([CLS],
        [SEP]) are added unless ``add_special_tokens`` is false, as the model's own calls add them.

        Raises:
            InvalidArgumentError: chat messages (encoders have no chat template: NO_CHAT_TEMPLATE).
            InputTooLongError: the text is over 32 characters per token of the model's window.
            FailedPreconditionError: offsets of a slow tokenizer (OFFSETS_NOT_SUPPORTED).

        """
        if request.messages is not None:
            raise no_chat_template(self.spec.name)
        ids, strings, offsets = await self.executor.run(
            self.tokens.tokenize,
            request.prompt or "",
            add_special_tokens=request.add_special_tokens is not False,
            return_token_strings=request.return_token_strings,
            return_offsets=request.return_offsets,
        )
        return TokenizeResult(ids, self.tokens.max_length, strings, offsets)

    async def detokenize(self, request: DetokenizeRequest) -> str:
        """The text of ``request.token_ids``, decoded on the lane (see :meth:`TokenCounter.detokenize`)."""
        return await self.executor.run(
            self.tokens.detokenize, request.token_ids, skip_special_tokens=request.skip_special_tokens
        )
