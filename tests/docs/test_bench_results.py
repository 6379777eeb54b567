"""Every committed bench result carries the one stamp, from a clean tree on a quiet machine.

The stamp (:func:`bench.environment.stamp` plus :mod:`bench.noise`'s figures) says which commit
was measured, on what, with which packages, and that nothing else ran beside it; the harness
refuses to write ``bench/results/`` otherwise, and this keeps a hand-made file from slipping in.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from bench import noise

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
FILES = sorted(RESULTS.glob("*.json"))


def test_there_are_results():
    assert FILES, "bench/results/ holds no result"


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_a_result_has_the_clean_quiet_stamp(path):
    payload = json.loads(path.read_text())
    assert payload["area"] == path.stem
    assert payload["mode"] in {"quick", "full"}, "a --tiny run is a smoke test, not a result"
    assert payload["git_revision"] and payload["git_dirty"] is False and payload["git_dirty_paths"] == []
    machine = payload["machine"]
    assert machine["cpu_model"] and machine["usable_cores"] >= 1 and machine["ram_bytes"] > 0
    assert payload["packages"]["project"]["grpcio"], "package versions are recorded"
    quiet = payload["noise"]
    assert quiet["noisy"] is False and quiet["reasons"] == []
    assert quiet["thresholds"] == asdict(noise.Thresholds()), "measured against the harness's thresholds"
    assert quiet["samples"][0]["label"] == "start" and quiet["samples"][-1]["label"] == "end"
    limits = noise.Thresholds()
    assert all(s["foreign_cores"] <= limits.foreign_cores for s in quiet["samples"])
    judged = [s for s in quiet["samples"] if s["calibration_judged"]]
    assert judged[0] is quiet["samples"][0], "the first calibration is the run's baseline"
    assert all(s["calibration_ratio"] <= limits.calibration_ratio for s in judged)
    assert payload["finished"] >= payload["started"]
