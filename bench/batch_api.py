"""The Batch API: a batch's throughput against the same lines sent live, and what it costs live callers.

One server (``universal-runtime``: gRPC, the gateway and the batch runner, default catalog:
``all-minilm-l6-v2`` and ``smollm2-135m-instruct``) started with a keys file of two keys of the
interactive class: ``bulk`` submits the batches (their lines run at ``batch`` priority whatever
the key's class, :mod:`service.batches`), ``app`` sends every live call. Three scenarios, each
with its contenders interleaved within a repetition (the order turns):

1. ``embed-lines``: N single-sentence ``/v1/embeddings`` lines (default :data:`EMBED_LINES`,
   ``--embed-lines`` up to 10,000);
2. ``chat-lines``: M ``/v1/chat/completions`` lines (default :data:`CHAT_LINES`, ``--chat-lines``
   up to 200; ``max_tokens`` :data:`CHAT_MAX_TOKENS`, temperature 0, each prompt new: a cold
   code in its system message, :func:`bench.workloads.chat_messages`).

   Contenders, on an otherwise idle server: ``batch`` (the JSONL uploaded with ``POST /v1/files``,
   ``POST /v1/batches``, polled every :data:`POLL_S` until it ends; lines/s is the lines over
   ``completed_at - in_progress_at``, the batch's own stamps, whole seconds as OpenAI's, so
   each is good to 1 s; ``e2e lines/s`` is over the time from the create call to the poll that
   saw it end, validation and finalizing included), and the same bodies sent as live HTTP calls
   through the gateway by :data:`LIVE_CONCURRENCY` (the runner's per-batch line concurrency,
   ``UR_BATCH_LINE_CONCURRENCY``, the reference) and by 8 concurrent clients (aiohttp, in this
   process). Goal: the batch's lines/s at least :data:`THROUGHPUT_GOAL` of the live
   calls'.

3. ``interactive``: an interactive chat's time to first token (``GenerateStream``, cold prompt,
   :data:`PROBE_TOKENS` tokens) and an interactive ``Embed`` of one sentence, two gRPC probes
   running side by side one call after another, ``quiet`` (the reference: an idle server, for
   the probe duration) and ``beside batches`` (while a batch of the N embedding lines and one of
   the M chat lines run, from when both were created until the first ended: every probe call ran
   beside both; the other is then cancelled). Goal: each probe's p99 beside the batches at most
   :data:`INTERFERENCE_GOAL` x its p99 quiet.

Every loop is bounded: the lines (at most :data:`MAX_EMBED_LINES` / :data:`MAX_CHAT_LINES`), the
probes (:data:`MAX_PROBE_CALLS` each, and the duration), the polls (:data:`BATCH_DEADLINE_S`).

Usage: ``python -m bench.batch_api [--quick|--tiny] [--out DIR] [--embed-lines N] [--chat-lines M]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import servers
from bench.procs import status_name
from bench.runner import Contender, Report, parse_config
from bench.stats import percentile
from bench.workloads import CHAT_MODEL, EMBED_MODEL, SENTENCES, chat_messages

HEADLINE = [
    {"key": "lines_per_s", "label": "lines/s", "higher_is_better": True},
    {"key": "e2e_lines_per_s", "label": "e2e lines/s", "higher_is_better": True},
    {"key": "chat_ttft_p99_ms", "label": "chat TTFT p99 ms", "higher_is_better": False},
    {"key": "embed_p99_ms", "label": "embed p99 ms", "higher_is_better": False},
]
KEYS = {"bulk": "bench-batch-api-bulk-secret", "app": "bench-batch-api-app-secret"}
#: The key that loads the models before the run (LoadModel needs role admin); no call is measured with it.
OPERATOR = ("operator", "bench-batch-api-operator-secret")
#: Defaults and most lines of each batch.
EMBED_LINES, MAX_EMBED_LINES = 2_000, 10_000
CHAT_LINES, MAX_CHAT_LINES = 50, 200
CHAT_MAX_TOKENS = 16
#: The runner's per-batch line concurrency (set on the server, so the reference matches it).
LIVE_CONCURRENCY = 4
WIDE_CONCURRENCY = 8
POLL_S = 0.1
#: Longest a batch may run before the run fails (a hang, not a slow machine: 10,000 lines take minutes).
BATCH_DEADLINE_S = 1800.0
CALL_TIMEOUT_S = 120.0
PROBE_TOKENS = 4
#: Pause between two calls of one probe, seconds.
PROBE_PAUSE_S = 0.02
#: Most calls of one probe in one run (the run also ends at its duration).
MAX_PROBE_CALLS = 5000
THROUGHPUT_GOAL = 0.8
INTERFERENCE_GOAL = 1.5
TIMES_SIGN = "\u00d7"
ENDED = ("completed", "failed", "expired", "cancelled")


def keys_file(folder: Path) -> Path:
    """Write the two keys (policy form, both interactive, weight 1) and the operator's (role admin,
    for LoadModel); return the file's path."""
    import yaml

    path = folder / "keys.yaml"
    policies = {
        name: {"key": secret, "priority": "interactive", "weight": 1} for name, secret in KEYS.items()
    }
    policies[OPERATOR[0]] = {"key": OPERATOR[1], "role": "admin"}
    path.write_text(yaml.safe_dump(policies))
    return path


def _headers(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[key]}"}


def embed_bodies(count: int) -> list[dict[str, Any]]:
    """``count`` single-sentence ``/v1/embeddings`` bodies (the bench's 64 sentences in turn)."""
    return [{"model": EMBED_MODEL, "input": SENTENCES[i % len(SENTENCES)]} for i in range(count)]


def chat_bodies(count: int, salt: str) -> list[dict[str, Any]]:
    """``count`` ``/v1/chat/completions`` bodies, each prompt new (a cold code derived from ``salt``)."""
    return [
        {
            "model": CHAT_MODEL,
            "messages": chat_messages(i, salt),
            "max_tokens": CHAT_MAX_TOKENS,
            "temperature": 0.0,
        }
        for i in range(count)
    ]


def jsonl(url: str, bodies: list[dict[str, Any]]) -> bytes:
    """A batch input file: one line per body, ``custom_id`` ``line-<i>``."""
    lines = (
        {"custom_id": f"line-{i}", "method": "POST", "url": url, "body": b} for i, b in enumerate(bodies)
    )
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


class BatchClient:
    """The ``bulk`` key's Batch API calls through the gateway at ``base`` (httpx, async).

    Raises (every method): ``httpx.HTTPStatusError`` for an answer other than 2xx.
    """

    def __init__(self, base: str):
        import httpx

        self.http = httpx.AsyncClient(base_url=base, headers=_headers("bulk"), timeout=CALL_TIMEOUT_S)

    async def close(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()

    async def submit(self, url: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
        """Upload ``bodies`` as a JSONL file and create a batch on ``url``.

        Returns ``{"batch": the created batch, "upload_s": seconds the upload took, "created": perf_counter
        when the create call returned}``.
        """
        start = time.perf_counter()
        name = f"{url.strip('/').replace('/', '-')}.jsonl"
        answer = await self.http.post(
            "/v1/files", files={"file": (name, jsonl(url, bodies))}, data={"purpose": "batch"}
        )
        answer.raise_for_status()
        upload_s = time.perf_counter() - start
        body = {"input_file_id": answer.json()["id"], "endpoint": url, "completion_window": "24h"}
        created = await self.http.post("/v1/batches", json=body)
        created.raise_for_status()
        return {"batch": created.json(), "upload_s": upload_s, "created": time.perf_counter()}

    async def wait(self, batch_id: str) -> dict[str, Any]:
        """Poll every :data:`POLL_S` until the batch ended; the batch and ``ended`` (perf_counter seen).

        Raises:
            TimeoutError: it did not end within :data:`BATCH_DEADLINE_S`.

        """
        async with asyncio.timeout(BATCH_DEADLINE_S):
            while True:  # bounded by the deadline
                answer = await self.http.get(f"/v1/batches/{batch_id}")
                answer.raise_for_status()
                batch = answer.json()
                if batch["status"] in ENDED:
                    return {"batch": batch, "ended": time.perf_counter()}
                await asyncio.sleep(POLL_S)

    async def cancel(self, batch_id: str) -> None:
        """Cancel the batch (an answer of 400, the batch ended meanwhile, is no failure)."""
        answer = await self.http.post(f"/v1/batches/{batch_id}/cancel")
        if answer.status_code != 400:
            answer.raise_for_status()

    async def delete_files(self, batch: dict[str, Any]) -> None:
        """Delete the batch's input, output and error files (the store keeps only what a run needs)."""
        for key in ("input_file_id", "output_file_id", "error_file_id"):
            if batch.get(key):
                (await self.http.delete(f"/v1/files/{batch[key]}")).raise_for_status()


def batch_result(submitted: dict[str, Any], waited: dict[str, Any]) -> dict[str, Any]:
    """A batch run as a contender's result: one record per line (failed lines with their error) and metrics.

    Raises:
        RuntimeError: the batch did not complete.

    """
    batch = waited["batch"]
    if batch["status"] != "completed":
        raise RuntimeError(f"batch {batch['id']} ended {batch['status']}: {batch.get('errors')}")
    counts = batch["request_counts"]
    span = batch["completed_at"] - batch["in_progress_at"]
    e2e = waited["ended"] - submitted["created"]
    records = [{"ok": True}] * counts["completed"] + [{"ok": False, "error": "failed line"}] * counts[
        "failed"
    ]
    metrics = {
        "lines_per_s": counts["completed"] / span if span > 0 else float("nan"),
        "e2e_lines_per_s": counts["completed"] / e2e if e2e > 0 else float("nan"),
        "stamped_s": float(span),
        "e2e_s": e2e,
        "upload_s": submitted["upload_s"],
    }
    return {"records": records, "wall_s": e2e, "metrics": metrics}


async def _run_batch(base: str, url: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    client = BatchClient(base)
    try:
        submitted = await client.submit(url, bodies)
        waited = await client.wait(submitted["batch"]["id"])
        await client.delete_files(waited["batch"])
    finally:
        await client.close()
    return batch_result(submitted, waited)


async def _run_live(base: str, url: str, bodies: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """``bodies`` POSTed to ``url`` by ``concurrency`` clients (aiohttp: less client CPU than httpx)."""
    import aiohttp

    records: list[dict[str, Any]] = []
    pending = iter(bodies)
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)
    async with aiohttp.ClientSession(
        base_url=base, connector=connector, timeout=timeout, headers=_headers("app")
    ) as session:

        async def worker() -> None:
            for body in pending:  # bounded: the shared iterator of the lines
                start = time.perf_counter()
                try:
                    async with session.post(url, json=body) as answer:
                        await answer.read()
                        ok = answer.status == 200
                        records.append(
                            {"ok": ok, "latency_s": time.perf_counter() - start, "error": answer.status}
                        )
                except (aiohttp.ClientError, TimeoutError) as exc:
                    records.append({"ok": False, "error": type(exc).__name__})

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    done = sum(r["ok"] for r in records)
    latencies = [r["latency_s"] for r in records if r["ok"]]
    metrics = {
        "lines_per_s": done / wall if wall > 0 else float("nan"),
        "latency_p50_ms": percentile(latencies, 50) * 1000,
    }
    metrics["e2e_lines_per_s"] = metrics["lines_per_s"]
    return {"records": records, "wall_s": wall, "metrics": metrics}


def throughput_contenders(base: str, url: str, make_bodies: Any) -> list[Contender]:
    """The batch, and the same lines live at the runner's concurrency (reference) and at 8.

    ``make_bodies(params)`` gives the lines of one run (the params carry the count and a salt).
    """

    def batch(params: dict[str, Any]) -> dict[str, Any]:
        return asyncio.run(_run_batch(base, url, make_bodies(params)))

    def live(concurrency: int):
        def run(params: dict[str, Any]) -> dict[str, Any]:
            return asyncio.run(_run_live(base, url, make_bodies(params), concurrency))

        return run

    return [
        Contender(
            f"live-{LIVE_CONCURRENCY}",
            f"live calls, {LIVE_CONCURRENCY} clients",
            "reference",
            run=live(LIVE_CONCURRENCY),
        ),
        Contender("batch", "batch (/v1/files + /v1/batches)", "ours", run=batch),
        Contender(
            f"live-{WIDE_CONCURRENCY}",
            f"live calls, {WIDE_CONCURRENCY} clients",
            "ceiling",
            run=live(WIDE_CONCURRENCY),
        ),
    ]


async def _probe(target: str, salt: str, stop: asyncio.Event) -> list[dict[str, Any]]:
    """The two interactive probes side by side until ``stop`` is set; one record per call.

    Chat: ``GenerateStream`` of a cold prompt (``salt``), :data:`PROBE_TOKENS` tokens, its time to
    first token; embed: ``Embed`` of one sentence, its latency. Each at most :data:`MAX_PROBE_CALLS`.
    """
    import grpc
    from universal_runtime.v1 import encoders_pb2, generation_pb2, inference_service_pb2_grpc

    roles = {"user": generation_pb2.CHAT_ROLE_USER, "system": generation_pb2.CHAT_ROLE_SYSTEM}
    metadata = (("authorization", f"Bearer {KEYS['app']}"),)
    records: list[dict[str, Any]] = []

    async with grpc.aio.insecure_channel(target) as channel:
        stub = inference_service_pb2_grpc.InferenceServiceStub(channel)

        async def chat() -> None:
            for index in range(MAX_PROBE_CALLS):  # bounded: and by stop
                if stop.is_set():
                    return
                request = generation_pb2.GenerateStreamRequest(
                    model=CHAT_MODEL,
                    messages=[
                        generation_pb2.ChatMessage(role=roles[m["role"]], content=m["content"])
                        for m in chat_messages(index, salt)
                    ],
                    parameters=generation_pb2.GenerationParameters(max_tokens=PROBE_TOKENS, temperature=0.0),
                )
                start = time.perf_counter()
                ttft = None
                try:
                    async for message in stub.GenerateStream(
                        request, metadata=metadata, timeout=CALL_TIMEOUT_S
                    ):
                        if ttft is None and (message.text or message.token_ids):
                            ttft = time.perf_counter() - start
                    records.append(
                        {"ok": ttft is not None, "kind": "chat", "ttft_s": ttft, "error": "no token"}
                    )
                except grpc.aio.AioRpcError as exc:
                    records.append(
                        {"ok": False, "kind": "chat", "error": status_name(exc) or exc.code().name}
                    )
                await asyncio.sleep(PROBE_PAUSE_S)

        async def embed() -> None:
            for index in range(MAX_PROBE_CALLS):  # bounded: and by stop
                if stop.is_set():
                    return
                request = encoders_pb2.EmbedRequest(
                    model=EMBED_MODEL, inputs=[SENTENCES[index % len(SENTENCES)]]
                )
                start = time.perf_counter()
                try:
                    await stub.Embed(request, metadata=metadata, timeout=CALL_TIMEOUT_S)
                    records.append({"ok": True, "kind": "embed", "latency_s": time.perf_counter() - start})
                except grpc.aio.AioRpcError as exc:
                    records.append(
                        {"ok": False, "kind": "embed", "error": status_name(exc) or exc.code().name}
                    )
                await asyncio.sleep(PROBE_PAUSE_S)

        await asyncio.gather(chat(), embed())
    return records


def probe_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """The probes' p50/p99 in ms and their call counts."""
    ttfts = [r["ttft_s"] for r in records if r["ok"] and r["kind"] == "chat"]
    embeds = [r["latency_s"] for r in records if r["ok"] and r["kind"] == "embed"]
    return {
        "chat_ttft_p99_ms": percentile(ttfts, 99) * 1000,
        "chat_ttft_p50_ms": percentile(ttfts, 50) * 1000,
        "chat_calls": float(len(ttfts)),
        "embed_p99_ms": percentile(embeds, 99) * 1000,
        "embed_p50_ms": percentile(embeds, 50) * 1000,
        "embed_calls": float(len(embeds)),
    }


async def _quiet(target: str, salt: str, duration_s: float) -> dict[str, Any]:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(duration_s, stop.set)
    start = time.perf_counter()
    records = await _probe(target, salt, stop)
    return {"records": records, "wall_s": time.perf_counter() - start, "metrics": probe_metrics(records)}


def stamped_lines_per_s(batch: dict[str, Any]) -> float:
    """A batch's completed lines over its own stamps, ``in_progress_at`` to its end (NaN without a span)."""
    end = batch.get("completed_at") or batch.get("cancelled_at") or 0
    span = end - (batch.get("in_progress_at") or end)
    return batch["request_counts"]["completed"] / span if span > 0 else float("nan")


async def _beside(base: str, target: str, salt: str, embed_lines: int, chat_lines: int) -> dict[str, Any]:
    """The probes from when both batches were created until the first of them ended.

    So every probe call ran while both batches did; the other batch is then cancelled (its lines
    in flight finish) and waited for, and every file of the two is deleted.
    """
    client = BatchClient(base)
    try:
        embeds = await client.submit("/v1/embeddings", embed_bodies(embed_lines))
        chats = await client.submit("/v1/chat/completions", chat_bodies(chat_lines, f"beside-{salt}"))
        ids = (embeds["batch"]["id"], chats["batch"]["id"])
        stop = asyncio.Event()
        start = time.perf_counter()
        probing = asyncio.create_task(_probe(target, salt, stop))
        waits = [asyncio.create_task(client.wait(batch_id)) for batch_id in ids]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.set()
        wall = time.perf_counter() - start
        records = await probing
        for batch_id, waiting in zip(ids, waits, strict=True):
            if not waiting.done():
                await client.cancel(batch_id)
        ended = [(await waiting)["batch"] for waiting in waits]
        for batch in ended:
            await client.delete_files(batch)
    finally:
        await client.close()
    metrics = probe_metrics(records)
    metrics.update(
        embed_batch_lines_per_s=stamped_lines_per_s(ended[0]),
        chat_batch_lines_per_s=stamped_lines_per_s(ended[1]),
        beside_s=wall,
    )
    return {"records": records, "wall_s": wall, "metrics": metrics}


def interference_contenders(
    base: str, target: str, duration_s: float, embed_lines: int, chat_lines: int
) -> list[Contender]:
    """The probes on an idle server (reference) and beside a running embedding and chat batch."""

    def quiet(params: dict[str, Any]) -> dict[str, Any]:
        return asyncio.run(_quiet(target, params["salt"], duration_s))

    def beside(params: dict[str, Any]) -> dict[str, Any]:
        return asyncio.run(_beside(base, target, params["salt"], embed_lines, chat_lines))

    return [
        Contender("quiet", "probes, idle server", "reference", run=quiet),
        Contender("beside", "probes beside the two batches", "ours", run=beside),
    ]


def warm_up(server: servers.Server) -> None:
    """Load both models (keep-alive ``-1``) and run a 4-line batch and a live call of each endpoint."""
    import grpc
    from universal_runtime.v1 import model_service_pb2, model_service_pb2_grpc

    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        for model in (EMBED_MODEL, CHAT_MODEL):
            stub.LoadModel(
                model_service_pb2.LoadModelRequest(name=model, keep_alive="-1"),
                metadata=(("authorization", f"Bearer {OPERATOR[1]}"),),
                timeout=300,
            )
    for url, bodies in (
        ("/v1/embeddings", embed_bodies(4)),
        ("/v1/chat/completions", chat_bodies(4, "warm")),
    ):
        asyncio.run(_run_batch(server.http_base, url, bodies))
        asyncio.run(_run_live(server.http_base, url, bodies, LIVE_CONCURRENCY))
    asyncio.run(_quiet(server.grpc_target, "warm", 1.0))


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--embed-lines",
        type=int,
        help=f"embedding lines per batch (default {EMBED_LINES}; at most {MAX_EMBED_LINES})",
    )
    parser.add_argument(
        "--chat-lines",
        type=int,
        help=f"chat lines per batch (default {CHAT_LINES}; at most {MAX_CHAT_LINES})",
    )


def _sizes(cfg: Any) -> tuple[int, int]:
    """(embedding lines, chat lines) of this run: the flags, else the mode's defaults.

    Raises:
        SystemExit: a count outside 1..the most (status 2, as argparse's errors).

    """
    embed = cfg.args.embed_lines or cfg.pick(full=EMBED_LINES, quick=EMBED_LINES // 2, tiny=40)
    chat = cfg.args.chat_lines or cfg.pick(full=CHAT_LINES, quick=CHAT_LINES // 2, tiny=4)
    for name, value, most in (
        ("--embed-lines", embed, MAX_EMBED_LINES),
        ("--chat-lines", chat, MAX_CHAT_LINES),
    ):
        if not 1 <= value <= most:
            print(f"python -m bench.batch_api: error: {name} must be 1..{most}, got {value}", file=sys.stderr)
            raise SystemExit(2)
    return embed, chat


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the three scenarios, each interleaved; write the JSON, plot and README section."""
    cfg = parse_config(
        "batch_api", argv, __doc__, reps={"full": 3, "quick": 2, "tiny": 1}, add_arguments=_add_arguments
    )
    embed_lines, chat_lines = _sizes(cfg)
    duration = cfg.pick(full=10.0, quick=6.0, tiny=2.0)
    settings = {
        "embed_lines": embed_lines,
        "chat_lines": chat_lines,
        "chat_max_tokens": CHAT_MAX_TOKENS,
        "batch_line_concurrency": LIVE_CONCURRENCY,
        "live_concurrency": [LIVE_CONCURRENCY, WIDE_CONCURRENCY],
        "poll_s": POLL_S,
        "probe": {"tokens": PROBE_TOKENS, "pause_s": PROBE_PAUSE_S, "quiet_duration_s": duration},
        "keys": {name: {"priority": "interactive", "weight": 1} for name in KEYS},
        "goals": {
            "throughput": f"batch lines/s >= {THROUGHPUT_GOAL}x the same lines live",
            "interference": f"probe p99 beside the batches <= {INTERFERENCE_GOAL}x quiet",
        },
        "load_average_at_start": list(os.getloadavg()),
    }
    title = "Batch API — a batch's lines/s against the same lines live, and live callers beside it"
    with (
        Report(cfg, title, HEADLINE, {"embed": EMBED_MODEL, "chat": CHAT_MODEL}, settings) as report,
        tempfile.TemporaryDirectory(prefix="ur-bench-batch-api-") as folder,
    ):
        env = {
            "UR_API_KEYS_FILE": str(keys_file(Path(folder))),
            "UR_BATCH_LINE_CONCURRENCY": str(LIVE_CONCURRENCY),
        }
        ours = report.start_server(lambda: servers.start_ours(cfg.log_dir, env=env))
        base, target = ours.http_base, ours.grpc_target
        assert base is not None and target is not None
        warm_up(ours)
        report.set_ceiling(
            f"live-{WIDE_CONCURRENCY}", "lines_per_s", f"{TIMES_SIGN}live, {WIDE_CONCURRENCY} clients"
        )
        report.note(
            "lines/s of a batch: its lines over completed_at - in_progress_at (whole seconds, so good to "
            "1 s); e2e: over the create call to the poll that saw it end; live: lines over the wall time "
            "of the clients (aiohttp in the bench's process, sharing the machine's cores with the server)"
        )
        report.note(
            "interactive: a chat probe (GenerateStream, cold prompt, time to first token) and an embed "
            "probe (one sentence) side by side, quiet for the probe duration and beside a batch of the "
            "embedding lines and one of the chat lines, from their creation until the first of them ended "
            "(the other is then cancelled); batch lines/s beside: completed lines over the batch's stamps"
        )

        def salted(contender: Contender, rep: int) -> dict[str, Any]:
            return {"salt": f"{contender.name}-{rep}"}

        scenarios = (
            ("embed-lines", "/v1/embeddings", lambda p: embed_bodies(embed_lines), {"lines": embed_lines}),
            (
                "chat-lines",
                "/v1/chat/completions",
                lambda p: chat_bodies(chat_lines, p["salt"]),
                {"lines": chat_lines},
            ),
        )
        for name, url, make_bodies, params in scenarios:
            trio = [report.add(c) for c in throughput_contenders(base, url, make_bodies)]
            report.compare(
                name, params, trio, f"live-{LIVE_CONCURRENCY}", lambda r: r["metrics"], vary=salted
            )
        pair = [
            report.add(c) for c in interference_contenders(base, target, duration, embed_lines, chat_lines)
        ]
        params = {"embed_lines": embed_lines, "chat_lines": chat_lines, "quiet_s": duration}
        report.compare("interactive", params, pair, "quiet", lambda r: r["metrics"], vary=salted)
        report.note(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
