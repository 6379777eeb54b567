"""Anomaly detection: fit and save, score (saved or one-shot), stream windows, list and delete.

Detectors are not catalog models: they live in a :class:`DetectorStore`, and fitting and
scoring run on the task's own CPU lane, beside the models' lanes. Rows
arrive as a *decode* function from the transport: decoding a large request (tens of ms for
10,000 rows of cells) is a step of the executor job, not of the event loop, and it needs the
detector's schema, which for a saved detector is known only once it is loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from engines.anomaly.detector import Detector, fit_detector
from engines.anomaly.store import DetectorStore, validate_detector_name
from engines.anomaly.stream import StreamDetector, check_stream_config
from engines.anomaly.types import (
    Cell,
    DetectorInfo,
    FeatureField,
    FitConfig,
    ScoreResult,
    StreamConfig,
    StreamStep,
)
from engines.executor import DeviceExecutor

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


class AnomalyTask:
    """Named detectors and one-shot detection.

    Args:
        store: saved detectors (versioned).
        cpu: the executor fits and scores run on.
        max_window: the largest rolling window a stream may ask for (rows).

    """

    def __init__(self, store: DetectorStore, cpu: DeviceExecutor, *, max_window: int) -> None:
        self._store = store
        self._cpu = cpu
        self._max_window = max_window

    async def fit(self, name: str, config: FitConfig, decode: RowDecoder) -> FittedDetector:
        """Fit on the decoded rows and save as the next version of ``name``.

        Raises:
            InvalidArgumentError: invalid name, too few or malformed rows.
            ResourceExhaustedError: the detector store is full (reason STORAGE_QUOTA_EXCEEDED).

        """
        name = validate_detector_name(name)

        def fit() -> Detector:
            # A full store is refused before the fit's work, not after (the size check repeats at save).
            self._store.check_quota(name)
            return fit_detector(decode(config.schema), config)

        detector = await self._cpu.run(fit)
        version = await self._cpu.run(self._store.save, name, detector)
        return FittedDetector(name, version, detector.row_count, detector.threshold)

    async def detect_once(
        self, config: FitConfig, decode: RowDecoder, *, threshold: float | None, explain: bool
    ) -> ScoreResult:
        """Fit on the rows and score the same rows (one executor job; nothing is saved).

        Raises:
            InvalidArgumentError: too few or malformed rows.

        """

        def fit_and_score() -> ScoreResult:
            rows = decode(config.schema)
            return fit_detector(rows, config).score(rows, threshold=threshold, explain=explain)

        return await self._cpu.run(fit_and_score)

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
            _, detector = self._store.load(name)  # cached after the first load
            return detector.score(decode(detector.schema), threshold=threshold, explain=explain)

        return await self._cpu.run(load_and_score)

    def open_stream(self, config: StreamConfig) -> AnomalyStream:
        """A new rolling-window stream.

        Raises:
            InvalidArgumentError: sizes out of range (see ``check_stream_config``).

        """
        check_stream_config(config, self._max_window)
        return AnomalyStream(config, self._cpu)

    async def list(self) -> list[DetectorInfo]:
        """Saved detectors (latest versions), sorted by name."""
        return await self._cpu.run(self._store.list)

    async def delete(self, name: str) -> int:
        """Delete every saved version of ``name``; returns how many were deleted.

        Raises:
            InvalidArgumentError: invalid name.
            DetectorNotFoundError: no such detector.

        """
        return await self._cpu.run(self._store.delete, validate_detector_name(name))
