"""What a llama.cpp load opens: the GGUF files a spec names and the llama.cpp parameters of its options.

:func:`gguf_file` and :func:`draft_file` resolve the model's source and its
``speculative.draft_model`` to local GGUF files; :func:`model_params` and :func:`context_params`
turn :class:`~engines.generation.options.LlamaCppOptions` into llama.cpp's
``llama_model_params`` (GPU layers, mmap/mlock, placement on one GPU) and
``llama_context_params`` (sequences, cells, batch sizes, KV cache types, threads, KV layout,
flash attention).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engines.base import ModelSpec
from engines.errors import ModelLoadError
from engines.generation.ggml_devices import cuda_index
from engines.generation.options import LlamaCppOptions
from engines.reasons import Reason
from engines.sources import resolve_source

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


def gguf_file(spec: ModelSpec) -> Path:
    """The local GGUF file of ``spec.source``.

    Raises:
        ModelLoadError: the source is missing (MODEL_SOURCE_MISSING, from
            :func:`~engines.sources.resolve_source`) or not a local file (MODEL_SOURCE_INVALID).

    """
    resolved = resolve_source(spec.source)
    if resolved.path is None or not resolved.path.is_file():
        raise ModelLoadError(
            f"llama_cpp needs a local .gguf file; {spec.source!r} is not one",
            reason=Reason.MODEL_SOURCE_INVALID,
            model=spec.name,
        )
    return resolved.path


def draft_file(model: str, draft: str) -> Path:
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
            f"speculative.draft_model of model {model!r} must be a local .gguf file; {draft!r} is not one",
            reason=Reason.MODEL_SOURCE_INVALID,
            model=model,
        )
    return resolved.path


def draft_path(model: str, options: LlamaCppOptions) -> Path | None:
    """The draft GGUF of ``speculative.draft_model`` (None: no draft model).

    Raises:
        ModelLoadError: the draft source is not a local file (reason MODEL_SOURCE_INVALID).

    """
    speculative = options.speculative
    if speculative is None or speculative.draft_model is None:
        return None
    return draft_file(model, speculative.draft_model)


def load_mode(options: LlamaCppOptions) -> int | None:
    """llama.cpp's ``load_mode`` from ``use_mmap``/``use_mlock`` (None: both unset: llama.cpp's)."""
    import llama_cpp

    mmap, mlock = options.use_mmap, options.use_mlock
    if mmap is None and not mlock:
        return None
    if mlock:
        return llama_cpp.LLAMA_LOAD_MODE_MLOCK if mmap is False else llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK
    return llama_cpp.LLAMA_LOAD_MODE_MMAP if mmap else llama_cpp.LLAMA_LOAD_MODE_NONE


def model_params(options: LlamaCppOptions, device: str) -> tuple[Any, int]:
    """llama.cpp's model parameters for a load on ``device``, and the GPU layers they ask for.

    ``n_gpu_layers`` unset puts every layer (-1) on a CUDA device and none (0) on the CPU.

    Raises:
        ValueError: ``device`` is a CUDA device that this llama.cpp build does not see.

    """
    import llama_cpp

    params = llama_cpp.llama_model_default_params()
    layers = options.n_gpu_layers
    on_gpu = device.startswith("cuda")
    if layers is None:  # unset: every layer on a CUDA device, none on the CPU
        layers = -1 if on_gpu else 0
    params.n_gpu_layers = layers
    mode = load_mode(options)
    if mode is not None:
        params.load_mode = mode
    if on_gpu:
        # The model stays on the device it was placed on (its lane's): llama.cpp's default would
        # split the layers over every visible GPU, outside the server's memory accounting.
        params.split_mode = llama_cpp.LLAMA_SPLIT_MODE_NONE
        params.main_gpu = cuda_index(device)
    return params, layers


def context_params(options: LlamaCppOptions, *, max_sequences: int, per_sequence: int, threads: int) -> Any:
    """llama.cpp's context parameters: ``max_sequences`` sequences of ``per_sequence`` tokens each.

    With ``kv_pool_tokens`` the context is that many cells, shared by all sequences
    (``kv_unified``); else a KV stream of ``per_sequence`` cells per sequence.
    """
    import llama_cpp

    pool = options.kv_pool_tokens
    params = llama_cpp.llama_context_default_params()
    params.n_seq_max = max_sequences
    params.n_ctx = pool or per_sequence * max_sequences
    params.n_batch = options.n_batch
    params.n_ubatch = options.n_ubatch or options.n_batch
    params.type_k = GGML_TYPES[options.cache_type_k]
    params.type_v = GGML_TYPES[options.cache_type_v]
    params.n_threads = threads
    params.n_threads_batch = threads
    # A KV stream per sequence: attention reads only the sequence's own cells, and a slot's
    # cached prompt keeps the cell layout of a cold prefill (see prompt_cache). A pool is one
    # buffer for all (memory by use; greedy output may then depend on what else runs).
    params.kv_unified = pool is not None
    # Flash attention off by default, as llama-cpp-python's own default, so greedy output
    # matches it token for token; "flash_attn: true" turns it on.
    params.flash_attn_type = (
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        if options.flash_attn
        else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    return params
