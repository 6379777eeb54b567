"""The devices llama.cpp itself sees (ggml's backend registry), and their memory.

llama.cpp placements and memory checks ask ggml, not torch: torch's view of CUDA needs torch's
own CUDA context, which a llama.cpp-only process should never pay for (hundreds of MB of device
memory) and which puts a second CUDA runtime and cuBLAS beside llama.cpp's. ggml numbers its CUDA
devices (``CUDA0``, ``CUDA1``...) in the CUDA runtime's order, which honours
``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` as torch does, so ``cuda:N`` is ggml's N-th GPU.

The functions are ggml's C API (``ggml/include/ggml-backend.h``: ``ggml_backend_dev_count``,
``_get``, ``_name``, ``_type``, ``_memory``), which llama-cpp-python loads but does not bind;
they are bound here with ctypes on its ``libggml``.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

#: ``enum ggml_backend_dev_type``'s value for a GPU with its own memory (ggml-backend.h).
GGML_BACKEND_DEVICE_TYPE_GPU = 1


@dataclass(frozen=True)
class GgmlDevice:
    """One ggml CUDA device: its name (``CUDA0``), and its free and total memory in bytes."""

    name: str
    free_bytes: int
    total_bytes: int


@functools.cache
def _library() -> Any:
    """llama-cpp-python's ``libggml`` with the device functions' signatures declared."""
    import llama_cpp
    from llama_cpp._ggml import libggml

    llama_cpp.llama_backend_init()  # registers the backends compiled in (CPU, and CUDA in a GPU build)
    libggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    libggml.ggml_backend_dev_count.argtypes = []
    libggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    libggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    libggml.ggml_backend_dev_name.restype = ctypes.c_char_p
    libggml.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
    libggml.ggml_backend_dev_type.restype = ctypes.c_int
    libggml.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    size = ctypes.POINTER(ctypes.c_size_t)
    libggml.ggml_backend_dev_memory.restype = None
    libggml.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, size, size]
    return libggml


def _cuda_handles() -> list[int]:
    """The CUDA GPUs in ggml's order (a Metal or Vulkan GPU is not ``cuda``: its name says which backend)."""
    library = _library()
    handles = (library.ggml_backend_dev_get(i) for i in range(library.ggml_backend_dev_count()))
    return [
        h
        for h in handles
        if library.ggml_backend_dev_type(h) == GGML_BACKEND_DEVICE_TYPE_GPU
        and library.ggml_backend_dev_name(h).startswith(b"CUDA")
    ]


def cuda_device_count() -> int:
    """How many CUDA GPUs llama.cpp can offload to: 0 in a CPU build or on a machine without one."""
    return len(_cuda_handles())


def cuda_index(device: str) -> int:
    """The index, in ggml's order, of the CUDA GPU for ``device`` (``"cuda"`` is ``"cuda:0"``).

    Raises:
        ValueError: not a CUDA device string, or llama.cpp has no GPU of that index.

    """
    kind, _, index = device.partition(":")
    if kind != "cuda" or not (index or "0").isdigit():
        raise ValueError(f"{device!r} is not a CUDA device (cuda or cuda:N)")
    number, count = int(index or 0), cuda_device_count()
    if number >= count:
        raise ValueError(f"llama.cpp sees {count} CUDA GPU(s); {device!r} is not one of them")
    return number


def cuda_memory(device: str) -> GgmlDevice:
    """The name and the free and total bytes of ``device``'s GPU, as its CUDA driver reports them now.

    Raises:
        ValueError: see :func:`cuda_index`.

    """
    handle = _cuda_handles()[cuda_index(device)]
    library = _library()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    library.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
    return GgmlDevice(library.ggml_backend_dev_name(handle).decode(), free.value, total.value)
