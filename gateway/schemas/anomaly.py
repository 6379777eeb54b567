"""JSON bodies of the anomaly routes (``/v1/anomaly/...``); unknown fields are refused (400)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.schemas.base import StrictRequestModel

Backend = Literal["isolation_forest", "local_outlier_factor", "one_class_svm", "ecod", "hbos", "copod", "knn"]
NormalizationName = Literal["standard", "robust", "none"]


class FeatureFieldBody(StrictRequestModel):
    """One column: ``name``, ``type`` (numeric or categorical) and the categorical ``encoding``."""

    name: str = ""
    type: Literal["numeric", "categorical"] = "numeric"
    encoding: Literal["one_hot", "label", "hash", "frequency"] = "one_hot"


class FitSettings(StrictRequestModel):
    """Fit settings shared by ``fit`` and one-shot ``detect``; unset fields take server defaults.

    Attributes:
        backend: Algorithm (default isolation_forest).
        schema_: Column declarations (JSON key ``schema``); unset means every column numeric.
        contamination: Expected share of anomalies, in (0, 0.5] (default 0.1).
        normalization: Feature scaling (default standard).

    """

    backend: Backend | None = None
    schema_: list[FeatureFieldBody] = Field(default_factory=list, alias="schema")
    contamination: float | None = None
    normalization: NormalizationName | None = None


class FitBody(FitSettings):
    """Body of ``POST /v1/anomaly/fit``: a detector name and training ``rows`` (lists of numbers/strings)."""

    detector: str
    rows: list[list[float | str]]


class DetectBody(FitSettings):
    """Body of ``POST /v1/anomaly/detect``.

    Attributes:
        detector: Saved detector; unset fits on ``rows`` and scores them (one-shot, using the
            fit settings).
        rows: Rows to score.
        threshold: Per-request threshold on the normalized score, in (0, 1].
        explain: Per-feature explanation of flagged rows.

    """

    detector: str = ""
    rows: list[list[float | str]]
    threshold: float | None = None
    explain: bool = False
