"""Plain dataclasses and enums of the anomaly engine, and checks of their values (no protobuf here)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engines.errors import InvalidArgumentError

Cell = float | str
"""One cell of a row: a number for numeric columns, a string for categorical ones."""


class AnomalyBackend(enum.StrEnum):
    """Detection algorithms (scikit-learn and pyod)."""

    ISOLATION_FOREST = "isolation_forest"
    LOCAL_OUTLIER_FACTOR = "local_outlier_factor"
    ONE_CLASS_SVM = "one_class_svm"
    ECOD = "ecod"
    HBOS = "hbos"
    COPOD = "copod"
    KNN = "knn"


class Normalization(enum.StrEnum):
    """Feature scaling before the detector: z-score, median/IQR, or none."""

    STANDARD = "standard"
    ROBUST = "robust"
    NONE = "none"


class FeatureKind(enum.StrEnum):
    """Kind of a column."""

    NUMERIC = "numeric"
    CATEGORICAL = "categorical"


class CategoricalEncoding(enum.StrEnum):
    """How a categorical column becomes numbers (see :mod:`engines.anomaly.encoding`)."""

    ONE_HOT = "one_hot"
    LABEL = "label"
    HASH = "hash"
    FREQUENCY = "frequency"


@dataclass(frozen=True, slots=True)
class FeatureField:
    """Declaration of one column: its name, kind and (categorical only) encoding."""

    name: str
    kind: FeatureKind = FeatureKind.NUMERIC
    encoding: CategoricalEncoding = CategoricalEncoding.ONE_HOT


@dataclass(frozen=True, slots=True)
class FitConfig:
    """How to fit a detector.

    Attributes:
        backend: the algorithm.
        schema: column declarations; ``None`` means every column numeric, named ``x0, x1, ...``.
        contamination: expected share of anomalies in the training rows, in (0, 0.5].
        normalization: feature scaling.

    """

    backend: AnomalyBackend = AnomalyBackend.ISOLATION_FOREST
    schema: tuple[FeatureField, ...] | None = None
    contamination: float = 0.1
    normalization: Normalization = Normalization.STANDARD


@dataclass(slots=True)
class RowScore:
    """Score of one row.

    Attributes:
        index: position of the row in its request.
        score: raw score, higher is more anomalous (the backend's own scale).
        normalized_score: share of the training rows that score lower, in [0, 1].
        is_anomaly: score at or above the threshold in force.
        explanation: ``(feature, share)`` pairs summing to 1, largest first (flagged rows, on request).

    """

    index: int
    score: float
    normalized_score: float
    is_anomaly: bool
    explanation: list[tuple[str, float]] = field(default_factory=list)


@dataclass(slots=True)
class ScoreResult:
    """Scores of a batch (parallel arrays, row i at position i) and the raw-score threshold applied.

    Attributes:
        raw: raw scores, shape (rows,), float64.
        normalized: normalized scores in [0, 1], shape (rows,).
        flags: whether each row is flagged, shape (rows,), bool.
        threshold: the raw-score threshold applied.
        explanations: ``(feature, share)`` pairs of flagged rows by row index, when asked for.

    """

    raw: np.ndarray
    normalized: np.ndarray
    flags: np.ndarray
    threshold: float
    explanations: dict[int, list[tuple[str, float]]] = field(default_factory=dict)

    @property
    def scores(self) -> list[RowScore]:
        """One :class:`RowScore` per row (built on demand: large batches use the arrays)."""
        return [
            RowScore(
                index=i, score=r, normalized_score=n, is_anomaly=f, explanation=self.explanations.get(i, [])
            )
            for i, (r, n, f) in enumerate(
                zip(self.raw.tolist(), self.normalized.tolist(), self.flags.tolist(), strict=True)
            )
        ]

    @property
    def anomaly_count(self) -> int:
        """Rows flagged."""
        return int(np.count_nonzero(self.flags))


@dataclass(frozen=True, slots=True)
class DetectorInfo:
    """What the store knows about a saved detector's latest version.

    ``shared`` is not in the store's files: it says which namespace the detector was found in
    (the shared one every key may use, or the calling key's own; :mod:`engines.owners`).
    """

    name: str
    version: int
    backend: AnomalyBackend
    schema: tuple[FeatureField, ...]
    row_count: int
    threshold: float
    contamination: float
    normalization: Normalization
    created_at_ms: int
    shared: bool = False


@dataclass(frozen=True, slots=True)
class DetectorListing:
    """Every saved detector: those whose manifest reads, and the names of those whose does not."""

    detectors: list[DetectorInfo]
    unreadable: list[str]


class StreamState(enum.StrEnum):
    """State of the window after a message."""

    COLLECTING = "collecting"
    READY = "ready"
    REFITTING = "refitting"


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """Settings of one stream: the fit settings and the window's sizes (rows)."""

    fit: FitConfig = field(default_factory=FitConfig)
    window_size: int = 1000
    min_samples: int = 100
    refit_interval: int = 100


@dataclass(slots=True)
class StreamStep:
    """Outcome of one message: scores (empty while collecting) and the window's state."""

    scores: list[RowScore]
    state: StreamState
    window_row_count: int
    fit_count: int


def check_contamination(contamination: float, field: str = "contamination") -> None:
    """Require ``0 < contamination <= 0.5``.

    Raises:
        InvalidArgumentError: out of range (metadata names ``field``).

    """
    if not (0.0 < contamination <= 0.5):
        raise InvalidArgumentError(
            f"{field}: must be in (0, 0.5], got {contamination}", field=field, value=contamination
        )


def accepts_matrix(schema: Sequence[FeatureField] | None, width: int) -> bool:
    """Whether a float matrix of ``width`` columns is valid input for ``schema`` (``None``: all numeric).

    True when the schema is all numeric and ``width`` wide, i.e. when :func:`check_rows` would
    accept every finite matrix of that width.
    """
    if schema is None:
        return width > 0
    return len(schema) == width and all(f.kind is FeatureKind.NUMERIC for f in schema)
