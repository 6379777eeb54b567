"""Anomaly detection: fit and save, score (saved or one-shot), stream windows, list and delete.

Detectors are not catalog models: they live in a :class:`DetectorStore`. Rows arrive as a
*decode* function from the transport: decoding a large request (tens of ms for 10,000 rows of
cells) is a step of a job on the task's own CPU lane, not of the event loop, and it needs the
detector's schema, which for a saved detector is known only once it is loaded. Scoring with a
saved detector runs on that lane too. Fitting (a named fit, or one-shot detection) runs in the
task's process lane (:class:`~engines.process_lane.ProcessLane`, at nice +10): scikit-learn holds
the GIL for long stretches of a 200,000-row fit, which in a thread stalls every other call
(``bench/isolation.py`` measures it; bench/README.md), and a process can be killed when the call
is cancelled or its deadline passes.

Saved detectors belong to the calling API key (:func:`service.tasks.callers.call_owner`), or to
the shared namespace every key may use and only admin keys write (:mod:`engines.owners`; a server
without keys keeps everything there). A key finds its own detector of a name first, then a shared
one; another key's is NOT_FOUND.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, replace
from typing import TypeVar

import numpy as np

from engines.anomaly.detector import Detector, fit_and_score
from engines.anomaly.store import DetectorNotFoundError, DetectorStore, fit_for_store, validate_detector_name
from engines.anomaly.stream import StreamDetector, check_stream_config
from engines.anomaly.types import (
    Cell,
    DetectorInfo,
    DetectorListing,
    FeatureField,
    FitConfig,
    ScoreResult,
    StreamConfig,
    StreamStep,
)
from engines.errors import ResourceExhaustedError
from engines.executor import DeviceExecutor
from engines.owners import OwnedStores
from engines.process_lane import ProcessLane
from engines.reasons import Reason
from service.tasks.callers import call_owner, write_target

T = TypeVar("T")
Rows = list[list[Cell]] | np.ndarray
#: Rows of a request for the columns ``schema`` (``None``: all numeric, any width); raises
#: InvalidArgumentError for malformed or too many rows. Blocking for large requests.
RowDecoder = Callable[[Sequence[FeatureField] | None], Rows]


@dataclass(frozen=True, slots=True)
class FittedDetector:
    """A saved fit: the detector's name, its new version, the rows it saw, its raw-score threshold.

    ``shared``: whether it was saved in the shared namespace.
    """

    name: str
    version: int
    row_count: int
    threshold: float
    shared: bool = False


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
        stores: saved detectors (versioned), shared and per key.
        cpu: the thread lane rows are decoded and scored on, and detectors saved and loaded.
        fits: the process lane fits run in.
        max_window: the largest rolling window a stream may ask for (rows).
        fit_timeout_s: the most seconds a fit may run (the row limit alone does not bound a
            one-class SVM, whose time grows with the square of the rows).

    """

    stores: OwnedStores[DetectorStore]
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
                reason=Reason.FIT_TOO_SLOW,
                rows=len(rows),
                fit_timeout_s=self.fit_timeout_s,
            ) from None

    async def fit(
        self, name: str, config: FitConfig, decode: RowDecoder, *, shared: bool = False
    ) -> FittedDetector:
        """Fit on the decoded rows and save as the next version of ``name``.

        Saved as the calling key's own, or with ``shared`` in the shared namespace (refitting a
        detector of that name there).

        Raises:
            PermissionDeniedError: ``shared`` from a key without role admin (ADMIN_ROLE_REQUIRED).
            InvalidArgumentError: invalid name, too few or malformed rows.
            ResourceExhaustedError: the detector store is full (reason STORAGE_QUOTA_EXCEEDED), or
                the fit ran past its time limit (FIT_TOO_SLOW).

        """
        store, in_shared = write_target(self.stores, shared, "fitting a shared anomaly detector")
        name = validate_detector_name(name)

        def read() -> Rows:
            # A full store is refused before the fit's work, not after (the size check repeats at save).
            store.check_quota(name)
            return decode(config.schema)

        rows = await self.cpu.run(read)
        # Serialized in the child too: skops takes seconds of Python for a large forest.
        detector, data = await self._in_fit_lane(fit_for_store, rows, config)
        version = await self.cpu.run(store.save, name, detector, data)
        return FittedDetector(name, version, detector.row_count, detector.threshold, in_shared)

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
        """Score the rows with the latest version of the detector ``name`` (one executor job).

        The caller's own detector of that name, else the shared one.

        Raises:
            InvalidArgumentError: invalid name, rows that do not fit its schema.
            DetectorNotFoundError: neither the caller nor the shared namespace has one (also
                when another key has).
            FailedPreconditionError: its file is missing, corrupt or untrusted.

        """
        name = validate_detector_name(name)
        visible = self.stores.visible(call_owner())

        def load() -> Detector:
            for store, _ in visible[:-1]:
                try:
                    return store.load(name)[1]  # cached after the first load
                except DetectorNotFoundError:
                    continue  # not the key's own: the shared one of that name, if any
            return visible[-1][0].load(name)[1]

        def load_and_score() -> ScoreResult:
            detector = load()
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
        """The detectors the caller may use (latest versions) and the names of unreadable ones.

        Its own and the shared ones, sorted by name (a name in both: its own first).
        """
        visible = self.stores.visible(call_owner())

        def listing() -> DetectorListing:
            infos: list[DetectorInfo] = []
            unreadable: set[str] = set()
            for store, shared in visible:
                found = store.listing()
                infos += [replace(info, shared=shared) for info in found.detectors]
                unreadable.update(found.unreadable)
            return DetectorListing(sorted(infos, key=lambda i: (i.name, i.shared)), sorted(unreadable))

        return await self.cpu.run(listing)

    async def delete(self, name: str, *, shared: bool = False) -> int:
        """Delete every saved version of the caller's own ``name`` (with ``shared``, the shared one).

        Returns how many versions were deleted.

        Raises:
            PermissionDeniedError: ``shared`` from a key without role admin (ADMIN_ROLE_REQUIRED).
            InvalidArgumentError: invalid name.
            DetectorNotFoundError: the namespace has no such detector (also for another key's).

        """
        store, _ = write_target(self.stores, shared, "deleting a shared anomaly detector")
        return await self.cpu.run(store.delete, validate_detector_name(name))
