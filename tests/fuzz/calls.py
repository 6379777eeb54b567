"""Calling any RPC with fuzzed requests, and the pass condition every fuzz case shares."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

import grpc
from hypothesis import given
from hypothesis import strategies as st
from universal_runtime.v1 import encoders_pb2 as e

from tests.conftest import EMBED_MODEL
from tests.fuzz.strategies import FUZZ_SETTINGS

log = logging.getLogger(__name__)
DEADLINE_S = 10.0
BAD_CODES = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
# grpc-python's aio client, not the server: when a server ends a client-streaming call while the
# client is still writing, the failed write sets the call's status locally to INTERNAL with these
# details and the server's own status is lost (see
# docs/architecture/design-notes.md#refusing-a-stream-after-its-upload). Ocr reads the whole upload
# before refusing bad options, which ends it there; a refusal mid-stream (FILE_TOO_LARGE, a bad
# StreamDetectAnomaly window) can still meet it. The server's INTERNAL always carries its own
# message (the admission chain's error mapping, service/core/admission/error_mapping.py), so only
# this exact text is let through, and only on client-streaming RPCs.
CLIENT_WRITE_RACE = "Internal error from Core"
#: Cases run, by "<RPC>:<status>", over every fuzz module of the run.
STATS: Counter[str] = Counter()


def _path(method) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


async def invoke(
    channel: grpc.aio.Channel,
    method,
    requests: list,
    *,
    metadata: tuple[tuple[str, str], ...] = (),
    replies: list[bytes] | None = None,
) -> tuple[grpc.StatusCode, str]:
    """Send ``requests`` (one unless client-streaming), drain the reply; return status and details.

    ``metadata`` goes with the call (an API key); the reply's serialized messages are appended to
    ``replies`` when it is given.
    """
    kept = replies if replies is not None else []
    kwargs = {
        "request_serializer": lambda msg: msg.SerializeToString(),
        "response_deserializer": lambda raw: raw,
    }
    path = _path(method)
    options = {"timeout": DEADLINE_S, "metadata": metadata or None}
    try:
        if method.client_streaming:
            kept += [
                reply async for reply in channel.stream_stream(path, **kwargs)(iter(requests), **options)
            ]
        elif method.server_streaming:
            kept += [reply async for reply in channel.unary_stream(path, **kwargs)(requests[0], **options)]
        else:
            kept.append(await channel.unary_unary(path, **kwargs)(requests[0], **options))
    except grpc.aio.AioRpcError as err:
        log.debug("%s: %s %s", method.name, err.code().name, err.details())
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


async def check_case(channel: grpc.aio.Channel, method, requests: list) -> None:
    """One fuzz case: no INTERNAL/UNKNOWN, and an answer within the deadline plus one second."""
    started = time.monotonic()
    code, details = await invoke(channel, method, requests)
    elapsed = time.monotonic() - started
    if method.client_streaming and code is grpc.StatusCode.INTERNAL and details == CLIENT_WRITE_RACE:
        STATS[f"{method.name}:client write race"] += 1
    else:
        STATS[f"{method.name}:{code.name}"] += 1
        assert code not in BAD_CODES, f"{method.name} answered {code.name} ({details}) to {requests!r}"
    assert elapsed <= DEADLINE_S + 1, f"{method.name} took {elapsed:.1f} s for {requests!r}"


async def assert_healthy(inference) -> None:
    """The server still answers a tiny Embed."""
    response = await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=["still alive"]), timeout=60)
    assert len(response.embeddings) == 1


async def fuzz_rpc(channel: grpc.aio.Channel, method, requests: st.SearchStrategy[list]) -> None:
    """Run :func:`check_case` on ``method`` for each drawn list of requests (``FUZZ_SETTINGS`` budget).

    Hypothesis drives a synchronous test function, so it runs in a worker thread and hands each
    call to this (the server's) event loop.
    """
    loop = asyncio.get_running_loop()

    @FUZZ_SETTINGS
    @given(drawn=requests)
    def fuzz(drawn: list) -> None:
        asyncio.run_coroutine_threadsafe(check_case(channel, method, drawn), loop).result()

    await asyncio.to_thread(fuzz)
