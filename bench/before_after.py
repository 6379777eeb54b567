"""This tree against an earlier commit: the faces' costs, side by side in one run.

A change to how calls reach the core (the admission chain, the in-process gateway) must not cost
the callers: the gateway's ``/v1/embeddings`` at 64 single-sentence clients and its chat streams'
time to first token, and the same over gRPC, measured on two ``universal-runtime`` servers (gRPC
and gateway in one process, the embedded default catalog): one from ``--before COMMIT``
(extracted with ``git archive``), one from this tree. Runs alternate between the two; the ratios
are this tree's over the commit's, paired by repetition.

Usage: ``python -m bench.before_after --before COMMIT [--scenario NAME ...] [--quick|--tiny] [--out DIR]``;
``--scenario`` (``gateway-embed``, ``grpc-embed``, ``gateway-chat``, ``grpc-chat``; repeatable) runs
only those, e.g. more repetitions of one.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import embeddings, generation, servers
from bench.procs import REPO_ROOT
from bench.runner import Report, client_contender, parse_config
from bench.workloads import CHAT_MODEL, EMBED_MODEL

HEADLINE = [
    {"key": "sentences_s", "label": "sentences/s", "higher_is_better": True},
    {"key": "latency_p50_ms", "label": "latency p50 ms", "higher_is_better": False},
    {"key": "agg_tok_s", "label": "aggregate tok/s", "higher_is_better": True},
    {"key": "ttft_p50_ms", "label": "TTFT p50 ms", "higher_is_better": False},
    {"key": "ttft_p95_ms", "label": "TTFT p95 ms", "higher_is_better": False},
]


SCENARIOS = ("gateway-embed", "grpc-embed", "gateway-chat", "grpc-chat")


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--before", required=True, help="the commit to compare this tree with")
    parser.add_argument(
        "--scenario", action="append", choices=SCENARIOS, help="run only this scenario (repeatable)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="tokens per chat request (default: 32 full, 16 quick)"
    )


def extract(commit: str, folder: Path) -> Path:
    """``commit``'s tree extracted into ``folder`` (``git archive``); returns ``folder``.

    Raises:
        subprocess.CalledProcessError: ``commit`` is not a commit of this repository.

    """
    archive = subprocess.run(["git", "archive", commit], cwd=REPO_ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the comparison; write its JSON, plot and README section."""
    cfg = parse_config("before_after", argv, __doc__, add_arguments=_arguments)
    duration = cfg.pick(full=5.0, quick=2.0, tiny=0.5)
    max_requests = cfg.pick(full=100_000, quick=100_000, tiny=3)
    embed_clients = cfg.pick(full=64, quick=64, tiny=2)
    # One stream (its TTFT and speed) and eight (the continuous batch), as the generation goals name.
    chat_clients = cfg.pick(full=(1, 8), quick=(1, 8), tiny=(1,))
    chat_requests = cfg.pick(full=32, quick=8, tiny=1)
    max_tokens = cfg.args.max_tokens or cfg.pick(full=32, quick=16, tiny=4)
    settings = {
        "before": cfg.args.before,
        "scenarios": cfg.args.scenario or list(SCENARIOS),
        "embed_clients": embed_clients,
        "chat_clients": list(chat_clients),
        "chat_requests_per_run": chat_requests,
        "max_tokens": max_tokens,
        "duration_s_per_run": duration,
    }
    model = {"embeddings": EMBED_MODEL, "chat": CHAT_MODEL}
    title = f"This tree against {cfg.args.before}: gateway and gRPC, embeddings and chat"
    with (
        tempfile.TemporaryDirectory(prefix="ur-before-") as folder,
        Report(cfg, title, HEADLINE, model, settings) as report,
    ):
        trees = {"before": extract(cfg.args.before, Path(folder)), "after": None}
        started = {
            name: report.start_server(
                functools.partial(servers.start_ours, cfg.log_dir, name=f"ours-{name}", tree=tree)
            )
            for name, tree in trees.items()
        }

        def contenders(mode: str, face: str, model_name: str) -> list:
            made = []
            for name, server in started.items():
                target = server.grpc_target if mode.startswith("grpc-") else server.http_base
                args = ["--mode", mode, "--target", str(target), "--model", model_name]
                made.append(report.add(client_contender(f"{name}-{face}", f"{name}: {face}", "ours", args)))
            return made

        gateway_embed = contenders("http-embed", "gateway /v1/embeddings", EMBED_MODEL)
        grpc_embed = contenders("grpc-embed", "gRPC Embed", EMBED_MODEL)
        gateway_chat = contenders("sse-chat", "gateway chat stream", CHAT_MODEL)
        grpc_chat = contenders("grpc-generate", "gRPC GenerateStream", CHAT_MODEL)
        first = {"concurrency": 1, "requests": 1, "warmup": 0}
        report.warm_up(gateway_embed + grpc_embed, {**first, "batch": 1})
        report.warm_up(gateway_chat + grpc_chat, {**first, "max_tokens": 1})
        embed = {"concurrency": embed_clients, "batch": 1, "requests": max_requests, "duration_s": duration}
        embed["warmup"] = 1
        chosen = set(cfg.args.scenario or SCENARIOS)
        for key, scenario, measured in (
            ("gateway-embed", f"gateway /v1/embeddings, {embed_clients} clients x 1 sentence", gateway_embed),
            ("grpc-embed", f"gRPC Embed, {embed_clients} clients x 1 sentence", grpc_embed),
        ):
            if key in chosen:
                report.compare(scenario, embed, measured, measured[0].name, embeddings.metrics)
        for clients in chat_clients:
            chat = {"concurrency": clients, "requests": chat_requests, "max_tokens": max_tokens, "warmup": 1}
            for key, face, measured in (
                ("gateway-chat", "gateway chat stream", gateway_chat),
                ("grpc-chat", "gRPC GenerateStream", grpc_chat),
            ):
                if key in chosen:
                    scenario = f"{face}, {clients} clients, {max_tokens} tokens"
                    vary = functools.partial(generation.cold_salt, f"{report.started}/{scenario}")
                    report.compare(scenario, chat, measured, measured[0].name, generation.metrics, vary=vary)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
