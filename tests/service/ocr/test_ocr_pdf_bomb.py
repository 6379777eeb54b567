"""A PDF page that takes PDFium minutes to render is stopped, and stalls no other model.

The file is a few KB: one page whose content stream inflates to 3.4 MB of page-sized filled
rectangles, which PDFium takes minutes to paint at 200 dpi (a file of 25 MB of small rectangles
renders in seconds on a fast machine, too quick for a reliable test). Its page is rendered in the
OCR engine's PDF worker process, which the page time limit (``ocr_page_timeout_s``) or a cancelled
call kills.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import psutil
import pytest
from universal_runtime.v1 import documents_pb2, encoders_pb2, inference_service_pb2_grpc

from bench.workloads import bomb_pdf
from gateway.app import create_app
from service.server import RunningServer, start_server
from tests.conftest import EMBED_MODEL, error_info
from tests.gateway.gateway_fakes import asgi_client
from tests.service.ocr.helpers import ocr, pdf_of, render_lines, requests

PAGE_TIMEOUT_S = 4.0
GOOD = render_lines(["Still healthy"], "DejaVuSans", 36, width=600)


BOMB = bomb_pdf()


def pdf_worker(server: RunningServer) -> psutil.Process:
    """The tesseract engine's PDF worker process in ``server`` (one must be running)."""
    pid = server.manager.get("tesseract").engine.pdf_worker.pid
    assert pid is not None
    return psutil.Process(pid)


@pytest.fixture(scope="module")
async def limited(settings) -> RunningServer:
    """A server whose PDF pages may take PAGE_TIMEOUT_S."""
    server = await start_server(settings.model_copy(update={"ocr_page_timeout_s": PAGE_TIMEOUT_S}))
    yield server
    await server.stop(grace=1.0)


@pytest.fixture(scope="module")
async def stub(limited):
    """A stub of ``limited``, with tesseract (and its PDF worker) and the embedder warm."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{limited.port}") as channel:
        stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
        await ocr(stub, pdf_of([GOOD.image]), model="tesseract")
        await stub.Embed(encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=["warm up"]))
        yield stub


async def test_a_page_over_the_time_limit_is_page_too_complex_and_the_next_call_works(stub):
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ocr(stub, BOMB, model="tesseract")
    elapsed = time.monotonic() - started
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value.details()
    info = error_info(err.value)
    assert info.reason == "PAGE_TOO_COMPLEX"
    assert info.metadata["page"] == "1"
    assert float(info.metadata["page_timeout_s"]) == PAGE_TIMEOUT_S
    assert PAGE_TIMEOUT_S <= elapsed < PAGE_TIMEOUT_S + 1.0
    [response] = await ocr(stub, pdf_of([GOOD.image]), model="tesseract")  # a new worker
    assert "healthy" in response.text.lower()


async def test_other_models_run_while_the_page_renders(stub):
    bomb = asyncio.create_task(ocr(stub, BOMB, model="tesseract"))
    await asyncio.sleep(1.0)  # the page is rendering by now
    started = time.monotonic()
    response = await stub.Embed(encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=["during the bomb"]))
    embed_s = time.monotonic() - started
    assert not bomb.done(), "the embedding waited for the page"
    assert len(response.embeddings) == 1
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await bomb
    assert error_info(err.value).reason == "PAGE_TOO_COMPLEX"
    assert embed_s < PAGE_TIMEOUT_S / 2


async def test_cancelling_the_call_kills_the_renderer(stub, limited):
    async def messages():
        for message in requests(BOMB, model="tesseract"):
            yield message

    await ocr(stub, pdf_of([GOOD.image]), model="tesseract")  # a worker runs (earlier bombs killed theirs)
    worker = pdf_worker(limited)
    call = stub.Ocr(messages())
    reading = asyncio.create_task(call.read())
    await asyncio.sleep(1.0)  # rendering
    assert worker.is_running()
    call.cancel()
    cancelled = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await reading
    gone, _ = await asyncio.to_thread(psutil.wait_procs, [worker], timeout=1.0)
    assert gone, f"the renderer outlived the cancelled call by {time.monotonic() - cancelled:.1f} s"
    [response] = await ocr(stub, pdf_of([GOOD.image]), model="tesseract")
    assert "healthy" in response.text.lower()


async def test_the_gateway_answers_413_page_too_complex(limited):
    async with asgi_client(create_app(f"127.0.0.1:{limited.port}")) as client:
        response = await client.post(
            "/v1/ocr", files={"file": ("bomb.pdf", BOMB, "application/pdf")}, data={"model": "tesseract"}
        )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "page_too_complex"


def _analyze_messages(data: bytes):
    """AnalyzeDocumentRequests for ``data`` read with tesseract (whose PDF worker the tests watch)."""
    options = documents_pb2.AnalyzeDocumentOptions(
        document=documents_pb2.DocumentReadOptions(ocr_model="tesseract")
    )
    yield documents_pb2.AnalyzeDocumentRequest(options=options, chunk=data[: 1 << 20])
    for start in range(1 << 20, len(data), 1 << 20):
        yield documents_pb2.AnalyzeDocumentRequest(chunk=data[start : start + (1 << 20)])


async def test_document_analysis_keeps_the_page_time_limit(stub):
    [page] = [p async for p in stub.AnalyzeDocument(_analyze_messages(pdf_of([GOOD.image])))]  # layout loaded
    assert "healthy" in page.markdown.lower()
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        [_ async for _ in stub.AnalyzeDocument(_analyze_messages(BOMB))]
    assert error_info(err.value).reason == "PAGE_TOO_COMPLEX"
    # The call ends shortly after the limit: the PDF child restarted after the last kill finds
    # pypdfium2 and pytest's launcher imported by the forkserver, so no import runs outside the
    # page's timer (see docs/architecture/design-notes.md#pdf-worker-imports-in-the-forkserver).
    assert PAGE_TIMEOUT_S <= time.monotonic() - started < PAGE_TIMEOUT_S + 1.0


async def test_cancelling_document_analysis_kills_the_renderer(stub, limited):
    await ocr(stub, pdf_of([GOOD.image]), model="tesseract")  # a worker runs (earlier bombs killed theirs)
    worker = pdf_worker(limited)
    call = stub.AnalyzeDocument(_analyze_messages(BOMB))
    reading = asyncio.create_task(call.read())
    await asyncio.sleep(1.0)  # rendering
    assert worker.is_running()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    gone, _ = await asyncio.to_thread(psutil.wait_procs, [worker], timeout=1.0)
    assert gone, "the renderer outlived the cancelled document call"


async def test_another_callers_pdf_waits_for_one_bomb_not_all(stub, limited):
    """Callers take turns on the PDF worker: three bombs on one connection, then a normal PDF on
    another, which waits for the bomb rendering when it came (first come, first served: all three)."""
    bombs = [asyncio.create_task(ocr(stub, BOMB, model="tesseract")) for _ in range(3)]
    await asyncio.sleep(1.0)  # the first bomb is rendering, the others wait
    # A connection of its own (channels to one target share a connection unless told not to).
    options = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{limited.port}", options=options) as channel:
        other = inference_service_pb2_grpc.InferenceServiceStub(channel)
        started = time.monotonic()
        [response] = await ocr(other, pdf_of([GOOD.image]), model="tesseract")
        waited = time.monotonic() - started
    assert "healthy" in response.text.lower()
    assert not all(bomb.done() for bomb in bombs)
    for bomb in bombs:
        bomb.cancel()
    await asyncio.gather(*bombs, return_exceptions=True)
    assert waited < PAGE_TIMEOUT_S, waited  # at most the first bomb's rest (~3 s), not 11 s
