"""Quota accuracy: a key limited to N requests a second, sending 3N a second, gets N a second served.

One server in this process with a keys file of one key per contender and repetition (a fresh
bucket each), ``requests_per_second: N``. A client sends ``ListModels`` (the cheapest
authenticated RPC) open loop at 3N a second for the window, each call at its scheduled time
whether or not earlier ones were answered (at most 3N x window calls), and counts the answers:
served (OK), refused with ``QUOTA_EXCEEDED``, and anything else (failed). Three contenders,
interleaved within each repetition (the order turns): gRPC straight to the server and HTTP
through the gateway (``GET /v1/models``, an in-process ASGI client; a 429 with ``Retry-After``
counts as refused), both with the default burst (N rounded up), and gRPC with ``burst: 1``.

The goal: N a second served, ± 10%. The bucket starts full, so a window serves its
burst on top of N x window: the steady rate is (served - burst) / window, and served /
(N x window + burst) is reported beside it. With ``burst: 1`` a bucket that is full caps what
accrues until the next call arrives, so an open-loop client at 3N gets less than N (about
N / (1 + 1/6) with random phases): the burst is what lets a key use its whole rate.

Usage: ``python -m bench.quota_accuracy [--quick|--tiny] [--out DIR] [--rate N]``.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc as msg

from bench.runner import Report, parse_config
from gateway.app import create_app
from gateway.errors import error_info_from_rpc_error
from service.server import start_server
from service.settings import Settings

#: (name, path, burst: None for the default, N rounded up).
CONTENDERS: tuple[tuple[str, str, int | None], ...] = (
    ("grpc", "grpc", None),
    ("gateway", "http", None),
    ("grpc, burst 1", "grpc", 1),
)
WARM_UP_SECRET = "bench-quota-warm-up-secret"
GOAL_TOLERANCE = 0.10


def key_of(index: int, rep: int) -> tuple[str, str]:
    """(name, secret) of the key contender ``index`` uses in one repetition: a fresh bucket each."""
    return f"c{index}-{rep}", f"bench-quota-c{index}-{rep}-secret"


def keys_file(path: Path, rate: float, reps: int) -> Path:
    """Write the keys file: one key per contender and repetition, N a second, each its burst."""
    lines = [f'warm-up:\n  key: "{WARM_UP_SECRET}"\n']  # no quota: the first call, not measured
    for rep in range(reps):  # bounded: the repetitions
        for index, (_, _, burst) in enumerate(CONTENDERS):
            name, secret = key_of(index, rep)
            burst_line = "" if burst is None else f"  burst: {burst}\n"
            lines.append(f'{name}:\n  key: "{secret}"\n  requests_per_second: {rate}\n{burst_line}')
    path.write_text("".join(lines))
    return path


async def open_loop(call: Callable[[], Awaitable[str]], rate: float, window_s: float) -> dict[str, Any]:
    """Send ``call`` at ``rate`` a second for ``window_s`` (at most rate x window calls); count outcomes.

    ``call`` returns ``"served"``, ``"refused"`` or ``"failed"``.
    """
    count = round(rate * window_s)
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for index in range(count):  # bounded: rate x window
        delay = start + index / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(call()))
    sent_s = loop.time() - start
    outcomes = await asyncio.gather(*tasks)
    return {
        "sent": count,
        "sent_per_s": count / sent_s if sent_s > 0 else float("nan"),
        "served": outcomes.count("served"),
        "refused": outcomes.count("refused"),
        "failed": outcomes.count("failed"),
    }


def grpc_call(stub: msg.ModelServiceStub, secret: str) -> Callable[[], Awaitable[str]]:
    """One ListModels of the key ``secret``, as an outcome."""
    metadata = (("authorization", f"Bearer {secret}"),)

    async def call() -> str:
        try:
            await stub.ListModels(m.ListModelsRequest(), metadata=metadata, timeout=30)
        except grpc.aio.AioRpcError as error:
            info = error_info_from_rpc_error(error)
            return "refused" if info is not None and info.reason == "QUOTA_EXCEEDED" else "failed"
        return "served"

    return call


def http_call(http: httpx.AsyncClient, secret: str) -> Callable[[], Awaitable[str]]:
    """One ``GET /v1/models`` of the key ``secret`` through the gateway, as an outcome."""
    headers = {"authorization": f"Bearer {secret}"}

    async def call() -> str:
        answer = await http.get("/v1/models", headers=headers)
        if answer.status_code == 200:
            return "served"
        return "refused" if answer.status_code == 429 and "retry-after" in answer.headers else "failed"

    return call


async def measure(
    rate: float,
    window_s: float,
    reps: int,
    folder: Path,
    checkpoint: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Every contender ``reps`` times, interleaved (the order turns each repetition).

    ``checkpoint(label)`` runs after each repetition (:meth:`bench.runner.Report.checkpoint`).
    """
    path = keys_file(folder / "keys.yaml", rate, reps)
    settings = Settings(grpc_port=0, data_dir=folder / "data", api_keys_file=path)
    running = await start_server(settings)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in CONTENDERS}
    try:
        app = create_app(f"127.0.0.1:{running.port}", api_keys_file=path)
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel,
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as http,
        ):
            stub = msg.ModelServiceStub(channel)
            warm_up = (("authorization", f"Bearer {WARM_UP_SECRET}"),)
            await stub.ListModels(m.ListModelsRequest(), metadata=warm_up, timeout=30)
            await http.get("/v1/models", headers=dict(warm_up))
            for rep in range(reps):
                turn = rep % len(CONTENDERS)
                for index in (*range(turn, len(CONTENDERS)), *range(turn)):
                    name, path_kind, burst = CONTENDERS[index]
                    secret = key_of(index, rep)[1]
                    call = grpc_call(stub, secret) if path_kind == "grpc" else http_call(http, secret)
                    print(f"[quota_accuracy] rep {rep + 1}/{reps} {name}", file=sys.stderr, flush=True)
                    run = await open_loop(call, 3 * rate, window_s)
                    run["burst"] = burst if burst is not None else math.ceil(rate)
                    runs[name].append(run)
                checkpoint(f"rep {rep + 1}")
    finally:
        await running.stop(grace=0.5)
    for reps_of in runs.values():
        for run in reps_of:
            run["steady_per_s"] = (run["served"] - run["burst"]) / window_s
            run["steady_over_rate"] = run["steady_per_s"] / rate
            run["served_over_expected"] = run["served"] / (rate * window_s + run["burst"])
    return {"runs": runs}


def table(payload: dict[str, Any]) -> dict[str, Any]:
    """The section's table (:func:`bench.results.markdown`'s ``tables``): a row per contender,
    medians over the repetitions."""
    header = "path | burst | sent | sent/s | served | refused | failed | steady served/s | steady / N | "
    header += "served / (N x window + burst) | goal met"
    rows = []
    for name, reps in payload["runs"].items():

        def med(key: str, reps: list[dict[str, Any]] = reps) -> float:
            return statistics.median(rep[key] for rep in reps)

        met = all(abs(rep["steady_over_rate"] - 1) <= GOAL_TOLERANCE for rep in reps)
        rows.append(
            [
                name,
                f"{med('burst'):.0f}",
                f"{med('sent'):.0f}",
                f"{med('sent_per_s'):.1f}",
                f"{med('served'):.0f}",
                f"{med('refused'):.0f}",
                f"{med('failed'):.0f}",
                f"{med('steady_per_s'):.2f}",
                f"{med('steady_over_rate'):.3f}",
                f"{med('served_over_expected'):.3f}",
                "yes" if met else "no",
            ]
        )
    title = f"Medians of {payload['reps']} repetition{'s' if payload['reps'] != 1 else ''}"
    return {"title": title, "header": header.split(" | "), "rows": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the bench; write ``quota_accuracy.json`` and the README section."""

    def add_arguments(parser: Any) -> None:
        parser.add_argument("--rate", type=float, default=20.0, help="N: the key's requests a second")

    cfg = parse_config(
        "quota_accuracy", argv, __doc__, reps={"full": 3, "quick": 2, "tiny": 1}, add_arguments=add_arguments
    )
    rate = cfg.args.rate
    window_s = cfg.pick(full=10.0, quick=10.0, tiny=2.0)
    title = f"Quota accuracy: a key of {rate:g} requests/s sending {3 * rate:g}/s for {window_s:g} s"
    settings = {"rate": rate, "window_s": window_s}
    with Report(cfg, title, [], {"name": "ListModels / GET /v1/models"}, settings) as report:
        with tempfile.TemporaryDirectory(prefix="bench-quota-") as folder:
            measured = asyncio.run(measure(rate, window_s, cfg.reps, Path(folder), report.checkpoint))
        report.payload.update(rate=rate, window_s=window_s, **measured)
        report.payload["tables"] = [table(report.payload)]
        report.note(
            f"goal: {rate:g} served a second, within {GOAL_TOLERANCE:.0%} (steady rate: served less the "
            "burst, over the window)"
        )
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
