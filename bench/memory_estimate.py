"""Memory before a load against memory after it: ``Engine.required_memory()`` for every default model.

For each model of the embedded default catalog, a fresh child process:

1. builds the engine as the server does (catalog entry, ``select_device``) and calls
   :meth:`~engines.base.Engine.required_memory` (the estimate, timed: it must stay cheap);
2. imports the libraries the backend runs on (:data:`LIBRARIES`), collects garbage and trims the
   heap, and reads its RSS;
3. loads the model and runs one request of its task (:func:`touch`: a ~400-token prompt for
   generation, so a full prefill batch runs; eight short texts for encoders; a rendered page for
   OCR and layout), so that memory-mapped weights are resident and the runtime's work buffers are
   allocated, then reads its RSS again after :data:`SETTLE_S`.

*Measured* is the RSS growth of step 3: the memory the load and first use add to a process that
already has the libraries (what a memory budget has to find room for when a server that already
runs such a backend loads one more model). Library code is left out on purpose: it is paid once per
process, not per model, and ``required_memory`` is a per-model figure. The engine's own
``memory_usage()`` after the load is recorded beside it; it is not the yardstick because for
llama.cpp it is the same formula as the estimate (weights plus KV) and for OCR, layout and the
exported runtimes it is unknown or partial.

Usage: ``python -m bench.memory_estimate [--quick|--tiny] [--out DIR] [--allow-dirty]`` (seconds a
model and repetition); ``--child MODEL`` measures one model and prints JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import json
import subprocess
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engines.base import Engine

MIB = 1024 * 1024
SETTLE_S = 0.5
#: Modules imported before the baseline RSS, by backend: the libraries a load brings in.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "llama_cpp": ("llama_cpp", "llama_cpp._internals", "llama_cpp.llama_chat_format"),
    "transformers": (
        "torch",
        "safetensors",
        "transformers",
        # transformers imports its model code lazily: ~140 MiB the first model of a process pays.
        "transformers.modeling_utils",
        "transformers.generation.utils",
        "transformers.models.auto.modeling_auto",
        "transformers.models.llama.modeling_llama",
        "transformers.tokenization_utils_fast",
        "engines.generation.hf_batch_cache",
        "engines.generation.hf_vocab",
        "engines.generation.torch_sampling",
    ),
    "sentence_transformers": ("torch", "transformers", "sentence_transformers", "openvino", "onnxruntime"),
    "embedding_head": (
        "torch",
        "transformers",
        "sentence_transformers",
        "openvino",
        "onnxruntime",
        "joblib",
        "sklearn.linear_model",
    ),
    "spacy": ("spacy",),
    "rapidocr": ("onnxruntime", "rapidocr_onnxruntime"),
    "rapid_layout": ("onnxruntime", "rapid_layout"),
    "tesseract": ("pytesseract",),
    "pocketsphinx": ("onnxruntime", "av", "pocketsphinx"),
    "espeak": ("av", "espeakng_loader"),
}
#: A prompt of about 400 tokens: one prefill fills most of a 512-token batch.
PROMPT = " ".join(["The quick brown fox jumps over the lazy dog near the river bank."] * 30)
#: A full batch of paragraphs: 64 texts (the encoders' ``max_batch_size``, spaCy's ``batch_size``) of
#: about 270 words and punctuation (spaCy tokens); encoders truncate them to their window (256 for MiniLM).
TEXTS = [
    f"Report {i}: " + " ".join(["the weather, the market and a short trip to the coast"] * 22)
    for i in range(64)
]
HEADLINE = [
    {"key": "estimate_mib", "label": "estimate MiB (RAM + VRAM)", "higher_is_better": False},
    {"key": "measured_mib", "label": "measured MiB (RSS growth)", "higher_is_better": False},
    {"key": "ratio", "label": "estimate / measured", "higher_is_better": False},
]
TITLE = "Memory estimate before a load (Engine.required_memory) against RSS growth, every default model"


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def _settled_rss() -> int:
    """RSS after a garbage collection and a heap trim (glibc), so freed memory is not counted."""
    gc.collect()
    with contextlib.suppress(OSError):  # not glibc: RSS may then include freed heap
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return _rss()


def _reset_peak() -> None:
    """Reset this process's peak RSS (``VmHWM``; Linux: ``5`` to ``/proc/self/clear_refs``)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def _peak_rss() -> int:
    """Peak RSS (bytes) since the last :func:`_reset_peak`, from ``/proc/self/status``."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _children_peak_rss() -> int:
    """Largest peak RSS (bytes) of the child processes waited for so far (tesseract runs as one)."""
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def _page_image() -> Any:
    """A 640 x 480 page with four lines of printed text (OCR and layout input)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (640, 480), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=28)
    for row, line in enumerate(("Invoice 2024-117", "Total due: 42.50 EUR", "Paid by card", "Thank you")):
        draw.text((40, 40 + 90 * row), line, fill="black", font=font)
    return image


def spoken_audio() -> bytes:
    """A WAV of a sentence spoken by eSpeak NG (the transcription request's input).

    Made before the baseline is read, so the synthesizer's memory is not counted as the model's.
    """
    import io
    import wave

    import numpy as np

    from engines.speech.espeak import speak

    audio = speak("please call me tomorrow morning and bring the report")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(audio.sample_rate)
        file.writeframes((np.clip(audio.samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def touch(engine: Engine, audio: bytes = b"") -> None:
    """One request of ``engine``'s first task, so weights are resident and work buffers allocated.

    ``audio`` is a transcription request's input (:func:`spoken_audio`).

    Raises:
        ValueError: a task this function does not drive.

    """
    from engines.encoder_types import ClassificationRequest, EntityRequest
    from engines.speech.types import AudioFormat, AudioLimits, SpeechOptions, TranscriptionOptions
    from engines.types import EmbeddingRequest, GenerationRequest, SamplingParams, Task

    tasks = {task.value if hasattr(task, "value") else str(task) for task in engine.tasks}
    # A full batch: the encoders' max_batch_size (an embedding head's is its encoder's), spaCy's batch_size.
    options = engine.options
    batch = getattr(options, "max_batch_size", None) or getattr(options, "batch_size", None) or len(TEXTS)
    texts = [TEXTS[i % len(TEXTS)] for i in range(batch)]

    async def run() -> None:
        if Task.GENERATE.value in tasks:
            # One ~420-token prompt per 512 tokens of the prefill budget (transformers' prefill_tokens;
            # llama.cpp: one micro-batch), at most max_sequences, streamed together.
            budget = getattr(engine.options, "prefill_tokens", 512)
            count = max(1, min(budget // 512, engine.options.max_sequences))  # type: ignore[attr-defined]

            async def one(index: int) -> None:
                request = GenerationRequest(
                    request_id=f"memory-{index}",
                    prompt=f"{index}. {PROMPT}",
                    params=SamplingParams(max_tokens=4, temperature=0),
                )
                async for _ in engine.stream(request):  # type: ignore[attr-defined]
                    pass

            await asyncio.gather(*(one(i) for i in range(count)))
        elif Task.EMBED.value in tasks:
            await engine.embed(EmbeddingRequest(inputs=texts))  # type: ignore[attr-defined]
        elif Task.CLASSIFY.value in tasks:
            await engine.classify(ClassificationRequest(inputs=texts))  # type: ignore[attr-defined]
        elif Task.EXTRACT_ENTITIES.value in tasks:
            await engine.extract_entities(EntityRequest(inputs=texts))  # type: ignore[attr-defined]
        elif Task.OCR.value in tasks:
            languages = engine.resolve_languages(("en",))  # type: ignore[attr-defined]
            engine.recognize(_page_image(), languages)  # type: ignore[attr-defined]
        elif Task.LAYOUT.value in tasks:
            engine.detect(_page_image())  # type: ignore[attr-defined]
        elif Task.TRANSCRIBE.value in tasks:
            limits = AudioLimits(max_bytes=len(audio), max_seconds=60)
            async for _ in engine.transcribe(audio, limits, TranscriptionOptions(word_timestamps=True)):  # type: ignore[attr-defined]
                pass
        elif Task.SYNTHESIZE_SPEECH.value in tasks:
            speech = engine.synthesize(PROMPT[:400], SpeechOptions(), AudioFormat.MP3)  # type: ignore[attr-defined]
            async for _ in speech:
                pass
        else:
            raise ValueError(f"no request for tasks {sorted(tasks)}")

    asyncio.run(run())


def child(name: str, overrides: dict[str, Any] | None = None) -> dict[str, float]:
    """Measure model ``name`` in this (fresh) process: estimate, then RSS growth of load + one request.

    ``overrides`` are catalog options set over the default catalog's (smaller batches for the tests).
    """
    import importlib

    from engines.executor import DeviceExecutor
    from engines.registry import engine_class
    from engines.types import Task
    from service.catalog import load_catalog

    spec = load_catalog().specs[name]
    spec = replace(spec, options={**spec.options, **(overrides or {})})
    cls = engine_class(spec.backend)
    device = cls.select_device(spec.device or "auto")
    engine = cls(spec, device, DeviceExecutor(device, name))
    start = time.perf_counter()
    estimate = engine.required_memory()
    estimate_s = time.perf_counter() - start
    for module in LIBRARIES.get(spec.backend, ()):
        importlib.import_module(module)
    engine.configure_lane()
    audio = spoken_audio() if Task.TRANSCRIBE in spec.tasks else b""
    before = _settled_rss()
    children_before = _children_peak_rss()
    _reset_peak()
    engine.load()
    loaded = _settled_rss()
    touch(engine, audio)
    time.sleep(SETTLE_S)
    peak = _peak_rss()
    after = _settled_rss()
    children = _children_peak_rss()
    children_peak = children if children > children_before else 0
    reported = engine.memory_usage()
    return {
        "estimate_ram": estimate.ram_bytes,
        "estimate_vram": estimate.vram_bytes,
        "estimate_s": estimate_s,
        "measured": peak - before + children_peak,
        "measured_settled": after - before,
        "measured_load": loaded - before,
        "children_peak": children_peak,
        "reported_ram": reported.ram_bytes,
        "reported_vram": reported.vram_bytes,
    }


def measure(name: str, overrides: dict[str, Any] | None = None, timeout_s: float = 300) -> dict[str, float]:
    """:func:`child` for ``name`` in a fresh process (``python -m bench.memory_estimate --child``).

    Raises:
        RuntimeError: the child failed (the end of its stderr is in the message).

    """
    from bench.procs import REPO_ROOT, base_env

    command = [sys.executable, "-m", "bench.memory_estimate", "--child", name, json.dumps(overrides or {})]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO_ROOT, env=base_env(), timeout=timeout_s, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"measuring {name} failed (exit {done.returncode}): {done.stderr[-3000:]}")
    out = done.stdout
    return json.loads(out.strip().splitlines()[-1])


def _run(params: dict[str, Any]) -> dict[str, Any]:
    """One measurement of ``params["model"]`` as a load-client-shaped result (one record)."""
    start = time.monotonic()
    figures = measure(params["model"])
    return {"records": [{"ok": True, **figures}], "wall_s": time.monotonic() - start}


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """One child's figures in MiB, and the ratio of the estimate (RAM + VRAM) to the measured peak."""
    (figures,) = result["records"]
    estimate = figures["estimate_ram"] + figures["estimate_vram"]
    return {
        "estimate_mib": estimate / MIB,
        "estimate_ram_mib": figures["estimate_ram"] / MIB,
        "estimate_vram_mib": figures["estimate_vram"] / MIB,
        "measured_mib": figures["measured"] / MIB,
        "measured_settled_mib": figures["measured_settled"] / MIB,
        "reported_mib": (figures["reported_ram"] + figures["reported_vram"]) / MIB,
        "ratio": estimate / figures["measured"],
        "estimate_ms": figures["estimate_s"] * 1000,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Estimate and measure every default model in fresh children; write the JSON, plot and README section."""
    from bench.runner import Contender, Report, parse_config
    from bench.workloads import CHAT_MODEL
    from service.catalog import load_catalog

    cfg = parse_config("memory_estimate", argv, __doc__, reps={"full": 3, "quick": 2, "tiny": 1})
    names = list(load_catalog().specs)
    if cfg.mode == "tiny":  # the smoke test: the GGUF model only (seconds, no torch)
        names = [CHAT_MODEL]
    settings = {"settle_s": SETTLE_S, "libraries_imported_first": LIBRARIES, "options": "the catalog's"}
    with Report(cfg, TITLE, HEADLINE, {"models": "the embedded default catalog"}, settings) as report:
        contender = report.add(
            Contender("required_memory", "required_memory() vs peak RSS growth", "ours", _run)
        )
        report.note(
            "measured: peak RSS growth (VmHWM) of a fresh child over the load and one request that fills "
            "the model's configured batch, the backend's libraries imported before (tesseract: plus the "
            "page's tesseract process); settled: the same after the request; reported: memory_usage()"
        )
        for name in names:
            report.compare(name, {"model": name}, [contender], contender.name, metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], json.loads(sys.argv[3]))))
    else:
        main(sys.argv[1:])
