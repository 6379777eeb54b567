"""Backend memory: what the server's process tree holds after its models are unloaded.

Goal (the backend-process issue): the RSS of the server's process tree after unloading every
model within 50 MB of a fresh start, for an idle server with the default models loaded and
unloaded, against the single-process design (``UR_BACKEND_PROCESSES=false``), where an unloaded
model's memory rarely comes back to the system.

Method: two contenders, interleaved within each repetition (the first rotates): ours with
backend processes (the default) and the same server with ``UR_BACKEND_PROCESSES=false`` (every
model in the server's process; the reference). Each run starts a fresh ``universal-runtime``
(gRPC + gateway, the embedded default catalog) and reads the RSS of its process tree (the
server and all its descendants, from ``/proc`` via psutil, after :data:`bench.memory.SETTLE_S`):

1. ``rss_fresh_mb``: idle, right after start;
2. ``rss_loaded_mb``: after ``LoadModel`` of the default models (``all-minilm-l6-v2`` and
   ``smollm2-135m-instruct``; tiny runs: the chat model only) and one small request each (one
   ``Embed``, one ``Generate`` of 8 tokens: memory-mapped weights count once touched);
3. ``rss_after_unload_mb``: after ``UnloadModel`` of each, once ``GetModel`` says it is not
   loaded and every process the loads added to the tree has exited (bounded wait);

then the server stops. ``after_unload_minus_fresh_mb`` is 3 minus 1 (goal: at most 50 MB with
backend processes). MB are 10^6 bytes; RSS counts shared pages (libraries, mapped weights) in
every process that maps them.

Usage: ``python -m bench.backend_memory [--quick|--tiny] [--reps N] [--out DIR]``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

from bench import servers
from bench.memory import MIB, measure_rss, touch, warm_args
from bench.runner import Contender, Report, parse_config
from bench.servers import Server
from bench.workloads import CHAT_MODEL, EMBED_MODEL

MB = 1_000_000
HEADLINE = [
    {"key": "rss_fresh_mb", "label": "RSS fresh MB", "higher_is_better": False},
    {"key": "rss_loaded_mb", "label": "RSS loaded MB", "higher_is_better": False},
    {"key": "rss_after_unload_mb", "label": "RSS after unload MB", "higher_is_better": False},
    {"key": "after_unload_minus_fresh_mb", "label": "after unload - fresh MB", "higher_is_better": False},
]
#: The default models and the tasks that pick their one small request (see bench.memory.warm_args).
MODELS = {EMBED_MODEL: ["TASK_EMBED"], CHAT_MODEL: ["TASK_GENERATE"]}
#: Contender name -> (label, role, the server's extra environment).
DESIGNS = {
    "single-process": (
        "single process (UR_BACKEND_PROCESSES=false, ref)",
        "reference",
        {"UR_BACKEND_PROCESSES": "false"},
    ),
    "backend-processes": ("backend processes (default)", "ours", {"UR_BACKEND_PROCESSES": "true"}),
}
#: Most seconds to wait for an unloaded model's status and its backend's exit.
UNLOAD_WAIT_S = 60.0
#: The goal: RSS after the unloads at most this much over the fresh server's.
GOAL_MB = 50.0


def children(server: Server) -> set[int]:
    """Pids of every descendant of ``server``'s process."""
    import psutil

    with contextlib.suppress(psutil.Error):
        return {p.pid for p in psutil.Process(server.process.pid).children(recursive=True)}
    return set()


def not_loaded(target: str, model: str) -> bool:
    """Whether ``GetModel`` says ``model`` is not loaded."""
    import grpc
    from universal_runtime.v1 import model_service_pb2, model_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        response = stub.GetModel(model_service_pb2.GetModelRequest(name=model), timeout=30)
    return response.model.status == model_service_pb2.MODEL_STATUS_NOT_LOADED


def wait_unloaded(
    server: Server, models: list[str], fresh: set[int], timeout_s: float = UNLOAD_WAIT_S
) -> int:
    """Wait until ``models`` are not loaded and no process outside ``fresh`` is left in the tree.

    Returns the processes the loads added that are still there when ``timeout_s`` ends (0: all gone).

    Raises:
        RuntimeError: a model still reads as loaded after ``timeout_s``.

    """
    target = server.grpc_target
    assert target is not None
    end = time.monotonic() + timeout_s
    while True:
        left = children(server) - fresh
        if not left and all(not_loaded(target, m) for m in models):
            return 0
        if time.monotonic() > end:
            if not all(not_loaded(target, m) for m in models):
                raise RuntimeError(f"{', '.join(models)} still loaded {timeout_s:.0f}s after UnloadModel")
            return len(left)
        time.sleep(0.1)


def measure(report: Report, name: str, env: dict[str, str], models: dict[str, list[str]]) -> dict[str, Any]:
    """One run: a fresh server, RSS idle, loaded and touched, after the unloads; a result dict."""
    server = servers.start_ours(report.cfg.log_dir, name=f"ours-{name}", env=env)
    try:
        target = server.grpc_target
        assert target is not None
        fresh = measure_rss(server) * MIB / MB
        fresh_children = children(server)
        for model, tasks in models.items():
            servers.load_model(target, model)
            touch(warm_args(model, tasks, target))
        loaded = measure_rss(server) * MIB / MB
        loaded_children = children(server)
        for model in models:
            servers.load_model(target, model, unload=True)
        left = wait_unloaded(server, list(models), fresh_children)
        after = measure_rss(server) * MIB / MB
    finally:
        server.stop()
    return {
        "records": [{"ok": True}],
        "rss_mb": {"fresh": fresh, "loaded": loaded, "after_unload": after},
        "processes": {
            "fresh": len(fresh_children),
            "loaded": len(loaded_children),
            "left_after_unload": left,
        },
    }


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-run figures: RSS fresh, loaded and after the unloads (MB), and the processes in the tree."""
    rss, processes = result["rss_mb"], result["processes"]
    return {
        "rss_fresh_mb": rss["fresh"],
        "rss_loaded_mb": rss["loaded"],
        "rss_after_unload_mb": rss["after_unload"],
        "after_unload_minus_fresh_mb": rss["after_unload"] - rss["fresh"],
        "loaded_minus_fresh_mb": rss["loaded"] - rss["fresh"],
        "children_loaded": float(processes["loaded"] - processes["fresh"]),
        "children_left_after_unload": float(processes["left_after_unload"]),
    }


def contenders(report: Report, models: dict[str, list[str]]) -> list[Contender]:
    """One contender per design of :data:`DESIGNS` (the single-process reference first)."""

    def runner(name: str, env: dict[str, str]) -> Any:
        return lambda params: measure(report, name, env, models)

    return [
        Contender(name, label, role, run=runner(name, env)) for name, (label, role, env) in DESIGNS.items()
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run both designs, interleaved; write the JSON, plot and README section."""
    cfg = parse_config("backend_memory", argv, __doc__, reps={"full": 5, "quick": 3, "tiny": 1})
    # The smoke test loads only the GGUF model (fast, no torch), as bench.memory's does.
    models = MODELS if cfg.mode != "tiny" else {CHAT_MODEL: MODELS[CHAT_MODEL]}
    settings = {
        "models": list(models),
        "requests": "one Embed / one Generate of 8 tokens per model",
        "rss": "server process + all descendants",
        "unload_wait_s": UNLOAD_WAIT_S,
        "goal_mb": GOAL_MB,
    }
    title = "Backend memory — the server's process tree after every model is unloaded"
    with Report(cfg, title, HEADLINE, {"models": list(models)}, settings) as report:
        report.note(
            "each run is a fresh server: RSS idle, after loading and touching the default models, and "
            "after unloading them (once GetModel says not loaded and the processes the loads added have "
            f"exited); goal: after unload - fresh <= {GOAL_MB:.0f} MB with backend processes"
        )
        scenario = f"fresh server, {' + '.join(models)} loaded, touched and unloaded"
        measured = [report.add(c) for c in contenders(report, models)]
        report.compare(scenario, {}, measured, "single-process", metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
