"""What Prometheus metrics cost: the same calls to a server recording them and to one that does not.

Two servers of ours run side by side with the embedded default catalog: one as shipped (metrics
on, traces off) and one with ``UR_METRICS_ENABLED=false``. Each scenario runs on both,
interleaved: a trivial call (``ModelService/ListModels`` over gRPC, one in flight: every
admission step runs, no model work) and one generation stream (``GenerateStream``, greedy, where
every token records its latency). Goal: metrics on within 3% of metrics off.

Usage: ``python -m bench.metrics_cost [--quick|--tiny] [--out DIR]``.
"""

from __future__ import annotations

import sys
from typing import Any

from bench import generation, overhead, servers
from bench.runner import Report, client_contender, parse_config
from bench.workloads import CHAT_MODEL, MAX_NEW_TOKENS

HEADLINE = [
    {"key": "latency_p50_us", "label": "round trip p50 µs", "higher_is_better": False},
    {"key": "calls_s", "label": "calls/s (1 in flight)", "higher_is_better": True},
    {"key": "stream_tok_s", "label": "per-stream tok/s", "higher_is_better": True},
    {"key": "ttft_p50_ms", "label": "TTFT p50 ms", "higher_is_better": False},
]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run both scenarios on both servers; write the JSON, plot and README section."""
    cfg = parse_config("metrics_cost", argv, __doc__, reps={"full": 5, "quick": 3, "tiny": 1})
    duration = cfg.pick(full=5.0, quick=2.0, tiny=0.5)
    max_tokens = cfg.pick(full=MAX_NEW_TOKENS, quick=MAX_NEW_TOKENS, tiny=4)
    trivial = {"concurrency": 1, "requests": 50_000, "duration_s": duration, "warmup": 20}
    stream = {
        "concurrency": 1,
        "requests": cfg.pick(full=4, quick=3, tiny=1),
        "warmup": 1,
        "max_tokens": max_tokens,
    }
    settings = {"trivial_call": trivial, "stream": stream, "metrics_off": "UR_METRICS_ENABLED=false"}
    title = "Cost of metrics — the same calls with Prometheus metrics on (as shipped) and off"
    with Report(cfg, title, HEADLINE, {"name": CHAT_MODEL}, settings) as report:
        on = report.start_server(lambda: servers.start_ours(cfg.log_dir, name="ours"))
        off = report.start_server(
            lambda: servers.start_ours(cfg.log_dir, name="ours-off", env={"UR_METRICS_ENABLED": "false"})
        )
        report.note("each repetition runs both servers in turn; ratios are metrics on over metrics off")

        def pair(mode: str, extra: list[str]) -> list:
            return [
                report.add(
                    client_contender(
                        f"{name}-{mode}",
                        label,
                        role,
                        ["--mode", mode, "--target", server.grpc_target, *extra],
                    )
                )
                for name, label, role, server in (
                    ("off", "metrics off", "reference", off),
                    ("on", "metrics on (as shipped)", "ours", on),
                )
            ]

        report.compare(
            "trivial call (ListModels)",
            trivial,
            pair("grpc-list-models", []),
            "off-grpc-list-models",
            overhead.metrics,
        )
        for server in (on, off):
            servers.load_model(server.grpc_target, CHAT_MODEL)
        report.compare(
            "one generation stream",
            stream,
            pair("grpc-generate", ["--model", CHAT_MODEL]),
            "off-grpc-generate",
            generation.metrics,
        )
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
