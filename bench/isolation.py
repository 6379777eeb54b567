"""Noisy neighbour: a small embed's latency while another caller's heavy request is in flight.

The probe is one client sending single-sentence ``Embed`` calls to ``all-minilm-l6-v2`` one after
another (10 ms apart). Each scenario runs the probe twice per repetition, interleaved: alone
("quiet", the reference) and while a neighbour process keeps one kind of heavy request in
flight, back to back, each with a deadline:

- ``pdf-bomb``: ``Ocr`` (RapidOCR) of a few-KB PDF whose page takes PDFium minutes to paint
  (:func:`bench.workloads.bomb_pdf`), deadline 5 s;
- ``embed-20mb``: ``Embed`` of one 20 MB string to the probe's own model, deadline 10 s (over
  the server's default limits: gRPC core refuses it by its length prefix);
- ``embed-4mb``: the same with 3.9 MB, just under the text RPCs' default 4 MiB limit: the
  largest embed the server parses;
- ``prompt-50mb``: ``Generate`` with a 50 MB prompt, deadline 10 s (refused by the limits too);
- ``chat-8``: 8 chat streams of 64 tokens at once, again and again (the generation model busy);
- ``ocr-pages``: ``Ocr`` (RapidOCR) of the bench's text page, one page after another;
- ``anomaly-fit``: ``FitAnomalyDetector`` (isolation forest) on 200,000 rows x 8 columns;
- ``cpu-hog``: no call at all, a process spinning on one core at nice +10: the floor of this
  machine for any neighbour that keeps one core busy at that priority (as the PDF renderer,
  anomaly fits and OCR lanes do), since the probe's model shares the same two cores.

Goal: the probe's p99 with a neighbour at most 2x its quiet p99, and every neighbour
call that runs past its deadline ends, on the server, within 1 s of it ("overrun": the RPC's
duration in the server's log minus the deadline, for calls that ended DEADLINE_EXCEEDED or
CANCELLED).

Usage: ``python -m bench.isolation [--quick|--tiny] [--out DIR] [--neighbours pdf-bomb,chat-8]``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import servers
from bench.procs import status_name
from bench.runner import Contender, Report, parse_config
from bench.stats import percentile
from bench.workloads import CHAT_MODEL, EMBED_MODEL, SENTENCES, anomaly_matrix, bomb_pdf, ocr_page_png

HEADLINE = [
    {"key": "probe_p99_ms", "label": "probe embed p99 ms", "higher_is_better": False},
    {"key": "probe_p50_ms", "label": "probe embed p50 ms", "higher_is_better": False},
    {"key": "overrun_max_s", "label": "worst overrun past a deadline s", "higher_is_better": False},
]
PROBE_PAUSE_S = 0.01
PROBE_TIMEOUT_S = 30.0
#: Deadline of each neighbour call, seconds.
DEADLINES = {
    "pdf-bomb": 5.0,
    "embed-20mb": 10.0,
    "embed-4mb": 10.0,
    "prompt-50mb": 10.0,
    "chat-8": 60.0,
    "ocr-pages": 30.0,
    "anomaly-fit": 60.0,
    "cpu-hog": 1.0,
}
#: Nice value of the cpu-hog neighbour (the server's process lanes and OCR lanes use 10).
HOG_NICENESS = 10
CHAT_STREAMS = 8
#: Models of the catalog the neighbours use (the probe's embedder is always loaded).
NEIGHBOUR_MODELS = {
    EMBED_MODEL: ("embed-20mb", "embed-4mb"),
    CHAT_MODEL: ("prompt-50mb", "chat-8"),
    "rapidocr": ("pdf-bomb", "ocr-pages"),
}
REQUEST_ID_PREFIX = "neighbour-"
MAX_MESSAGE = 64 * 2**20  # what the neighbour's channel may send: more than the server takes
#: Megabytes of text in each big-message neighbour's one string.
BIG_MESSAGES_MB = {"embed-20mb": 20, "embed-4mb": 3.9, "prompt-50mb": 50}


def _neighbour_call(kind: str, target: str) -> Callable[[str], None]:
    """One heavy call of ``kind`` against ``target``, given its request id (raises on errors)."""
    import grpc
    from universal_runtime.v1 import (
        anomaly_pb2,
        encoders_pb2,
        generation_pb2,
        inference_service_pb2_grpc,
        ocr_pb2,
    )

    channel = grpc.insecure_channel(
        target,
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.max_receive_message_length", MAX_MESSAGE),
        ],
    )
    stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
    deadline = DEADLINES[kind]

    def metadata(request_id: str) -> list[tuple[str, str]]:
        return [("x-request-id", request_id)]

    if kind in ("pdf-bomb", "ocr-pages"):
        data, mime = (bomb_pdf(), "application/pdf") if kind == "pdf-bomb" else (ocr_page_png(), "image/png")
        options = ocr_pb2.OcrOptions(model="rapidocr", mime_type=mime)

        def ocr(request_id: str) -> None:
            messages = iter([ocr_pb2.OcrRequest(options=options, chunk=data)])
            for _ in stub.Ocr(messages, timeout=deadline, metadata=metadata(request_id)):
                pass

        return ocr
    if kind in BIG_MESSAGES_MB:
        # Serialized once and sent as bytes: the neighbour's own serializing (tens of ms a call for
        # 50 MB) would otherwise load the machine's cores, not the server.
        text = "word " * int(BIG_MESSAGES_MB[kind] * 2**20 / 5)
        if kind.startswith("embed"):
            method = "Embed"
            message = encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=[text])
        else:
            method = "Generate"
            message = generation_pb2.GenerateRequest(
                model=CHAT_MODEL,
                prompt=text,
                parameters=generation_pb2.GenerationParameters(max_tokens=8),
            )
        payload = message.SerializeToString()
        call = channel.unary_unary(f"/universal_runtime.v1.InferenceService/{method}")
        return lambda request_id: call(payload, timeout=deadline, metadata=metadata(request_id))
    if kind == "chat-8":
        request = generation_pb2.GenerateRequest(
            model=CHAT_MODEL,
            messages=[
                generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_USER, content="Tell a long story.")
            ],
            parameters=generation_pb2.GenerationParameters(max_tokens=64, temperature=0.0),
        )

        def chats(request_id: str) -> None:
            threads = [
                threading.Thread(
                    target=stub.Generate,
                    args=(request,),
                    kwargs={"timeout": deadline, "metadata": metadata(f"{request_id}.{i}")},
                )
                for i in range(CHAT_STREAMS)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        return chats
    if kind == "anomaly-fit":
        matrix = anomaly_matrix(200_000, seed=7)
        request = anomaly_pb2.FitAnomalyDetectorRequest(
            detector="noisy-neighbour",
            backend=anomaly_pb2.ANOMALY_BACKEND_ISOLATION_FOREST,
            numeric_rows=anomaly_pb2.NumericRows(
                column_count=matrix.shape[1], values=matrix.ravel().tolist()
            ),
        )
        return lambda request_id: stub.FitAnomalyDetector(
            request, timeout=deadline, metadata=metadata(request_id)
        )
    if kind == "cpu-hog":

        def spin(request_id: str) -> None:
            end = time.perf_counter() + DEADLINES[kind]
            while time.perf_counter() < end:
                pass

        return spin
    raise ValueError(f"unknown neighbour {kind!r}")


def _neighbour_loop(kind: str, target: str, stop: Any, started: Any, out: Any) -> None:
    """Child process: run ``kind`` calls back to back until ``stop`` is set; put a summary on ``out``."""
    call = _neighbour_call(kind, target)
    if kind == "cpu-hog":
        os.nice(HOG_NICENESS)
    calls, errors = 0, {}
    started.set()
    while not stop.is_set():
        try:
            call(f"{REQUEST_ID_PREFIX}{kind}-{calls}")
        except Exception as exc:
            name = status_name(exc) or type(exc).__name__
            errors[name] = errors.get(name, 0) + 1
        calls += 1
    out.put({"calls": calls, "errors": errors})


def _probe(target: str, duration_s: float) -> list[dict[str, Any]]:
    """Single-sentence embeds one after another for ``duration_s``; one record per call."""
    import grpc
    from universal_runtime.v1 import encoders_pb2, inference_service_pb2_grpc

    records = []
    with grpc.insecure_channel(target) as channel:
        stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
        end = time.monotonic() + duration_s
        index = 0
        while time.monotonic() < end:
            request = encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=[SENTENCES[index % len(SENTENCES)]])
            start = time.perf_counter()
            try:
                stub.Embed(request, timeout=PROBE_TIMEOUT_S)
                records.append({"ok": True, "latency_s": time.perf_counter() - start})
            except grpc.RpcError as exc:
                records.append({"ok": False, "error": exc.code().name})
            index += 1
            time.sleep(PROBE_PAUSE_S)
    return records


def overruns(log_path: Path, kind: str) -> list[float]:
    """Seconds past its deadline at which each of ``kind``'s neighbour calls ended in the server.

    Read from the server's per-RPC log lines (JSON, ``message`` "rpc") of calls whose request id
    is a neighbour's and whose code is DEADLINE_EXCEEDED or CANCELLED.
    """
    found = []
    prefix = f"{REQUEST_ID_PREFIX}{kind}-"
    for line in log_path.read_text(errors="replace").splitlines():
        if prefix not in line:
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("message") == "rpc" and entry.get("code") in ("DEADLINE_EXCEEDED", "CANCELLED"):
            found.append(max(0.0, entry["duration_ms"] / 1000 - DEADLINES[kind]))
    return found


def probe_metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-repetition figures: probe p50/p99 in ms, probe calls, and the neighbour's counts."""
    latencies = [r["latency_s"] for r in result["records"] if r.get("ok")]
    values = {
        "probe_p50_ms": percentile(latencies, 50) * 1000,
        "probe_p99_ms": percentile(latencies, 99) * 1000,
        "probe_calls": float(len(latencies)),
    }
    if "neighbour" in result:
        values["neighbour_calls"] = float(result["neighbour"]["calls"])
        values["overrun_max_s"] = max(result["overruns"], default=0.0)
        values["over_deadline_calls"] = float(len(result["overruns"]))
    return values


def contenders(target: str, log_path: Path, kind: str, duration_s: float) -> list[Contender]:
    """The quiet probe (reference) and the probe beside ``kind``."""

    def quiet(params: dict[str, Any]) -> dict[str, Any]:
        start = time.monotonic()
        return {"records": _probe(target, duration_s), "wall_s": time.monotonic() - start}

    def beside(params: dict[str, Any]) -> dict[str, Any]:
        context = multiprocessing.get_context("spawn")
        stop, started, out = context.Event(), context.Event(), context.Queue()
        child = context.Process(target=_neighbour_loop, args=(kind, target, stop, started, out), daemon=True)
        before = len(overruns(log_path, kind))
        child.start()
        try:
            if not started.wait(60):
                raise RuntimeError(f"neighbour {kind} did not start")
            time.sleep(1.0)  # its first call is in flight
            start = time.monotonic()
            records = _probe(target, duration_s)
            wall = time.monotonic() - start
        finally:
            stop.set()
        neighbour = out.get(timeout=DEADLINES[kind] + 30)
        child.join(10)
        time.sleep(0.5)  # the server's log line of the last call
        return {
            "records": records,
            "wall_s": wall,
            "neighbour": neighbour,
            "overruns": overruns(log_path, kind)[before:],
        }

    return [
        Contender("quiet", "probe alone", "reference", run=quiet),
        Contender("neighbour", "probe beside the neighbour", "ours", run=beside),
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every neighbour scenario; write the JSON, plot and README section."""
    cfg = parse_config(
        "isolation",
        argv,
        __doc__,
        reps={"full": 3, "quick": 2, "tiny": 1},
        add_arguments=lambda parser: parser.add_argument(
            "--neighbours", help=f"comma-separated scenarios to run (default: all of {', '.join(DEADLINES)})"
        ),
    )
    duration = cfg.pick(full=20.0, quick=8.0, tiny=2.0)
    only = [k for k in (cfg.args.neighbours or "").split(",") if k]
    kinds = only or cfg.pick(full=list(DEADLINES), quick=list(DEADLINES), tiny=["embed-20mb"])
    unknown = set(kinds) - set(DEADLINES)
    if unknown:
        raise SystemExit(f"unknown neighbours {sorted(unknown)}; known: {', '.join(DEADLINES)}")
    settings = {
        "probe": {"model": EMBED_MODEL, "inputs": 1, "pause_s": PROBE_PAUSE_S, "duration_s": duration},
        "neighbour_deadlines_s": {k: DEADLINES[k] for k in kinds},
        "chat_streams": CHAT_STREAMS,
    }
    model = {"probe": EMBED_MODEL, "generation": CHAT_MODEL, "ocr": "rapidocr"}
    title = "Noisy neighbour — single-sentence embed latency while a heavy request is in flight"
    with Report(cfg, title, HEADLINE, model, settings) as report:
        ours = report.start_server(lambda: servers.start_ours(cfg.log_dir, env={"UR_LOG_LEVEL": "INFO"}))
        log_path = ours.process.log_path
        # The models the scenarios use, loaded for good before anything is timed.
        needed = {
            name for name, users in NEIGHBOUR_MODELS.items() if name == EMBED_MODEL or set(users) & set(kinds)
        }
        for name in needed:
            servers.load_model(ours.grpc_target, name)
        if "rapidocr" in needed:
            _neighbour_call("ocr-pages", ours.grpc_target)("warm-up")  # RapidOCR's first page is slow
        report.note(
            "each scenario alternates the probe alone and the probe beside its neighbour; the ratio is "
            "the probe's p99 beside the neighbour over its p99 alone in the same repetition"
        )
        for kind in kinds:
            pair = [report.add(c) for c in contenders(ours.grpc_target, log_path, kind, duration)]
            report.compare(kind, {"duration_s": duration}, pair, "quiet", probe_metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
