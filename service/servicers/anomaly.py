"""InferenceService anomaly-detection RPCs: fit, detect, stream, list and delete detectors."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import numpy as np
from universal_runtime.v1 import anomaly_pb2 as pb

from engines.anomaly.detector import Detector, fit_detector
from engines.anomaly.store import DetectorStore, validate_detector_name
from engines.anomaly.stream import StreamDetector, check_stream_config
from engines.anomaly.types import Cell, FeatureField, FitConfig, ScoreResult
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

    def _rows(
        self, request, *, allow_empty: bool = False, schema: Sequence[FeatureField] | None = None
    ) -> list[list[Cell]] | np.ndarray:
        """The request's rows (blocking for large per-row requests: call it on the executor)."""
        return request_rows(
            request,
            max_rows=self._settings.anomaly_max_rows,
            max_features=self._settings.anomaly_max_features,
            allow_empty=allow_empty,
            schema=schema,
        )

    def _fit(self, request, config: FitConfig) -> Detector:
        """Read the rows and fit (one executor job)."""
        return fit_detector(self._rows(request, schema=config.schema), config)

    def _fit_and_score(
        self, request: pb.DetectAnomalyRequest, config: FitConfig, threshold: float | None
    ) -> ScoreResult:
        """One-shot use: read the rows, fit on them and score them (one executor job)."""
        rows = self._rows(request, schema=config.schema)
        return fit_detector(rows, config).score(rows, threshold=threshold, explain=request.explain)

    def _score_saved(
        self, name: str, request: pb.DetectAnomalyRequest, threshold: float | None
    ) -> ScoreResult:
        """Load (from the store's cache), read the rows against its schema and score: one executor job."""
        _, detector = self._detectors.load(name)
        rows = self._rows(request, schema=detector.schema)
        return detector.score(rows, threshold=threshold, explain=request.explain)

    async def FitAnomalyDetector(
        self, request: pb.FitAnomalyDetectorRequest, context: grpc.aio.ServicerContext
    ) -> pb.FitAnomalyDetectorResponse:
        """Fit a detector on the rows and save it as the next version of its name."""
        name = validate_detector_name(request.detector)
        config = fit_config_from_pb(
            request.backend, request.schema, request.contamination, request.normalization
        )
        detector = await self._cpu.run(self._fit, request, config)
        version = await self._cpu.run(self._detectors.save, name, detector)
        return pb.FitAnomalyDetectorResponse(
            detector=name, version=version, row_count=detector.row_count, threshold=detector.threshold
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
        if not request.detector:
            config = fit_config_from_pb(
                request.backend, request.schema, request.contamination, request.normalization
            )
            result = await self._cpu.run(self._fit_and_score, request, config, threshold)
            return detect_response(result, columnar=request.columnar_output)
        name = validate_detector_name(request.detector)
        one_shot_only = (request.backend, len(request.schema), request.contamination, request.normalization)
        require(
            not any(one_shot_only),
            "detector",
            "backend, schema, contamination and normalization are for one-shot use (no detector); "
            "a saved detector keeps the ones it was fitted with",
        )
        result = await self._cpu.run(self._score_saved, name, request, threshold)
        return detect_response(result, columnar=request.columnar_output)

    async def StreamDetectAnomaly(self, request_iterator, context: grpc.aio.ServicerContext):
        """Score rows as they arrive over a rolling window (one reply per request message)."""
        session: StreamDetector | None = None
        try:
            async for request in request_iterator:
                if session is None:
                    config = stream_config_from_pb(request.config)
                    check_stream_config(config, self._settings.anomaly_max_window)
                    session = StreamDetector(config, self._cpu)
                rows = self._rows(request, allow_empty=True, schema=session.schema)
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
