"""Memory a GGUF model will hold under llama.cpp, from the file's header alone (no weights read).

backend.go's ``RequiredMemory{RAM, VRAM}`` for the ``llama_cpp`` backend: the sum of

- **weights**: every tensor's bytes, from the GGUF tensor records (the span from one tensor's data
  offset to the next one's, so any quantization type counts right; the last tensor ends at the end
  of the file). Layout: ggml ``docs/gguf.md`` (versions 2 and 3).
- **KV cache**: cells x per-layer K and V rows. Cells are what the engine creates
  (``kv_pool_tokens``, else tokens per sequence x ``max_sequences``, padded to 256 as llama.cpp
  pads); a layer's K row is ``key_length x head_count_kv`` elements, its V row
  ``value_length x head_count_kv`` (``<arch>.attention.*`` metadata; key/value lengths default to
  ``embedding_length / head_count``), f16 (2 bytes) as llama.cpp's default cache type.
- **output buffer**: logits of one token per sequence, ``n_seq_max x n_vocab`` float32.
- **compute buffer**: the graph llama.cpp reserves for one ``n_ubatch`` micro-batch, the larger of
  the output side, ``n_ubatch x (n_vocab + 2 n_embd) x 4`` (a full batch of logits), and the
  attention side, ``n_ubatch x n_kv x (n_head + 1) x 4 + n_ubatch x 2 n_ff x 4`` (the f32 KQ
  scores and mask over a sequence's cells, and the feed-forward's hidden rows; with flash attention
  the scores are never materialised and only a f16 mask remains). Fitted to llama.cpp's own
  ``compute buffer size`` log line (see
  docs/architecture/design-notes.md#memory-estimates-against-measured-peaks).

On a GPU the split follows ``n_gpu_layers`` as llama.cpp places tensors: the last ``n_gpu_layers``
repeating layers (``blk.N.*``) and their KV on the device, the output layer too when every layer is
offloaded (``-1`` or more than ``block_count``), the token embeddings always in host memory (a tied
output layer is copied to the device), and the compute buffer on the device once any layer is
there. Not modeled: sliding-window layers' smaller caches (their full-size cache is counted, an
over-estimate), recurrent-state models, and llama.cpp's CPU repacking of Q4_0/IQ4_NL weights.
"""

from __future__ import annotations

import mmap
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engines.generation.context_size import CONTEXT_ALIGNMENT, DEFAULT_CAP
from engines.generation.gguf_info import gguf_parameter_count
from engines.generation.options import LlamaCppOptions
from engines.generation.requantize import cached_path
from engines.types import MemoryUsage

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32  # general.alignment when the file does not say
KV_BYTES_PER_ELEMENT = 2  # f16 K and V, llama.cpp's default cache type
FLOAT_BYTES = 4
#: Sizes of the fixed-size metadata value types (GGUF ``gguf_metadata_value_type``) and their
#: ``struct`` codes: uint8, int8, uint16, int16, uint32, int32, float32, bool, uint64, int64, float64.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
#: Arrays of numbers up to this length are kept (per-layer head counts); longer ones (token lists,
#: scores) only have their length kept.
MAX_KEPT_ARRAY = 4096
#: Bound on metadata pairs and tensor records read (a corrupt header cannot loop for ever).
MAX_RECORDS = 1 << 20
_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass
class GgufHeader:
    """What :func:`read_gguf_header` reads: metadata and the bytes of each tensor.

    Attributes:
        metadata: scalar and string values by key; arrays of numbers up to
            :data:`MAX_KEPT_ARRAY` long as lists.
        array_lengths: the length of every array value by key (``tokenizer.ggml.tokens``: the vocabulary).
        tensor_bytes: bytes of each tensor's data by tensor name.

    """

    metadata: dict[str, Any] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    tensor_bytes: dict[str, int] = field(default_factory=dict)

    def arch_value(self, key: str, default: Any = None) -> Any:
        """``<general.architecture>.<key>`` from the metadata, or ``default``."""
        arch = self.metadata.get("general.architecture", "llama")
        return self.metadata.get(f"{arch}.{key}", default)


def read_gguf_header(path: Path) -> GgufHeader:
    """Metadata and tensor sizes of the GGUF file at ``path`` (reads the header only, via mmap).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: not a GGUF file, a version before 2, or a header that runs past the file.

    """
    size = path.stat().st_size
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != MAGIC:
            raise ValueError(f"{path} is not a GGUF file")
        try:
            return _parse(data, size)
        except struct.error as exc:
            raise ValueError(f"{path}: truncated or corrupt GGUF header ({exc})") from exc


def _parse(data: mmap.mmap, size: int) -> GgufHeader:
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    if version < 2:
        raise ValueError(f"GGUF version {version} is not supported")
    if n_tensors > MAX_RECORDS or n_kv > MAX_RECORDS:
        raise ValueError(f"implausible GGUF header: {n_tensors} tensors, {n_kv} metadata pairs")
    header = GgufHeader()
    offset = 24
    for _ in range(n_kv):  # bounded by MAX_RECORDS
        key, offset = _string(data, offset)
        (kind,) = struct.unpack_from("<I", data, offset)
        value, offset = _value(data, offset + 4, kind, key, header)
        if value is not None:
            header.metadata[key] = value
    offsets: list[tuple[int, str]] = []
    for _ in range(n_tensors):  # bounded by MAX_RECORDS
        name, offset = _string(data, offset)
        (n_dims,) = struct.unpack_from("<I", data, offset)
        offset += 4 + 8 * n_dims + 4  # dims, then the type
        (data_offset,) = struct.unpack_from("<Q", data, offset)
        offset += 8
        offsets.append((data_offset, name))
    alignment = int(header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)) or DEFAULT_ALIGNMENT
    start = -(-offset // alignment) * alignment
    offsets.sort()
    ends = [o for o, _ in offsets[1:]] + [size - start]
    for (begin, name), end in zip(offsets, ends, strict=True):
        header.tensor_bytes[name] = max(0, end - begin)
    return header


def _string(data: mmap.mmap, offset: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", data, offset)
    end = offset + 8 + length
    if end > len(data):
        raise ValueError("a GGUF string runs past the end of the file")
    return data[offset + 8 : end].decode("utf-8", errors="replace"), end


def _value(data: mmap.mmap, offset: int, kind: int, key: str, header: GgufHeader) -> tuple[Any, int]:
    """One metadata value at ``offset``: (value or None when not kept, offset after it)."""
    if kind in SCALARS:
        code = SCALARS[kind]
        return struct.unpack_from(f"<{code}", data, offset)[0], offset + struct.calcsize(code)
    if kind == STRING:
        return _string(data, offset)
    if kind != ARRAY:
        raise ValueError(f"unknown GGUF metadata type {kind}")
    element, count = struct.unpack_from("<IQ", data, offset)
    offset += 12
    header.array_lengths[key] = count
    if element in SCALARS:
        width = struct.calcsize(SCALARS[element])
        kept = (
            list(struct.unpack_from(f"<{count}{SCALARS[element]}", data, offset))
            if count <= MAX_KEPT_ARRAY
            else None
        )
        return kept, offset + count * width
    for _ in range(count):  # bounded by the file: each element advances the offset past its bytes
        _, offset = _value(data, offset, element, key, header)
    return None, offset


def _per_layer(value: Any, layers: int, default: int) -> list[int]:
    """A per-layer metadata value (a number, or a list of one per layer) as ``layers`` numbers."""
    if isinstance(value, list) and len(value) == layers:
        return [int(v) for v in value]
    if value is None or isinstance(value, list):
        return [default] * layers
    return [int(value)] * layers


@dataclass(frozen=True)
class GgufMemory:
    """The parts of :func:`gguf_required_memory`'s estimate, in bytes, and how they split.

    Attributes:
        weights_ram, weights_vram: tensor bytes in host and device memory.
        kv_ram, kv_vram: KV cache bytes in host and device memory.
        output: the logits buffer (host memory).
        compute: the compute buffer (device memory once any layer is offloaded, else host).
        compute_on_device: where ``compute`` is.
        cells: KV cells counted.

    """

    weights_ram: int
    weights_vram: int
    kv_ram: int
    kv_vram: int
    output: int
    compute: int
    compute_on_device: bool
    cells: int

    def usage(self) -> MemoryUsage:
        """The total as RAM and VRAM."""
        ram = self.weights_ram + self.kv_ram + self.output + (0 if self.compute_on_device else self.compute)
        vram = self.weights_vram + self.kv_vram + (self.compute if self.compute_on_device else 0)
        return MemoryUsage(ram_bytes=ram, vram_bytes=vram)


def kv_cells(
    *, n_ctx: int | None, n_ctx_train: int, max_context: int, max_sequences: int, kv_pool_tokens: int | None
) -> tuple[int, int]:
    """(cells of the whole cache, cells one sequence sees) as the llama.cpp engine sizes them.

    ``n_ctx`` (the catalog's) per sequence, else the training context capped at ``max_context``
    (the automatic plan when memory is not short: a load under memory pressure may take fewer);
    a ``kv_pool_tokens`` pool is the whole cache. Padded to :data:`CONTEXT_ALIGNMENT` like llama.cpp.
    """
    per_sequence = n_ctx or min(n_ctx_train or max_context, max_context)
    if kv_pool_tokens:
        per_sequence = min(per_sequence, kv_pool_tokens)
        total = kv_pool_tokens
    else:
        total = per_sequence * max_sequences
    total = -(-total // CONTEXT_ALIGNMENT) * CONTEXT_ALIGNMENT
    return total, per_sequence


def gguf_required_memory(
    path: Path,
    *,
    n_ctx: int | None = None,
    max_context: int = DEFAULT_CAP,
    max_sequences: int = 1,
    kv_pool_tokens: int | None = None,
    n_batch: int = 512,
    n_gpu_layers: int | None = None,
    on_gpu: bool = False,
    flash_attn: bool = False,
) -> GgufMemory:
    """Memory llama.cpp will hold for the GGUF at ``path`` with these context options (module notes).

    Args:
        path: the GGUF file the engine loads.
        n_ctx: tokens per sequence from the catalog (None/0: automatic).
        max_context: cap of the automatic context.
        max_sequences: sequences the context holds (``n_seq_max``).
        kv_pool_tokens: cells of a shared KV pool, or None for a stream per sequence.
        n_batch: the micro-batch (the engine sets ``n_ubatch = n_batch``).
        n_gpu_layers: layers offloaded on a GPU (-1: all; None: all on a GPU, none on the CPU).
        on_gpu: whether the engine's device is a CUDA device.
        flash_attn: llama.cpp's flash attention (no KQ score matrix in the compute buffer).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: not a readable GGUF header.

    """
    header = read_gguf_header(path)
    layers = int(header.arch_value("block_count", 0))
    embed = int(header.arch_value("embedding_length", 0))
    head_count = header.arch_value("attention.head_count", 1)
    heads = (max(head_count) if isinstance(head_count, list) else int(head_count)) or 1
    kv_heads = _per_layer(header.arch_value("attention.head_count_kv"), layers, heads)
    key_length = int(header.arch_value("attention.key_length", embed // heads))
    value_length = int(header.arch_value("attention.value_length", embed // heads))
    feed_forward = header.arch_value("feed_forward_length", 4 * embed)
    feed_forward = max(feed_forward) if isinstance(feed_forward, list) else int(feed_forward)
    vocab = int(header.array_lengths.get("tokenizer.ggml.tokens", header.arch_value("vocab_size", 0)))
    cells, per_sequence = kv_cells(
        n_ctx=n_ctx,
        n_ctx_train=int(header.arch_value("context_length", 0)),
        max_context=max_context,
        max_sequences=max_sequences,
        kv_pool_tokens=kv_pool_tokens,
    )
    offloaded = 0
    if on_gpu:
        offloaded = layers + 1 if n_gpu_layers is None or n_gpu_layers < 0 else min(n_gpu_layers, layers + 1)
    first_gpu_layer = layers - min(offloaded, layers)
    output_on_gpu = offloaded > layers
    weights_ram = weights_vram = 0
    for name, size in header.tensor_bytes.items():
        match = _LAYER.match(name)
        if match is not None:
            device = int(match.group(1)) >= first_gpu_layer and offloaded > 0
        else:
            device = output_on_gpu and name.startswith("output")
        if device:
            weights_vram += size
        else:
            weights_ram += size
    if output_on_gpu and "output.weight" not in header.tensor_bytes:
        weights_vram += header.tensor_bytes.get("token_embd.weight", 0)  # tied: copied to the device
    kv_ram = kv_vram = 0
    for layer, n_kv_heads in enumerate(kv_heads):
        size = cells * n_kv_heads * (key_length + value_length) * KV_BYTES_PER_ELEMENT
        if offloaded and layer >= first_gpu_layer:
            kv_vram += size
        else:
            kv_ram += size
    ubatch = max(1, n_batch)
    output_side = ubatch * (vocab + 2 * embed) * FLOAT_BYTES
    scores = 2 if flash_attn else (heads + 1) * FLOAT_BYTES  # f16 mask only, or f32 KQ + mask
    visible = cells if kv_pool_tokens else per_sequence  # cells one micro-batch attends over
    attention_side = ubatch * visible * scores + ubatch * 2 * feed_forward * FLOAT_BYTES
    return GgufMemory(
        weights_ram=weights_ram,
        weights_vram=weights_vram,
        kv_ram=kv_ram,
        kv_vram=kv_vram,
        output=max_sequences * vocab * FLOAT_BYTES,
        compute=max(output_side, attention_side),
        compute_on_device=offloaded > 0,
        cells=cells,
    )


#: Bytes per weight of the ``quantize`` option's types (ggml blocks: q4_0 18 bytes and q8_0 34 bytes
#: per 32 weights), for a requantized copy not made yet.
QUANTIZED_BYTES_PER_WEIGHT = {"q4_0": 18 / 32, "q8_0": 34 / 32, "f16": 2.0}


def llama_cpp_required_memory(
    source: Path, options: LlamaCppOptions, device: str, max_sequences: int
) -> MemoryUsage:
    """:func:`gguf_required_memory` for a ``llama_cpp`` catalog entry's GGUF ``source`` and typed ``options``.

    The file loaded is ``source``, or its requantized copy (``quantize``) when it was made; before
    it is made, the source's figures with the weights scaled to the target type's bytes per weight
    (:data:`QUANTIZED_BYTES_PER_WEIGHT`). ``device``: the engine's (``cuda[:N]`` puts layers on the GPU).

    Raises:
        FileNotFoundError: ``source`` is missing.
        ValueError: ``source`` is not a readable GGUF file.

    """
    path, scale = source, 1.0
    if options.quantize is not None:
        copy = cached_path(source, options.quantize, options.cache_dir)
        if copy.is_file():
            path = copy
        else:
            weights = sum(read_gguf_header(source).tensor_bytes.values()) or 1
            scale = gguf_parameter_count(source) * QUANTIZED_BYTES_PER_WEIGHT[options.quantize] / weights
    memory = gguf_required_memory(
        path,
        n_ctx=options.n_ctx or None,
        max_context=options.max_context,
        max_sequences=max_sequences,
        kv_pool_tokens=options.kv_pool_tokens,
        n_batch=options.n_batch,
        n_gpu_layers=options.n_gpu_layers,
        on_gpu=device.startswith("cuda"),
        flash_attn=options.flash_attn,
    )
    usage = memory.usage()
    if scale != 1.0:
        ram_weights, vram_weights = memory.weights_ram, memory.weights_vram
        usage = MemoryUsage(
            ram_bytes=usage.ram_bytes + round(ram_weights * (scale - 1)),
            vram_bytes=usage.vram_bytes + round(vram_weights * (scale - 1)),
        )
    return usage
