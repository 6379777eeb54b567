"""The in-process references, each in a worker process of its own (so it has the cores to itself).

- ``llama``: llama-cpp-python's ``Llama.create_chat_completion(stream=True)`` called directly,
  one request after another on one thread: the floor of serving overhead for generation.
- ``st``: sentence-transformers ``SentenceTransformer.encode``: the reference for embeddings.

The worker loads its model, prints ``{"ready": true, "load_s": ..., "rss_before_load_bytes": ...}``,
then answers one JSON command per stdin line with one JSON line in the load client's result format
(``{"mode", "concurrency": 1, "wall_s", "records": [...]}``)::

    {"op": "generate", "requests": 4, "max_tokens": 128, "warmup": 1, "duration_s": 60}
    {"op": "embed", "requests": 100, "batch": 32, "warmup": 1, "duration_s": 5}

Usage: ``python -m bench.inprocess llama`` or ``python -m bench.inprocess st``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.workloads import MAX_NEW_TOKENS, chat_messages, gguf_path, minilm_dir, sentence_batch

#: Context size, as in the server's default catalog entry.
N_CTX = 2048


def load_llama() -> Callable[[int, dict[str, Any]], dict[str, Any]]:
    """Open the GGUF as the server does (all cores, n_ctx 2048); return a one-request function."""
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=str(gguf_path()), n_ctx=N_CTX, n_threads=os.cpu_count() or 1, verbose=False
    )

    def generate(i: int, command: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        ttft = None
        chunks = 0
        for chunk in llm.create_chat_completion(
            messages=chat_messages(i),
            max_tokens=int(command.get("max_tokens", MAX_NEW_TOKENS)),
            temperature=0.0,
            repeat_penalty=1.0,
            stream=True,
        ):
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                chunks += 1
                if ttft is None:
                    ttft = time.perf_counter() - start
        return {"latency_s": time.perf_counter() - start, "ttft_s": ttft, "tokens": chunks}

    return generate


def load_sentence_transformers() -> Callable[[int, dict[str, Any]], dict[str, Any]]:
    """Load all-MiniLM-L6-v2 on CPU; return a one-call function (``batch`` sentences per call)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_dir()), device="cpu")

    def embed(i: int, command: dict[str, Any]) -> dict[str, Any]:
        batch = int(command.get("batch", 1))
        inputs = sentence_batch(i, batch)
        start = time.perf_counter()
        vectors = model.encode(inputs, batch_size=batch, convert_to_numpy=True)
        assert len(vectors) == batch
        return {"latency_s": time.perf_counter() - start, "items": batch}

    return embed


LOADERS = {"llama": load_llama, "st": load_sentence_transformers}


def serve_commands(
    call: Callable[[int, dict[str, Any]], dict[str, Any]], command: dict[str, Any]
) -> dict[str, Any]:
    """Run one command: ``warmup`` unrecorded calls, then calls until ``requests`` or ``duration_s``."""
    for i in range(int(command.get("warmup", 1))):
        call(-1 - i, {**command, "max_tokens": 1})  # as the load client warms up
    records = []
    start = time.perf_counter()
    deadline = start + float(command.get("duration_s", 60.0))
    for i in range(int(command.get("requests", 1))):
        if time.perf_counter() >= deadline:
            break
        try:
            record = call(i, command)
            record["ok"] = True
        except Exception as exc:  # recorded like the load client does
            record = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        records.append(record)
    return {
        "mode": command.get("op"),
        "concurrency": 1,
        "wall_s": time.perf_counter() - start,
        "records": records,
    }


def main(argv: list[str] | None = None) -> None:
    """Load the reference named in ``argv[0]`` and answer commands until stdin closes."""
    kind = (argv or sys.argv[1:])[0]
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # llama.cpp and torch may print; stdout stays pure JSON lines
    import psutil

    rss_before = psutil.Process().memory_info().rss  # before the library is imported
    start = time.perf_counter()
    call = LOADERS[kind]()
    ready = {"ready": True, "load_s": time.perf_counter() - start, "rss_before_load_bytes": rss_before}
    out.write(json.dumps(ready) + "\n")
    out.flush()
    for line in sys.stdin:
        if line.strip():
            out.write(json.dumps(serve_commands(call, json.loads(line))) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
