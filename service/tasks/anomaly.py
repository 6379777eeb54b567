"""Anomaly detection: fit and save, score (saved or one-shot), stream windows, list and delete.

Detectors are not catalog models: they live in a :class:`DetectorStore`. Rows arrive as a
*decode* function from the transport: decoding a large request (tens of ms for 10,000 rows of
cells) is a step of a job on the task's own CPU lane, not of the event loop, and it needs the
detector's schema, which for a saved detector is known only once it is loaded. Scoring with a
saved detector runs on that lane too. Fitting (a named fit, or one-shot detection) runs in the
task's process lane (:class:`~engines.process_lane.ProcessLane`, at nice +10): scikit-learn holds
the GIL for long stretches of a 200,000-row fit, which in a thread stalled every other call
(the probe's p99 went 7x in ``bench/isolation.py``), and a process can be killed when the call
is cancelled or its deadline passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import TypeVar

import numpy as np

from engines.anomaly.detector import fit_and_score
from engines.anomaly.store import DetectorStore, fit_for_store, validate_detector_name
from engines.anomaly.stream import StreamDetector, check_stream_config
from engines.anomaly.types import (
    Cell,
    DetectorListing,
    FeatureField,
    FitConfig,
    ScoreResult,
    StreamConfig,
    StreamStep,
)
from engines.errors import ResourceExhaustedError
from engines.executor import DeviceExecutor
from engines.process_lane import ProcessLane

T = TypeVar("T")
Rows = list[list[Cell]] | np.ndarray
#: Rows of a request for the columns ``schema`` (``None``: all numeric, any width); raises
#: InvalidArgumentError for malformed or too many rows. Blocking for large requests.
RowDecoder = Callable[[Sequence[FeatureField] | None], Rows]


@dataclass(frozen=True, slots=True)
class FittedDetector:
    """A saved fit: the detector's name, its new version, the rows it saw, its raw-score threshold."""

    name: str
    version: int
    row_count: int
    threshold: float


class AnomalyStream:
    """One StreamDetectAnomaly call: a rolling window over the rows sent so far.

    Memory is bounded by the window size (checked against ``anomaly_max_window``).
    """

    def __init__(self, config: StreamConfig, cpu: DeviceExecutor) -> None:
        self._window = StreamDetector(config, cpu)
        self._cpu = cpu

    def _decode(self, decode: RowDecoder) -> tuple[list[list[Cell]], tuple[FeatureField, ...] | None]:
        rows = decode(self._window.schema)
        if isinstance(rows, np.ndarray):
            rows = rows.tolist()  # the rolling window keeps plain rows
        return rows, self._window.check(rows)

    async def add(self, decode: RowDecoder) -> StreamStep:
        """Add one message's rows; scores once the window holds ``min_samples`` rows.

        The rows are decoded and checked on the CPU lane, like a unary request's: a message
        may carry up to ``anomaly_max_rows`` rows (hundreds of ms of Python for 200,000), which
        must not stall the event loop and every other call on it. A stream's messages are still
        handled one at a time, in order, so the scores are the same.

        Raises:
            InvalidArgumentError: malformed rows, or rows that do not fit the stream's schema.

        """
        rows, schema = await self._cpu.run(self._decode, decode)
        return await self._window.add(rows, schema)

    async def close(self) -> None:
        """Stop a refit still under way (the call ended)."""
        await self._window.close()


@dataclass(eq=False)
class AnomalyTask:
    """Named detectors and one-shot detection.

    Attributes:
        store: saved detectors (versioned).
        cpu: the thread lane rows are decoded and scored on, and detectors saved and loaded.
        fits: the process lane fits run in.
        max_window: the largest rolling window a stream may ask for (rows).
        fit_timeout_s: the most seconds a fit may run (the row limit alone does not bound a
            one-class SVM, whose time grows with the square of the rows).

    """

    store: DetectorStore
    cpu: DeviceExecutor
    fits: ProcessLane
    _: KW_ONLY
    max_window: int
    fit_timeout_s: float

    async def _in_fit_lane(
        self, function: Callable[..., T], rows: Rows, config: FitConfig, *args: object
    ) -> T:
        """``function(rows, config, *args)`` in the process lane, under the fit time limit.

        Raises:
            ResourceExhaustedError: over ``fit_timeout_s`` (reason FIT_TOO_SLOW; the fit was stopped).

        """
        try:
            return await self.fits.run(function, rows, config, *args, timeout_s=self.fit_timeout_s)
        except TimeoutError:
            raise ResourceExhaustedError(
                f"the fit on {len(rows)} rows took more than {self.fit_timeout_s:g} s and was stopped; "
                "send fewer rows or use a faster backend (isolation forest, ECOD, HBOS)",
                reason="FIT_TOO_SLOW",
                rows=len(rows),
                fit_timeout_s=self.fit_timeout_s,
            ) from None

    async def fit(self, name: str, config: FitConfig, decode: RowDecoder) -> FittedDetector:
        """Fit on the decoded rows and save as the next version of ``name``.

        Raises:
            InvalidArgumentError: invalid name, too few or malformed rows.
            ResourceExhaustedError: the detector store is full (reason STORAGE_QUOTA_EXCEEDED), or
                the fit ran past its time limit (FIT_TOO_SLOW).

        """
        name = validate_detector_name(name)

        def read() -> Rows:
            # A full store is refused before the fit's work, not after (the size check repeats at save).
            self.store.check_quota(name)
            return decode(config.schema)

        rows = await self.cpu.run(read)
        # Serialized in the child too: skops takes seconds of Python for a large forest.
        detector, data = await self._in_fit_lane(fit_for_store, rows, config)
        version = await self.cpu.run(self.store.save, name, detector, data)
        return FittedDetector(name, version, detector.row_count, detector.threshold)

    async def detect_once(
        self, config: FitConfig, decode: RowDecoder, *, threshold: float | None, explain: bool
    ) -> ScoreResult:
        """Fit on the rows and score the same rows (in the process lane; nothing is saved).

        Raises:
            InvalidArgumentError: too few or malformed rows.
            ResourceExhaustedError: the fit ran past its time limit (FIT_TOO_SLOW).

        """
        rows = await self.cpu.run(decode, config.schema)
        return await self._in_fit_lane(fit_and_score, rows, config, threshold, explain)

    async def detect(
        self, name: str, decode: RowDecoder, *, threshold: float | None, explain: bool
    ) -> ScoreResult:
        """Score the rows with the latest version of the saved detector ``name`` (one executor job).

        Raises:
            InvalidArgumentError: invalid name, rows that do not fit its schema.
            DetectorNotFoundError: no such detector.
            FailedPreconditionError: its file is missing, corrupt or untrusted.

        """
        name = validate_detector_name(name)

        def load_and_score() -> ScoreResult:
            _, detector = self.store.load(name)  # cached after the first load
            return detector.score(decode(detector.schema), threshold=threshold, explain=explain)

        return await self.cpu.run(load_and_score)

    def open_stream(self, config: StreamConfig) -> AnomalyStream:
        """A new rolling-window stream.

        Raises:
            InvalidArgumentError: sizes out of range (see ``check_stream_config``).

        """
        check_stream_config(config, self.max_window)
        return AnomalyStream(config, self.cpu)

    async def list(self) -> DetectorListing:
        """Saved detectors (latest versions) and the names of unreadable ones, sorted by name."""
        return await self.cpu.run(self.store.listing)

    async def delete(self, name: str) -> int:
        """Delete every saved version of ``name``; returns how many were deleted.

        Raises:
            InvalidArgumentError: invalid name.
            DetectorNotFoundError: no such detector.

        """
        return await self.cpu.run(self.store.delete, validate_detector_name(name))
