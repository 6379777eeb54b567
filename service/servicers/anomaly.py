"""InferenceService anomaly-detection RPCs: fit, detect, stream, list and delete detectors."""

from __future__ import annotations

import grpc
import numpy as np
from universal_runtime.v1 import anomaly_pb2 as pb

from engines.anomaly.detector import fit_detector
from engines.anomaly.store import DetectorStore, validate_detector_name
from engines.anomaly.stream import StreamDetector, check_stream_config
from engines.anomaly.types import Cell, FitConfig, ScoreResult
from engines.executor import DeviceExecutor
from service.convert.anomaly import (
    detect_response,
    detector_info_to_pb,
    fit_config_from_pb,
    optional_threshold,
    request_rows,
    stream_config_from_pb,
    stream_response,
)
from service.convert.validation import require
from service.servicers.base import RpcBase


def _fit_and_score(
    rows: list[list[Cell]], config: FitConfig, threshold: float | None, explain: bool
) -> ScoreResult:
    """One-shot use: fit on the rows and score the same rows (blocking)."""
    return fit_detector(rows, config).score(rows, threshold=threshold, explain=explain)


class AnomalyRpcs(RpcBase):
    """Fit, score and stream-score anomaly detectors.

    Detectors are not catalog models: they live in a :class:`DetectorStore` under
    ``settings.data_dir/anomaly``, and fitting and scoring run on the CPU executor.
    """

    _store: DetectorStore | None = None

    @property
    def _detectors(self) -> DetectorStore:
        if self._store is None:
            self._store = DetectorStore(
                self._settings.data_dir / "anomaly", keep_versions=self._settings.anomaly_keep_versions
            )
        return self._store

    @property
    def _cpu(self) -> DeviceExecutor:
        return self._manager.executor_for("cpu")

    def _rows(self, request, *, allow_empty: bool = False) -> list[list[Cell]] | np.ndarray:
        return request_rows(
            request,
            max_rows=self._settings.anomaly_max_rows,
            max_features=self._settings.anomaly_max_features,
            allow_empty=allow_empty,
        )

    async def FitAnomalyDetector(
        self, request: pb.FitAnomalyDetectorRequest, context: grpc.aio.ServicerContext
    ) -> pb.FitAnomalyDetectorResponse:
        """Fit a detector on the rows and save it as the next version of its name."""
        name = validate_detector_name(request.detector)
        config = fit_config_from_pb(
            request.backend, request.schema, request.contamination, request.normalization
        )
        rows = self._rows(request)
        detector = await self._cpu.run(fit_detector, rows, config)
        version = await self._cpu.run(self._detectors.save, name, detector)
        return pb.FitAnomalyDetectorResponse(
            detector=name, version=version, row_count=len(rows), threshold=detector.threshold
        )

    async def DetectAnomaly(
        self, request: pb.DetectAnomalyRequest, context: grpc.aio.ServicerContext
    ) -> pb.DetectAnomalyResponse:
        """Score rows against a saved detector, or fit-and-score them when no detector is named."""
        threshold = optional_threshold(request)
        require(
            not (request.columnar_output and request.explain),
            "columnar_output",
            "columnar output carries no explanations; drop explain or columnar_output",
        )
        rows = self._rows(request)
        if not request.detector:
            config = fit_config_from_pb(
                request.backend, request.schema, request.contamination, request.normalization
            )
            result = await self._cpu.run(_fit_and_score, rows, config, threshold, request.explain)
            return detect_response(result, columnar=request.columnar_output)
        name = validate_detector_name(request.detector)
        one_shot_only = (request.backend, len(request.schema), request.contamination, request.normalization)
        require(
            not any(one_shot_only),
            "detector",
            "backend, schema, contamination and normalization are for one-shot use (no detector); "
            "a saved detector keeps the ones it was fitted with",
        )
        result = await self._cpu.run(self._score_saved, name, rows, threshold, request.explain)
        return detect_response(result, columnar=request.columnar_output)

    def _score_saved(
        self, name: str, rows: list[list[Cell]] | np.ndarray, threshold: float | None, explain: bool
    ) -> ScoreResult:
        """Load (from the store's cache) and score in one executor job: one thread hop per call."""
        _, detector = self._detectors.load(name)
        return detector.score(rows, threshold=threshold, explain=explain)

    async def StreamDetectAnomaly(self, request_iterator, context: grpc.aio.ServicerContext):
        """Score rows as they arrive over a rolling window (one reply per request message)."""
        session: StreamDetector | None = None
        try:
            async for request in request_iterator:
                if session is None:
                    config = stream_config_from_pb(request.config)
                    check_stream_config(config, self._settings.anomaly_max_window)
                    session = StreamDetector(config, self._cpu)
                rows = self._rows(request, allow_empty=True)
                if isinstance(rows, np.ndarray):
                    rows = rows.tolist()  # the rolling window keeps plain rows
                yield stream_response(await session.add(rows))
        finally:
            if session is not None:
                await session.close()

    async def ListAnomalyDetectors(
        self, request: pb.ListAnomalyDetectorsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAnomalyDetectorsResponse:
        """Saved detectors, sorted by name."""
        infos = await self._cpu.run(self._detectors.list)
        return pb.ListAnomalyDetectorsResponse(detectors=[detector_info_to_pb(i) for i in infos])

    async def DeleteAnomalyDetector(
        self, request: pb.DeleteAnomalyDetectorRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteAnomalyDetectorResponse:
        """Delete every saved version of a detector."""
        name = validate_detector_name(request.detector)
        count = await self._cpu.run(self._detectors.delete, name)
        return pb.DeleteAnomalyDetectorResponse(detector=name, versions_deleted=count)
