"""Overhead of the contract: a trivial call's round trip over gRPC against the same call over the gateway.

Sequential calls (one client, one in flight) of ``grpc.health.v1.Health/Check`` vs ``GET /health``
and of ``ModelService/ListModels`` vs ``GET /v1/models``; ``llama_cpp.server``'s ``GET /v1/models``
shows another Python HTTP server's floor. The gateway's figures include its own gRPC call to
the server, so gateway minus gRPC is what the HTTP hop adds.

Usage: ``python -m bench.overhead [--quick|--tiny] [--no-peers] [--out DIR]``.
"""

from __future__ import annotations

import sys
from typing import Any

from bench import peers, servers
from bench.runner import Contender, Report, client_contender, ok_records, parse_config
from bench.stats import percentile

HEADLINE = [
    {"key": "latency_p50_us", "label": "round trip p50 µs", "higher_is_better": False},
    {"key": "latency_p99_us", "label": "round trip p99 µs", "higher_is_better": False},
    {"key": "calls_s", "label": "calls/s (1 in flight)", "higher_is_better": True},
]


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-repetition figures: round-trip p50/p99 (µs) and calls per second."""
    latencies = [r["latency_s"] for r in ok_records(result)]
    return {
        "latency_p50_us": percentile(latencies, 50) * 1e6,
        "latency_p99_us": percentile(latencies, 99) * 1e6,
        "calls_s": len(latencies) / result["wall_s"] if result["wall_s"] > 0 else float("nan"),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the overhead comparison; write its JSON, plot and README section."""
    cfg = parse_config("overhead", argv, __doc__)
    duration = cfg.pick(full=5.0, quick=1.0, tiny=0.5)
    max_requests = cfg.pick(full=20_000, quick=20_000, tiny=20)
    params = {"concurrency": 1, "requests": max_requests, "duration_s": duration, "warmup": 20}
    settings = {"duration_s_per_run": duration, "max_requests_per_run": max_requests, "in_flight": 1}
    title = "Overhead of the contract — trivial call round trip, gRPC vs HTTP gateway"
    with Report(cfg, title, HEADLINE, {"name": "none (no model is used)"}, settings) as report:
        ours = report.start_server(lambda: servers.start_ours(cfg.log_dir))
        health = [
            report.add(
                client_contender(
                    "grpc-health",
                    "ours gRPC Health/Check",
                    "ours",
                    ["--mode", "grpc-health", "--target", ours.grpc_target],
                )
            ),
            report.add(
                client_contender(
                    "gateway-health",
                    "ours gateway GET /health",
                    "ours",
                    ["--mode", "http-get", "--target", ours.http_base, "--path", "/health"],
                )
            ),
        ]
        listing: list[Contender] = [
            report.add(
                client_contender(
                    "grpc-list",
                    "ours gRPC ListModels",
                    "ours",
                    ["--mode", "grpc-list-models", "--target", ours.grpc_target],
                )
            ),
            report.add(
                client_contender(
                    "gateway-list",
                    "ours gateway GET /v1/models",
                    "ours",
                    ["--mode", "http-get", "--target", ours.http_base, "--path", "/v1/models"],
                )
            ),
        ]
        listing += report.start_peer(
            "llama-server-list",
            "llama_cpp.server GET /v1/models",
            peers.llama_env(),
            servers.start_llama_server,
            lambda llama: ["--mode", "http-get", "--target", llama.http_base, "--path", "/v1/models"],
        )
        report.compare("health check", params, health, "grpc-health", metrics)
        report.compare("list models", params, listing, "grpc-list", metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
