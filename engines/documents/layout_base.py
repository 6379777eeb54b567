"""The layout engine base class: a page image in, layout regions out, structured with its OCR.

A layout backend implements :meth:`LayoutEngine.detect` only; :meth:`LayoutEngine.analyze_page`
(the :class:`~engines.capabilities.LayoutAnalyzer` capability) runs detection and the structure
step (:func:`engines.documents.structure.structure_page`) as one job on the engine's lane, so a
page is one bounded job and other callers of the model interleave between pages.
"""

from __future__ import annotations

import abc
import logging
import time
from typing import Any, TypeVar

from PIL import Image

from engines.base import Engine
from engines.documents.structure import structure_page
from engines.documents.types import LayoutRegion, StructuredPage
from engines.ocr.types import Box, OcrPage
from engines.options import EngineOptions
from engines.process_lane import FairTurns, take_turn
from engines.types import Task

log = logging.getLogger(__name__)


LayoutOptionsT = TypeVar("LayoutOptionsT", bound=EngineOptions)


class LayoutEngine(Engine[LayoutOptionsT]):
    """A layout-analysis backend (the :class:`~engines.capabilities.LayoutAnalyzer` capability).

    Subclasses implement :meth:`detect` (plus :meth:`load`, :meth:`unload`, :meth:`memory_usage`).
    Layout is batch work beside OCR: like the OCR engines, the lane runs at nice 10 unless the
    catalog option ``niceness`` says otherwise.
    """

    tasks = frozenset({Task.LAYOUT})
    # Same reason as OcrEngine: a page is batch work that yields the cores to interactive lanes.
    default_niceness = 10

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Callers take fair turns for page jobs on the lane (engines.process_lane.take_turn).
        self.turns = FairTurns(self.spec.name)

    @abc.abstractmethod
    def detect(self, image: Image.Image) -> list[LayoutRegion]:
        """Regions of ``image`` (RGB), boxes in its pixels, any order (blocking).

        Overlapping or duplicate regions are fine: the structure step removes them.
        """

    async def analyze_page(self, image: Image.Image, page: OcrPage) -> StructuredPage:
        """Detect the layout of ``image`` and structure ``page``'s lines into it (one lane job).

        ``page`` is the OCR of ``image``; when the two sizes differ (an image rendered at
        another resolution), region boxes are scaled into ``page``'s pixels.
        """
        return await take_turn(self.turns, lambda: self.executor.run(self._analyze, image, page))

    def _analyze(self, image: Image.Image, page: OcrPage) -> StructuredPage:
        started = time.perf_counter()
        regions = self.detect(image.convert("RGB") if image.mode != "RGB" else image)
        detected = time.perf_counter()
        if image.width and image.height and (image.width, image.height) != (page.width, page.height):
            sx, sy = page.width / image.width, page.height / image.height
            regions = [
                LayoutRegion(
                    r.type, Box(r.box.x * sx, r.box.y * sy, r.box.width * sx, r.box.height * sy), r.confidence
                )
                for r in regions
            ]
        result = structure_page(page, regions, self.backend)
        log.debug(
            "layout page %d: %d regions in %.1f ms, structure %.1f ms",
            page.page_number,
            len(regions),
            (detected - started) * 1000,
            (time.perf_counter() - detected) * 1000,
        )
        return result
