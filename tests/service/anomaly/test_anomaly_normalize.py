"""Normalized scores: the mid-rank ECDF of the training scores, ties included."""

from __future__ import annotations

import numpy as np

from engines.anomaly.detector import fit_detector
from engines.anomaly.types import AnomalyBackend, FitConfig, Normalization


def mid_rank(quantiles: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The definition: mean of the left and right insertion ranks over the kept quantiles."""
    low = np.searchsorted(quantiles, scores, side="left")
    high = np.searchsorted(quantiles, scores, side="right")
    return (low + high) / (2.0 * len(quantiles))


def test_normalize_matches_the_mid_rank_definition_with_ties():
    rng = np.random.default_rng(3)
    # HBOS scores come from histograms, so many training scores (and kept quantiles) tie.
    detector = fit_detector(
        rng.normal(size=(2000, 4)),
        FitConfig(backend=AnomalyBackend.HBOS, normalization=Normalization.NONE, contamination=0.1),
    )
    quantiles = detector.quantiles
    assert len(np.unique(quantiles)) < len(quantiles)
    scores = np.concatenate(
        [
            detector.score(rng.normal(size=(5000, 4))).raw,
            quantiles[::7],  # exactly on kept quantiles
            [quantiles[0] - 1.0, quantiles[-1] + 1.0],  # outside the training range
        ]
    )
    normalized = detector.normalize(scores)
    np.testing.assert_array_equal(normalized, mid_rank(quantiles, scores))
    assert normalized[-2] == 0.0 and normalized[-1] == 1.0
