"""Smoke tests of the backend-process areas: each entry point in tiny mode, into a tmp dir.

``bench.backend_isolation`` kills the chat model's backend mid-stream; ``bench.backend_memory``
loads and unloads models in fresh servers of both designs. The goals are measured by ``make
bench`` on a quiet machine; these only keep the areas from rotting, and check what does not
depend on the machine's speed (how the streams end, which processes come and go).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.bench.test_bench_smoke import REPO, _wait, check_area_output


def _tiny(tmp_path: Path, area: str) -> dict[str, Any]:
    """Run ``bench.<area> --tiny`` into ``tmp_path/area``; check its output; return its JSON."""
    proc = subprocess.Popen(
        [sys.executable, "-m", f"bench.{area}", "--tiny", "--no-peers", "--out", str(tmp_path / area)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = _wait(proc, timeout_s=600)
    check_area_output(tmp_path, area, proc.returncode, log)
    return json.loads((tmp_path / area / f"{area}.json").read_text())


def test_backend_isolation_kills_end_the_streams_with_backend_exited(tmp_path):
    payload = _tiny(tmp_path, "backend_isolation")
    (scenario,) = payload["scenarios"]
    results = scenario["results"]
    assert scenario["reference"] == "no-kill" and sorted(results) == ["no-kill", "sigkill", "sigsegv"]
    streams = payload["settings"]["streams"]
    for name in ("sigkill", "sigsegv"):
        figures = {k: v["median"] for k, v in results[name]["metrics"].items()}
        assert figures["embed_errors"] == 0 and figures["embed_calls"] > 0, figures
        assert figures["streams_backend_exited"] == streams and figures["streams_ended_otherwise"] == 0
        # Within 1 s is the goal on a quiet machine; a busy test machine gets slack.
        assert 0 <= figures["stream_end_max_s"] < 10, figures
        assert figures["recovery_s"] > 0 and math.isfinite(figures["recovery_minus_load_s"]), figures
        assert figures["restart_load_s"] > 0, figures
        assert results[name]["ratios"]["embed_p99_ms"]["median"] > 0
    reference = results["no-kill"]["metrics"]
    assert "recovery_s" not in reference and reference["embed_errors"]["median"] == 0


def test_backend_memory_unloading_ends_the_backend_processes(tmp_path):
    payload = _tiny(tmp_path, "backend_memory")
    (scenario,) = payload["scenarios"]
    results = scenario["results"]
    assert scenario["reference"] == "single-process"
    ours = {k: v["median"] for k, v in results["backend-processes"]["metrics"].items()}
    single = {k: v["median"] for k, v in results["single-process"]["metrics"].items()}
    assert ours["children_loaded"] >= len(payload["settings"]["models"]), ours
    assert ours["children_left_after_unload"] == 0 and single["children_loaded"] == 0
    for figures in (ours, single):
        assert figures["rss_loaded_mb"] > figures["rss_fresh_mb"] > 0, figures
        assert (
            figures["after_unload_minus_fresh_mb"] == figures["rss_after_unload_mb"] - figures["rss_fresh_mb"]
        )
