"""What a result was measured on: machine, package versions, git revision."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

#: Packages whose versions matter to the figures (those not installed are reported as None).
PROJECT_PACKAGES = [
    "universal-runtime",
    "grpcio",
    "protobuf",
    "torch",
    "transformers",
    "sentence-transformers",
    "llama-cpp-python",
    "fastapi",
    "uvicorn",
    "httpx",
    "numpy",
]


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (falls back to ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_names() -> list[str]:
    """NVIDIA GPU names from ``nvidia-smi`` (empty when there is none)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def machine_info() -> dict[str, object]:
    """CPU model, logical cores, cores this process may use, RAM (bytes), GPUs, OS and Python."""
    import psutil

    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_bytes": psutil.virtual_memory().total,
        "gpus": gpu_names(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def package_versions(names: list[str]) -> dict[str, str | None]:
    """Installed versions of ``names`` in this interpreter (None when not installed)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def venv_package_versions(python: Path, names: list[str]) -> dict[str, str | None]:
    """Versions of ``names`` in another interpreter (a peer's virtual environment)."""
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: out[n] = None\n"
        "print(json.dumps(out))\n"
    )
    try:
        result = subprocess.run(
            [str(python), "-c", code, *names], capture_output=True, text=True, timeout=60, check=True
        )
        return json.loads(result.stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError):
        return dict.fromkeys(names)


#: Paths a bench run writes itself: changes there do not make a measured tree "dirty".
BENCH_OUTPUTS = ("bench/results", "bench/README.md")


def git_state(repo: Path) -> dict[str, object]:
    """The commit a run measures: ``{"revision": short sha, "dirty": bool, "dirty_paths": [...]}``.

    ``dirty`` is true when tracked or untracked (not ignored) files differ from the commit,
    outside :data:`BENCH_OUTPUTS` (the run's own results, written area after area). Outside a
    checkout: revision None, dirty False.
    """

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout

    try:
        revision = git("rev-parse", "--short", "HEAD").strip()
        excludes = [f":(exclude){path}" for path in BENCH_OUTPUTS]
        status = git("status", "--porcelain", "--untracked-files=all", "--", ".", *excludes)
    except (OSError, subprocess.SubprocessError):
        return {"revision": None, "dirty": False, "dirty_paths": []}
    paths = [line[3:] for line in status.splitlines() if line.strip()]
    return {"revision": revision, "dirty": bool(paths), "dirty_paths": paths}


def stamp(git: dict[str, object]) -> dict[str, object]:
    """What every result file records about where it was measured (one stamp for every area).

    ``git``: :func:`git_state` of the measured tree. Returns ``git_revision``, ``git_dirty``,
    ``git_dirty_paths`` (at most 20), ``machine`` (:func:`machine_info`) and ``packages``
    (``{"project": versions of PROJECT_PACKAGES}``; peers add theirs). The run's noise figures
    (:mod:`bench.noise`) join it when the run finishes.
    """
    return {
        "git_revision": git["revision"],
        "git_dirty": git["dirty"],
        "git_dirty_paths": list(git["dirty_paths"])[:20],  # type: ignore[call-overload]
        "machine": machine_info(),
        "packages": {"project": package_versions(PROJECT_PACKAGES)},
    }


def utc_now() -> str:
    """The current UTC time in ISO 8601, seconds precision."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()
