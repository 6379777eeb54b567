"""A PDF child started after a kill has nothing to import before its first page.

The cause of the page limit test's 1.18 s overrun (commit 80a16b6): each child restarted after a
kill imported pypdfium2 and re-ran pytest's launcher on its first job (the PDF's opening, before
the page's timer starts): 68 ms of CPU, stretched to about a second at nice +10 beside a full
suite on 2 cores. The forkserver imports both once now (6 ms of CPU per restart).
"""

from __future__ import annotations

import subprocess
import sys
import time

from engines.ocr.pdf_worker import PdfWorker
from engines.ocr.types import OcrLimits
from tests.ocr.helpers import pdf_of, render_lines

PDF = pdf_of([render_lines(["Restarted"], "DejaVuSans", 36, width=600).image])
LIMITS = OcrLimits(max_bytes=1 << 24, max_pixels=40_000_000, max_pages=10, page_timeout_s=30.0)


def _import_cpu_s() -> float:
    """CPU seconds a fresh interpreter spends importing pypdfium2."""
    code = "import time; t = time.process_time(); import pypdfium2; print(time.process_time() - t)"
    return float(
        subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True).stdout
    )


async def test_a_restarted_child_opens_a_pdf_for_less_cpu_than_importing_pypdfium2():
    worker = PdfWorker()
    try:
        assert await worker.page_count(PDF, LIMITS) == 1  # the forkserver is up
        worker.stop()
        assert await worker.page_count(PDF, LIMITS) == 1  # a new child's first job
        child_cpu_s = await worker._lane.run(time.process_time)  # all the child has spent so far
    finally:
        worker.stop()
    import_cpu_s = _import_cpu_s()
    assert child_cpu_s < import_cpu_s, (child_cpu_s, import_cpu_s)
