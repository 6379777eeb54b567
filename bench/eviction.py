"""Eviction under a memory budget: requests cycling over three default models, side by side.

Two servers, each in this process, one after the other, on the same three models of the default
catalog (the chat GGUF and the MiniLM embedder, and MiniLM again under a second name). The
reference has no budget: all three stay loaded after their first request. The other has
``memory_budget_bytes`` set to the sum of the two larger estimates
(:meth:`service.model_manager.ModelManager.required_memory`): cycling over three models in room
for two, every request finds its model evicted (least recently used is the one asked for next)
and waits for a load. Requests go one at a time; every one must be answered.

Reported per server: requests served and failed, loads and evictions, latency p50/p99 of every
request, of the requests that found their model loaded ("warm") and of those that waited for a
load ("with a load"), and the median load time (a request with a load less the warm median of
its model).

Usage: ``python -m bench.eviction [--quick|--tiny] [--out DIR]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import yaml
from prometheus_client import REGISTRY
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc as isg

from bench.runner import Report, parse_config
from bench.stats import percentile
from service.catalog import load_catalog
from service.server import start_server
from service.settings import Settings

CHAT = "smollm2-135m-instruct"
EMBEDDERS = ("all-minilm-l6-v2", "minilm-second")
MODELS = (CHAT, *EMBEDDERS)


def bench_catalog() -> dict[str, Any]:
    """Three entries from the embedded default catalog; the second embedder is MiniLM under another name."""
    specs = load_catalog(None).specs
    entries = {}
    for name, source_name in ((CHAT, CHAT), (EMBEDDERS[0], EMBEDDERS[0]), (EMBEDDERS[1], EMBEDDERS[0])):
        spec = specs[source_name]
        entries[name] = {
            "backend": spec.backend,
            "tasks": [task.value for task in spec.tasks],
            "source": spec.source,
            "options": spec.options,
        }
    return {"models": entries}


async def request(inference: isg.InferenceServiceStub, model: str) -> None:
    """One request of ``model``: 8 greedy tokens of chat, or one sentence embedded."""
    if model == CHAT:
        parameters = g.GenerationParameters(max_tokens=8, temperature=0.0)
        await inference.Generate(
            g.GenerateRequest(model=model, prompt="Hello", parameters=parameters), timeout=300
        )
    else:
        await inference.Embed(e.EmbedRequest(model=model, inputs=["a sentence to embed"]), timeout=300)


async def run_one(settings: Settings, cycles: int) -> dict[str, Any]:
    """Start a server with ``settings``, send ``cycles`` rounds over :data:`MODELS`, and measure."""
    running = await start_server(settings)
    evictions_before = evictions()
    records: list[dict[str, Any]] = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            inference = isg.InferenceServiceStub(channel)
            for _ in range(cycles):
                for model in MODELS:
                    managed = running.manager.get(model)
                    loads_before = managed.load_count
                    started = time.perf_counter()
                    ok, error = True, ""
                    try:
                        await request(inference, model)
                    except grpc.aio.AioRpcError as exc:
                        ok, error = False, f"{exc.code().name}: {exc.details()}"
                    records.append(
                        {
                            "model": model,
                            "ok": ok,
                            "error": error,
                            "latency_s": time.perf_counter() - started,
                            "loaded": managed.load_count > loads_before,
                        }
                    )
        evicted = evictions() - evictions_before
    finally:
        await running.stop(grace=1.0)
    return {"records": records, "evictions": evicted}


def evictions() -> float:
    """Evictions of the bench's models so far in this process (``ur_model_evictions_total``)."""
    return sum(
        REGISTRY.get_sample_value("ur_model_evictions_total", {"model": model, "reason": reason}) or 0.0
        for model in MODELS
        for reason in ("memory", "max_loaded_models")
    )


def warm_medians(result: dict[str, Any]) -> dict[str, float]:
    """Median latency (s) by model of the requests that found their model loaded."""
    medians = {}
    for model in MODELS:
        warm = [
            r["latency_s"] for r in result["records"] if r["ok"] and r["model"] == model and not r["loaded"]
        ]
        if warm:
            medians[model] = statistics.median(warm)
    return medians


def summary(result: dict[str, Any], warm_base: dict[str, float]) -> dict[str, float]:
    """Counts and latency percentiles (seconds) of one run.

    ``warm_base``: each model's warm median (the reference's, in the same repetition); a load's
    time is a request with a load less it.
    """
    records = result["records"]
    served = [r for r in records if r["ok"]]
    warm = [r["latency_s"] for r in served if not r["loaded"]]
    cold_records = [r for r in served if r["loaded"]]
    cold = [r["latency_s"] for r in cold_records]
    load_times = [r["latency_s"] - warm_base[r["model"]] for r in cold_records if r["model"] in warm_base]
    latencies = [r["latency_s"] for r in served]
    nan = float("nan")
    return {
        "requests": float(len(records)),
        "served": float(len(served)),
        "failed": float(len(records) - len(served)),
        "loads": float(sum(r["loaded"] for r in records)),
        "evictions": float(result["evictions"]),
        "p50_s": percentile(latencies, 50) if latencies else nan,
        "p99_s": percentile(latencies, 99) if latencies else nan,
        "warm_p50_s": percentile(warm, 50) if warm else nan,
        "warm_p99_s": percentile(warm, 99) if warm else nan,
        "with_load_p50_s": percentile(cold, 50) if cold else nan,
        "with_load_p99_s": percentile(cold, 99) if cold else nan,
        "load_time_p50_s": statistics.median(load_times) if load_times else nan,
    }


async def estimates(settings: Settings) -> dict[str, int]:
    """RAM estimate of each model, bytes, from a server that loads nothing."""
    running = await start_server(settings)
    try:
        return {name: (await running.manager.required_memory(name)).ram_bytes for name in MODELS}
    finally:
        await running.stop(grace=0)


async def measure(
    cycles: int, reps: int, data_dir: Path, checkpoint: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Both servers, ``reps`` times interleaved; the per-rep summaries and the budget used.

    ``checkpoint(label)`` runs after each repetition (:meth:`bench.runner.Report.checkpoint`).
    """
    catalog_path = data_dir / "catalog.yaml"
    catalog_path.write_text(yaml.safe_dump(bench_catalog()))
    base = Settings(
        grpc_port=0, catalog_path=catalog_path, data_dir=data_dir / "data", memory_headroom_bytes=0
    )
    sizes = await estimates(base)
    budget = sum(sorted(sizes.values())[1:])
    contenders = {
        "no budget (all three stay loaded)": base,
        "budget of the two larger estimates": base.model_copy(update={"memory_budget_bytes": budget}),
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    for rep in range(reps):
        results = {name: await run_one(settings, cycles) for name, settings in contenders.items()}
        base = warm_medians(results[next(iter(contenders))])
        for name, result in results.items():
            runs[name].append(summary(result, base))
        checkpoint(f"rep {rep + 1}")
    return {"estimates_bytes": sizes, "budget_bytes": budget, "runs": runs}


def table(payload: dict[str, Any]) -> dict[str, Any]:
    """The section's table (:func:`bench.results.markdown`'s ``tables``): a row per server, medians
    over the repetitions."""
    keys = [
        ("served", "served"),
        ("failed", "failed"),
        ("loads", "loads"),
        ("evictions", "evictions"),
        ("p50_s", "p50 s"),
        ("p99_s", "p99 s"),
        ("warm_p50_s", "warm p50 s"),
        ("with_load_p50_s", "with a load p50 s"),
        ("with_load_p99_s", "with a load p99 s"),
        ("load_time_p50_s", "load time p50 s"),
    ]
    rows = []
    for name, reps in payload["runs"].items():
        cells = []
        for key, _ in keys:
            values = [rep[key] for rep in reps if rep[key] == rep[key]]
            cells.append(f"{statistics.median(values):.3g}" if values else "n/a")
        rows.append([name, *cells])
    title = f"Medians of {payload['reps']} repetition{'s' if payload['reps'] != 1 else ''}"
    return {"title": title, "header": ["server", *(label for _, label in keys)], "rows": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run both servers; write ``eviction.json`` and the README section."""
    cfg = parse_config("eviction", argv, __doc__, reps={"full": 3, "quick": 2, "tiny": 1})
    cycles = cfg.pick(full=10, quick=5, tiny=2)
    title = f"Eviction \u2014 {cycles} rounds over {', '.join(MODELS)}, one request at a time"
    model = {"names": list(MODELS)}
    with Report(cfg, title, [], model, {"cycles": cycles}) as report:
        with tempfile.TemporaryDirectory(prefix="bench-eviction-") as folder:
            measured = asyncio.run(measure(cycles, cfg.reps, Path(folder), report.checkpoint))
        report.payload.update(cycles=cycles, **measured)
        report.payload["tables"] = [table(report.payload)]
        report.note(
            f"budget: {measured['budget_bytes'] / (1 << 20):.0f} MiB, the two larger estimates ("
            + ", ".join(f"{k} {v / (1 << 20):.0f} MiB" for k, v in measured["estimates_bytes"].items())
            + ")"
        )
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
