"""Soak: mixed load on every task for a fixed time; the server's memory every 10 s and every error.

One server (the embedded default catalog), and one client thread per load below, each calling
again as soon as its call ends, until the duration is over:

- ``generate`` x2: ``GenerateStream`` chat, 32 new tokens (llama.cpp), one in four cancelled by
  the client after its first token (counted OK: the client ended it, and the server must free it);
- ``embed``: 4 sentences; ``rerank``: a query over 8 documents; ``classify``: the catalog's
  intent classifier; ``ner``: spaCy entities of 2 sentences;
- ``ocr``: the bench's text page (RapidOCR);
- ``anomaly``: 1,000 rows scored by a detector fitted once at the start;
- ``gateway``: ``POST /v1/embeddings`` and a streamed ``/v1/chat/completions`` in turn;
- ``bad``: requests that must be refused (an empty input, an unknown model), checked for
  INVALID_ARGUMENT / NOT_FOUND.

Every 10 s: the resident memory (RSS) of the server and its children, and the calls and errors
so far. Pass: no unexpected error (a refusal ``bad`` expects, a cancel the client made, are
expected; anything else, INTERNAL above all, is not), the server healthy at the end, and RSS
growing less than :data:`RSS_SLOPE_LIMIT_MB_PER_MIN` over the second half (no leak).

Usage: ``python -m bench.soak [--quick|--tiny] [--duration-s S] [--out DIR]`` (the common bench
flags; ``--no-peers`` and ``--reps`` do nothing here); ``make soak``
runs 30 minutes. Writes ``soak.json``, ``soak.png`` and the README section.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import results, servers
from bench.procs import grpc_serving, status_name
from bench.runner import BenchConfig, Report, parse_config
from bench.workloads import CHAT_MODEL, EMBED_MODEL, SENTENCES, anomaly_matrix, ocr_page_png

SAMPLE_EVERY_S = 10.0
CALL_TIMEOUT_S = 60.0
#: RSS growth over the run's second half above which the soak fails (MB per minute).
RSS_SLOPE_LIMIT_MB_PER_MIN = 5.0
MIN_SLOPE_SPAN_S = 300.0
#: Pause between the ``bad`` load's calls (refusals are cheap; unpaced they would be most calls).
BAD_PAUSE_S = 0.2
DURATIONS = {"full": 1800.0, "quick": 180.0, "tiny": 20.0}
DETECTOR = "soak-detector"
#: Status codes a load's calls may end with without it being an error.
EXPECTED = {"bad": {"INVALID_ARGUMENT", "NOT_FOUND"}, "generate": {"CANCELLED"}}


class Tally:
    """Calls and outcomes per load, shared by the client threads (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: collections.Counter[str] = collections.Counter()
        self.codes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.unexpected: list[str] = []

    def record(self, load: str, code: str) -> None:
        with self._lock:
            self.calls[load] += 1
            self.codes[load][code] += 1
            if code != "OK" and code not in EXPECTED.get(load, set()):
                self.unexpected.append(f"{load}: {code}")

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return sum(self.calls.values()), len(self.unexpected)


def _loads(target: str, http_base: str) -> dict[str, Callable[[int], None]]:
    """One function per load; each makes one call (index ``i``) and raises on a failed call."""
    import grpc
    import httpx
    from universal_runtime.v1 import (
        anomaly_pb2,
        encoders_pb2,
        generation_pb2,
        inference_service_pb2_grpc,
        ocr_pb2,
    )

    stub = inference_service_pb2_grpc.InferenceServiceStub(grpc.insecure_channel(target))
    http = httpx.Client(base_url=http_base, timeout=CALL_TIMEOUT_S)
    page = ocr_page_png()
    rows = anomaly_matrix(1000, seed=11)
    detect = anomaly_pb2.DetectAnomalyRequest(
        detector=DETECTOR,
        rows=[
            anomaly_pb2.FeatureRow(values=[anomaly_pb2.FeatureValue(number_value=v) for v in row])
            for row in rows.tolist()
        ],
    )

    def sentences(i: int, count: int) -> list[str]:
        return [SENTENCES[(i + k) % len(SENTENCES)] for k in range(count)]

    def generate(i: int) -> None:
        request = generation_pb2.GenerateStreamRequest(
            model=CHAT_MODEL,
            messages=[
                generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_USER, content=sentences(i, 1)[0])
            ],
            parameters=generation_pb2.GenerationParameters(max_tokens=32, temperature=0.7, seed=i),
        )
        call = stub.GenerateStream(request, timeout=CALL_TIMEOUT_S)
        for _ in call:
            if i % 4 == 0:  # a client that goes away mid-stream
                call.cancel()
                break

    def gateway(i: int) -> None:
        if i % 2:
            response = http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": sentences(i, 2)})
        else:
            body = {
                "model": CHAT_MODEL,
                "messages": [{"role": "user", "content": sentences(i, 1)[0]}],
                "max_tokens": 16,
                "stream": True,
            }
            with http.stream("POST", "/v1/chat/completions", json=body) as response:
                last = [line for line in response.iter_lines() if line.startswith("data: ")][-1:]
            if response.status_code == 200 and last != ["data: [DONE]"]:
                raise RuntimeError(f"stream ended with {last}")
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}")

    def bad(i: int) -> None:
        if i % 2:
            stub.Embed(encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=[""]), timeout=CALL_TIMEOUT_S)
        else:
            stub.Embed(encoders_pb2.EmbedRequest(model="no-such-model", inputs=["x"]), timeout=CALL_TIMEOUT_S)
        raise RuntimeError("a bad request was accepted")

    def ocr(i: int) -> None:
        options = ocr_pb2.OcrOptions(model="rapidocr", mime_type="image/png")
        pages = list(
            stub.Ocr(iter([ocr_pb2.OcrRequest(options=options, chunk=page)]), timeout=CALL_TIMEOUT_S)
        )
        if not pages or not pages[0].text:
            raise RuntimeError("no text read")

    timeout = {"timeout": CALL_TIMEOUT_S}
    return {
        "generate-1": generate,
        "generate-2": generate,
        "embed": lambda i: stub.Embed(
            encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=sentences(i, 4)), **timeout
        ),
        "rerank": lambda i: stub.Rerank(
            encoders_pb2.RerankRequest(
                model=EMBED_MODEL, query=sentences(i, 1)[0], documents=sentences(i + 1, 8)
            ),
            **timeout,
        ),
        "classify": lambda i: stub.Classify(
            encoders_pb2.ClassifyRequest(model="intent-clinc150", inputs=sentences(i, 2)), **timeout
        ),
        "ner": lambda i: stub.ExtractEntities(
            encoders_pb2.ExtractEntitiesRequest(model="en-core-web-sm", inputs=sentences(i, 2)), **timeout
        ),
        "ocr": ocr,
        "anomaly": lambda i: stub.DetectAnomaly(detect, **timeout),
        "gateway": gateway,
        "bad": bad,
    }


def _fit_detector(target: str) -> None:
    from bench.anomaly import fit_detector

    fit_detector(target, DETECTOR, "ANOMALY_BACKEND_ISOLATION_FOREST", "NORMALIZATION_STANDARD", 5000)


def _code(exc: BaseException) -> str:
    return status_name(exc) or f"{type(exc).__name__}: {str(exc)[:80]}"


def _client(name: str, call: Callable[[int], None], end: float, tally: Tally) -> None:
    load = name.split("-")[0]
    i = 0
    while time.monotonic() < end:
        try:
            call(i)
            tally.record(load, "OK")
        except Exception as exc:
            tally.record(load, _code(exc))
        i += 1
        if load == "bad":
            time.sleep(BAD_PAUSE_S)


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its children (the PDF renderer, the forkserver)."""
    import psutil

    process = psutil.Process(pid)
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += child.memory_info().rss
    return total


def slope_mb_per_min(samples: list[dict[str, float]]) -> float:
    """Least-squares slope of RSS (MB) over time (min) in the second half of ``samples``.

    NaN (not judged) when that half spans less than :data:`MIN_SLOPE_SPAN_S`: allocators and
    caches still grow in a run's first minutes, which is not a leak.
    """
    half = samples[len(samples) // 2 :]
    if len(half) < 2 or half[-1]["t_s"] - half[0]["t_s"] < MIN_SLOPE_SPAN_S:
        return float("nan")
    xs = [s["t_s"] / 60 for s in half]
    ys = [s["rss_bytes"] / 2**20 for s in half]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else float("nan")


def plot(path: Path, payload: dict[str, Any]) -> Path | None:
    """RSS (MB) and calls per 10 s over time; None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    samples = payload["samples"]
    minutes = [s["t_s"] / 60 for s in samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(minutes, [s["rss_bytes"] / 2**20 for s in samples])
    top.set_ylabel("server RSS (MB)")
    rates = [0.0] + [
        (b["calls"] - a["calls"]) / max(1e-9, b["t_s"] - a["t_s"]) for a, b in itertools.pairwise(samples)
    ]
    bottom.plot(minutes, rates, label="calls/s")
    bottom.plot(minutes, [s["unexpected"] for s in samples], label="unexpected errors (cumulative)")
    bottom.set_xlabel("minutes")
    bottom.legend(fontsize=8)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.suptitle(f"{payload['title']}\n{results.machine_line(payload)}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _slope(value: float | None) -> str:
    """The slope as the section prints it: NaN (a run too short to judge) is null once in JSON."""
    return "nan" if value is None or value != value else f"{value:.2f}"


def markdown(payload: dict[str, Any]) -> str:
    """The README section: what ran, the verdict, calls and codes per load."""
    summary = payload["summary"]
    lines = [
        f"### {payload['title']}",
        "",
        f"{results.measured_line(payload)}; {payload['duration_s'] / 60:.1f} minutes. "
        f"JSON: `{payload['json_name']}`, plot: `{payload['png_name']}`.",
        "",
        f"**{'PASS' if summary['passed'] else 'FAIL'}**: {summary['calls']} calls, "
        f"{summary['unexpected']} unexpected errors, healthy at the end: {summary['healthy_at_end']}; "
        f"RSS {summary['rss_start_mb']:.0f} MB after warm-up, {summary['rss_max_mb']:.0f} MB at most, "
        f"{summary['rss_end_mb']:.0f} MB at the end; second-half slope "
        f"{_slope(summary['rss_slope_mb_per_min'])} MB/min (limit {RSS_SLOPE_LIMIT_MB_PER_MIN}; "
        "nan: run too short to judge).",
        "",
        "| load | calls | outcomes |",
        "|---|---|---|",
    ]
    for load, codes in sorted(payload["codes"].items()):
        shown = ", ".join(f"{code} {count}" for code, count in sorted(codes.items()))
        lines.append(f"| {load} | {sum(codes.values())} | {shown} |")
    if payload["unexpected_examples"]:
        lines += ["", "Unexpected: " + "; ".join(payload["unexpected_examples"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the soak; write its JSON, plot and README section; exit status 1 when it failed."""
    cfg = parse_config(
        "soak",
        argv,
        __doc__,
        add_arguments=lambda parser: parser.add_argument(
            "--duration-s", type=float, help="seconds of load (default: 1800 full, 180 quick, 20 tiny)"
        ),
    )
    duration = cfg.args.duration_s or DURATIONS[cfg.mode]
    cfg.log_dir.mkdir(parents=True, exist_ok=True)
    title = "Soak \u2014 mixed load on every task, one client per load, memory every 10 s"
    models = [CHAT_MODEL, EMBED_MODEL, "intent-clinc150", "en-core-web-sm", "rapidocr"]
    with Report(cfg, title, [], {"names": models}, {"duration_s": duration}) as report:
        report.payload["duration_s"] = duration
        report.payload.update(_soak(cfg, models, duration))
        report.finish(markdown=markdown, plot=plot)
    print(markdown(report.payload), file=sys.stderr)
    if not report.payload["summary"]["passed"]:
        sys.exit(1)
    return report.payload


def _soak(cfg: BenchConfig, models: list[str], duration: float) -> dict[str, Any]:
    """Run the loads for ``duration`` seconds against one server; samples, codes and the verdict."""
    server = servers.start_ours(cfg.log_dir)
    tally = Tally()
    samples: list[dict[str, float]] = []
    try:
        for name in models:
            servers.load_model(server.grpc_target, name)
        _fit_detector(server.grpc_target)
        loads = _loads(server.grpc_target, server.http_base)
        start = time.monotonic()
        end = start + duration
        threads = [
            threading.Thread(target=_client, args=(name, call, end, tally), daemon=True)
            for name, call in loads.items()
        ]
        for thread in threads:
            thread.start()
        while True:
            calls, unexpected = tally.snapshot()
            now = time.monotonic() - start
            samples.append(
                {
                    "t_s": now,
                    "rss_bytes": rss_bytes(server.process.pid),
                    "calls": calls,
                    "unexpected": unexpected,
                }
            )
            print(f"[soak {now:6.0f}s] rss {samples[-1]['rss_bytes'] / 2**20:.0f} MB, {calls} calls, "
                  f"{unexpected} unexpected", file=sys.stderr, flush=True)  # fmt: skip
            if now >= duration:
                break
            time.sleep(min(SAMPLE_EVERY_S, max(0.0, duration - now)))
        for thread in threads:
            thread.join(CALL_TIMEOUT_S + 5)
        healthy = grpc_serving(server.grpc_target)
    finally:
        server.stop()
    rss_mb = [s["rss_bytes"] / 2**20 for s in samples]
    slope = slope_mb_per_min(samples)
    summary = {
        "calls": sum(tally.calls.values()),
        "unexpected": len(tally.unexpected),
        "healthy_at_end": healthy,
        "rss_start_mb": rss_mb[0],
        "rss_max_mb": max(rss_mb),
        "rss_end_mb": rss_mb[-1],
        "rss_slope_mb_per_min": slope,
    }
    summary["passed"] = bool(
        healthy and not tally.unexpected and not (slope > RSS_SLOPE_LIMIT_MB_PER_MIN)  # NaN (tiny) passes
    )
    return {
        "samples": samples,
        "codes": {load: dict(codes) for load, codes in tally.codes.items()},
        "unexpected_examples": sorted(set(tally.unexpected))[:10],
        "summary": summary,
    }


if __name__ == "__main__":
    main(sys.argv[1:])
