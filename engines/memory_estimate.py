"""Memory a model will hold, estimated before its load from its files' headers and its options.

The shared arithmetic of the engines' :meth:`~engines.base.Engine.required_memory` (backend.go's
``RequiredMemory{RAM, VRAM}``): parameter counts from safetensors headers (the 8-byte length and
JSON header that open every ``.safetensors`` file, as the format's specification lays it out; no
weights are read), a transformer's shape from ``config.json``, and the working memory of a forward
pass over a batch. Everything here is cheap (file headers and small JSON files) and touches no device.

Working memory of an encoder's forward pass, per token of a batch of ``tokens`` tokens padded to
``seq_len`` (:func:`encoder_activation_bytes`): one layer is live at a time in inference, holding
its attention scores (``heads x seq_len`` per token) and the rows of its hidden state, query, key,
value and output (``4 x hidden``) and of its feed-forward layer and activation (``2 x intermediate``),
in the compute dtype. ``python -m bench.memory_estimate`` checks it against the measured peak (see
docs/architecture/design-notes.md#memory-estimates-against-measured-peaks).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.sources import path_size_bytes
from engines.types import MemoryUsage

#: Bytes per element of the safetensors dtypes (the format's ``dtype`` strings).
SAFETENSORS_ITEMSIZE = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
#: The safetensors specification's bound on the JSON header (100 MB).
MAX_SAFETENSORS_HEADER = 100_000_000
#: Bound on the ``.safetensors`` shards of one folder read (a sharded 400B model has ~200).
MAX_SHARDS = 1024


def device_bytes(usage: MemoryUsage, device: str) -> int:
    """The part of ``usage`` on ``device``: RAM for ``cpu``, VRAM otherwise (``estimated_load_bytes``)."""
    return usage.ram_bytes if device == "cpu" else usage.vram_bytes


def on_device(total: int, device: str) -> MemoryUsage:
    """``total`` bytes held on ``device``: host RAM for the CPU, device memory otherwise."""
    return MemoryUsage(ram_bytes=total) if device == "cpu" else MemoryUsage(vram_bytes=total)


def safetensors_parameter_count(folder: Path) -> int:
    """Elements of every tensor in the ``*.safetensors`` files directly in ``folder`` (0: none there).

    Raises:
        FileNotFoundError: ``folder`` does not exist.
        ValueError: a file whose header is not a safetensors header.

    """
    if not folder.exists():
        raise FileNotFoundError(f"model folder {folder} does not exist")
    total = 0
    for path in sorted(folder.glob("*.safetensors"))[:MAX_SHARDS]:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ValueError(f"{path} is not a safetensors file (too short)")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_SAFETENSORS_HEADER:
                raise ValueError(f"{path}: safetensors header of {length} bytes is over the format's bound")
            try:
                header = json.loads(handle.read(length))
            except ValueError as exc:
                raise ValueError(f"{path}: unreadable safetensors header ({exc})") from exc
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in entry["shape"]:
                count *= int(dim)
            total += count
    return total


def weight_bytes(folder: Path, itemsize: int) -> int:
    """Bytes of a model folder's weights loaded at ``itemsize`` bytes per parameter.

    From the safetensors headers when the folder has them; else the folder's size on disk
    (``pytorch_model.bin`` and other formats hold the weights at their stored dtype).

    Raises:
        FileNotFoundError: ``folder`` does not exist.
        ValueError: an unreadable safetensors header.

    """
    count = safetensors_parameter_count(folder)
    return count * itemsize if count else path_size_bytes(folder)


@dataclass(frozen=True)
class TransformerShape:
    """The sizes of a transformer that its memory depends on (``config.json``'s names in brackets).

    Attributes:
        hidden: width of the hidden state (``hidden_size``).
        layers: layers (``num_hidden_layers``).
        heads: attention heads (``num_attention_heads``).
        kv_heads: key/value heads (``num_key_value_heads``; ``heads`` without grouped-query attention).
        head_dim: width of one head (``head_dim``, else ``hidden / heads``).
        intermediate: width of the feed-forward layer (``intermediate_size``, else ``4 x hidden``).
        max_positions: longest sequence (``max_position_embeddings``).

    """

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    max_positions: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TransformerShape:
        """The shape of a (text) ``config.json``; a nested ``text_config`` is used when present."""
        config = config.get("text_config") or config
        hidden = int(config.get("hidden_size") or config.get("d_model") or 0)
        heads = int(config.get("num_attention_heads") or config.get("n_head") or 1)
        return cls(
            hidden=hidden,
            layers=int(config.get("num_hidden_layers") or config.get("n_layer") or 0),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config.get("intermediate_size") or 4 * hidden),
            max_positions=int(config.get("max_position_embeddings") or 512),
        )

    @classmethod
    def from_gguf(cls, metadata: dict[str, Any]) -> TransformerShape:
        """The shape from GGUF metadata (``<arch>.block_count``, ``<arch>.embedding_length``...)."""
        arch = metadata.get("general.architecture", "llama")

        def value(key: str, default: int) -> int:
            found = metadata.get(f"{arch}.{key}", default)
            return int(max(found) if isinstance(found, list) else found) or default

        hidden = value("embedding_length", 0)
        heads = value("attention.head_count", 1)
        return cls(
            hidden=hidden,
            layers=value("block_count", 0),
            heads=heads,
            kv_heads=value("attention.head_count_kv", heads),
            head_dim=value("attention.key_length", hidden // heads),
            intermediate=value("feed_forward_length", 4 * hidden),
            max_positions=value("context_length", 512),
        )

    def kv_bytes_per_token(self, itemsize: int) -> int:
        """KV-cache bytes of one token: K and V rows of every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * itemsize


def read_json(path: Path) -> dict[str, Any]:
    """A small JSON file as a dict ({} when missing or not an object).

    Raises:
        ValueError: the file is not valid JSON.

    """
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def encoder_sequence_length(folder: Path, shape: TransformerShape) -> int:
    """Longest input of an encoder in ``folder`` (tokens), capped by its position embeddings.

    sentence-transformers' ``max_seq_length``, else the tokenizer's ``model_max_length`` when it is
    a real bound, else ``max_position_embeddings``.
    """
    length = read_json(folder / "sentence_bert_config.json").get("max_seq_length")
    if not length:
        length = read_json(folder / "tokenizer_config.json").get("model_max_length")
        if not isinstance(length, int) or length > 1_000_000:  # transformers' "no limit" sentinel
            length = None
    return min(int(length or shape.max_positions), shape.max_positions)


def encoder_activation_bytes(shape: TransformerShape, tokens: int, seq_len: int, itemsize: int) -> int:
    """Peak working memory of one encoder forward pass over ``tokens`` tokens padded to ``seq_len``.

    One layer live at a time: ``tokens x (heads x seq_len + 4 x hidden + 2 x intermediate) x itemsize``
    (module notes; measured against it there).
    """
    per_token = shape.heads * seq_len + 4 * shape.hidden + 2 * shape.intermediate
    return tokens * per_token * itemsize


#: Bytes per element of the ``dtype`` option's values.
DTYPE_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def dtype_itemsize(device: str, override: str | None = None) -> int:
    """Bytes per parameter of the dtype :func:`engines.device.torch_dtype_for` picks, without importing torch.

    ``override`` (the ``dtype`` option) wins; else float32 on the CPU, a 16-bit type on CUDA and MPS.
    """
    if override:
        return DTYPE_ITEMSIZE.get(override, 4)
    return 4 if device == "cpu" else 2
