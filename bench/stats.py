"""Robust summaries for noisy, shared machines: medians, percentiles, paired ratios."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation (numpy's default, "linear").

    Returns NaN for an empty sequence.
    """
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    if not data:
        return math.nan
    rank = (len(data) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


#: A cell whose repetitions spread (max - min) over more than this fraction of their median is
#: flagged unstable: its median alone would hide that the runs disagree.
UNSTABLE_SPREAD = 0.3


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, p5/p95, quartiles (IQR), min, max, count and relative spread of ``values``.

    ``spread`` is (max - min) / |median| (NaN for an empty sequence or a zero median); a cell
    with ``spread`` above :data:`UNSTABLE_SPREAD` is reported as unstable (:func:`is_unstable`).
    """
    low, mid, high = percentile(values, 0), percentile(values, 50), percentile(values, 100)
    return {
        "spread": ratio(high - low, abs(mid)),
        "median": mid,
        "p5": percentile(values, 5),
        "p95": percentile(values, 95),
        "q1": percentile(values, 25),
        "q3": percentile(values, 75),
        "min": low,
        "max": high,
        "n": len([v for v in values if v is not None and not math.isnan(v)]),
    }


def is_unstable(summary: dict[str, float] | None) -> bool:
    """Whether a summary's repetitions (two or more) spread above :data:`UNSTABLE_SPREAD`."""
    if not summary or (summary.get("n") or 0) < 2:
        return False
    spread = summary.get("spread")
    return spread is not None and not math.isnan(spread) and spread > UNSTABLE_SPREAD


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, NaN when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return math.nan
    if math.isnan(numerator) or math.isnan(denominator):
        return math.nan
    return numerator / denominator


def paired_ratio(contender: Sequence[float], reference: Sequence[float]) -> dict[str, float]:
    """Summary of the per-repetition ratios ``contender[i] / reference[i]``.

    Pairing runs of the same repetition (run back to back, A B A B ...) cancels most of the
    drift of a shared machine; the median of the ratios is the figure to quote.
    """
    return summarize([ratio(a, b) for a, b in zip(contender, reference, strict=False)])


def fmt(value: float, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, or ``-`` for NaN/None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:.0f}"
