"""Speech and image generation: ours over gRPC against the same engines called in this process.

Workloads, made in the run (nothing downloaded):

- **transcribe**: :data:`CORPUS` spoken by eSpeak NG's en-us voice, one second of silence between
  sentences, as one 16 kHz WAV. Reference: the default catalog's ``pocketsphinx-en-us`` engine
  loaded in this process, its own ``transcribe`` (decoding, Silero VAD windows, recognition) on
  the same bytes. Ours: ``Transcribe`` over gRPC (the WAV in 1 MiB chunks) to a server with the
  model in its backend process, as the default runs it. Figure: audio seconds transcribed per wall
  second (x real time; its inverse is the real-time factor). Target: ours ≥ 0.9x the reference.
- **speak**: :data:`CORPUS` as one text, spoken as mp3 by the default ``espeak-ng``. Reference:
  the engine in this process, its own ``synthesize``; ours: ``SynthesizeSpeech`` over gRPC. Figure:
  audio seconds made per wall second, and the time to the first audio.
- **image**: one 256x256 image, 4 steps, of a tiny random Stable Diffusion pipeline built in the
  run (``tests/engines/images/tiny_pipeline.py``: the weights mean nothing; the cost of serving
  does). Reference: the diffusers pipeline called in this process, its image encoded as PNG;
  ours: ``GenerateImage`` over gRPC (the ``diffusers`` engine in its backend process). Figure:
  images per second. The tiny model's image takes about 90 ms, so the fixed cost of a call shows
  here as it would not beside a real model's seconds.

Word error rates (a table; deterministic enough to measure once): the transcribe workload's
transcript by the reference and by ours, and the round trip (ours speaks :data:`CORPUS`, ours
transcribes it). WER: word-level Levenshtein distance over the reference's words, case and
punctuation aside.

Usage: ``python -m bench.speech [--quick|--tiny] [--out DIR]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import servers
from bench.runner import Contender, Report, item_metrics, parse_config

#: Sentences PocketSphinx hears from eSpeak NG (tests/spoken.py has the two the tests use).
CORPUS = (
    "open the door please",
    "please call me tomorrow morning",
    "i would like a cup of coffee",
    "can you help me find my keys",
    "i need to buy some bread and milk",
    "hello world",
)
STT_MODEL = "pocketsphinx-en-us"
TTS_MODEL = "espeak-ng"
IMAGE_MODEL = "tiny-sd"
IMAGE_SIZE = 256
IMAGE_STEPS = 4
HEADLINE = [
    {"key": "rate", "label": "items/s", "higher_is_better": True},
    {"key": "latency_p50_ms", "label": "latency p50 ms", "higher_is_better": False},
]


def _records(calls: list[tuple[float, float]], wall_s: float) -> dict[str, Any]:
    """A load-client-shaped result of ``(latency_s, items)`` calls in ``wall_s`` seconds."""
    return {
        "records": [{"ok": True, "latency_s": latency, "items": items} for latency, items in calls],
        "wall_s": wall_s,
    }


def _timed(calls: int, one: Any) -> dict[str, Any]:
    """``calls`` sequential calls of ``one() -> items``, each timed."""
    results = []
    start = time.perf_counter()
    for _ in range(calls):
        began = time.perf_counter()
        items = one()
        results.append((time.perf_counter() - began, items))
    return _records(results, time.perf_counter() - start)


def _runner(side: Any, call: Any, items: float, calls: int) -> Any:
    """A contender's run: ``calls`` sequential ``call(side)``, each worth ``items``."""

    def one() -> float:
        call(side)
        return items

    return lambda params: _timed(calls, one)


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Items (audio seconds, or images) per wall second, and per-call latency."""
    return item_metrics(result, "rate")


class InProcess:
    """The default catalog's speech engines (and the tiny pipeline) loaded in this process, on their lanes."""

    def __init__(self, image_folder: Path | None) -> None:
        from engines.executor import DeviceExecutor
        from engines.registry import engine_class
        from service.catalog import load_catalog

        specs = load_catalog().specs
        self.loop = asyncio.new_event_loop()
        self.engines = {}
        for name in (STT_MODEL, TTS_MODEL):
            spec = specs[name]
            engine = engine_class(spec.backend)(spec, "cpu", DeviceExecutor("cpu", name))
            engine.configure_lane()
            engine.load()
            self.engines[name] = engine
        self.pipeline = None
        if image_folder is not None:
            import torch
            from diffusers import DiffusionPipeline

            torch.set_num_threads(2)
            self.pipeline = DiffusionPipeline.from_pretrained(
                str(image_folder), use_safetensors=True, local_files_only=True
            )
            self.pipeline.set_progress_bar_config(disable=True)

    def transcribe(self, data: bytes) -> str:
        """The reference transcript of ``data`` (the engine's own stream, as the server calls it)."""
        from engines.speech.types import AudioLimits, TranscriptionOptions, TranscriptSegment

        async def run() -> str:
            engine = self.engines[STT_MODEL]
            limits = AudioLimits(max_bytes=len(data) + 1, max_seconds=3600)
            events = engine.transcribe(data, limits, TranscriptionOptions())
            async with contextlib.aclosing(events) as stream:
                return " ".join([e.text async for e in stream if isinstance(e, TranscriptSegment)])

        return self.loop.run_until_complete(run())

    def speak(self, text: str) -> tuple[bytes, float]:
        """The reference mp3 of ``text``, and seconds to its first piece."""
        from engines.speech.types import AudioFormat, SpeechOptions

        async def run() -> tuple[bytes, float]:
            began = time.perf_counter()
            first = 0.0
            pieces = []
            stream = self.engines[TTS_MODEL].synthesize(text, SpeechOptions(), AudioFormat.MP3)
            async with contextlib.aclosing(stream) as audio:
                async for piece in audio:
                    first = first or time.perf_counter() - began
                    pieces.append(piece.data)
            return b"".join(pieces), first

        return self.loop.run_until_complete(run())

    def draw(self, seed: int) -> bytes:
        """One reference image, as PNG (what ours answers)."""
        import io

        import torch

        generator = torch.Generator().manual_seed(seed)
        image = self.pipeline(
            "a red square",
            height=IMAGE_SIZE,
            width=IMAGE_SIZE,
            num_inference_steps=IMAGE_STEPS,
            generator=generator,
        ).images[0]
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return buffer.getvalue()

    def close(self) -> None:
        """Unload the engines."""
        for engine in self.engines.values():
            engine.unload()
            engine.executor.shutdown()
        self.loop.close()


class Ours:
    """Calls to our server over gRPC."""

    def __init__(self, target: str) -> None:
        import grpc
        from universal_runtime.v1 import inference_service_pb2_grpc

        self.channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 << 20)])
        self.stub = inference_service_pb2_grpc.InferenceServiceStub(self.channel)

    def transcribe(self, data: bytes) -> str:
        """Our transcript of ``data``."""
        from universal_runtime.v1 import speech_pb2

        options = speech_pb2.TranscribeOptions(model=STT_MODEL)
        chunks = [data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20)]
        messages = [speech_pb2.TranscribeRequest(options=options, chunk=chunks[0])]
        messages += [speech_pb2.TranscribeRequest(chunk=c) for c in chunks[1:]]
        answers = self.stub.Transcribe(iter(messages), timeout=600)
        return " ".join(a.segment.text for a in answers if a.HasField("segment"))

    def speak(self, text: str) -> tuple[bytes, float]:
        """Our mp3 of ``text``, and seconds to its first piece."""
        from universal_runtime.v1 import speech_pb2

        request = speech_pb2.SynthesizeSpeechRequest(
            model=TTS_MODEL, input=text, response_format=speech_pb2.AUDIO_FORMAT_MP3
        )
        began = time.perf_counter()
        first = 0.0
        pieces = []
        for answer in self.stub.SynthesizeSpeech(request, timeout=600):
            first = first or time.perf_counter() - began
            pieces.append(answer.audio)
        return b"".join(pieces), first

    def draw(self, seed: int) -> None:
        """One image of ours."""
        from universal_runtime.v1 import images_pb2

        request = images_pb2.GenerateImageRequest(
            model=IMAGE_MODEL,
            prompt="a red square",
            width=IMAGE_SIZE,
            height=IMAGE_SIZE,
            steps=IMAGE_STEPS,
            seed=seed,
        )
        images = [a for a in self.stub.GenerateImage(request, timeout=600) if a.HasField("image")]
        assert len(images) == 1

    def close(self) -> None:
        """Close the channel."""
        self.channel.close()


def _catalog(folder: Path, image_folder: Path | None) -> Path:
    """A catalog of the default speech models (and the tiny image model) for our server."""
    from service.catalog import load_catalog

    specs = load_catalog().specs
    models = {
        name: {
            "tasks": [str(t) for t in specs[name].tasks],
            "backend": specs[name].backend,
            "source": specs[name].source,
        }
        for name in (STT_MODEL, TTS_MODEL)
    }
    if image_folder is not None:
        models[IMAGE_MODEL] = {
            "tasks": ["generate_image"],
            "backend": "diffusers",
            "source": str(image_folder),
            "options": {"threads": 2, "default_steps": IMAGE_STEPS},
        }
    path = folder / "catalog.yaml"
    path.write_text(yaml.safe_dump({"models": models}))
    return path


def word_error_table(sentences: str, heard: dict[str, str]) -> dict[str, Any]:
    """The WER table: a row per transcript of the corpus."""
    from tests.spoken import normalized_word_errors

    rows = []
    for label, text in heard.items():
        errors, words = normalized_word_errors(sentences, text)
        rows.append([label, f"{errors / words:.1%}", f"{errors} of {words}"])
    return {
        "title": f"Word error rate — {len(CORPUS)} sentences spoken by eSpeak NG (en-us), heard by "
        "PocketSphinx",
        "header": ["transcript", "WER", "word errors"],
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the speech and image comparisons; write the JSON, plot and README section."""
    cfg = parse_config("speech", argv, __doc__, reps={"full": 5, "quick": 3, "tiny": 1})
    calls = cfg.pick(full=5, quick=3, tiny=1)
    corpus = CORPUS if cfg.mode != "tiny" else CORPUS[:1]
    settings = {
        "corpus": list(corpus),
        "calls_per_run": calls,
        "in_flight": 1,
        "image": {"size": IMAGE_SIZE, "steps": IMAGE_STEPS, "weights": "tiny random pipeline"},
        "device": "cpu",
    }
    model = {
        "names": [STT_MODEL, TTS_MODEL, IMAGE_MODEL],
        "packages": ["pocketsphinx", "espeakng-loader", "diffusers"],
    }
    title = "Speech and images — ours over gRPC against the same engines in-process, sequential calls"
    from tests.spoken import decoded_seconds, spoken_wav

    with tempfile.TemporaryDirectory() as scratch, Report(cfg, title, HEADLINE, model, settings) as report:
        image_folder = None
        if cfg.mode != "tiny":
            from tests.engines.images.tiny_pipeline import build_tiny_pipeline

            image_folder = build_tiny_pipeline(Path(scratch) / IMAGE_MODEL)
        audio = spoken_wav(*corpus, gap_s=1.0)
        audio_s = decoded_seconds(audio)
        text = ". ".join(s.capitalize() for s in corpus) + "."
        server = report.start_server(
            lambda: servers.start_ours(
                cfg.log_dir, env={"UR_CATALOG_PATH": str(_catalog(Path(scratch), image_folder))}
            )
        )
        here, ours = InProcess(image_folder), Ours(server.grpc_target)
        report.stack.callback(here.close)
        report.stack.callback(ours.close)
        spoken_s = decoded_seconds(here.speak(text)[0])
        report.note(
            f"transcribe: {audio_s:.1f} s of speech a call; speak: {len(text)} characters, about "
            f"{spoken_s:.1f} s of mp3 a call; items are audio seconds (x real time), images for image"
        )
        report.note(
            "ours runs each model in its own backend process (the default): a call crosses the server's "
            "admission, the hop to the backend and back; the references call the engine on its lane here"
        )
        workloads = [
            ("transcribe", "stt", "pocketsphinx", "Transcribe", lambda side: side.transcribe(audio), audio_s),
            ("speak", "tts", "espeak", "SynthesizeSpeech", lambda side: side.speak(text), spoken_s),
        ]
        if image_folder is not None:
            workloads.append(("image", "image", "diffusers", "GenerateImage", lambda side: side.draw(1), 1.0))
        for scenario, key, engine, rpc, call, items in workloads:
            contenders = [
                report.add(
                    Contender(
                        f"inprocess-{key}",
                        f"{engine} in-process",
                        "reference",
                        _runner(here, call, items, calls),
                    )
                ),
                report.add(
                    Contender(
                        f"ours-grpc-{key}", f"ours gRPC {rpc}", "ours", _runner(ours, call, items, calls)
                    )
                ),
            ]
            report.warm_up(contenders, {})
            report.compare(scenario, {"workload": scenario}, contenders, f"inprocess-{key}", metrics)
        if cfg.mode != "tiny":
            reference = " ".join(corpus)
            heard = {
                "pocketsphinx in-process": here.transcribe(audio),
                "ours (Transcribe)": ours.transcribe(audio),
                "ours speaks, ours hears (round trip)": ours.transcribe(ours.speak(text)[0]),
            }
            report.payload["tables"] = [word_error_table(reference, heard)]
            report.payload["transcripts"] = heard
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
