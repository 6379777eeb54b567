"""Prometheus samples for tests: the exposition text a ``/metrics`` endpoint serves, parsed.

The registry is the process's, shared by every server a test session starts, so a check is a
difference between two scrapes around the calls it makes.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition text by (name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape() -> Samples:
    """This process's samples now: what the server's and the gateway's ``/metrics`` serve."""
    return parse(generate_latest(REGISTRY).decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 for a series not exported (yet)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How far a sample moved between two scrapes."""
    return value(after, name, **labels) - value(before, name, **labels)


def observations(before: Samples, after: Samples, histogram: str, **labels: str) -> dict[float, int]:
    """Observations a histogram recorded between two scrapes, by bucket (upper bound): only buckets that got some.

    Buckets are cumulative in the exposition; this takes each bucket's own count. For histograms
    with a bucket per integer (``ur_generation_batch_size`` up to 8) the keys are the exact values.
    """
    bounds = sorted(
        float(dict(key)["le"])
        for name, key in after
        if name == f"{histogram}_bucket" and all(dict(key).get(k) == v for k, v in labels.items())
    )
    counts, below = {}, 0.0
    for bound in bounds:
        le = "+Inf" if bound == float("inf") else str(bound)
        cumulative = moved(before, after, f"{histogram}_bucket", **labels, le=le)
        if cumulative > below:
            counts[bound] = int(cumulative - below)
        below = cumulative
    return counts
