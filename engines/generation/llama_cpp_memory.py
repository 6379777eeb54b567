"""Memory of a llama.cpp model: a draft model's share of a load, free bytes, a loaded model's size.

The estimate of a load itself is :func:`~engines.generation.gguf_memory.llama_cpp_required_memory`;
what is free is asked of llama.cpp's own device list on CUDA (never torch), of the host on the CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engines.device import available_memory_bytes
from engines.generation.context_size import kv_bytes_per_token
from engines.generation.ggml_devices import cuda_memory
from engines.generation.gguf_memory import llama_cpp_required_memory
from engines.generation.options import LlamaCppOptions
from engines.types import MemoryUsage

KV_HEADROOM_BYTES = 1 << 30  # memory left for everything else when sizing the KV cache
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


def with_draft_model(
    memory: MemoryUsage, draft: Path | None, options: LlamaCppOptions, device: str, max_sequences: int
) -> MemoryUsage:
    """``memory`` plus what the ``draft`` GGUF takes (None: no draft model, ``memory`` as it is).

    The draft is loaded as its file is (no requantized copy), with one KV stream per sequence.
    """
    if draft is None:
        return memory
    plain = options.model_copy(update={"quantize": None, "cache_dir": None, "kv_pool_tokens": None})
    extra = llama_cpp_required_memory(draft, plain, device, max_sequences)
    return MemoryUsage(memory.ram_bytes + extra.ram_bytes, memory.vram_bytes + extra.vram_bytes)


def free_bytes(device: str) -> int:
    """Free bytes of ``device`` as llama.cpp sees it.

    The GPU's free memory on CUDA (:func:`~engines.generation.ggml_devices.cuda_memory`: no
    torch), host memory on the CPU.

    Raises:
        ValueError: the CUDA device is not one llama.cpp sees.

    """
    if device.startswith("cuda"):
        return cuda_memory(device).free_bytes
    return available_memory_bytes()


def loaded_memory(
    model_bytes: int,
    metadata: dict[str, Any],
    cells: int,
    options: LlamaCppOptions,
    device: str,
    draft_bytes: int = 0,
) -> MemoryUsage:
    """Weights (``model_bytes``), the KV cache of ``cells`` cells and a draft model, on ``device``.

    A cell holds the keys and values of every layer (from the GGUF ``metadata``) in the
    ``cache_type_k``/``cache_type_v`` types; all of it is VRAM on CUDA, RAM on the CPU.
    """
    # kv_bytes_per_token(..., 1) is keys and values at one byte each: half of it per side.
    elements = kv_bytes_per_token(metadata, 1) / 2
    per_cell = elements * (KV_TYPE_BYTES[options.cache_type_k] + KV_TYPE_BYTES[options.cache_type_v])
    total = model_bytes + int(cells * per_cell) + draft_bytes
    if device.startswith("cuda"):
        return MemoryUsage(ram_bytes=0, vram_bytes=total)
    return MemoryUsage(ram_bytes=total)
