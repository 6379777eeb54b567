"""Without API keys, HTTP clients at two addresses take turns on the PDF renderer.

Every call through the gateway reaches the server from the gateway's own peer, so without more
all keyless HTTP clients would be one fair-share caller, and a one-page PDF would wait behind every
content-bomb PDF of another client (see
docs/architecture/design-notes.md#fair-turns-on-the-pdf-renderer). The gateway passes the client's address as
call metadata (``x-ur-client-address``), which the keyless server uses as the caller within the
gateway's peer. Real PDFium, the real bomb file, a real server without keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from bench.workloads import bomb_pdf
from gateway.app import create_app
from service.server import RunningServer, start_server
from tests.service.ocr.helpers import pdf_of, render_lines

PAGE_TIMEOUT_S = 3.0
BOMBS = 4
BOMB = bomb_pdf()
NORMAL = pdf_of([render_lines(["Normal page"], "DejaVuSans", 36, width=600).image])
BOMBER, OTHER = "10.0.0.1", "10.0.0.2"


@pytest.fixture(scope="module")
async def limited(settings) -> AsyncIterator[RunningServer]:
    """A server without keys whose PDF pages may take PAGE_TIMEOUT_S."""
    assert not settings.api_key and not settings.api_keys_file
    server = await start_server(settings.model_copy(update={"ocr_page_timeout_s": PAGE_TIMEOUT_S}))
    yield server
    await server.stop(grace=1.0)


@contextlib.asynccontextmanager
async def clients(server: RunningServer, *addresses: str) -> AsyncIterator[list[httpx.AsyncClient]]:
    """One gateway in front of ``server``, and an HTTP client of it from each of ``addresses``."""
    app = create_app(f"127.0.0.1:{server.port}")
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(app.router.lifespan_context(app))
        yield [
            await stack.enter_async_context(
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app, client=(address, 40000)),
                    base_url="http://gateway",
                    timeout=120,
                )
            )
            for address in addresses
        ]


async def _ocr(client: httpx.AsyncClient, data: bytes) -> httpx.Response:
    return await client.post(
        "/v1/ocr", files={"file": ("doc.pdf", data, "application/pdf")}, data={"model": "tesseract"}
    )


async def test_another_addresss_pdf_waits_for_one_bomb_not_all(limited):
    async with clients(limited, BOMBER, OTHER) as (bomber, other):
        warm = await _ocr(other, NORMAL)  # tesseract and its PDF worker are up
        assert warm.status_code == 200, warm.text
        bombs = [asyncio.create_task(_ocr(bomber, BOMB)) for _ in range(BOMBS)]
        await asyncio.sleep(1.0)  # the first bomb is rendering, the others wait
        started = time.monotonic()
        answer = await _ocr(other, NORMAL)
        waited = time.monotonic() - started
        pending = sum(not bomb.done() for bomb in bombs)
        for bomb in bombs:
            bomb.cancel()
        await asyncio.gather(*bombs, return_exceptions=True)
    assert answer.status_code == 200, answer.text
    assert "normal" in answer.json()["text"].lower()
    assert pending >= BOMBS - 1, f"only {pending} bombs were still waiting: the PDF was served after them"
    # First come, first served it waited for every bomb (about BOMBS x PAGE_TIMEOUT_S = 12 s);
    # by address it waits for the rest of the one rendering (about 2 s) and its own page.
    assert waited < 2 * PAGE_TIMEOUT_S, waited
