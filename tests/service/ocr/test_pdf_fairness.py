"""One caller's PDF bombs do not queue another caller's document behind all of them (six bombs
at a 5 s page limit would make a one-page PDF wait 30 s). Real PDFium, the real bomb file."""

from __future__ import annotations

import asyncio
import time

import pytest

from bench.workloads import bomb_pdf
from engines.errors import ResourceExhaustedError
from engines.fair_share import Caller, caller_var
from engines.ocr.pdf_worker import PdfWorker
from engines.ocr.types import OcrLimits
from engines.process_lane import FairTurns
from tests.service.ocr.helpers import pdf_of, render_lines

LIMIT_S = 1.5
LIMITS = OcrLimits(max_bytes=1 << 24, max_pixels=40_000_000, max_pages=10, page_timeout_s=LIMIT_S)
BOMBS = 4
BOMB = bomb_pdf()
NORMAL = pdf_of([render_lines(["Normal page"], "DejaVuSans", 36, width=600).image])


async def _read(worker: PdfWorker, caller: str, data: bytes) -> None:
    """Open ``data`` and render its first page, as ``caller`` (the bombs' errors are swallowed)."""
    caller_var.set(Caller(lane=caller))
    await worker.page_count(data, LIMITS)
    try:
        await worker.render(data, LIMITS, 1, 100)
    except ResourceExhaustedError as exc:
        assert exc.reason == "PAGE_TOO_COMPLEX"


async def _normal_wait_s(bomb_caller: str) -> float:
    """Seconds a normal one-page PDF from caller "b" takes with BOMBS bombs of ``bomb_caller`` queued."""
    worker = PdfWorker()
    try:
        await _read(worker, "warm", NORMAL)  # the forkserver and a child are up
        bombs = [asyncio.create_task(_read(worker, bomb_caller, BOMB)) for _ in range(BOMBS)]
        await asyncio.sleep(0.3)  # the first bomb is rendering
        started = time.monotonic()
        await asyncio.create_task(_read(worker, "b", NORMAL))
        waited = time.monotonic() - started
        for bomb in bombs:
            bomb.cancel()
        await asyncio.gather(*bombs, return_exceptions=True)
        return waited
    finally:
        worker.stop()


@pytest.mark.parametrize("bomb_caller", ["a", "b"])
async def test_a_normal_pdf_waits_for_at_most_one_bomb_of_another_caller(bomb_caller):
    """From another caller, the normal PDF waits for the bomb that was rendering, not for all four;
    from the same caller, its jobs keep their order (it waits for all of them)."""
    waited = await _normal_wait_s(bomb_caller)
    if bomb_caller == "a":
        assert waited < LIMIT_S * 1.6, waited  # FIFO: about BOMBS * LIMIT_S
    else:
        assert waited > LIMIT_S * (BOMBS - 1), waited


async def test_turns_go_to_the_least_served_caller_and_a_cancelled_wait_passes_its_turn_on():
    turns = FairTurns()
    order: list[str] = []

    async def job(caller: str, hold_s: float) -> None:
        await turns.acquire(caller)
        order.append(caller)
        await asyncio.sleep(hold_s)
        turns.release(caller, hold_s)

    first = asyncio.create_task(job("a", 0.05))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(job(c, 0.01)) for c in ("a", "a", "b", "c")]
    await asyncio.sleep(0)
    queued[3].cancel()  # c leaves before its turn
    await asyncio.gather(first, *queued, return_exceptions=True)
    assert order == ["a", "b", "a", "a"]  # b (0 s used) before a's second job (a used 0.05 s)
    await asyncio.wait_for(turns.acquire("d"), 1.0)  # the lane is free again: nothing hangs
