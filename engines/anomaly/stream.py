"""Streaming detection over a rolling window with periodic refits.

The window keeps the last ``window_size`` rows; the first fit happens once ``min_samples`` rows
have arrived, and a refit on the window after every ``refit_interval`` new rows.

Refits run in the background on the executor while the next rows are read; the rows of the
message that triggered a refit are scored by the previous model and the reply says
``refitting``. The new model is swapped in before the next message is scored, so the order of
events (and thus every score) depends only on the rows sent, not on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from collections.abc import Sequence

from engines.anomaly.detector import MIN_FIT_ROWS, Detector, fit_detector
from engines.anomaly.encoding import check_rows, default_schema
from engines.anomaly.types import (
    Cell,
    FeatureField,
    StreamConfig,
    StreamState,
    StreamStep,
    check_contamination,
)
from engines.errors import InvalidArgumentError
from engines.executor import DeviceExecutor


def check_stream_config(config: StreamConfig, max_window: int) -> None:
    """Validate a stream's settings.

    Raises:
        InvalidArgumentError: ``min_samples`` below ``MIN_FIT_ROWS``, ``window_size`` below
            ``min_samples`` or above ``max_window``, ``refit_interval`` below 1, contamination
            outside (0, 0.5].

    """
    check_contamination(config.fit.contamination, "config.contamination")
    checks = (
        (config.min_samples >= MIN_FIT_ROWS, "config.min_samples", f"must be at least {MIN_FIT_ROWS}"),
        (config.window_size >= config.min_samples, "config.window_size", "must be at least min_samples"),
        (config.window_size <= max_window, "config.window_size", f"must be at most {max_window}"),
        (config.refit_interval >= 1, "config.refit_interval", "must be at least 1"),
    )
    for ok, name, message in checks:
        if not ok:
            raise InvalidArgumentError(f"{name}: {message}", field=name)


class StreamDetector:
    """The state of one StreamDetectAnomaly call.

    Args:
        config: validated settings (see :func:`check_stream_config`).
        executor: where fits and scoring run.

    """

    def __init__(self, config: StreamConfig, executor: DeviceExecutor) -> None:
        self.config = config
        self.executor = executor
        self.schema = config.fit.schema
        self.window: deque[Sequence[Cell]] = deque(maxlen=config.window_size)
        self.detector: Detector | None = None
        self.fit_count = 0
        self.rows_since_fit = 0
        self._refit: asyncio.Task[Detector] | None = None

    def _fit(self, rows: list[Sequence[Cell]]) -> Detector:
        return fit_detector(rows, dataclasses.replace(self.config.fit, schema=self.schema))

    def check(self, rows: Sequence[Sequence[Cell]]) -> tuple[FeatureField, ...] | None:
        """Validate ``rows`` against the stream's schema (blocking: run it on the executor).

        Returns:
            The schema to pass to :meth:`add` with them: the stream's, or for a stream without a
            declared schema and no rows yet, all-numeric columns as wide as the first row.

        Raises:
            InvalidArgumentError: rows that do not fit the schema (see ``check_rows``).

        """
        if not rows:
            return self.schema
        schema = default_schema(len(rows[0])) if self.schema is None else self.schema
        check_rows(rows, schema)
        return schema

    async def add(
        self, rows: Sequence[Sequence[Cell]], schema: tuple[FeatureField, ...] | None
    ) -> StreamStep:
        """Add ``rows`` to the window and score them when a model is ready.

        ``rows`` were validated by :meth:`check`, which gave ``schema``. Calls must not overlap:
        each message's rows are checked and added before the next message's.
        """
        if self._refit is not None:  # swap in the model refitted since the last message
            self.detector, self._refit = await self._refit, None
            self.fit_count += 1
        self.schema = schema
        self.window.extend(rows)
        self.rows_since_fit += len(rows)
        if self.detector is None:
            if len(self.window) < self.config.min_samples:
                return StreamStep([], StreamState.COLLECTING, len(self.window), self.fit_count)
            self.detector = await self.executor.run(self._fit, list(self.window))
            self.fit_count += 1
            self.rows_since_fit = 0
        scores = (await self.executor.run(self.detector.score, rows)).scores if rows else []
        state = StreamState.READY
        if self.rows_since_fit >= self.config.refit_interval:
            self.rows_since_fit = 0
            self._refit = asyncio.ensure_future(self.executor.run(self._fit, list(self.window)))
            state = StreamState.REFITTING
        return StreamStep(scores, state, len(self.window), self.fit_count)

    async def close(self) -> None:
        """Cancel a refit still under way (the call ended)."""
        if self._refit is not None:
            self._refit.cancel()
            with contextlib.suppress(BaseException):
                await self._refit
            self._refit = None
