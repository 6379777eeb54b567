"""Memory of a batched encoder before its load: weights at the load dtype plus a full batch's working memory.

For ``BatchedEncoderEngine.required_memory`` (:mod:`engines.batching.engine`; backend.go's
``RequiredMemory``), from the model folder's ``config.json``, safetensors headers and the catalog
options; no weights read, no runtime imported.

Every runtime: :data:`ENCODER_LOAD_OVERHEAD_BYTES` of host RAM for the tokenizer and module objects.

- **torch**: parameters x the dtype's bytes, plus :func:`~engines.memory_estimate.encoder_activation_bytes`
  for the largest batch the options allow: ``min(max_batch_tokens, max_batch_size x seq_len)``
  tokens padded to the model's longest input ``seq_len``.
- **OpenVINO** (CPU): the exported weights twice (the IR's ``.bin`` stays memory-mapped and the CPU
  plugin keeps its own packed copy), plus a multiple of torch's working memory
  (:data:`RUNTIME_ACTIVATION_FACTOR`): the plugin plans buffers for the whole graph of the largest
  shape it has run and keeps them.
- **ONNX Runtime** (CPU): the exported weights once, plus a multiple of torch's working memory: its
  arena grows to the largest batch's buffers and keeps them.

The multiples are fitted with ``python -m bench.memory_estimate`` (see
docs/architecture/design-notes.md#memory-estimates-against-measured-peaks).

``quantize: int8`` stores one byte per weight instead of four. On a GPU the model stays in torch
and the whole figure is device memory.
"""

from __future__ import annotations

from pathlib import Path

from engines.batching.options import EncoderOptions, exported_runtime
from engines.memory_estimate import (
    TransformerShape,
    dtype_itemsize,
    encoder_activation_bytes,
    encoder_sequence_length,
    on_device,
    read_json,
    safetensors_parameter_count,
)
from engines.sources import path_size_bytes
from engines.types import MemoryUsage

#: Working memory of an exported runtime as a multiple of torch's, by (runtime, quantize) (measured).
RUNTIME_ACTIVATION_FACTOR = {
    ("openvino", "none"): 3.0,
    ("openvino", "int8"): 3.8,
    ("onnx", "none"): 2.7,
    ("onnx", "int8"): 2.7,
}
#: RSS a loaded encoder holds besides its weights and batches: the tokenizer, the module objects and
#: the loader's buffers, in bytes (``python -m bench.memory_estimate`` measures it).
ENCODER_LOAD_OVERHEAD_BYTES = 50 * 1024 * 1024
#: Copies of the exported weights a runtime holds (OpenVINO: the mapped IR and the plugin's own).
RUNTIME_WEIGHT_COPIES = {"openvino": 2, "onnx": 1}
FLOAT32_BYTES = 4
INT8_BYTES = 1


def encoder_required_memory(folder: Path, options: EncoderOptions, device: str) -> MemoryUsage:
    """RAM and device bytes an encoder in ``folder`` will hold with ``options`` on ``device`` (module notes).

    Raises:
        FileNotFoundError: ``folder`` does not exist.
        ValueError: an unreadable ``config.json`` or safetensors header.

    """
    if not folder.exists():
        raise FileNotFoundError(f"model folder {folder} does not exist")
    shape = TransformerShape.from_config(read_json(folder / "config.json"))
    asked = getattr(options, "max_seq_length", None) or getattr(options, "max_length", None)
    seq_len = min(asked or encoder_sequence_length(folder, shape), shape.max_positions)
    tokens = min(options.max_batch_tokens, options.max_batch_size * seq_len)
    parameters = safetensors_parameter_count(folder)
    exported = exported_runtime(options) if device == "cpu" else None
    if exported is None:
        itemsize = dtype_itemsize(device, options.dtype)
        weights = parameters * itemsize if parameters else path_size_bytes(folder)
        held = on_device(weights + encoder_activation_bytes(shape, tokens, seq_len, itemsize), device)
        return MemoryUsage(held.ram_bytes + ENCODER_LOAD_OVERHEAD_BYTES, held.vram_bytes)
    per_weight = INT8_BYTES if exported.quantize == "int8" else FLOAT32_BYTES
    weights = parameters * per_weight if parameters else path_size_bytes(folder)
    activations = encoder_activation_bytes(shape, tokens, seq_len, FLOAT32_BYTES)
    factor = RUNTIME_ACTIVATION_FACTOR.get((exported.runtime, exported.quantize), 3.0)
    copies = RUNTIME_WEIGHT_COPIES.get(exported.runtime, 1)
    return MemoryUsage(ram_bytes=copies * weights + round(factor * activations) + ENCODER_LOAD_OVERHEAD_BYTES)
