"""Device selection (CUDA, then MPS, then CPU), dtype per device, and releasing device memory."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def resolve_device(preference: str = "auto") -> str:
    """Return the device to run on.

    Args:
        preference: ``"auto"`` picks ``cuda`` if available, then ``mps``, then ``cpu``;
            anything else (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``) is taken as given
            after checking that it exists.

    Raises:
        ValueError: an explicit device that is not available on this machine.

    """
    import torch

    if preference in ("", "auto"):
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    kind = preference.split(":", 1)[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {preference!r} requested but CUDA is not available")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {preference!r} requested but MPS is not available")
    if kind not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unknown device {preference!r}; expected auto, cpu, cuda[:N] or mps")
    return preference


def torch_dtype_for(device: str, override: str | None = None) -> torch.dtype:
    """Default compute dtype: bf16 on CUDA with bf16 support, else fp16 on CUDA/MPS, fp32 on CPU.

    Args:
        device: a device string from :func:`resolve_device`.
        override: ``"float32"``, ``"float16"`` or ``"bfloat16"`` to force a dtype.

    """
    import torch

    if override:
        return getattr(torch, override)
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device == "mps":
        return torch.float16
    return torch.float32


def release_device_memory(device: str) -> None:
    """Run the garbage collector and return cached allocator blocks of ``device`` to the system."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is None:  # never imported: no allocator has cached anything (and importing it costs ~200 MB)
        return
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()
    elif device == "mps" and torch.backends.mps.is_available():
        torch.mps.empty_cache()


def torch_module_memory(module: torch.nn.Module) -> tuple[int, int]:
    """Bytes of a module's parameters and buffers as (host bytes, accelerator bytes)."""
    ram = vram = 0
    for tensor in (*module.parameters(), *module.buffers()):
        size = tensor.numel() * tensor.element_size()
        if tensor.device.type == "cpu":
            ram += size
        else:
            vram += size
    return ram, vram


def cpu_threads() -> int:
    """Cores this process may run on (its CPU affinity), the default thread count of a lane."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def set_torch_threads(count: int) -> None:
    """Give torch's intra-op work on the calling thread ``count`` threads.

    Call it once per lane, not per job: changing the count rebuilds thread pools (milliseconds).
    """
    import torch

    if torch.get_num_threads() != count:
        torch.set_num_threads(count)


def lower_thread_priority(niceness: int) -> None:
    """Run the calling thread, and the threads it starts from now on, at nice ``niceness`` (0-19).

    Linux keeps a nice value per thread (``setpriority(PRIO_PROCESS, tid)``), and a thread
    inherits its creator's: a lane set this way before its model loads carries its runtime's
    worker threads along (ONNX Runtime makes its pool when the session is created). Only ever
    lowers the priority (raising it needs privileges); a no-op where not supported.
    """
    tid = threading.get_native_id()
    with contextlib.suppress(OSError, AttributeError):
        if niceness > os.getpriority(os.PRIO_PROCESS, tid):
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
