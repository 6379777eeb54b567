"""The in-process references, each in a worker process of its own (so it has the cores to itself).

- ``llama [GGUF]``: llama-cpp-python's ``Llama.create_chat_completion(stream=True)`` called directly,
  one request after another on one thread: the floor of serving overhead for generation.
- ``llama-batched [GGUF]``: the bare llama.cpp batched-decode loop (:mod:`bench.batched_decode`)
  on the GGUF our server serves (or the file named): the ceiling of batched generation. Its
  ``generate_batched`` command runs the requests in waves of ``concurrency`` sequences.
- ``transformers-batched [CATALOG NAME]``: ``model.generate`` on a batch of left-padded prompts
  (:mod:`bench.hf_batched`), with the model our transformers engine loads for the catalog entry
  (default ``smollm2-135m-instruct-hf``): the ceiling of that engine. Same ``generate_batched``
  command.
- ``st [RUNTIME [QUANTIZE]]``: sentence-transformers ``SentenceTransformer.encode``: the
  reference for embeddings; its transformers model in torch (the default), or exported for
  ``onnx`` (ONNX Runtime) or ``openvino`` as our engines export it, ``none`` or ``int8``.
- ``ocr``: ``RapidOCR()(image)`` and ``pytesseract.image_to_data`` on the decoded OCR page.
- ``anomaly``: scikit-learn IsolationForest (on StandardScaler-scaled rows) and pyod ECOD,
  fitted once on the fit rows, scoring the batch.

The worker loads its model, prints ``{"ready": true, "load_s": ..., "rss_before_load_bytes": ...}``,
then answers one JSON command per stdin line with one JSON line in the load client's result format
(``{"mode", "concurrency": 1, "wall_s", "records": [...]}``)::

    {"op": "generate", "requests": 4, "max_tokens": 128, "warmup": 1, "duration_s": 60}
    {"op": "generate_batched", "concurrency": 8, "requests": 8, "max_tokens": 128, "warmup": 1}
    {"op": "embed", "requests": 100, "batch": 32, "warmup": 1, "duration_s": 5}
    {"op": "ocr", "model": "rapidocr", "requests": 5, "warmup": 1, "duration_s": 5}
    {"op": "anomaly", "detector": "iforest", "rows": 10000, "requests": 5, "warmup": 1}

Usage: ``python -m bench.inprocess KIND [ARG]`` (``llama [GGUF]``, ``llama-batched [GGUF]``,
``transformers-batched [CATALOG NAME]``, ``st [RUNTIME [QUANTIZE]]``, ``ocr``, ``anomaly``).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.workloads import (
    ANOMALY_FIT_ROWS,
    ANOMALY_FIT_SEED,
    ANOMALY_SCORE_SEED,
    MAX_NEW_TOKENS,
    anomaly_matrix,
    chat_messages,
    gguf_path,
    ocr_page_png,
    sentence_batch,
)

if TYPE_CHECKING:
    from bench.batched_decode import WaveGenerator

#: Context size, as in the server's default catalog entry.
N_CTX = 2048


#: Bytes of llama-cpp-python's RAM prompt cache when a command asks for it (many prompts' KV).
PROMPT_CACHE_BYTES = 1 << 30


def load_llama(model_path: str | None = None) -> Callable[[int, dict[str, Any]], dict[str, Any]]:
    """Open the GGUF (``model_path``, default the shipped Q4_1) as the server does (all cores,
    n_ctx 2048); return a one-request function.

    Command keys: ``max_tokens``; ``salt`` (cold prompts, see :func:`bench.workloads.chat_messages`);
    ``prompt_cache`` (true: llama-cpp-python's own ``LlamaRAMCache``, which keeps many prompts'
    states as our slots do; false or absent: none, only the previous prompt's prefix is reused).
    """
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=model_path or str(gguf_path()), n_ctx=N_CTX, n_threads=os.cpu_count() or 1, verbose=False
    )
    ram_cache = llama_cpp.LlamaRAMCache(capacity_bytes=PROMPT_CACHE_BYTES)

    def generate(i: int, command: dict[str, Any]) -> dict[str, Any]:
        llm.set_cache(ram_cache if command.get("prompt_cache") else None)
        start = time.perf_counter()
        ttft = None
        chunks = 0
        for chunk in llm.create_chat_completion(
            messages=chat_messages(i, command.get("salt")),
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


def load_llama_batched(model_path: str | None = None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Open ``model_path`` (default: the file our server serves) for the bare batched loop.

    Returns a function of a whole ``generate_batched`` command, see :func:`answer_waves`.
    """
    from bench.batched_decode import CEILING_CELLS, CEILING_SEQUENCES, BatchedDecoder
    from bench.workloads import served_chat_model
    from engines.device import cpu_threads

    path = Path(model_path) if model_path else served_chat_model()[0]
    decoder = BatchedDecoder(path, cpu_threads(), CEILING_SEQUENCES, CEILING_CELLS)
    return functools.partial(answer_waves, decoder)


def load_transformers_batched(model: str | None = None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Load a transformers generation model through our engine, for ``model.generate`` in batches.

    ``model`` is its catalog name (default :data:`bench.hf_batched.DEFAULT_MODEL`). Returns a
    function of a whole ``generate_batched`` command, see :func:`answer_waves`.
    """
    # Before torch loads libgomp: the OpenMP wait defaults our server runs its torch lanes with.
    import service.openmp  # noqa: F401
    from bench.hf_batched import DEFAULT_MODEL, HFBatchedGenerator

    return functools.partial(answer_waves, HFBatchedGenerator(model or DEFAULT_MODEL))


def answer_waves(generator: WaveGenerator, command: dict[str, Any]) -> dict[str, Any]:
    """Answer a ``generate_batched`` command (``concurrency``, ``requests``, ``max_tokens``,
    ``warmup``, ``salt``) with ``generator`` (a llama.cpp or transformers batch generator).

    It generates the requests' prompts (:func:`bench.workloads.chat_messages`, tokenized before
    any timing) in waves of ``concurrency`` sequences and answers a load-client-shaped result
    (see :func:`bench.batched_decode.run_waves`); a failure is recorded as failed requests, as
    the load client records them.
    """
    from bench.batched_decode import run_waves

    concurrency = int(command.get("concurrency", 1))
    requests = int(command.get("requests", concurrency))
    salt = command.get("salt")
    try:
        for i in range(int(command.get("warmup", 1))):  # as the load client warms up
            run_waves(generator, [generator.chat_tokens(chat_messages(-1 - i, salt))], 1, 1)
        prompts = [generator.chat_tokens(chat_messages(i, salt)) for i in range(requests)]
        max_tokens = int(command.get("max_tokens", MAX_NEW_TOKENS))
        return run_waves(generator, prompts, concurrency, max_tokens)
    except Exception as exc:  # recorded like the load client does
        error = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        return {"mode": "batched", "concurrency": concurrency, "wall_s": 0.0, "records": [error]}


def load_sentence_transformers(
    runtime: str = "torch", quantize: str = "none"
) -> Callable[[int, dict[str, Any]], dict[str, Any]]:
    """Load all-MiniLM-L6-v2 on CPU; return a one-call function (``batch`` sentences per call).

    ``runtime`` (torch, onnx, openvino) and ``quantize`` (none, int8) run its transformers model
    as the catalog options of the same names do in our server: the export comes from (or goes
    to) the default converted cache our server uses (see :func:`bench.encoder_runtimes.load`).
    """
    from bench.encoder_runtimes import load

    model = load(runtime, quantize, None)

    def embed(i: int, command: dict[str, Any]) -> dict[str, Any]:
        batch = int(command.get("batch", 1))
        inputs = sentence_batch(i, batch)
        start = time.perf_counter()
        vectors = model.encode(inputs, batch_size=batch, convert_to_numpy=True)
        assert len(vectors) == batch
        return {"latency_s": time.perf_counter() - start, "items": batch}

    return embed


def load_ocr() -> Callable[[int, dict[str, Any]], dict[str, Any]]:
    """Create RapidOCR and find tesseract; return a one-page function (``model`` picks the engine).

    The page is decoded once: the reference is the engine alone, without transfer or decoding.
    Tesseract gets our catalog entry's settings (``eng``, ``--psm 3 --oem 1``).
    """
    import io

    import numpy as np
    import pytesseract
    from PIL import Image
    from rapidocr_onnxruntime import RapidOCR

    image = Image.open(io.BytesIO(ocr_page_png())).convert("RGB")
    array = np.asarray(image)
    rapid = RapidOCR()
    pytesseract.get_tesseract_version()  # fails here, at load, when the program is missing

    def read_page(i: int, command: dict[str, Any]) -> dict[str, Any]:
        model = command.get("model", "rapidocr")
        start = time.perf_counter()
        if model == "rapidocr":
            result, _ = rapid(array)
            assert result, "rapidocr read no text"
        elif model == "tesseract":
            data = pytesseract.image_to_data(
                image, lang="eng", config="--psm 3 --oem 1", output_type=pytesseract.Output.DICT
            )
            assert any(t.strip() for t in data["text"]), "tesseract read no text"
        else:
            raise ValueError(f"unknown OCR model {model!r}")
        return {"latency_s": time.perf_counter() - start, "items": 1}

    return read_page


def load_anomaly() -> Callable[[int, dict[str, Any]], dict[str, Any]]:
    """Fit IsolationForest (scaled) and ECOD as our backends do; return a one-batch scoring function.

    Fitted at load on the :data:`ANOMALY_FIT_ROWS` fit rows; ``rows`` sets the batch size,
    ``detector`` (``iforest`` or ``ecod``) the algorithm. Same settings as the server:
    ``IsolationForest(n_estimators=100, random_state=0)``, ``ECOD(contamination=0.1)``.
    """
    from pyod.models.ecod import ECOD
    from sklearn.ensemble import IsolationForest
    from sklearn.preprocessing import StandardScaler

    train = anomaly_matrix(ANOMALY_FIT_ROWS, ANOMALY_FIT_SEED)
    scaler = StandardScaler().fit(train)
    forest = IsolationForest(n_estimators=100, random_state=0).fit(scaler.transform(train))
    models = {
        "iforest": lambda x: -forest.score_samples(scaler.transform(x)),
        "ecod": ECOD(contamination=0.1).fit(train).decision_function,
    }
    batches: dict[int, Any] = {}

    def score(i: int, command: dict[str, Any]) -> dict[str, Any]:
        rows = int(command.get("rows", 10_000))
        if rows not in batches:
            batches[rows] = anomaly_matrix(rows, ANOMALY_SCORE_SEED)
        batch = batches[rows]
        start = time.perf_counter()
        scores = models[command.get("detector", "iforest")](batch)
        assert len(scores) == rows
        return {"latency_s": time.perf_counter() - start, "items": rows}

    return score


LOADERS: dict[str, Callable[..., Callable[..., dict[str, Any]]]] = {
    "llama": load_llama,
    "st": load_sentence_transformers,
    "ocr": load_ocr,
    "anomaly": load_anomaly,
}
#: Workers whose function answers a whole command at once (not one request at a time).
WHOLE_COMMAND = {"llama-batched": load_llama_batched, "transformers-batched": load_transformers_batched}


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
    """Load the worker named in ``argv[0]`` (arguments: ``argv[1:]``); answer commands until stdin closes."""
    kind, *args = argv or sys.argv[1:]
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # llama.cpp and torch may print; stdout stays pure JSON lines
    import psutil

    rss_before = psutil.Process().memory_info().rss  # before the library is imported
    start = time.perf_counter()
    call = {**LOADERS, **WHOLE_COMMAND}[kind](*args)
    ready = {"ready": True, "load_s": time.perf_counter() - start, "rss_before_load_bytes": rss_before}
    out.write(json.dumps(ready) + "\n")
    out.flush()
    for line in sys.stdin:
        if line.strip():
            command = json.loads(line)
            answer = call(command) if kind in WHOLE_COMMAND else serve_commands(call, command)
            out.write(json.dumps(answer) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
