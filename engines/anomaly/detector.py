"""Fitting and scoring anomaly detectors (scikit-learn and pyod) on encoded, scaled rows.

Scores follow one convention whatever the backend: the raw score is higher for more anomalous
rows (scikit-learn's ``score_samples`` is negated; pyod's ``decision_function`` is used as is).
The threshold is the ``1 - contamination`` quantile of the training rows' scores, so about a
``contamination`` share of the training rows is flagged. The normalized score is the share of
training rows that score lower (the empirical CDF of the training scores, mid-rank for ties),
so it is in [0, 1] and comparable across backends.

Explanations: for each flagged row, the absolute robust z-score of every model input column
(distance from the training median in training inter-quartile ranges), summed per schema
feature and divided by the row's total, i.e. each feature's share of the row's deviation.
This is model-agnostic and cheap; it says where the row is unusual, not why a given backend
ranked it as it did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engines.anomaly.encoding import TabularEncoder, default_schema, feature_shares
from engines.anomaly.types import (
    AnomalyBackend,
    Cell,
    FeatureField,
    FitConfig,
    Normalization,
    ScoreResult,
    check_contamination,
)
from engines.errors import InvalidArgumentError

MIN_FIT_ROWS = 10
"""Fewest rows a detector is fitted on (neighbour-based backends need several neighbours)."""

QUANTILE_LEVELS = np.linspace(0.0, 1.0, 1001)
"""Levels at which the training-score distribution is kept for normalized scores."""

RANDOM_STATE = 0
"""Seed of randomized backends (isolation forest), so a refit on the same rows is identical."""


@dataclass(frozen=True, slots=True)
class _Algorithm:
    """How one backend is built and how its raw scores (higher = more anomalous) are read."""

    build: Callable[[int, float], Any]  # (training rows, contamination) -> unfitted estimator
    train_scores: Callable[[Any, np.ndarray], np.ndarray]
    scores: Callable[[Any, np.ndarray], np.ndarray]


def _isolation_forest(n: int, contamination: float) -> Any:
    from sklearn.ensemble import IsolationForest

    return IsolationForest(n_estimators=100, random_state=RANDOM_STATE)


def _local_outlier_factor(n: int, contamination: float) -> Any:
    from sklearn.neighbors import LocalOutlierFactor

    return LocalOutlierFactor(n_neighbors=min(20, n - 1), novelty=True)


def _one_class_svm(n: int, contamination: float) -> Any:
    from sklearn.svm import OneClassSVM

    # nu bounds the share of training rows outside the boundary: the contamination.
    return OneClassSVM(nu=contamination, gamma="scale")


def _pyod(class_path: str, **kwargs: Any) -> Callable[[int, float], Any]:
    module_name, _, class_name = class_path.rpartition(".")

    def build(n: int, contamination: float) -> Any:
        import importlib

        cls = getattr(importlib.import_module(module_name), class_name)
        extra = {"n_neighbors": min(5, n - 1)} if "n_neighbors" in kwargs else kwargs
        return cls(contamination=contamination, **extra)

    return build


def _negated_score_samples(model: Any, x: np.ndarray) -> np.ndarray:
    return -model.score_samples(x)


def _pyod_train_scores(model: Any, x: np.ndarray) -> np.ndarray:
    return np.asarray(model.decision_scores_, dtype=np.float64)


def _pyod_scores(model: Any, x: np.ndarray) -> np.ndarray:
    return np.asarray(model.decision_function(x), dtype=np.float64)


ALGORITHMS: dict[AnomalyBackend, _Algorithm] = {
    AnomalyBackend.ISOLATION_FOREST: _Algorithm(
        _isolation_forest, _negated_score_samples, _negated_score_samples
    ),
    # In novelty mode score_samples on the training rows would count each row as its own
    # neighbour; the fitted negative_outlier_factor_ is the unbiased training score.
    AnomalyBackend.LOCAL_OUTLIER_FACTOR: _Algorithm(
        _local_outlier_factor, lambda m, x: -m.negative_outlier_factor_, _negated_score_samples
    ),
    AnomalyBackend.ONE_CLASS_SVM: _Algorithm(_one_class_svm, _negated_score_samples, _negated_score_samples),
    AnomalyBackend.ECOD: _Algorithm(_pyod("pyod.models.ecod.ECOD"), _pyod_train_scores, _pyod_scores),
    AnomalyBackend.HBOS: _Algorithm(_pyod("pyod.models.hbos.HBOS"), _pyod_train_scores, _pyod_scores),
    AnomalyBackend.COPOD: _Algorithm(_pyod("pyod.models.copod.COPOD"), _pyod_train_scores, _pyod_scores),
    AnomalyBackend.KNN: _Algorithm(
        _pyod("pyod.models.knn.KNN", n_neighbors=5), _pyod_train_scores, _pyod_scores
    ),
}


def _scaler(normalization: Normalization) -> Any:
    from sklearn.preprocessing import RobustScaler, StandardScaler

    if normalization is Normalization.STANDARD:
        return StandardScaler()
    if normalization is Normalization.ROBUST:
        return RobustScaler()
    return None


class Detector:
    """A fitted detector: encoder, scaler, model, threshold and training-score distribution.

    Build one with :func:`fit_detector`; persist it with :meth:`state` / :meth:`from_state`.
    Methods are blocking (run them on an executor).
    """

    def __init__(self, state: dict[str, Any]) -> None:
        self.backend = AnomalyBackend(state["backend"])
        self.contamination = float(state["contamination"])
        self.normalization = Normalization(state["normalization"])
        self.row_count = int(state["row_count"])
        self.threshold = float(state["threshold"])
        self.quantiles = np.asarray(state["quantiles"], dtype=np.float64)
        self.center = np.asarray(state["center"], dtype=np.float64)
        self.spread = np.asarray(state["spread"], dtype=np.float64)
        self.encoder: TabularEncoder = state["encoder"]
        self.scaler = state["scaler"]
        self.model = state["model"]

    def state(self) -> dict[str, Any]:
        """Everything needed to rebuild the detector (numbers, strings, arrays, estimators)."""
        return {
            "backend": str(self.backend),
            "contamination": self.contamination,
            "normalization": str(self.normalization),
            "row_count": self.row_count,
            "threshold": self.threshold,
            "quantiles": self.quantiles,
            "center": self.center,
            "spread": self.spread,
            "encoder": self.encoder,
            "scaler": self.scaler,
            "model": self.model,
        }

    @property
    def schema(self) -> tuple[FeatureField, ...]:
        """Column declarations the detector was fitted with."""
        return self.encoder.schema

    def _inputs(self, rows: Sequence[Sequence[Cell]]) -> np.ndarray:
        x = self.encoder.transform(rows)
        return self.scaler.transform(x) if self.scaler is not None else x

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Share of training rows scoring lower than each score (mid-rank ECDF), in [0, 1]."""
        quantiles = self.quantiles
        # Searching sorted keys is over twice as fast as random ones on a large batch (each
        # search starts where the previous ended), even counting the argsort.
        order = np.argsort(scores)
        low = np.empty(len(scores), dtype=np.intp)
        low[order] = np.searchsorted(quantiles, scores[order], side="left")
        # The right-side rank differs from the left one only for scores equal to a kept
        # quantile (ties, e.g. HBOS's histogram scores): search again for those alone.
        high = low.copy()
        tied = np.flatnonzero(quantiles[np.minimum(low, len(quantiles) - 1)] == scores)
        if tied.size:
            high[tied] = np.searchsorted(quantiles, scores[tied], side="right")
        return (low + high) / (2.0 * len(quantiles))

    def score(
        self, rows: Sequence[Sequence[Cell]], *, threshold: float | None = None, explain: bool = False
    ) -> ScoreResult:
        """Score ``rows``.

        Args:
            rows: rows in schema order.
            threshold: per-request threshold on the normalized score in (0, 1]; ``None`` uses the
                detector's raw-score threshold.
            explain: add per-feature shares to flagged rows (see the module notes).

        Returns:
            One :class:`RowScore` per row and the raw-score threshold applied (for a
            per-request threshold, the raw score at that normalized level).

        Raises:
            InvalidArgumentError: rows that do not fit the schema.

        """
        x = self._inputs(rows)
        raw = ALGORITHMS[self.backend].scores(self.model, x)
        normalized = self.normalize(raw)
        if threshold is None:
            flags = raw >= self.threshold
            applied = self.threshold
        else:
            flags = normalized >= threshold
            applied = float(np.interp(threshold, QUANTILE_LEVELS, self.quantiles))
        shares = None
        if explain and flags.any():
            deviation = np.abs(x[flags] - self.center) / self.spread
            shares = feature_shares(deviation, self.encoder.output_features, len(self.encoder.names))
        explanations: dict[int, list[tuple[str, float]]] = {}
        if shares is not None:
            for row, share in zip(np.flatnonzero(flags).tolist(), shares.tolist(), strict=True):
                explanations[row] = sorted(zip(self.encoder.names, share, strict=True), key=lambda p: -p[1])
        return ScoreResult(
            raw=raw, normalized=normalized, flags=flags, threshold=applied, explanations=explanations
        )


def fit_detector(rows: Sequence[Sequence[Cell]], config: FitConfig) -> Detector:
    """Fit a detector on ``rows`` (blocking).

    Raises:
        InvalidArgumentError: fewer than ``MIN_FIT_ROWS`` rows, rows that do not fit the schema,
            contamination outside (0, 0.5].

    """
    check_contamination(config.contamination)
    if len(rows) < MIN_FIT_ROWS:
        raise InvalidArgumentError(
            f"rows: a detector needs at least {MIN_FIT_ROWS} rows to fit, got {len(rows)}",
            field="rows",
            rows=len(rows),
            min_rows=MIN_FIT_ROWS,
        )
    schema = config.schema or default_schema(len(rows[0]))
    encoder = TabularEncoder(schema).fit(rows)
    x = encoder.transform(rows)
    scaler = _scaler(config.normalization)
    if scaler is not None:
        x = scaler.fit_transform(x)
    algorithm = ALGORITHMS[config.backend]
    model = algorithm.build(len(rows), config.contamination)
    model.fit(x)
    train = np.asarray(algorithm.train_scores(model, x), dtype=np.float64)
    center = np.median(x, axis=0)
    spread = np.subtract(*np.percentile(x, [75, 25], axis=0))
    spread = np.where(spread > 1e-12, spread, x.std(axis=0))
    spread = np.where(spread > 1e-12, spread, 1.0)
    return Detector(
        {
            "backend": str(config.backend),
            "contamination": float(config.contamination),
            "normalization": str(config.normalization),
            "row_count": len(rows),
            "threshold": float(np.quantile(train, 1.0 - config.contamination)),
            "quantiles": np.quantile(train, QUANTILE_LEVELS),
            "center": center,
            "spread": spread,
            "encoder": encoder,
            "scaler": scaler,
            "model": model,
        }
    )


def fit_and_score(
    rows: Sequence[Sequence[Cell]], config: FitConfig, threshold: float | None, explain: bool
) -> ScoreResult:
    """Fit a detector on ``rows`` and score the same rows (one-shot detection; blocking).

    Raises:
        InvalidArgumentError: as :func:`fit_detector` and :meth:`Detector.score`.

    """
    return fit_detector(rows, config).score(rows, threshold=threshold, explain=explain)
