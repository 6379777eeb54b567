"""Fairness: one key's single embeds beside another key's flood of 64 concurrent embedding clients.

One server (``universal-runtime``, the default catalog's ``all-minilm-l6-v2``) started with a keys
file of two keys of the same class and weight, ``team-a`` and ``team-b``. The flood is a child
process running :data:`FLOOD_CLIENTS` concurrent clients of ``team-a`` on one channel, each sending
``Embed`` calls back to back (closed loop) until it is stopped: of one sentence each (scenario
``flood-64``, at most 64 inputs queued: about one batch), or of :data:`BULK_INPUTS` sentences each
(``flood-64x16``, up to 1,024 inputs queued: 16 batches of the default 64). The probe is one
client sending single-sentence ``Embed`` calls one after another (:data:`PROBE_PAUSE_S` apart) for
the run's duration (at most :data:`MAX_PROBE_CALLS` calls). The contenders of a repetition,
interleaved (the order turns):

- ``alone`` (the reference): ``team-b``'s probe on an otherwise idle server;
- ``beside``: ``team-b``'s probe while ``team-a`` floods: the encoder batcher's fair queue
  (start-time fair queuing between keys, :mod:`engines.fair_queue`) puts each of its inputs in the
  next batch the lane takes, whatever ``team-a`` has queued;
- ``beside, fair_batch_ms N``: the same on servers whose embedder has another time slice
  (:data:`OTHER_SLICES_MS`; 0: no slices, batches as large as the limits allow while both keys
  send work), for the price and the gain of the slices (:mod:`engines.batching.time_slice`);
- ``same key``: the probe sent with ``team-a``'s key beside the same flood: first in, first out
  among the flood's inputs, what every caller got before the fair queue (for comparison only:
  with single-sentence flood calls, one batch of them is all that is ever queued, so it waits
  about as long; with bulk calls it waits for all 16 batches).

The goal: ``team-b``'s p99 beside the flood at most 1.5x its p99 alone. A batch on the
lane is never interrupted, so the probe's floor beside the flood is the rest of the batch running
when it arrives plus its own batch, which the flood's inputs fill: up to ``max_batch_size``
without time slices, up to about ``fair_batch_ms`` of device time with them.

Usage: ``python -m bench.fairness [--quick|--tiny] [--out DIR]``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import isolation, servers
from bench.procs import status_name
from bench.runner import Contender, Report, parse_config
from bench.workloads import EMBED_MODEL, SENTENCES, sentence_batch
from engines.batching.options import BatchingConfig

HEADLINE = [
    {"key": "probe_p99_ms", "label": "team-b embed p99 ms", "higher_is_better": False},
    {"key": "probe_p50_ms", "label": "team-b embed p50 ms", "higher_is_better": False},
    {"key": "flood_per_s", "label": "team-a inputs/s", "higher_is_better": True},
]
FLOOD_CLIENTS = 64
#: Sentences per flood call in the bulk scenario.
BULK_INPUTS = 16
#: Scenario name -> sentences per flood call.
SCENARIOS = {"flood-64": 1, f"flood-64x{BULK_INPUTS}": BULK_INPUTS}
PROBE_PAUSE_S = 0.01
#: Most probe calls in one run (the run also ends at its duration).
MAX_PROBE_CALLS = 5000
CALL_TIMEOUT_S = 30.0
#: Seconds the flood runs before the probe starts (its clients are all in flight by then).
FLOOD_LEAD_S = 1.0
KEYS = {"team-a": "bench-fairness-team-a-secret", "team-b": "bench-fairness-team-b-secret"}
#: The key that loads the model before the run (LoadModel needs role admin); no call is measured with it.
OPERATOR = ("operator", "bench-fairness-operator-secret")
GOAL_RATIO = 1.5
#: The embedder's time slice by default, and the others each measured on a server of its own.
DEFAULT_SLICE_MS = BatchingConfig().fair_batch_ms
OTHER_SLICES_MS = (50.0, 0.0)
DEFAULT_CATALOG = Path(__file__).resolve().parent.parent / "service" / "default_catalog.yaml"


def keys_file(folder: Path) -> Path:
    """Write the two keys (policy form: both interactive, weight 1) and the operator's (role
    admin, for LoadModel); return the file's path."""
    path = folder / "keys.yaml"
    path.write_text(
        "".join(
            f'{name}:\n  key: "{secret}"\n  priority: interactive\n  weight: 1\n'
            for name, secret in KEYS.items()
        )
        + f'{OPERATOR[0]}:\n  key: "{OPERATOR[1]}"\n  role: admin\n'
    )
    return path


def _metadata(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {KEYS[key]}"),)


def _flood(target: str, inputs: int, stop: Any, started: Any, out: Any) -> None:
    """Child process: :data:`FLOOD_CLIENTS` closed-loop embed clients of team-a until ``stop`` is set.

    Each call embeds ``inputs`` sentences; the summary put on ``out`` counts inputs embedded.
    """
    import grpc
    from universal_runtime.v1 import encoders_pb2, inference_service_pb2_grpc

    async def run() -> dict[str, Any]:
        calls, errors = 0, {}
        async with grpc.aio.insecure_channel(target) as channel:
            stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
            metadata = _metadata("team-a")

            async def client(index: int) -> None:
                nonlocal calls
                sent = 0
                while not stop.is_set():  # bounded by the run's duration (the parent sets stop)
                    batch = sentence_batch(index * 7919 + sent, inputs)
                    request = encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=batch)
                    try:
                        await stub.Embed(request, metadata=metadata, timeout=CALL_TIMEOUT_S)
                        calls += inputs
                    except grpc.aio.AioRpcError as exc:
                        name = status_name(exc) or exc.code().name
                        errors[name] = errors.get(name, 0) + 1
                    sent += 1

            started.set()
            begin = time.monotonic()
            await asyncio.gather(*(client(i) for i in range(FLOOD_CLIENTS)))
            return {"calls": calls, "errors": errors, "wall_s": time.monotonic() - begin}

    out.put(asyncio.run(run()))


def _probe(target: str, key: str, duration_s: float) -> list[dict[str, Any]]:
    """Single-sentence embeds of ``key`` one after another for ``duration_s``; one record per call."""
    import grpc
    from universal_runtime.v1 import encoders_pb2, inference_service_pb2_grpc

    records = []
    with grpc.insecure_channel(target) as channel:
        stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
        metadata = _metadata(key)
        end = time.monotonic() + duration_s
        for index in range(MAX_PROBE_CALLS):  # bounded: and by the duration
            if time.monotonic() >= end:
                break
            request = encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=[SENTENCES[index % len(SENTENCES)]])
            start = time.perf_counter()
            try:
                stub.Embed(request, metadata=metadata, timeout=CALL_TIMEOUT_S)
                records.append({"ok": True, "latency_s": time.perf_counter() - start})
            except grpc.RpcError as exc:
                records.append({"ok": False, "error": exc.code().name})
            time.sleep(PROBE_PAUSE_S)
    return records


def _load_embedder(target: str) -> None:
    """``LoadModel`` of the embedder (keep-alive ``-1``), with the operator's key (role admin)."""
    import grpc
    from universal_runtime.v1 import model_service_pb2, model_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        model_service_pb2_grpc.ModelServiceStub(channel).LoadModel(
            model_service_pb2.LoadModelRequest(name=EMBED_MODEL, keep_alive="-1"),
            metadata=(("authorization", f"Bearer {OPERATOR[1]}"),),
            timeout=300,
        )


def probe_metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-repetition figures: the probe's p50/p99 in ms and calls, the flood's inputs a second."""
    values = isolation.probe_metrics({"records": result["records"]})
    if "flood" in result:
        flood = result["flood"]
        values["flood_per_s"] = flood["calls"] / flood["wall_s"] if flood["wall_s"] > 0 else 0.0
        values["flood_errors"] = float(sum(flood["errors"].values()))
    return values


def sliced_catalog(folder: Path, slice_ms: float) -> Path:
    """A catalog of the default catalog's embedder with ``fair_batch_ms: slice_ms``."""
    catalog = yaml.safe_load(DEFAULT_CATALOG.read_text())
    entry = catalog["models"][EMBED_MODEL]
    entry["options"] = {**entry.get("options", {}), "fair_batch_ms": slice_ms}
    path = folder / f"slice-{slice_ms:g}ms.yaml"
    path.write_text(yaml.safe_dump({"models": {EMBED_MODEL: entry}}))
    return path


def contenders(target: str, others: dict[float, str], inputs: int, duration_s: float) -> list[Contender]:
    """team-b's probe alone (reference), beside team-a's flood (the default slice, then each of
    ``others``: slice in ms -> that server's gRPC target), and with team-a's key beside it."""

    def alone(params: dict[str, Any]) -> dict[str, Any]:
        start = time.monotonic()
        return {"records": _probe(target, "team-b", duration_s), "wall_s": time.monotonic() - start}

    def beside(key: str, target: str = target):
        def run(params: dict[str, Any]) -> dict[str, Any]:
            context = multiprocessing.get_context("spawn")
            stop, started, out = context.Event(), context.Event(), context.Queue()
            child = context.Process(target=_flood, args=(target, inputs, stop, started, out), daemon=True)
            child.start()
            try:
                if not started.wait(60):
                    raise RuntimeError("the flood did not start")
                time.sleep(FLOOD_LEAD_S)
                start = time.monotonic()
                records = _probe(target, key, duration_s)
                wall = time.monotonic() - start
            finally:
                stop.set()
            flood = out.get(timeout=CALL_TIMEOUT_S + 30)
            child.join(10)
            return {"records": records, "wall_s": wall, "flood": flood}

        return run

    return [
        Contender("alone", "team-b alone", "reference", run=alone),
        Contender("beside", "team-b beside team-a's flood", "ours", run=beside("team-b")),
        *(
            Contender(
                f"beside-slice-{slice_ms:g}",
                f"team-b beside the flood, fair_batch_ms {slice_ms:g}",
                "ours",
                run=beside("team-b", other),
            )
            for slice_ms, other in others.items()
        ),
        Contender("same-key", "the probe with team-a's key (FIFO)", "floor", run=beside("team-a")),
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the contenders interleaved; write the JSON, plot and README section."""
    cfg = parse_config("fairness", argv, __doc__, reps={"full": 3, "quick": 2, "tiny": 1})
    duration = cfg.pick(full=15.0, quick=6.0, tiny=2.0)
    settings = {
        "probe": {"model": EMBED_MODEL, "inputs": 1, "pause_s": PROBE_PAUSE_S, "duration_s": duration},
        "flood": {"clients": FLOOD_CLIENTS, "inputs_per_call": SCENARIOS, "lead_s": FLOOD_LEAD_S},
        "keys": {name: {"priority": "interactive", "weight": 1} for name in KEYS},
        "fair_batch_ms": {"default": DEFAULT_SLICE_MS, "others": list(OTHER_SLICES_MS)},
        "goal": f"team-b's p99 beside the flood <= {GOAL_RATIO}x its p99 alone",
    }
    title = f"Fairness — one key's single embeds beside another key's {FLOOD_CLIENTS} concurrent clients"
    with (
        Report(cfg, title, HEADLINE, {"embed": EMBED_MODEL}, settings) as report,
        tempfile.TemporaryDirectory(prefix="ur-bench-fairness-") as folder,
    ):
        env = {"UR_API_KEYS_FILE": str(keys_file(Path(folder)))}
        ours = report.start_server(lambda: servers.start_ours(cfg.log_dir, env=env))
        others = {}
        for slice_ms in OTHER_SLICES_MS:
            slice_env = {**env, "UR_CATALOG_PATH": str(sliced_catalog(Path(folder), slice_ms))}
            name = f"ours-slice-{slice_ms:g}ms"
            other = report.start_server(
                lambda name=name, env=slice_env: servers.start_ours(cfg.log_dir, name, env)
            )
            others[slice_ms] = other.grpc_target
        for target in (ours.grpc_target, *others.values()):
            _load_embedder(target)
            _probe(target, "team-b", 1.0)  # warm: the first batches are slower
        report.note(
            f"each repetition runs team-b's probe alone, beside team-a's flood (the default "
            f"fair_batch_ms of {DEFAULT_SLICE_MS:g} ms, then on servers with "
            f"{', '.join(f'{ms:g}' for ms in OTHER_SLICES_MS)} ms; 0: whole batches), and with "
            "team-a's key beside the flood (first in, first out among the flood's inputs); ratios are "
            "to the probe alone in the same repetition; the flood's client shares the machine's cores "
            "with the server"
        )
        for scenario, inputs in SCENARIOS.items():
            runs = [report.add(c) for c in contenders(ours.grpc_target, others, inputs, duration)]
            params = {"duration_s": duration, "flood_inputs_per_call": inputs}
            report.compare(scenario, params, runs, "alone", probe_metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
