"""The bench knows when its machine is not quiet, and --tiny never writes the committed results.

A process outside the run's tree that burns a core is counted as foreign CPU and makes the run
noisy; the run's own children burning CPU are not. A noisy run meant for ``bench/results/``
writes nothing and says why; a ``--tiny`` run writes into a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bench import noise, runner

REPO = Path(__file__).resolve().parents[2]
#: Seconds each hog runs; bounded, and killed at the end of its test in any case.
HOG_S = 30
HOG = f"import time\nend = time.monotonic() + {HOG_S}\nwhile time.monotonic() < end: pass\n"


def quick_thresholds(**limits: float) -> noise.Thresholds:
    """Thresholds with a short first window, so each test takes seconds."""
    return noise.Thresholds(settle_s=1.0, **limits)


def foreign_hog() -> int:
    """Start a CPU hog outside this process's tree (its shell parent exits); return its pid."""
    started = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -c "$0" >/dev/null 2>&1 & echo $!', HOG],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return int(started.stdout.strip())


def test_a_hog_outside_the_run_makes_it_noisy():
    pid = foreign_hog()
    try:
        monitor = noise.Monitor(quick_thresholds())
        monitor.checkpoint("start")
        time.sleep(2.0)
        later = monitor.checkpoint("after")
    finally:
        os.kill(pid, signal.SIGKILL)
    # The hog owns most of a core in both windows (the run's own calibration is not counted).
    assert monitor.samples[0]["foreign_cores"] > 0.5, monitor.samples
    assert later["foreign_cores"] > 0.5, monitor.samples
    summary = monitor.summary()
    assert summary["noisy"] and any("other processes used" in line for line in summary["reasons"])


def cpu_s(proc: psutil.Process) -> float:
    """The process's own CPU seconds (user + system)."""
    times = proc.cpu_times()
    return times.user + times.system


# The next three check the run's own accounting against each process's own CPU, not the machine's
# foreign figure: they hold however busy the rest of the machine is.


def test_the_runs_own_children_are_counted_as_its_own():
    own = noise.OwnProcesses()
    own.spent_since_last()
    hog = subprocess.Popen([sys.executable, "-c", HOG])
    try:
        time.sleep(1.5)
        spent = own.spent_since_last()
        burnt = cpu_s(psutil.Process(hog.pid))
    finally:
        hog.kill()
        hog.wait(timeout=30)
    assert burnt > 0.2 and spent >= 0.9 * burnt, (spent, burnt)


def test_a_server_stopped_before_its_workers_keeps_them_as_the_runs_own():
    # A "server" starts a busy worker, says its pid and exits at a word from the run: the worker is
    # reparented away from the run's tree and keeps burning CPU, all of it still the run's own.
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL); "
            f"w = subprocess.Popen([sys.executable, '-c', {HOG!r}], **quiet); print(w.pid, flush=True); input()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    worker = psutil.Process(int(server.stdout.readline()))
    try:
        own = noise.OwnProcesses()
        own.spent_since_last()  # the worker is seen while its parent lives
        server.communicate("stop\n", timeout=30)
        before = cpu_s(worker)
        own.spent_since_last()
        time.sleep(1.5)
        spent = own.spent_since_last()
        burnt = cpu_s(worker) - before
    finally:
        worker.kill()
    assert burnt > 0.2 and spent >= 0.9 * burnt, (spent, burnt)
    # Once it is gone (its new parent reaped it), nothing is taken back from the run's count.
    time.sleep(0.5)
    assert own.spent_since_last() >= 0.0


def test_a_child_that_exited_unreaped_is_counted_once():
    # A worker that burns CPU briefly and exits; the run reaps it only later, so in between it is a
    # zombie whose CPU no reaped-children time holds yet.
    own = noise.OwnProcesses()
    own.spent_since_last()
    worker = subprocess.Popen([sys.executable, "-c", HOG.replace(str(HOG_S), "1")])
    deadline = time.monotonic() + 30
    while psutil.Process(worker.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.1)
    burnt = cpu_s(psutil.Process(worker.pid))
    exited = own.spent_since_last()
    worker.wait(timeout=30)
    reaped = own.spent_since_last()
    assert burnt > 0.2 and exited >= 0.9 * burnt, (exited, burnt)
    # Reaped: this process's reaped-children time now holds it, and it is not counted twice.
    assert reaped < 0.5 * burnt, (reaped, burnt)


def test_a_slow_calibration_makes_a_run_noisy():
    monitor = noise.Monitor(quick_thresholds())
    monitor.samples = [
        {
            "label": "start",
            "interval_s": 1.0,
            "foreign_cores": 0.0,
            "calibration_s": 0.1,
            "calibration_ratio": 1.0,
            "calibration_judged": True,
        },
        {
            "label": "rep 1",
            "interval_s": 9.0,
            "foreign_cores": 0.0,
            "calibration_s": 0.2,
            "calibration_ratio": 2.0,
            "calibration_judged": True,
        },
    ]
    (reason,) = monitor.reasons()
    assert reason.startswith("rep 1: the calibration job took x2.00")


#: Run in a fresh interpreter, so that the run's own processes are exactly the ones it starts (under
#: pytest, servers of session fixtures are this process's children too, and may be busy).
OWN_BUSY_THEN_IDLE = f"""
import json, subprocess, sys, time
from bench import noise
monitor = noise.Monitor(noise.Thresholds(settle_s=1.0))
monitor.checkpoint("start")
hog = subprocess.Popen([sys.executable, "-c", {HOG!r}])
time.sleep(0.5)
during = monitor.checkpoint("own process spinning")
hog.kill()
hog.wait(timeout=30)
after = monitor.checkpoint("idle again")
print(json.dumps({{"during": during, "after": after, "reasons": monitor.reasons()}}))
"""


def test_a_calibration_beside_the_runs_own_busy_processes_is_not_judged():
    # The run's own server spinning (as llama.cpp's OpenMP threads do between steps).
    ran = subprocess.run(
        [sys.executable, "-c", OWN_BUSY_THEN_IDLE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=True,
    )
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    during, after = seen["during"], seen["after"]
    limit = noise.Thresholds().own_cores_idle
    assert during["own_cores_during_calibration"] > limit and not during["calibration_judged"], during
    assert not any("calibration" in line for line in seen["reasons"])
    assert after["calibration_judged"], after


def config(out: Path, readme: Path) -> runner.BenchConfig:
    git = {"revision": "abc1234", "dirty": False, "dirty_paths": []}
    return runner.BenchConfig("noise_check", "quick", False, out, readme, 1, git, argparse.Namespace())


def test_a_noisy_run_writes_nothing_to_bench_results(monkeypatch, tmp_path, capsys):
    # A foreign-CPU limit below zero: every machine is "busy", so the refusal path runs for sure.
    always_busy = noise.Monitor
    monkeypatch.setattr(noise, "Monitor", lambda: always_busy(quick_thresholds(foreign_cores=-1.0)))
    readme = tmp_path / "README.md"
    cfg = config(runner.DEFAULT_RESULTS.resolve(), readme)
    with (
        runner.Report(cfg, "noise check", [], {}, {}) as report,
        pytest.raises(runner.MachineNotQuietError) as refused,
    ):
        report.finish()
    assert "not quiet" in str(refused.value) and "other processes used" in str(refused.value)
    assert not (runner.DEFAULT_RESULTS / "noise_check.json").exists() and not readme.exists()
    assert "**noisy (" in capsys.readouterr().err


def test_a_noisy_run_elsewhere_is_written_and_marked(monkeypatch, tmp_path):
    always_busy = noise.Monitor
    monkeypatch.setattr(noise, "Monitor", lambda: always_busy(quick_thresholds(foreign_cores=-1.0)))
    cfg = config(tmp_path, tmp_path / "README.md")
    with runner.Report(cfg, "noise check", [], {}, {}) as report:
        report.finish()
    assert report.payload["noise"]["noisy"] and report.payload["noise"]["samples"][-1]["label"] == "end"
    assert "**noisy (" in (tmp_path / "README.md").read_text()


def test_tiny_never_writes_the_committed_results(monkeypatch, capsys):
    monkeypatch.setattr(runner.signal, "signal", lambda *args: None)
    cfg = runner.parse_config("overhead", ["--tiny"])
    assert runner.DEFAULT_RESULTS.resolve() not in (cfg.out_dir, *cfg.out_dir.parents)
    assert cfg.readme == cfg.out_dir / "README.md" and "--tiny: writing into" in capsys.readouterr().err
    for named in (
        ["--out", str(runner.DEFAULT_RESULTS)],
        ["--out", "bench/results"],
        ["--readme", "bench/README.md"],
    ):
        with pytest.raises(SystemExit) as refused:
            runner.parse_config("overhead", ["--tiny", *named])
        assert refused.value.code == 2
        assert "never writes bench/results/" in capsys.readouterr().err


def test_a_run_whose_calibrations_were_never_judged_still_renders():
    from bench import results

    payload = {
        "finished": "2026-11-29T00:00:00+00:00",
        "git_revision": "abc1234",
        "git_dirty": False,
        "machine": {"cpu_model": "cpu", "usable_cores": 2, "ram_bytes": 2**30, "gpus": []},
        "noise": {"noisy": False, "foreign_cores_max": 0.01, "calibration_ratio_max": None},
    }
    assert results.measured_line(payload).endswith(
        "quiet (other processes at most 0.01 cores, calibration not judged)"
    )


def test_a_noisy_run_never_touches_the_committed_readme(monkeypatch, tmp_path):
    always_busy = noise.Monitor
    monkeypatch.setattr(noise, "Monitor", lambda: always_busy(quick_thresholds(foreign_cores=-1.0)))
    before = runner.DEFAULT_README.read_text()
    cfg = config(tmp_path, runner.DEFAULT_README)
    with runner.Report(cfg, "noise check", [], {}, {}) as report, pytest.raises(runner.MachineNotQuietError):
        report.finish()
    assert runner.DEFAULT_README.read_text() == before and not (tmp_path / "noise_check.json").exists()
