"""Data and proto builders shared by the anomaly tests."""

from __future__ import annotations

import numpy as np
from universal_runtime.v1 import anomaly_pb2 as pb

N_ROWS = 400
OUTLIERS = list(range(7, N_ROWS, 40))  # 10 injected rows
CONTAMINATION = 0.05

CITIES = ["berlin", "paris", "rome", "madrid"]


def numeric_data(seed: int = 0) -> np.ndarray:
    """Gaussian rows (4 columns) with OUTLIERS moved 7 standard deviations away on every column."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N_ROWS, 4))
    x[OUTLIERS] += rng.choice([-7.0, 7.0], size=(len(OUTLIERS), 4))
    return x


def mixed_rows(seed: int = 0) -> list[list]:
    """Numeric rows plus a city (categorical) and a channel (categorical) column."""
    rng = np.random.default_rng(seed)
    x = numeric_data(seed)
    cities = rng.choice(CITIES, size=N_ROWS)
    channels = rng.choice(["web", "app", "store"], size=N_ROWS, p=[0.5, 0.3, 0.2])
    return [[*map(float, r), str(c), str(ch)] for r, c, ch in zip(x, cities, channels, strict=True)]


MIXED_SCHEMA = [
    *[pb.FeatureField(name=f"x{i}", type=pb.FEATURE_TYPE_NUMERIC) for i in range(4)],
    pb.FeatureField(name="city", type=pb.FEATURE_TYPE_CATEGORICAL, encoding=pb.CATEGORICAL_ENCODING_ONE_HOT),
    pb.FeatureField(name="channel", type=pb.FEATURE_TYPE_CATEGORICAL, encoding=pb.CATEGORICAL_ENCODING_HASH),
]


def cell(value) -> pb.FeatureValue:
    """A FeatureValue holding a number or a string."""
    if isinstance(value, str):
        return pb.FeatureValue(string_value=value)
    return pb.FeatureValue(number_value=float(value))


def to_rows(rows) -> list[pb.FeatureRow]:
    """FeatureRows from lists of numbers and strings."""
    return [pb.FeatureRow(values=[cell(v) for v in row]) for row in rows]


def top_indices(response: pb.DetectAnomalyResponse, k: int) -> set[int]:
    """Indices of the k highest raw scores."""
    ranked = sorted(response.scores, key=lambda s: -s.score)
    return {s.index for s in ranked[:k]}
