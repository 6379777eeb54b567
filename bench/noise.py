"""Whether the machine stayed quiet while a bench ran: other processes' CPU and a calibration loop.

A result is a ratio of two programs only when nothing else shares the machine: two shared cores
do not slow the contenders alike, so interleaving repetitions does not cancel a neighbour out.
A :class:`Monitor` takes checkpoints (the start, after each repetition, the end), and at each one
records:

- ``foreign_cores``: CPU time spent since the previous checkpoint by every process outside this
  run's own process tree (the harness, its servers, peers and load clients), in cores (seconds of
  CPU per second of wall time). This is the load average with the run's own work taken out: the
  load average itself counts the run's servers, and the previous area's for a minute after it, so
  it is recorded but does not decide.
- ``calibration_s``: the time of a fixed CPU job on every usable core (SHA-256 over a fixed
  buffer, one thread per core; hashlib releases the GIL), and its ratio to the run's first. The
  run's own processes may still be busy at a checkpoint (llama.cpp's OpenMP threads spin for work
  under ``OMP_WAIT_POLICY=ACTIVE``), which slows the job without anything else running: the
  cores they used during the job are recorded (``own_cores_during_calibration``) and the ratio
  is judged only when they stayed under ``thresholds.own_cores_idle``.
- the 1, 5 and 15-minute load averages and the usable cores, for the record.

A run is ``noisy`` when any interval's foreign CPU or any calibration ratio passes its
:class:`Thresholds`; bench/README.md ("Quiet machines") gives the measurements behind them.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

#: Bytes each calibration thread hashes per round, and rounds per checkpoint (the fastest counts).
CALIBRATION_BYTES = 128 << 20
CALIBRATION_ROUNDS = 5
_BLOCK = bytes(range(256)) * 4096  # 1 MiB; content is irrelevant, size fixes the work


@dataclass(frozen=True)
class Thresholds:
    """Limits past which a run is ``noisy``.

    Attributes:
        foreign_cores: Average cores used by processes outside the run over any interval
            between checkpoints (a busy neighbour on one core of two reads about 1.0).
        calibration_ratio: A checkpoint's calibration time over the run's first.
        settle_s: Wall seconds of the first checkpoint's foreign-CPU window (nothing of the run
            is running yet, so it says whether the machine is quiet before anything starts).
        own_cores_idle: The most cores the run's other processes may use during a calibration
            for its ratio to count (more, and the job measured the run, not the machine).

    """

    foreign_cores: float = 0.15
    calibration_ratio: float = 1.25
    settle_s: float = 3.0
    own_cores_idle: float = 0.1


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def busy_cpu_s() -> float:
    """CPU seconds all cores have spent busy since boot (everything but idle and I/O wait).

    ``steal`` counts: time a hypervisor gave to other guests is time the run did not get.
    """
    t = psutil.cpu_times()
    extra = sum(getattr(t, name, 0.0) for name in ("irq", "softirq", "steal"))
    return t.user + t.nice + t.system + extra


Key = tuple[int, float]  # (pid, create time): a pid alone may be reused


class OwnProcesses:
    """The run's processes and the CPU they spent: this process, its descendants, and every process
    that once was one (a server's workers stay the run's own when the server stops first and
    they are reparented).

    Each process counts with the children it has reaped (``children_user``/``children_system``),
    so a load client that ran and exited between two snapshots still counts. A process that is
    gone since the last snapshot is taken out of the sum only when its parent is still the run's:
    that parent's reaped-children time now holds it. One whose parent is gone too just stops
    counting (its CPU since the last snapshot is lost, and reads as other processes' CPU).
    """

    def __init__(self) -> None:
        self._known: dict[Key, psutil.Process] = {}
        self._last: dict[Key, tuple[float, Key | None]] = {}

    @staticmethod
    def _key(proc: psutil.Process) -> Key:
        return proc.pid, proc.create_time()

    def snapshot(self) -> dict[Key, tuple[float, Key | None]]:
        """``{key: (CPU seconds with reaped children, parent's key)}`` of every live own process."""
        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                self._known.setdefault(self._key(proc), proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        out: dict[Key, tuple[float, Key | None]] = {}
        for key, proc in list(self._known.items()):
            try:
                # An exited child not reaped yet (a zombie) still has its times in /proc, and no
                # parent's reaped-children time holds it yet: it counts as live until it is reaped.
                with proc.oneshot():
                    if not proc.is_running():
                        raise psutil.NoSuchProcess(proc.pid)
                    t = proc.cpu_times()
                    parent = proc.parent()
                    parent_key = self._key(parent) if parent is not None else None
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                del self._known[key]
                continue
            total = t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
            out[key] = (total, parent_key)
        return out

    def spent_since_last(self) -> float:
        """CPU seconds the run's processes spent since the previous call (0 at the first)."""
        now = self.snapshot()
        last, self._last = self._last, now
        if not last:
            return 0.0
        spent = sum(total - last[key][0] if key in last else total for key, (total, _) in now.items())
        # Reaped since: the parent's reaped-children time counts it whole, so take out what was counted.
        spent -= sum(total for key, (total, parent) in last.items() if key not in now and parent in now)
        return spent


def own_cpu_s() -> float:
    """CPU seconds of this process alone (its threads: the calibration job runs here)."""
    t = psutil.Process().cpu_times()
    return t.user + t.system


def calibrate(cores: int, rounds: int = CALIBRATION_ROUNDS) -> float:
    """Wall seconds of the fastest of ``rounds`` rounds of the calibration job on ``cores`` threads.

    Each thread hashes :data:`CALIBRATION_BYTES` with SHA-256; the job is fixed, so its time moves
    only with what else runs on the machine (or the CPU's clock). The fastest round is the speed
    the machine still offers (as ``timeit`` reports): something running beside the whole job
    slows every round, while a blip of a few milliseconds (the kernel reclaiming a model's memory
    the run just freed) slows one.
    """
    blocks = CALIBRATION_BYTES // len(_BLOCK)

    def work() -> None:
        digest = hashlib.sha256()
        for _ in range(blocks):
            digest.update(_BLOCK)

    times = []
    for _ in range(rounds):
        threads = [threading.Thread(target=work) for _ in range(cores)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        times.append(time.perf_counter() - start)
    return min(times)


@dataclass
class Monitor:
    """Checkpoints of one run (see the module docstring); :meth:`summary` judges them."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    samples: list[dict[str, Any]] = field(default_factory=list)
    _last: tuple[float, float] | None = None  # wall and busy CPU at the last checkpoint

    def __post_init__(self) -> None:
        self._own = OwnProcesses()

    def checkpoint(self, label: str) -> dict[str, Any]:
        """Record a checkpoint named ``label``; the first one also watches the machine for
        ``thresholds.settle_s`` before anything of the run starts. Returns the sample."""
        cores = usable_cores()
        if self._last is None:
            first_wall, first_busy, _ = self._counters()
            self._last = (first_wall, first_busy)
            time.sleep(self.thresholds.settle_s)
        wall, busy, own = self._counters()
        last_wall, last_busy = self._last
        elapsed = max(1e-6, wall - last_wall)
        # Other processes' share: everything busy less the run's own, never below zero (the
        # counters are read a few microseconds apart).
        foreign = max(0.0, (busy - last_busy) - own) / elapsed
        self_before, started = own_cpu_s(), time.monotonic()
        calibration = calibrate(cores)
        spent = max(1e-6, time.monotonic() - started)
        # The run's processes other than this one, while the job ran (this one is the job).
        others = max(0.0, self._own.spent_since_last() - (own_cpu_s() - self_before)) / spent
        first = self.samples[0]["calibration_s"] if self.samples else calibration
        sample = {
            "label": label,
            "interval_s": round(elapsed, 3),
            "foreign_cores": round(foreign, 4),
            "calibration_s": round(calibration, 5),
            "calibration_ratio": round(calibration / first, 4),
            "own_cores_during_calibration": round(others, 4),
            "calibration_judged": others <= self.thresholds.own_cores_idle,
            "load_average": [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None,
            "usable_cores": cores,
        }
        self.samples.append(sample)
        # The calibration itself is the run's own work: the next interval starts after it.
        self._last = (time.monotonic(), busy_cpu_s())
        return sample

    def _counters(self) -> tuple[float, float, float]:
        """Wall time, the machine's busy CPU, the run's CPU since the last call."""
        return time.monotonic(), busy_cpu_s(), self._own.spent_since_last()

    def reasons(self) -> list[str]:
        """Why the run is noisy: one line per checkpoint past a threshold (empty when quiet)."""
        limits = self.thresholds
        lines = []
        for sample in self.samples:
            if sample["foreign_cores"] > limits.foreign_cores:
                lines.append(
                    f"{sample['label']}: other processes used {sample['foreign_cores']:.2f} cores over "
                    f"{sample['interval_s']:.0f} s (limit {limits.foreign_cores})"
                )
            if sample["calibration_judged"] and sample["calibration_ratio"] > limits.calibration_ratio:
                lines.append(
                    f"{sample['label']}: the calibration job took x{sample['calibration_ratio']:.2f} "
                    f"its first time (limit x{limits.calibration_ratio})"
                )
        return lines

    def summary(self) -> dict[str, Any]:
        """``{"noisy", "reasons", "thresholds", "foreign_cores_max", "calibration_ratio_max", "samples"}``
        (the calibration maximum over the judged checkpoints)."""
        return {
            "noisy": bool(self.reasons()),
            "reasons": self.reasons(),
            "thresholds": asdict(self.thresholds),
            "foreign_cores_max": max((s["foreign_cores"] for s in self.samples), default=None),
            "calibration_ratio_max": max(
                (s["calibration_ratio"] for s in self.samples if s["calibration_judged"]), default=None
            ),
            "samples": self.samples,
        }
