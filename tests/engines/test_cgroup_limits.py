"""A container's CPU and memory limits (cgroup v2 and v1) bound the default thread count and the
memory a model load may take: on a 64-core node a pod limited to 2 CPUs and 4 GiB must not start
64 threads or load past its limit (the kernel would kill it, not answer an error)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines import device


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    return root


@pytest.mark.parametrize(
    ("files", "cpus"),
    [
        ({"cpu.max": "200000 100000"}, 2.0),
        ({"cpu.max": "150000 100000"}, 1.5),
        ({"cpu.max": "max 100000"}, None),
        ({"cpu/cpu.cfs_quota_us": "300000", "cpu/cpu.cfs_period_us": "100000"}, 3.0),
        ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
        ({}, None),
    ],
)
def test_cpu_limit(tmp_path, files, cpus):
    assert device.cgroup_cpu_limit(write(tmp_path, files)) == cpus


@pytest.mark.parametrize(
    ("files", "available"),
    [
        ({"memory.max": str(4 << 30), "memory.current": str(1 << 30)}, 3 << 30),
        ({"memory.max": "max", "memory.current": "123"}, None),
        ({"memory/memory.limit_in_bytes": str(2 << 30), "memory/memory.usage_in_bytes": str(3 << 30)}, 0),
        ({"memory/memory.limit_in_bytes": str(1 << 62), "memory/memory.usage_in_bytes": "5"}, None),
        ({}, None),
    ],
)
def test_memory_available(tmp_path, files, available):
    assert device.cgroup_memory_available(write(tmp_path, files)) == available


def test_the_default_thread_count_and_free_memory_respect_the_limits(monkeypatch):
    cores = device.cpu_threads()
    monkeypatch.setattr(device, "cgroup_cpu_limit", lambda root=device.CGROUP_ROOT: 1.2)
    assert device.cpu_threads() == min(cores, 2)  # rounded up, never above the cores
    monkeypatch.setattr(device, "cgroup_memory_available", lambda root=device.CGROUP_ROOT: 12345)
    assert device.available_memory_bytes() == 12345
