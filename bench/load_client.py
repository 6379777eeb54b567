"""The load generator: a separate process that sends a bounded load and prints JSON on stdout.

The same code drives our server and every peer: gRPC (``grpc.aio``) for our contract, HTTP
(``aiohttp``) for the gateway and the peers' OpenAI-style APIs. ``--concurrency`` workers share
one channel (or one connection pool) and take requests until ``--requests`` are sent or
``--duration-s`` has passed; each request's latency (and for streams the time to first token
and the tokens received) is recorded. ``--warmup`` requests go first and are not recorded.

Usage::

    python -m bench.load_client --mode grpc-generate --target 127.0.0.1:50051 \\
        --model smollm2-135m-instruct --concurrency 4 --requests 8

Output (one JSON object)::

    {"mode": ..., "concurrency": 4, "wall_s": 3.2,
     "records": [{"ok": true, "latency_s": 0.8, "ttft_s": 0.05, "tokens": 128, "items": 1}, ...]}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.procs import status_name
from bench.workloads import ANOMALY_SCORE_SEED, MAX_NEW_TOKENS, anomaly_matrix, chat_messages, sentence_batch

Record = dict[str, Any]
Call = Callable[[int], Awaitable[Record]]

MODES = (
    "grpc-generate",
    "sse-chat",
    "grpc-embed",
    "http-embed",
    "grpc-health",
    "grpc-list-models",
    "http-get",
    "grpc-ocr",
    "grpc-analyze",
    "grpc-anomaly",
    "grpc-echo",
)
#: Request forms of ``grpc-anomaly``: FeatureRow cells, or packed NumericRows with columnar output.
#: ``grpc-echo`` sends the bytes of the same request to :mod:`bench.echo_server` (the transport floor).
ANOMALY_FORMS = ("rows", "numeric")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.load_client", description=__doc__)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--target", required=True, help="host:port for gRPC, a base URL for HTTP")
    parser.add_argument("--path", default="", help="HTTP path appended to the base URL")
    parser.add_argument("--model", default="")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=10, help="most requests recorded")
    parser.add_argument("--duration-s", type=float, default=60.0, help="no request starts after this")
    parser.add_argument("--warmup", type=int, default=1, help="unrecorded requests sent first")
    parser.add_argument("--batch", type=int, default=1, help="inputs per embedding call")
    parser.add_argument("--max-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--extra", default="{}", help="JSON merged into each HTTP request body")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per-request deadline")
    parser.add_argument("--detector", default="", help="saved anomaly detector (grpc-anomaly)")
    parser.add_argument("--form", choices=ANOMALY_FORMS, default="rows", help="anomaly request form")
    parser.add_argument("--rows", type=int, default=10_000, help="rows per anomaly request")
    parser.add_argument(
        "--page",
        choices=("text", "document"),
        default="text",
        help="grpc-ocr: the 8-line text page, or the report page of grpc-analyze (with word boxes)",
    )
    parser.add_argument(
        "--salt",
        default=None,
        help="generation: make every prompt new (cold) with a code derived from this salt",
    )

    return parser.parse_args(argv)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {status_name(exc) or str(exc)[:200]}"


async def _grpc_calls(args: argparse.Namespace) -> tuple[Call, Callable[[], Awaitable[None]]]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from universal_runtime.v1 import (
        anomaly_pb2,
        documents_pb2,
        encoders_pb2,
        generation_pb2,
        inference_service_pb2_grpc,
        model_service_pb2,
        model_service_pb2_grpc,
        ocr_pb2,
    )

    channel = grpc.aio.insecure_channel(args.target)
    inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
    roles = {"user": generation_pb2.CHAT_ROLE_USER, "system": generation_pb2.CHAT_ROLE_SYSTEM}

    async def generate(i: int) -> Record:
        request = generation_pb2.GenerateStreamRequest(
            model=args.model,
            messages=[
                generation_pb2.ChatMessage(role=roles[m["role"]], content=m["content"])
                for m in chat_messages(i, args.salt)
            ],
            parameters=generation_pb2.GenerationParameters(
                max_tokens=args.max_tokens, temperature=0.0, repetition_penalty=1.0
            ),
        )
        start = time.perf_counter()
        ttft = None
        tokens = 0
        usage_tokens = None
        async for message in inference.GenerateStream(request, timeout=args.timeout_s):
            if ttft is None and (message.text or message.token_ids):
                ttft = time.perf_counter() - start
            tokens += len(message.token_ids)
            if message.HasField("usage"):
                usage_tokens = message.usage.completion_tokens
        return {"latency_s": time.perf_counter() - start, "ttft_s": ttft, "tokens": usage_tokens or tokens}

    async def embed(i: int) -> Record:
        inputs = sentence_batch(i, args.batch)
        start = time.perf_counter()
        response = await inference.Embed(
            encoders_pb2.EmbedRequest(model=args.model, inputs=inputs), timeout=args.timeout_s
        )
        assert len(response.embeddings) == len(inputs)
        return {"latency_s": time.perf_counter() - start, "items": len(inputs)}

    async def health(i: int) -> Record:
        stub = health_pb2_grpc.HealthStub(channel)
        start = time.perf_counter()
        await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=args.timeout_s)
        return {"latency_s": time.perf_counter() - start}

    async def list_models(i: int) -> Record:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        start = time.perf_counter()
        await stub.ListModels(model_service_pb2.ListModelsRequest(), timeout=args.timeout_s)
        return {"latency_s": time.perf_counter() - start}

    async def ocr(i: int) -> Record:
        # The document page is read with word boxes, as AnalyzeDocument reads it.
        options = ocr_pb2.OcrOptions(
            model=args.model, mime_type="image/png", return_boxes=args.page == "document"
        )
        start = time.perf_counter()
        stream = inference.Ocr(
            iter([ocr_pb2.OcrRequest(options=options, chunk=page)]), timeout=args.timeout_s
        )
        pages = [p async for p in stream]
        assert pages and pages[0].text, "no text read"
        return {"latency_s": time.perf_counter() - start, "items": len(pages)}

    async def analyze(i: int) -> Record:
        options = documents_pb2.AnalyzeDocumentOptions(
            document=documents_pb2.DocumentReadOptions(ocr_model=args.model, mime_type="image/png")
        )
        start = time.perf_counter()
        stream = inference.AnalyzeDocument(
            iter([documents_pb2.AnalyzeDocumentRequest(options=options, chunk=page)]), timeout=args.timeout_s
        )
        pages = [p async for p in stream]
        assert pages and pages[0].markdown, "no markdown"
        return {"latency_s": time.perf_counter() - start, "items": len(pages)}

    async def anomaly(i: int) -> Record:
        start = time.perf_counter()
        response = await inference.DetectAnomaly(anomaly_request, timeout=args.timeout_s)
        assert response.summary.row_count == args.rows
        return {"latency_s": time.perf_counter() - start, "items": args.rows}

    async def echo(i: int) -> Record:
        start = time.perf_counter()
        await echo_call(echo_bytes, timeout=args.timeout_s)
        return {"latency_s": time.perf_counter() - start, "items": args.rows}

    if args.mode == "grpc-ocr" and args.page == "text":
        from bench.workloads import ocr_page_png

        page = ocr_page_png()
    elif args.mode in ("grpc-ocr", "grpc-analyze"):
        from bench.workloads import document_page_png

        page = document_page_png()
    if args.mode in ("grpc-anomaly", "grpc-echo"):
        # Built once, before timing: the figure is the RPC (serialize, send, score, parse).
        matrix = anomaly_matrix(args.rows, ANOMALY_SCORE_SEED)
        if args.form == "numeric":
            packed = anomaly_pb2.NumericRows(column_count=matrix.shape[1], values=matrix.ravel().tolist())
            anomaly_request = anomaly_pb2.DetectAnomalyRequest(
                detector=args.detector, numeric_rows=packed, columnar_output=True
            )
        else:
            rows = [
                anomaly_pb2.FeatureRow(values=[anomaly_pb2.FeatureValue(number_value=v) for v in row])
                for row in matrix.tolist()
            ]
            anomaly_request = anomaly_pb2.DetectAnomalyRequest(detector=args.detector, rows=rows)
    if args.mode == "grpc-echo":
        from bench.echo_server import ECHO_METHOD

        # The same bytes our server would receive, to a server that does nothing with them.
        echo_bytes = anomaly_request.SerializeToString()
        echo_call = channel.unary_unary(ECHO_METHOD)

    calls = {
        "grpc-generate": generate,
        "grpc-embed": embed,
        "grpc-health": health,
        "grpc-list-models": list_models,
        "grpc-ocr": ocr,
        "grpc-analyze": analyze,
        "grpc-anomaly": anomaly,
        "grpc-echo": echo,
    }
    return calls[args.mode], channel.close


async def _http_calls(args: argparse.Namespace) -> tuple[Call, Callable[[], Awaitable[None]]]:
    # aiohttp, not httpx: at 64 clients httpx's client costs about as much CPU as the gateway it
    # drives, so the load generator, not the server, would set the figure.
    import aiohttp

    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=args.timeout_s)
    session = aiohttp.ClientSession(base_url=args.target, connector=connector, timeout=timeout)
    extra = json.loads(args.extra)

    async def chat(i: int) -> Record:
        body = {
            "model": args.model,
            "messages": chat_messages(i, args.salt),
            "max_tokens": args.max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **extra,
        }
        start = time.perf_counter()
        ttft = None
        chunks = 0
        usage_tokens = None
        async with session.post(args.path or "/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            async for raw in response.content:  # one SSE line at a time
                line = raw.decode()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                for choice in chunk.get("choices") or []:
                    if (choice.get("delta") or {}).get("content"):
                        chunks += 1
                        if ttft is None:
                            ttft = time.perf_counter() - start
                if chunk.get("usage"):
                    usage_tokens = chunk["usage"].get("completion_tokens")
        # Servers that send no usage send one chunk per token (llama.cpp does).
        return {"latency_s": time.perf_counter() - start, "ttft_s": ttft, "tokens": usage_tokens or chunks}

    async def embed(i: int) -> Record:
        inputs = sentence_batch(i, args.batch)
        start = time.perf_counter()
        body = {"model": args.model, "input": inputs, **extra}
        async with session.post(args.path or "/v1/embeddings", json=body) as response:
            response.raise_for_status()
            data = (await response.json())["data"]
        assert len(data) == len(inputs)
        return {"latency_s": time.perf_counter() - start, "items": len(inputs)}

    async def get(i: int) -> Record:
        start = time.perf_counter()
        async with session.get(args.path or "/health") as response:
            response.raise_for_status()
            await response.read()
        return {"latency_s": time.perf_counter() - start}

    calls = {"sse-chat": chat, "http-embed": embed, "http-get": get}
    return calls[args.mode], session.close


async def run_load(args: argparse.Namespace) -> dict[str, Any]:
    """Send the load described by ``args``; return the result object (see the module docstring)."""
    make = _grpc_calls if args.mode.startswith("grpc-") else _http_calls
    call, close = await make(args)
    try:
        # Warm-up opens the connection (and a generation warm-up asks for one token only, so
        # that connection setup is not counted in the first request's time to first token).
        max_tokens, args.max_tokens = args.max_tokens, 1
        for i in range(args.warmup):
            await call(-1 - i)
        args.max_tokens = max_tokens
        next_index = 0
        records: list[Record] = []
        deadline = time.perf_counter() + args.duration_s

        async def worker() -> None:
            nonlocal next_index
            while next_index < args.requests and time.perf_counter() < deadline:
                i = next_index
                next_index += 1
                started = time.perf_counter()
                try:
                    record = await call(i)
                    record["ok"] = True
                except Exception as exc:  # recorded, never fatal: errors are part of the result
                    # How long a refusal or a timeout took matters as much as that it happened.
                    record = {"ok": False, "error": _error(exc), "latency_s": time.perf_counter() - started}
                records.append(record)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        wall = time.perf_counter() - start
    finally:
        await close()
    return {"mode": args.mode, "concurrency": args.concurrency, "wall_s": wall, "records": records}


def main(argv: list[str] | None = None) -> None:
    """Run the load and print the JSON result on the original stdout."""
    args = parse_args(argv)
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything a library prints goes to stderr, keeping stdout pure JSON
    result = asyncio.run(run_load(args))
    out.write(json.dumps(result) + "\n")
    out.flush()


if __name__ == "__main__":
    sys.exit(main())
