"""`make image-test`: build deploy/Dockerfile from a local base, run it, call every task, stop it.

Steps, each bounded in time and timed:

0. ``storage``: removes what earlier runs left in podman's image store (images labelled
   :data:`IMAGE_LABEL`, and dangling images), then checks that the store's file system has
   :data:`BUILD_FREE_BYTES` free, else fails at once naming both figures: a build that runs out
   of space fails minutes in, while committing a multi-GB layer;
1. ``base``: the local Debian bookworm base images (deploy/image/base.sh; kept when present);
2. ``build``: ``podman build`` of deploy/Dockerfile on those bases, with the build arguments and
   build-time volumes given (``--build-flags``), labelled :data:`IMAGE_LABEL`, without keeping a
   cache of intermediate layers (``--layers=false``: the sources are copied before ``make
   install``, so a new commit rebuilds every layer anyway and a kept cache only fills the disk);
3. ``start``: ``podman run`` with the three ports published on 127.0.0.1 at free high ports, then
   polling the gRPC health service until InferenceService is SERVING (what deploy/healthcheck.py
   asks), and the image's own HEALTHCHECK once through ``podman healthcheck run``;
4. one call per task on each face: gRPC ``GenerateStream``, ``Embed``, ``Classify``,
   ``ExtractEntities``, ``Rerank``, ``Ocr``, ``SynthesizeSpeech`` then ``Transcribe`` of its
   audio, ``FitAnomalyDetector`` then ``DetectAnomaly``; HTTP chat completion (streamed),
   embeddings, rerank, classify, NER, OCR, speech then its transcription, anomaly fit and detect,
   ``/metrics`` on the gateway's port and on the metrics port;
5. ``stop``: ``podman stop`` (SIGTERM, the image's stop signal, then SIGKILL after
   ``--stop-timeout-s``); the container must exit 0 and its log must show the drain ("shutting
   down", then "stopped") with no traceback.

Prints a table of the steps and their seconds, and exits 1 on the first failure with the
container's log tail. The container is removed whatever happens, and the image too unless
``--keep-image`` (each run's image is about 4.3 GB; CI runs one after another on one disk).

Usage (from the repository root, the project's venv; `make image-test` passes these)::

    PYTHONPATH=. .venv/bin/python deploy/image/smoke.py --podman "podman --runtime runc" \
        --limits "--ulimit nofile=20000:20000" --build-flags "--build-arg PIP_FIND_LINKS=/run/wheels ..."
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib.util
import shlex
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
from prometheus_client.parser import text_string_to_metric_families
from universal_runtime.v1 import (
    anomaly_pb2,
    encoders_pb2,
    generation_pb2,
    inference_service_pb2_grpc,
    ocr_pb2,
    speech_pb2,
)

from bench.workloads import CHAT_MODEL, EMBED_MODEL, SENTENCES, ocr_page_png

ROOT = Path(__file__).resolve().parents[2]
CLASSIFY_MODEL = "intent-clinc150"
NER_MODEL = "en-core-web-sm"
OCR_MODEL = "rapidocr"
STT_MODEL = "pocketsphinx-en-us"
TTS_MODEL = "espeak-ng"
#: What the speech models say and hear (tests/spoken.py: a sentence PocketSphinx hears from eSpeak NG).
SPOKEN = "Open the door please."
SPOKEN_WORD = "door"
#: A word of the OCR page's first line (bench.workloads.ocr_page_png draws SENTENCES[0] first).
OCR_WORD = "quarterly"
#: The container's ports (deploy/Dockerfile's EXPOSE): gRPC, the gateway, Prometheus.
CONTAINER_PORTS = {"grpc": 50051, "http": 8000, "metrics": 9090}
#: Anomaly rows: 64 points on a line and one far off it, which the detector must flag.
FIT_ROWS = [[float(i), float(2 * i)] for i in range(64)]
DETECT_ROWS = [[10.0, 20.0], [500.0, -400.0]]
#: Gauges of the model-server protocol an endpoint picker reads (GIE proposal 003), on both ports.
PROTOCOL_GAUGES = (
    "ur_requests_waiting",
    "ur_requests_running",
    "ur_kv_cache_usage_ratio",
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
)


#: The label every image this script builds carries, so that cleaning up removes only those.
IMAGE_LABEL = "org.universal-runtime.image-test=true"
#: Free bytes the build needs in podman's store: 17-18 GB were taken at the peak of a cold build
#: here (docs/scale-out/container.md, Built and run here): the builder stage's venv layer (about
#: 4.2 GB) is written twice while committed (the container's diff, then the layer), the runtime
#: image holds another copy, and the pip cache mount grows beside.
BUILD_FREE_BYTES = 20 * 1024**3


class SmokeError(RuntimeError):
    """A step failed; the message says which and why."""


def health_check() -> Callable[[str], bool]:
    """deploy/healthcheck.py's ``check(target)``: the same question the image's HEALTHCHECK asks."""
    spec = importlib.util.spec_from_file_location("ur_healthcheck", ROOT / "deploy" / "healthcheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.check


def free_port() -> int:
    """A TCP port on 127.0.0.1 free now (the kernel's ephemeral range, so high)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Smoke:
    """The steps' timings and the podman command line they run with."""

    def __init__(self, podman: list[str]) -> None:
        self.podman = podman
        self.rows: list[tuple[str, float, str]] = []

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[dict[str, str]]:
        """Times the block as step ``name``; the block may set ``note`` in the dict it gets."""
        note: dict[str, str] = {"note": ""}
        start = time.monotonic()
        try:
            yield note
        except (grpc.RpcError, httpx.HTTPError, subprocess.SubprocessError, AssertionError, KeyError) as err:
            raise SmokeError(f"{name}: {type(err).__name__}: {err}") from err
        self.rows.append((name, time.monotonic() - start, note["note"]))

    def run(self, *args: str, timeout: float, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``podman ARGS``; output captured, text. Raises SmokeError on a non-zero exit when ``check``."""
        result = subprocess.run([*self.podman, *args], capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise SmokeError(
                f"podman {shlex.join(args[:3])}... exited {result.returncode}: {result.stderr[-2000:]}"
            )
        return result

    def summary(self) -> str:
        """The steps as a Markdown table: step, seconds, what it checked."""
        lines = ["| step | s | checked |", "|---|---:|---|"]
        lines += [f"| {name} | {seconds:.1f} | {note} |" for name, seconds, note in self.rows]
        return "\n".join(lines)


def clean_up(smoke: Smoke, image: str) -> None:
    """Removes ``image``, every image labelled :data:`IMAGE_LABEL` and dangling images; never fails.

    Dangling images (untagged, no child) are what an interrupted or superseded build leaves; the
    base images are tagged and stay.
    """
    smoke.run("rmi", "--force", image, timeout=300, check=False)
    smoke.run("image", "prune", "--force", "--filter", f"label={IMAGE_LABEL}", timeout=300, check=False)
    smoke.run("image", "prune", "--force", timeout=300, check=False)


def free_bytes_in_store(smoke: Smoke) -> tuple[str, int]:
    """The folder of podman's image store (its graph root) and the bytes free on its file system."""
    root = smoke.run("info", "--format", "{{.Store.GraphRoot}}", timeout=60).stdout.strip()
    return root, shutil.disk_usage(root).free


def storage(smoke: Smoke, args: argparse.Namespace) -> None:
    """Step ``storage``: what earlier runs left is removed; then enough free space, or a clear failure."""
    with smoke.step("storage") as note:
        clean_up(smoke, args.image)
        root, free = free_bytes_in_store(smoke)
        assert free >= BUILD_FREE_BYTES, (
            f"{root} has {free / 1024**3:.1f} GiB free; the build needs {BUILD_FREE_BYTES / 1024**3:.0f} GiB"
        )
        note["note"] = f"{root}: {free / 1024**3:.1f} GiB free"


def build(smoke: Smoke, args: argparse.Namespace) -> None:
    """Steps ``base`` and ``build``."""
    with smoke.step("base") as note:
        subprocess.run(
            [str(ROOT / "deploy" / "image" / "base.sh"), args.base_prefix],
            check=True,
            timeout=args.base_timeout_s,
        )
        note["note"] = f"{args.base_prefix}:bookworm, {args.base_prefix}:bookworm-slim"
    command = [
        "build",
        "--format=docker",  # keeps HEALTHCHECK, which the OCI image format has no field for
        "--network=host",
        "--layers=false",
        "--label",
        IMAGE_LABEL,
        "-f",
        str(ROOT / "deploy" / "Dockerfile"),
        "-t",
        args.image,
        "--build-arg",
        f"BUILDER_IMAGE={args.base_prefix}:bookworm",
        "--build-arg",
        f"RUNTIME_IMAGE={args.base_prefix}:bookworm-slim",
    ]
    command += [*shlex.split(args.build_flags), *args.limit_flags, str(ROOT)]
    with smoke.step("build") as note:
        # The build's output goes to the terminal as it comes: it is long (llama.cpp compiles).
        subprocess.run([*smoke.podman, *command], check=True, timeout=args.build_timeout_s)
        size = smoke.run("image", "inspect", "--format", "{{.Size}}", args.image, timeout=60).stdout.strip()
        note["note"] = f"{args.image}, {int(size) / 1e9:.2f} GB"


def start(smoke: Smoke, args: argparse.Namespace, name: str, ports: dict[str, int]) -> None:
    """Step ``start``: run the container and wait, bounded, for SERVING."""
    check = health_check()
    publish = [f"--publish=127.0.0.1:{ports[face]}:{port}" for face, port in CONTAINER_PORTS.items()]
    with smoke.step("start to healthy") as note:
        smoke.run("run", "--detach", f"--name={name}", *publish, *args.limit_flags, args.image, timeout=120)
        deadline = time.monotonic() + args.health_timeout_s
        while not check(f"127.0.0.1:{ports['grpc']}", timeout=2.0):
            state = smoke.run("inspect", "--format", "{{.State.Status}}", name, timeout=30).stdout.strip()
            if state != "running":
                raise SmokeError(f"start: the container is {state} before it served")
            if time.monotonic() > deadline:
                raise SmokeError(f"start: not SERVING within {args.health_timeout_s:.0f} s")
            time.sleep(1.0)
        note["note"] = "gRPC health: InferenceService SERVING"
    with smoke.step("image HEALTHCHECK") as note:
        result = smoke.run("healthcheck", "run", name, timeout=60, check=False)
        assert result.returncode == 0, (
            f"podman healthcheck run: {result.returncode} {result.stdout}{result.stderr}"
        )
        note["note"] = "deploy/healthcheck.py in the container: healthy"


def grpc_calls(smoke: Smoke, target: str, timeout: float) -> None:
    """One call per task on the gRPC face, each checked for a real answer."""
    channel = grpc.insecure_channel(target)
    stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
    with smoke.step("grpc GenerateStream") as note:
        request = generation_pb2.GenerateStreamRequest(
            model=CHAT_MODEL,
            messages=[generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_USER, content="Say hello.")],
            parameters=generation_pb2.GenerationParameters(max_tokens=16, temperature=0.0),
        )
        text = "".join(chunk.text for chunk in stub.GenerateStream(request, timeout=timeout))
        assert text.strip(), "no text generated"
        note["note"] = f"{CHAT_MODEL}: {text.strip()[:40]!r}"
    with smoke.step("grpc Embed") as note:
        reply = stub.Embed(
            encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=SENTENCES[:2]), timeout=timeout
        )
        assert len(reply.embeddings) == 2 and reply.dimensions > 0
        note["note"] = f"{EMBED_MODEL}: 2 x {reply.dimensions}"
    with smoke.step("grpc Classify") as note:
        reply = stub.Classify(
            encoders_pb2.ClassifyRequest(model=CLASSIFY_MODEL, inputs=["What is my account balance?"]),
            timeout=timeout,
        )
        assert len(reply.classifications) == 1 and reply.classifications[0].label
        top = reply.classifications[0]
        note["note"] = f"{CLASSIFY_MODEL}: {top.label} {top.score:.2f}"
    with smoke.step("grpc ExtractEntities") as note:
        reply = stub.ExtractEntities(
            encoders_pb2.ExtractEntitiesRequest(model=NER_MODEL, inputs=["Ada Lovelace lived in London."]),
            timeout=timeout,
        )
        texts = [entity.text for entity in reply.results[0].entities]
        assert "London" in texts, texts
        note["note"] = f"{NER_MODEL}: {texts}"
    with smoke.step("grpc Rerank") as note:
        reply = stub.Rerank(
            encoders_pb2.RerankRequest(
                model=EMBED_MODEL, query="a small cat", documents=["stock prices fell", "a kitten sleeps"]
            ),
            timeout=timeout,
        )
        assert reply.results[0].index == 1, reply
        note["note"] = "the kitten ranks first"
    with smoke.step("grpc Ocr") as note:
        options = ocr_pb2.OcrOptions(model=OCR_MODEL, mime_type="image/png")
        pages = list(
            stub.Ocr(iter([ocr_pb2.OcrRequest(options=options, chunk=ocr_page_png())]), timeout=timeout)
        )
        assert OCR_WORD in pages[0].text, pages[0].text[:300]
        note["note"] = f"{OCR_MODEL}: {len(pages[0].text.splitlines())} lines, {OCR_WORD!r} read"
    with smoke.step("grpc SynthesizeSpeech + Transcribe") as note:
        speech = stub.SynthesizeSpeech(
            speech_pb2.SynthesizeSpeechRequest(
                model=TTS_MODEL, input=SPOKEN, response_format=speech_pb2.AUDIO_FORMAT_WAV
            ),
            timeout=timeout,
        )
        audio = b"".join(piece.audio for piece in speech)
        options = speech_pb2.TranscribeOptions(model=STT_MODEL)
        answers = list(
            stub.Transcribe(
                iter([speech_pb2.TranscribeRequest(options=options, chunk=audio)]), timeout=timeout
            )
        )
        heard = " ".join(a.segment.text for a in answers if a.HasField("segment"))
        assert SPOKEN_WORD in heard, heard
        note["note"] = f"{TTS_MODEL} spoke {len(audio)} bytes; {STT_MODEL} heard {heard!r}"
    detector = f"image-test-{uuid.uuid4().hex[:8]}"
    with smoke.step("grpc FitAnomalyDetector") as note:
        reply = stub.FitAnomalyDetector(
            anomaly_pb2.FitAnomalyDetectorRequest(detector=detector, rows=_feature_rows(FIT_ROWS)),
            timeout=timeout,
        )
        assert reply.row_count == len(FIT_ROWS)
        note["note"] = f"{detector} v{reply.version}, {reply.row_count} rows"
    with smoke.step("grpc DetectAnomaly") as note:
        reply = stub.DetectAnomaly(
            anomaly_pb2.DetectAnomalyRequest(detector=detector, rows=_feature_rows(DETECT_ROWS)),
            timeout=timeout,
        )
        flags = [score.is_anomaly for score in reply.scores]
        assert flags == [False, True], flags
        note["note"] = "the far point flagged, the near one not"
    channel.close()


def _feature_rows(rows: list[list[float]]) -> list[anomaly_pb2.FeatureRow]:
    return [
        anomaly_pb2.FeatureRow(values=[anomaly_pb2.FeatureValue(number_value=v) for v in row]) for row in rows
    ]


def http_calls(smoke: Smoke, http: httpx.Client, metrics_url: str) -> None:
    """One call per task on the HTTP face (the OpenAI-format routes and ours), each checked."""

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = http.post(path, json=body)
        assert response.status_code == 200, f"{path}: HTTP {response.status_code} {response.text[:300]}"
        return response.json()

    with smoke.step("http POST /v1/chat/completions (stream)") as note:
        body = {
            "model": CHAT_MODEL,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 16,
        }
        with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
            assert response.status_code == 200, f"HTTP {response.status_code}"
            events = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and len(events) > 2, events[-3:]
        note["note"] = f"{len(events)} SSE events, ends with [DONE]"
    with smoke.step("http POST /v1/embeddings") as note:
        data = post("/v1/embeddings", {"model": EMBED_MODEL, "input": SENTENCES[:2]})["data"]
        assert len(data) == 2 and data[0]["embedding"]
        note["note"] = f"2 x {len(data[0]['embedding'])}"
    with smoke.step("http POST /v1/rerank") as note:
        body = {
            "model": EMBED_MODEL,
            "query": "a small cat",
            "documents": ["stock prices fell", "a kitten sleeps"],
        }
        results = post("/v1/rerank", body)["results"]
        assert results[0]["index"] == 1, results
        note["note"] = "the kitten ranks first"
    with smoke.step("http POST /v1/classify") as note:
        data = post("/v1/classify", {"model": CLASSIFY_MODEL, "input": ["What is my account balance?"]})
        top = data["data"][0]
        assert top["label"], data
        note["note"] = f"{CLASSIFY_MODEL}: {top['label']} {top['score']:.2f}"
    with smoke.step("http POST /v1/ner") as note:
        data = post("/v1/ner", {"model": NER_MODEL, "input": ["Ada Lovelace lived in London."]})
        assert "London" in str(data), data
        note["note"] = "London found"
    with smoke.step("http POST /v1/ocr") as note:
        page = base64.b64encode(ocr_page_png()).decode()
        data = post("/v1/ocr", {"model": OCR_MODEL, "file": page, "mime_type": "image/png"})
        assert OCR_WORD in str(data), str(data)[:300]
        note["note"] = f"{OCR_WORD!r} read"
    with smoke.step("http POST /v1/audio/speech + /v1/audio/transcriptions") as note:
        response = http.post("/v1/audio/speech", json={"model": TTS_MODEL, "input": SPOKEN})
        assert response.status_code == 200, f"HTTP {response.status_code} {response.text[:300]}"
        files = {"file": ("speech.mp3", response.content, "audio/mpeg")}
        heard = http.post("/v1/audio/transcriptions", data={"model": STT_MODEL}, files=files)
        assert heard.status_code == 200 and SPOKEN_WORD in heard.json()["text"], heard.text[:300]
        note["note"] = f"mp3 of {len(response.content)} bytes heard as {heard.json()['text']!r}"
    detector = f"image-test-http-{uuid.uuid4().hex[:8]}"
    with smoke.step("http POST /v1/anomaly/fit") as note:
        data = post("/v1/anomaly/fit", {"detector": detector, "rows": FIT_ROWS})
        note["note"] = f"{detector}: {data.get('row_count')} rows"
    with smoke.step("http POST /v1/anomaly/detect") as note:
        data = post("/v1/anomaly/detect", {"detector": detector, "rows": DETECT_ROWS})
        flags = [score["is_anomaly"] for score in data["scores"]]
        assert flags == [False, True], data
        note["note"] = "the far point flagged, the near one not"
    for label, url in (
        ("http GET /metrics (gateway port)", "/metrics"),
        ("GET /metrics (metrics port)", metrics_url),
    ):
        with smoke.step(label) as note:
            response = http.get(url)
            assert response.status_code == 200, response.status_code
            names = {family.name for family in text_string_to_metric_families(response.text)}
            missing = [name for name in PROTOCOL_GAUGES if name not in names]
            assert not missing, f"not served: {missing}"
            note["note"] = f"{len(names)} series, the protocol's gauges among them"


def stop(smoke: Smoke, name: str, stop_timeout_s: int) -> None:
    """Step ``stop``: SIGTERM, then the exit code and the log's drain lines."""
    with smoke.step("stop (SIGTERM)") as note:
        smoke.run("stop", f"--time={stop_timeout_s}", name, timeout=stop_timeout_s + 60)
        code = smoke.run("inspect", "--format", "{{.State.ExitCode}}", name, timeout=30).stdout.strip()
        logs = smoke.run("logs", name, timeout=60)
        log = logs.stdout + logs.stderr
        assert code == "0", f"exit code {code}"
        drain = [line for line in log.splitlines() if "shutting down" in line or '"stopped"' in line]
        assert len(drain) >= 2 and "shutting down" in drain[0], f"no drain in the log: {log[-2000:]}"
        assert "Traceback" not in log, log[log.index("Traceback") :][:2000]
        # The image ships MiniLM's OpenVINO export (`prepare` at build time): its keys must match
        # at run time, or the first Embed exports again (engines/converted_cache.py).
        assert "exporting encoder" not in log and "deriving " not in log, "the shipped export was not used"
        note["note"] = "exit 0; log: shutting down, stopped; no export at run time"


def main(argv: list[str] | None = None) -> int:
    """Runs the steps; prints the summary table; 0 when every step passed, 1 otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="localhost/universal-runtime:image-test")
    parser.add_argument("--podman", default="podman", help="the podman command line, with global flags")
    parser.add_argument("--base-prefix", default="localhost/ur-base")
    parser.add_argument("--build-flags", default="", help="more podman build flags (--build-arg, --volume)")
    parser.add_argument(
        "--limits", default="", help="podman flags for the build's and the run's containers (--ulimit)"
    )
    parser.add_argument("--no-build", action="store_true", help="run the image already built")
    parser.add_argument("--keep-image", action="store_true", help="keep the image when done (for --no-build)")
    parser.add_argument("--base-timeout-s", type=float, default=900.0)
    parser.add_argument("--build-timeout-s", type=float, default=3600.0)
    parser.add_argument("--health-timeout-s", type=float, default=300.0)
    parser.add_argument("--call-timeout-s", type=float, default=120.0)
    parser.add_argument("--stop-timeout-s", type=int, default=30)
    args = parser.parse_args(argv)
    args.limit_flags = shlex.split(args.limits)
    smoke = Smoke(shlex.split(args.podman))
    name = f"ur-image-test-{uuid.uuid4().hex[:8]}"
    ports = {face: free_port() for face in CONTAINER_PORTS}
    try:
        if not args.no_build:
            storage(smoke, args)
            build(smoke, args)
        start(smoke, args, name, ports)
        grpc_calls(smoke, f"127.0.0.1:{ports['grpc']}", args.call_timeout_s)
        with httpx.Client(base_url=f"http://127.0.0.1:{ports['http']}", timeout=args.call_timeout_s) as http:
            http_calls(smoke, http, f"http://127.0.0.1:{ports['metrics']}/metrics")
        stop(smoke, name, args.stop_timeout_s)
    except (SmokeError, subprocess.SubprocessError) as err:
        logs = smoke.run("logs", "--tail=40", name, timeout=60, check=False)
        print(f"image-test FAILED: {err}\n--- container log (last 40 lines) ---\n{logs.stdout}{logs.stderr}")
        print(smoke.summary())
        return 1
    finally:
        smoke.run("rm", "--force", "--time=0", name, timeout=120, check=False)
        if not args.keep_image:
            clean_up(smoke, args.image)
    print(smoke.summary())
    total = sum(seconds for _, seconds, _ in smoke.rows)
    print(f"image-test passed: {len(smoke.rows)} steps, {total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
