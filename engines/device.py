"""Device selection (CUDA, then MPS, then CPU), dtype per device, and releasing device memory."""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.util
import logging
import math
import os
import platform
import re
import subprocess
import sys
import threading
from pathlib import Path
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
    if torch is None:  # never imported: no allocator has cached anything (and importing it is costly)
        return
    # Only where torch started CUDA: it then holds a cache; asking otherwise would start its context
    # (in a process whose CUDA models are llama.cpp's, which frees its own memory on unload).
    if device.startswith("cuda") and torch.cuda.is_initialized():
        # cuBLAS keeps a workspace per handle and stream (32 MiB each on Hopper), allocated from
        # torch's cache at a thread's first matrix product and never freed, so each retired lane
        # would keep one after its model's unload.
        clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:
            clear_workspaces()
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


CGROUP_ROOT = Path("/sys/fs/cgroup")
"""Where Linux mounts the control groups (a container's CPU and memory limits are read there)."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs this process's control group may use (its CFS quota over period), or None if unlimited.

    Reads cgroup v2 ``cpu.max`` (``"200000 100000"``: 2 CPUs; ``"max 100000"``: no limit), else
    cgroup v1 ``cpu/cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` (quota -1: no limit). A Kubernetes
    container's ``resources.limits.cpu`` becomes this quota.
    """
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return None if quota == "max" or not period else int(quota) / int(period)
    quota, period = _read(root / "cpu" / "cpu.cfs_quota_us"), _read(root / "cpu" / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) <= 0:
        return None
    return int(quota) / int(period)


def cgroup_memory_available(root: Path = CGROUP_ROOT) -> int | None:
    """Bytes this process's control group may still take (limit minus usage), or None if unlimited.

    cgroup v2 ``memory.max`` and ``memory.current``, else v1 ``memory/memory.limit_in_bytes`` and
    ``memory.usage_in_bytes`` (v1 writes a huge number for "no limit"). A Kubernetes container's
    ``resources.limits.memory`` is this limit: a load past it gets the process killed, not an error.
    """
    limit, usage = _read(root / "memory.max"), _read(root / "memory.current")
    if limit is None:
        limit, usage = (
            _read(root / "memory" / "memory.limit_in_bytes"),
            _read(root / "memory" / "memory.usage_in_bytes"),
        )
    if limit is None or usage is None or limit == "max" or int(limit) >= 1 << 60:
        return None
    return max(0, int(limit) - int(usage))


def cpu_threads() -> int:
    """CPUs this process may use, the default thread count of a lane.

    Its CPU affinity, capped by its control group's CPU limit (rounded up) when there is one: in
    a container limited to 2 CPUs on a 64-core node, 64 threads would only be throttled.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return cores if limit is None else max(1, min(cores, math.ceil(limit)))


def available_memory_bytes() -> int:
    """Bytes free for a new model in host memory.

    The system's available memory, or less when the control group's limit leaves less (see
    :func:`cgroup_memory_available`).
    """
    import psutil

    available = psutil.virtual_memory().available
    in_group = cgroup_memory_available()
    return available if in_group is None else min(available, in_group)


def device_free_bytes(device: str) -> int:
    """Bytes free for a new model on ``device`` now, as torch sees it.

    Host memory (:func:`available_memory_bytes`) for ``cpu`` and ``mps`` (Apple's GPUs share it);
    the device's free memory for ``cuda[:N]`` (``torch.cuda.mem_get_info``, which starts torch's
    CUDA context on that device if it has none yet).
    """
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    return available_memory_bytes()


#: Longest wait for ``nvidia-smi`` to answer, seconds.
NVIDIA_SMI_TIMEOUT_S = 10.0


def nvidia_smi(*arguments: str) -> str | None:
    """``nvidia-smi``'s output for ``arguments``, asked of the driver (no CUDA context starts).

    None when the tool is missing, fails or does not answer within :data:`NVIDIA_SMI_TIMEOUT_S`.
    """
    try:
        answer = subprocess.run(
            ["nvidia-smi", *arguments],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return answer.stdout


@functools.cache
def driver_gpu_count() -> int:
    """GPUs the NVIDIA driver lists (``nvidia-smi -L``; 0 without the tool or a GPU), once per process."""
    listing = nvidia_smi("-L") or ""
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


@functools.cache
def torch_built_with_cuda() -> bool:
    """Whether the installed torch wheel was built with CUDA, read from its files without importing it.

    ``torch/version.py`` names the CUDA version it was built against (``cuda = '12.1'``; ``None``
    in a CPU-only wheel). False when torch is not installed.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return False
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return False
    match = re.search(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match is not None


def resolve_device_without_torch(preference: str = "auto") -> str:
    """:func:`resolve_device`'s answer, for a process that must not import torch.

    The server decides a torch model's device before its backend process starts, without the
    hundreds of MB torch's import costs: CUDA when the installed torch was built with it and the
    driver lists a GPU (:func:`torch_built_with_cuda`, :func:`driver_gpu_count`), MPS on Apple
    silicon, else the CPU. The backend's torch checks the device again when it loads.

    Raises:
        ValueError: an explicit device that is not available on this machine, or unknown.

    """
    cuda = torch_built_with_cuda() and driver_gpu_count() > 0
    mps = sys.platform == "darwin" and platform.machine() == "arm64"
    if preference in ("", "auto"):
        return "cuda" if cuda else "mps" if mps else "cpu"
    kind, _, index = preference.partition(":")
    if kind == "cuda" and (not cuda or (index.isdigit() and int(index) >= driver_gpu_count())):
        raise ValueError(f"device {preference!r} requested but CUDA is not available")
    if kind == "mps" and not mps:
        raise ValueError(f"device {preference!r} requested but MPS is not available")
    if kind not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unknown device {preference!r}; expected auto, cpu, cuda[:N] or mps")
    return preference


def cuda_free_bytes_from_driver(device: str) -> int | None:
    """Free memory of GPU ``cuda[:N]`` as the driver reports it, without starting a CUDA context.

    For a process that must not start any CUDA runtime itself (the server, whose models run in
    backend processes): asks ``nvidia-smi`` (``--query-gpu=memory.free``, MiB) for GPU ``N``
    in the driver's order, which is CUDA's with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. None when
    ``nvidia-smi`` is missing, fails or does not answer within :data:`NVIDIA_SMI_TIMEOUT_S`.
    """
    index = device.partition(":")[2] or "0"
    answer = nvidia_smi(f"--id={index}", "--query-gpu=memory.free", "--format=csv,noheader,nounits")
    try:
        return int((answer or "").split()[0]) * (1 << 20)
    except (ValueError, IndexError):
        return None


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
