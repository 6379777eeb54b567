"""Parameter count of a GGUF file from its header alone, fast enough for the event loop.

``gguf.GGUFReader`` builds numpy views of every metadata value (tens of thousands of
vocabulary strings) and takes seconds; the memory check before a load only needs the tensor
shapes. Layout from the GGUF specification (ggml ``docs/gguf.md``, versions 2 and 3): header
(magic, version, tensor count, metadata count), metadata key/value pairs, then one info record
per tensor (name, dimensions, type, offset).
"""

from __future__ import annotations

import math
import mmap
import struct
from pathlib import Path

MAGIC = b"GGUF"
# Sizes of the fixed-size metadata value types (GGUF ``gguf_metadata_value_type``).
SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


def gguf_parameter_count(path: Path) -> int:
    """Total elements of all tensors in the GGUF file at ``path``.

    Raises:
        ValueError: not a GGUF file, or a version before 2 (32-bit counts).

    """
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != MAGIC:
            raise ValueError(f"{path} is not a GGUF file")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        offset = 24
        for _ in range(n_kv):
            offset = _skip_string(data, offset)
            (kind,) = struct.unpack_from("<I", data, offset)
            offset = _skip_value(data, offset + 4, kind)
        total = 0
        for _ in range(n_tensors):
            offset = _skip_string(data, offset)
            (n_dims,) = struct.unpack_from("<I", data, offset)
            dims = struct.unpack_from(f"<{n_dims}Q", data, offset + 4)
            total += math.prod(dims)
            offset += 4 + 8 * n_dims + 4 + 8  # dims, then type and data offset
        return total


def _skip_string(data: mmap.mmap, offset: int) -> int:
    (length,) = struct.unpack_from("<Q", data, offset)
    return offset + 8 + length


def _skip_value(data: mmap.mmap, offset: int, kind: int) -> int:
    if kind in SCALAR_SIZES:
        return offset + SCALAR_SIZES[kind]
    if kind == STRING:
        return _skip_string(data, offset)
    if kind == ARRAY:
        element, count = struct.unpack_from("<IQ", data, offset)
        offset += 12
        if element in SCALAR_SIZES:
            return offset + count * SCALAR_SIZES[element]
        for _ in range(count):
            offset = _skip_value(data, offset, element)
        return offset
    raise ValueError(f"unknown GGUF metadata type {kind}")
