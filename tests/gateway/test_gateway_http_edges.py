"""Request heads over their limits, through uvicorn: 431/414 before the head is buffered.

uvicorn's httptools protocol alone buffers a header of any size, so a 10 MB header would make
``GET /health`` a 200 and grow the process by hundreds of megabytes (see
docs/architecture/design-notes.md#http-request-heads).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from urllib.parse import urlsplit

import httpx
import pytest

from gateway.app import create_app
from gateway.http_limits import (
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADER_COUNT,
    DEFAULT_MAX_HEADER_LINE_BYTES,
)
from tests.gateway.gateway_fakes import serve_with_uvicorn


@pytest.fixture
async def base_url(fake):
    async with serve_with_uvicorn(create_app(fake.target)) as url:
        yield url


async def exchange(base_url: str, head: bytes, *, chunk: int = 64 * 1024) -> tuple[int, dict, int]:
    """Send ``head`` (in chunks; the server may close early) and read the answer.

    Returns the status, the JSON body (``{}`` if none) and how many bytes of the head were sent
    before the server closed the connection.
    """
    address = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    sent = 0
    try:
        with contextlib.suppress(ConnectionError):
            for start in range(0, len(head), chunk):
                writer.write(head[start : start + chunk])
                await writer.drain()
                sent = start + chunk
                if reader.at_eof() or writer.is_closing():
                    break
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    status_line, _, rest = answer.partition(b"\r\n")
    _, _, body = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(body) if body else {}, min(sent, len(head))


def get(path: str = "/health", headers: list[tuple[str, str]] = ()) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: gateway", "Connection: close", *(f"{n}: {v}" for n, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (
            [("x-big", "a" * DEFAULT_MAX_HEADER_LINE_BYTES)],
            f"A request header exceeds {DEFAULT_MAX_HEADER_LINE_BYTES}",
        ),
        (
            [(f"x-h{i}", "v") for i in range(DEFAULT_MAX_HEADER_COUNT + 1)],
            f"more than {DEFAULT_MAX_HEADER_COUNT}",
        ),
        ([(f"x-h{i}", "a" * 4000) for i in range(20)], f"exceed {DEFAULT_MAX_HEADER_BYTES} bytes in all"),
    ],
    ids=["one-long-line", "too-many", "too-much-in-all"],
)
async def test_heads_over_a_limit_are_431(base_url, headers, message):
    status, body, _ = await exchange(base_url, get(headers=headers))
    assert status == 431
    assert body["error"]["code"] == "request_header_fields_too_large"
    assert message in body["error"]["message"]


async def test_a_10mb_header_is_431(base_url):
    head = get().removesuffix(b"\r\n") + b"x-huge: " + b"a" * (10 * 1024 * 1024) + b"\r\n\r\n"
    status, body, _ = await exchange(base_url, head)
    assert status == 431, body


async def test_a_huge_header_is_refused_before_the_rest_of_it_arrives(base_url):
    # The client sends 256 KiB of a header and waits: the answer comes without the other 10 MB,
    # so the server never buffered more than that. Before, it waited for the whole header.
    address = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    try:
        writer.write(get().removesuffix(b"\r\n") + b"x-huge: " + b"a" * (256 * 1024))
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        assert status_line.startswith(b"HTTP/1.1 431 "), status_line
    finally:
        writer.close()


async def test_a_request_target_over_the_line_limit_is_414(base_url):
    status, body, _ = await exchange(base_url, get("/health?q=" + "a" * DEFAULT_MAX_HEADER_LINE_BYTES))
    assert status == 414
    assert body["error"]["code"] == "request_uri_too_long"


async def test_heads_within_the_limits_are_served_on_one_connection(base_url):
    address = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    headers = "".join(f"x-h{i}: {'v' * 900}\r\n" for i in range(60))  # 54 KB of 64 KiB
    try:
        for _ in range(3):  # each request's head is counted afresh (160 KB over three)
            writer.write(f"GET /health HTTP/1.1\r\nHost: gateway\r\n{headers}\r\n".encode())
            status_line = await asyncio.wait_for(reader.readline(), 10)
            assert status_line.startswith(b"HTTP/1.1 200"), status_line
            length = 0
            while (line := await reader.readline()) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
    finally:
        writer.close()


async def test_large_bodies_are_not_counted_as_head(base_url):
    # Reads of a body (up to 256 KiB each) that end one request and start the next on a kept-alive
    # connection were once counted as head: a 70 KB chat body came back 431.
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        for size in (70_000, 300_000, 1_000_000, 70_000):
            body = {"model": "m", "messages": [{"role": "user", "content": "x" * size}]}
            response = await http.post("/v1/chat/completions", json=body)
            assert response.status_code == 200, (size, response.text)
