"""A PDF child started after a kill has nothing to import before its first page.

A child restarted after a kill must not import pypdfium2 or re-run pytest's launcher on its first
job (the PDF's opening, before the page's timer starts), which at nice +10 beside busy cores
stretches to about a second: the forkserver imports both once (see
docs/architecture/design-notes.md#pdf-worker-imports-in-the-forkserver).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from engines.ocr import pdf_worker
from engines.process_lane import _PRELOAD

# In a fresh interpreter, as in the server: the start-up registration (service.server) comes
# first, then another lane's child starts the forkserver (an anomaly fit before any OCR model
# loads), then the PDF worker's child is killed and restarted. The pytest process cannot show
# this: its forkserver was started long before by whichever test ran first.
SCRIPT = textwrap.dedent(
    """
    import asyncio, os, time
    from engines.ocr.pdf_worker import PRELOAD, PdfWorker
    from engines.ocr.types import OcrLimits
    from engines.process_lane import ProcessLane, preload_modules
    from tests.service.ocr.helpers import pdf_of, render_lines

    PDF = pdf_of([render_lines(["Restarted"], "DejaVuSans", 36, width=600).image])
    LIMITS = OcrLimits(max_bytes=1 << 24, max_pixels=40_000_000, max_pages=10, page_timeout_s=30.0)

    async def main():
        preload_modules(*PRELOAD)  # what service.server does at start-up
        other = ProcessLane("other")
        await other.run(os.getpid)  # the forkserver starts here, for another lane
        worker = PdfWorker()
        try:
            assert await worker.page_count(PDF, LIMITS) == 1
            worker.stop()
            assert await worker.page_count(PDF, LIMITS) == 1  # a new child's first job
            print(await worker._lane.run(time.process_time))  # all that child has spent
        finally:
            worker.stop()
            other.stop()

    asyncio.run(main())
    """
)


def _import_cpu_s() -> float:
    """CPU seconds a fresh interpreter spends importing pypdfium2."""
    code = "import time; t = time.process_time(); import pypdfium2; print(time.process_time() - t)"
    return float(
        subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True).stdout
    )


def test_a_restarted_child_opens_a_pdf_for_less_cpu_than_importing_pypdfium2():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    child_cpu_s = float(run.stdout.split()[-1])
    import_cpu_s = _import_cpu_s()
    assert child_cpu_s < import_cpu_s, (child_cpu_s, import_cpu_s)


def test_the_server_names_the_pdf_children_imports_at_start_up(server):
    assert set(pdf_worker.PRELOAD) <= _PRELOAD
