"""Memory: what a model costs our server, like for like with the references; then every model in turn.

Like for like (the headline): for each model that has an in-process reference, a fresh server
process loads that model alone; ``added`` is its RSS after the load and one small request minus
the same process idle, and the reference's is its RSS after the same minus the bare Python
process before it imported the library (both count the libraries the model brings in, such as
torch). The peers (``llama_cpp.server``, infinity) load the same model at start; their RSS is
shown beside ours.

In turn: one fresh server loads, touches and unloads every default-catalog model one after
another, so each figure includes what earlier models left (libraries stay imported).

Loads and unloads go through ``ModelService/LoadModel`` and ``UnloadModel``; after a load one
small request runs (memory-mapped weights count once they are touched), then RSS is read
(the process and its children, from ``/proc`` via psutil). One fresh process per contender,
scenario and repetition.

Usage: ``python -m bench.memory [--quick|--tiny] [--no-peers] [--out DIR]``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import peers, servers
from bench.runner import BenchConfig, Contender, Report, parse_config, run_load_client
from bench.servers import Server
from bench.workloads import CHAT_MODEL, EMBED_MODEL

MIB = 1024 * 1024
#: Time for the allocator and the OS to settle before RSS is read.
SETTLE_S = 1.0
PeerStart = Callable[[Path, Path], Server]
HEADLINE = [
    {"key": "rss_mib", "label": "RSS MiB", "higher_is_better": False},
    {"key": "added_mib", "label": "added by the load MiB", "higher_is_better": False},
    {"key": "given_back_mib", "label": "given back by the unload MiB", "higher_is_better": True},
]


def warm_args(model: str, tasks: list[str], target: str, *, http: bool = False) -> list[str] | None:
    """Load-client flags for one small request to ``model``, chosen by its tasks.

    None for tasks the load client does not drive (their weights may be counted only in part
    if they are memory-mapped and untouched).
    """
    common = ["--target", target, "--model", model]
    if "TASK_GENERATE" in tasks:
        return ["--mode", "sse-chat" if http else "grpc-generate", *common, "--max-tokens", "8"]
    if "TASK_EMBED" in tasks:
        # infinity serves embeddings at /embeddings; our gateway at /v1/embeddings (not used here).
        return (
            ["--mode", "http-embed", "--path", "/embeddings", *common]
            if http
            else ["--mode", "grpc-embed", *common]
        )
    return None


def touch(args: list[str] | None) -> None:
    """One request, not measured, so that lazily mapped weights are resident."""
    if args:
        run_load_client(args, {"requests": 1, "warmup": 0, "concurrency": 1})


def measure_rss(server: Server) -> float:
    """RSS (MiB) of ``server`` and its children after :data:`SETTLE_S`."""
    time.sleep(SETTLE_S)
    return server.process.rss_bytes() / MIB


def alone_scenario(model: str) -> str:
    """Name of the like-for-like scenario of ``model``."""
    return f"{model} alone, fresh process"


def ours_alone(report: Report, model: str, tasks: list[str]) -> dict[str, float]:
    """A fresh server: RSS idle, then after loading ``model`` and one request (``added_mib``: the rise)."""
    ours = servers.start_ours(report.cfg.log_dir, name="ours-memory-alone")
    try:
        idle = measure_rss(ours)
        report.progress(f"ours: loading {model} alone")
        reported = servers.load_model(ours.grpc_target, model)
        touch(warm_args(model, tasks, ours.grpc_target))
        loaded = measure_rss(ours)
        return {
            "rss_mib": loaded,
            "added_mib": loaded - idle,
            "server_reported_mib": reported["ram_bytes"] / MIB,
        }
    finally:
        ours.stop()


def ours_cycle(report: Report, models: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """One fresh server: idle, then load, touch, measure, unload, measure for each model in turn.

    ``added_mib`` is RSS after a load minus RSS before it (libraries a first load brings in,
    such as torch, count for the first model that needs them); ``given_back_mib`` is RSS
    after the load minus RSS after the unload.
    """
    cfg = report.cfg
    ours = servers.start_ours(cfg.log_dir, name="ours-memory")
    try:
        rss = measure_rss(ours)
        out = {"idle": {"rss_mib": rss}}
        for model, tasks in models.items():
            report.progress(f"ours: loading {model}")
            before = rss
            reported = servers.load_model(ours.grpc_target, model)
            touch(warm_args(model, tasks, ours.grpc_target))
            loaded = measure_rss(ours)
            out[f"in turn: loaded {model}"] = {
                "rss_mib": loaded,
                "added_mib": loaded - before,
                "server_reported_mib": reported["ram_bytes"] / MIB,
            }
            servers.load_model(ours.grpc_target, model, unload=True)
            rss = measure_rss(ours)
            out[f"in turn: unloaded {model}"] = {"rss_mib": rss, "given_back_mib": loaded - rss}
        return out
    finally:
        ours.stop()


def single(start: Callable[[], Server], warm: Callable[[Server], None]) -> dict[str, float]:
    """Start a peer or worker, ``warm`` it with one request, read its RSS, stop it.

    ``added_mib`` is given for workers: RSS minus the worker's RSS before it imported the
    library and loaded the model (what the model costs a bare Python process).
    """
    server = start()
    try:
        warm(server)
        rss = measure_rss(server)
        before = server.info.get("rss_before_load_bytes")
        return {"rss_mib": rss, **({"added_mib": rss - float(before) / MIB} if before else {})}
    finally:
        server.stop()


def worker_entry(
    kind: str, op: str, cfg: BenchConfig
) -> tuple[Callable[[], Server], Callable[[Server], None]]:
    """Start and warm-up functions of an in-process reference worker (``llama``/``st``)."""
    command = {"op": op, "requests": 1, "warmup": 0, "max_tokens": 8}
    return (lambda: servers.start_worker(kind, cfg.log_dir)), (lambda s: s.process.request(command) and None)


def peer_entry(
    start: PeerStart, python: Path, model: str, tasks: list[str], cfg: BenchConfig
) -> tuple[Callable[[], Server], Callable[[Server], None]]:
    """Start and warm-up functions of a peer server (``start(python, log_dir)``)."""
    return (lambda: start(python, cfg.log_dir)), (
        lambda s: touch(warm_args(model, tasks, s.http_base or "", http=True))
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the memory comparison; write its JSON, plot and README section."""
    cfg = parse_config("memory", argv, __doc__, reps={"full": 3, "quick": 1, "tiny": 1})
    settings = {"settle_s": SETTLE_S, "keep_alive": "-1 (until unloaded)", "rss": "process + children"}
    title = "Memory — what one model adds, like for like; then every default model in turn"
    with Report(cfg, title, HEADLINE, {"models": "the embedded default catalog"}, settings) as report:
        probe = servers.start_ours(cfg.log_dir, name="ours-catalog")
        try:
            catalog = {str(m["name"]): list(m["tasks"]) for m in servers.list_models(probe.grpc_target)}
        finally:
            probe.stop()
        # The smoke test loads only the GGUF model (fast, no torch); the catalog may grow.
        models = catalog if cfg.mode != "tiny" else {m: t for m, t in catalog.items() if m == CHAT_MODEL}
        report.payload["model"]["loaded"] = list(models)
        ours = report.add(Contender("ours", "ours (gRPC + gateway process)", "ours"))
        # name -> (label, role, model, start, warm)
        others: dict[str, tuple[str, str, str, Callable[[], Server], Callable[[Server], None]]] = {}
        if CHAT_MODEL in models:
            others["llama-inprocess"] = (
                "llama-cpp-python in-process",
                "reference",
                CHAT_MODEL,
                *worker_entry("llama", "generate", cfg),
            )
        if EMBED_MODEL in models:
            others["st-inprocess"] = (
                "sentence-transformers in-process",
                "reference",
                EMBED_MODEL,
                *worker_entry("st", "embed", cfg),
            )
        for name, label, env, model, start in (
            ("llama-server", "llama_cpp.server", peers.llama_env, CHAT_MODEL, servers.start_llama_server),
            ("infinity", "infinity", peers.infinity_env, EMBED_MODEL, servers.start_infinity),
        ):
            if model not in models:
                continue
            try:
                python = report.peer_python(env())
            except peers.PeerUnavailableError as exc:
                report.unavailable(name, label, "peer", str(exc))
                continue
            others[name] = (label, "peer", model, *peer_entry(start, python, model, models[model], cfg))
        for name, (label, role, *_) in others.items():
            report.add(Contender(name, label, role))
        per_rep: dict[str, dict[str, list[dict[str, float] | None]]] = {}
        compared = sorted({model for _, _, model, *_ in others.values()})
        for rep in range(cfg.reps):
            report.progress(f"repetition {rep + 1}/{cfg.reps}: ours")
            for model in compared:
                values = ours_alone(report, model, models[model])
                per_rep.setdefault(alone_scenario(model), {}).setdefault(ours.name, []).append(values)
            for name, (label, role, model, start, warm) in others.items():
                report.progress(f"repetition {rep + 1}/{cfg.reps}: {label}")
                try:
                    values = single(start, warm)
                except Exception as exc:
                    report.unavailable(name, label, role, str(exc)[-300:])
                    values = None
                per_rep.setdefault(alone_scenario(model), {}).setdefault(name, []).append(values)
            for scenario, values in ours_cycle(report, models).items():
                per_rep.setdefault(scenario, {}).setdefault(ours.name, []).append(values)
            report.checkpoint(f"rep {rep + 1}")
        for scenario, contenders in per_rep.items():
            reference = next((n for n in contenders if n.endswith("-inprocess")), ours.name)
            report.record(scenario, {}, reference, contenders)
        report.note(
            "like for like: the 'alone, fresh process' rows compare what one model adds to a process "
            "that had none (ours: RSS after the load minus the same server idle; references: minus the "
            "bare Python process before the library import); the 'in turn' rows load every default "
            "model one after another in one server, so each includes what the earlier ones left"
        )
        untouched = [m for m, tasks in models.items() if warm_args(m, tasks, "") is None]
        if untouched:
            report.note(
                f"loaded but not sent a request (no load-client mode for their task): {', '.join(untouched)}"
            )
        report.note(
            "RSS sums the process and its children and counts shared pages (libraries, "
            "memory-mapped weights); references: the same model loaded in a bare Python process"
        )
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
