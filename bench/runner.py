"""The skeleton every area shares: flags, progress, contenders, interleaved repetitions, the report.

A comparison runs its contenders interleaved within each repetition (A B C, then B C A, ...:
the starting contender rotates so none always runs first), so that a shared machine's drift
hits them alike; figures are medians over repetitions and medians of per-repetition ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import environment, noise, results
from bench.peers import BENCH_DIR, PeerEnv, PeerUnavailableError, ensure
from bench.procs import REPO_ROOT, base_env
from bench.servers import Server, start_worker
from bench.stats import paired_ratio, percentile, ratio, summarize

MODES = ("full", "quick", "tiny")
DEFAULT_RESULTS = BENCH_DIR / "results"
DEFAULT_README = BENCH_DIR / "README.md"
DEFAULT_REPS = {"full": 5, "quick": 3, "tiny": 2}
LOAD_CLIENT_TIMEOUT_S = 600.0
#: Environment variables that change the figures, recorded with them.
RECORDED_ENV = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "UR_CATALOG_PATH", "BENCH_TRANSFORMERS_MODEL")

Metrics = dict[str, float]


@dataclass
class BenchConfig:
    """What one run of an area does.

    Attributes:
        area: Area name (``generation``, ``embeddings``, ``memory``, ``overhead``).
        mode: ``full`` (``make bench``), ``quick`` (``make bench-quick``) or ``tiny`` (the smoke test).
        peers: Whether to install and run the peers (``--no-peers`` turns them off).
        out_dir: Where ``<area>.json``, ``<area>.png`` and ``logs/`` go.
        readme: The Markdown file whose marked section is refreshed.
        reps: Interleaved repetitions of each comparison.
        git: The measured commit (:func:`bench.environment.git_state`): revision, dirty, dirty_paths.
        args: Every parsed flag, including an area's own (see :func:`parse_config`).

    """

    area: str
    mode: str
    peers: bool
    out_dir: Path
    readme: Path
    reps: int
    git: dict[str, Any]
    args: argparse.Namespace

    @property
    def log_dir(self) -> Path:
        """Logs of the servers and workers of this run."""
        return self.out_dir / "logs" / self.area

    def pick(self, full: Any, quick: Any, tiny: Any) -> Any:
        """The value for this run's mode."""
        return {"full": full, "quick": quick, "tiny": tiny}[self.mode]


def build_parser(area: str, description: str | None) -> argparse.ArgumentParser:
    """The flags every entry point takes."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{area}", description=description)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_const", dest="mode", const="quick", help="short run (minutes)")
    size.add_argument("--tiny", action="store_const", dest="mode", const="tiny", help="smoke test (seconds)")
    parser.add_argument("--no-peers", action="store_true", help="skip the peers (reported as not measured)")
    parser.add_argument("--out", type=Path, default=DEFAULT_RESULTS, help="results directory")
    parser.add_argument(
        "--readme",
        type=Path,
        help="Markdown file to refresh (default: bench/README.md, "
        "or <out>/README.md when --out is not the default)",
    )
    parser.add_argument("--reps", type=int, help="interleaved repetitions (default: 5 full, 3 quick, 2 tiny)")
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write into bench/results/ from a tree with uncommitted changes (the table then says so)",
    )
    return parser


def parse_config(
    area: str,
    argv: list[str] | None = None,
    description: str | None = None,
    reps: dict[str, int] | None = None,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> BenchConfig:
    """Parse the common flags into a :class:`BenchConfig` (``reps``: default repetitions per mode).

    ``add_arguments`` adds an area's own flags; their values are in :attr:`BenchConfig.args`.

    Published results must come from committed code: writing into the default ``bench/results/``
    from a tree with uncommitted changes (outside the bench's own outputs) exits with status 2
    before anything runs, unless ``--allow-dirty``. A ``--tiny`` smoke run never writes there:
    without ``--out`` it writes into a new temporary directory (printed), and naming
    ``bench/results/`` or ``bench/README.md`` for it exits with status 2.
    """
    parser = build_parser(area, description)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    mode = args.mode or "full"
    out = args.out.resolve()
    readme = args.readme or (DEFAULT_README if out == DEFAULT_RESULTS.resolve() else out / "README.md")
    if mode == "tiny":
        named_results = args.out is not DEFAULT_RESULTS and out == DEFAULT_RESULTS.resolve()
        if named_results or (args.readme and args.readme.resolve() == DEFAULT_README.resolve()):
            parser.error("--tiny is a smoke test: it never writes bench/results/ or bench/README.md")
        if out == DEFAULT_RESULTS.resolve():
            out = Path(tempfile.mkdtemp(prefix=f"bench-{area}-tiny-"))
            readme = out / "README.md"
            print(f"[{area}] --tiny: writing into {out}", file=sys.stderr, flush=True)
    # The OpenMP default (spin, then sleep) is what every contender runs with in production, and
    # on a quiet machine it is the fast one: OMP_WAIT_POLICY=PASSIVE makes llama.cpp about 4x
    # slower per token here. On a busy shared machine, spinning threads starve the others; set
    # OMP_WAIT_POLICY=PASSIVE in the environment then (every contender inherits it, and it is
    # recorded with the results).
    # SIGTERM unwinds like Ctrl-C, so that the servers this run started are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    count = args.reps or (reps or DEFAULT_REPS)[mode]
    git = environment.git_state(REPO_ROOT)
    if git["dirty"] and out == DEFAULT_RESULTS.resolve() and not args.allow_dirty:
        shown = ", ".join(git["dirty_paths"][:5]) + (" ..." if len(git["dirty_paths"]) > 5 else "")
        parser.error(
            f"the tree has uncommitted changes ({shown}): commit them so the results name the code "
            "they measured, write elsewhere with --out, or pass --allow-dirty"
        )
    return BenchConfig(area, mode, not args.no_peers, out, readme, max(1, count), git, args)


class MachineNotQuietError(RuntimeError):
    """A run meant for ``bench/results/`` ran on a busy machine (:mod:`bench.noise`): nothing written."""


class Progress:
    """Progress lines on stderr, prefixed with the area and the seconds since it started."""

    def __init__(self, area: str):
        self.area = area
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        """Print one progress line."""
        print(f"[{self.area} {time.monotonic() - self.start:6.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass
class Contender:
    """One thing measured: ours over some protocol, a peer, or an in-process reference.

    Attributes:
        name: Identifier in the JSON (``ours-grpc``).
        label: Name in tables and plots.
        role: ``reference``, ``ours``, ``peer``, or ``floor`` (a no-work transport baseline).
        run: Runs one measurement for a scenario's parameters; returns a load-client result.
        reason: Why it was not measured (None when it was).

    """

    name: str
    label: str
    role: str
    run: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    reason: str | None = None


def run_load_client(base_args: list[str], params: dict[str, Any]) -> dict[str, Any]:
    """Run ``python -m bench.load_client`` once with ``base_args`` plus ``params``; return its JSON.

    ``params`` keys map to flags (``duration_s`` → ``--duration-s``).

    Raises:
        RuntimeError: the client failed (its stderr's end is in the message).

    """
    argv = [sys.executable, "-m", "bench.load_client", *base_args]
    for key, value in params.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=LOAD_CLIENT_TIMEOUT_S, cwd=REPO_ROOT, env=base_env()
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"load client failed ({proc.returncode}): {proc.stderr.strip()[-600:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def client_contender(name: str, label: str, role: str, base_args: list[str]) -> Contender:
    """A contender measured by the load client (``base_args``: mode, target, model...)."""
    return Contender(name, label, role, run=lambda params: run_load_client(base_args, params))


def worker_contender(name: str, label: str, worker: Server, op: str, role: str = "reference") -> Contender:
    """An in-process contender measured by its worker (see :mod:`bench.inprocess`)."""
    return Contender(name, label, role, run=lambda params: worker.process.request({"op": op, **params}))


def ok_records(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The successful requests of a load result."""
    return [r for r in result["records"] if r.get("ok")]


def item_metrics(result: dict[str, Any], rate_key: str) -> dict[str, float]:
    """Per-repetition figures of an item-counting load: ``rate_key`` (items / wall second),
    per-call latency p50/p95 in ms, and the number of calls."""
    records = ok_records(result)
    latencies = [r["latency_s"] for r in records]
    items = sum(r["items"] for r in records)
    return {
        rate_key: items / result["wall_s"] if result["wall_s"] > 0 else float("nan"),
        "latency_p50_ms": percentile(latencies, 50) * 1000,
        "latency_p95_ms": percentile(latencies, 95) * 1000,
        "calls": float(len(records)),
    }


def _series(reps: list[Metrics | None], key: str) -> list[float]:
    """``key`` of each repetition's metrics, NaN where a repetition has none (keeps repetitions aligned)."""
    return [m.get(key, float("nan")) if m else float("nan") for m in reps]


class Report:
    """Collects one area's comparisons and writes its JSON, PNG and README section.

    Args:
        cfg: The run's configuration.
        title: Heading of the area (states model and settings briefly).
        headline: Metrics shown in the table and plot: dicts with ``key``, ``label``,
            ``higher_is_better``.
        model: Model facts (name, file, format) recorded with the results.
        settings: Settings recorded with the results (tokens, concurrency levels...).

    """

    def __init__(
        self,
        cfg: BenchConfig,
        title: str,
        headline: list[dict[str, Any]],
        model: dict[str, Any],
        settings: dict[str, Any],
    ):
        self.cfg = cfg
        self.progress = Progress(cfg.area)
        self.started = environment.utc_now()
        self.start = time.monotonic()
        self.noise = noise.Monitor()
        self.payload: dict[str, Any] = {
            "area": cfg.area,
            "title": title,
            "mode": cfg.mode,
            "reps": cfg.reps,
            "started": self.started,
            **environment.stamp(cfg.git),
            "model": model,
            "settings": settings,
            "environment": {k: os.environ.get(k) for k in RECORDED_ENV},
            "headline": headline,
            "contenders": {},
            "scenarios": [],
            "notes": [],
        }
        self.stack = contextlib.ExitStack()
        self.checkpoint("start")

    def checkpoint(self, label: str) -> None:
        """Measure the machine now (:meth:`bench.noise.Monitor.checkpoint`); the first call
        watches it for a few seconds. :meth:`compare` calls it after every repetition; an area
        with its own loop calls it between its repetitions."""
        sample = self.noise.checkpoint(label)
        judged = "" if sample["calibration_judged"] else " (not judged: the run's own processes were busy)"
        self.progress(
            f"machine at {label}: other processes {sample['foreign_cores']:.2f} cores, "
            f"calibration x{sample['calibration_ratio']:.2f}{judged}"
        )

    def __enter__(self) -> Report:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def note(self, text: str) -> None:
        """Add a note shown under the table."""
        self.payload["notes"].append(text)
        self.progress(f"note: {text}")

    def add(self, contender: Contender) -> Contender:
        """Register ``contender`` (with its reason if it is unavailable)."""
        self.payload["contenders"][contender.name] = {
            "label": contender.label,
            "role": contender.role,
            "reason": contender.reason,
        }
        return contender

    def unavailable(self, name: str, label: str, role: str, reason: str) -> Contender:
        """Register a contender that is not measured, and why."""
        self.progress(f"{label}: not measured: {reason}")
        return self.add(Contender(name, label, role, reason=reason))

    def start_server(self, start: Callable[[], Server]) -> Server:
        """Call ``start``; the server is stopped when the report closes."""
        server = start()
        self.stack.callback(server.stop)
        self.progress(f"{server.name} ready in {server.ready_s:.1f}s")
        return server

    def start_peer(
        self,
        name: str,
        label: str,
        env: Any,
        start: Callable[[Path, Path], Server],
        client_args: Callable[[Server], list[str]],
    ) -> list[Contender]:
        """Install a peer (``env``: a ``peers.PeerEnv``), start its server, measure it with the load client.

        Args:
            start: ``start(peer_python, log_dir)`` starts the peer's server.
            client_args: the load client's mode, target and model for the started server.

        Returns:
            ``[contender]``, or ``[]`` when any step failed (registered as not measured, with why).

        """
        try:
            python = self.peer_python(env)
            server = self.start_server(lambda: start(python, self.cfg.log_dir))
        except Exception as exc:
            self.unavailable(name, label, "peer", str(exc)[-300:])
            return []
        return [self.add(client_contender(name, label, "peer", client_args(server)))]

    def start_reference(
        self, kind: str, name: str, label: str, op: str, role: str = "reference", args: tuple[str, ...] = ()
    ) -> list[Contender]:
        """Start the in-process worker ``kind`` (with ``args``); ``[contender]``, or ``[]`` if it failed.

        ``role``: ``reference`` (the scenario's reference) or ``ceiling`` (see :meth:`set_ceiling`).
        """
        try:
            worker = self.start_server(lambda: start_worker(kind, self.cfg.log_dir, args))
        except Exception as exc:
            self.unavailable(name, label, role, str(exc)[-300:])
            return []
        return [self.add(worker_contender(name, label, worker, op, role))]

    def set_ceiling(self, contender: str, metric: str, label: str) -> None:
        """Also give every contender's ``metric`` as a ratio to ``contender``'s (a column ``label``).

        The ratio is the median of the per-repetition ratios, as for the reference,
        in each scenario where ``contender`` ran; it goes to ``ceiling_ratio`` in the JSON, and
        the ceiling's name to ``ceiling``. :meth:`ceiling_for` gives some contenders another one.
        """
        self.payload["ceiling"] = {"contender": contender, "metric": metric, "label": label, "of": {}}

    def ceiling_for(self, contenders: list[str], ceiling: str) -> None:
        """Give ``contenders`` the ceiling ``ceiling`` instead of :meth:`set_ceiling`'s.

        For contenders whose own engine has a ceiling of its own (our transformers engine against
        transformers' batched ``generate``): a ratio to another engine's would say nothing about
        what is left to gain. Without a run of ``ceiling`` in a scenario they get no ratio there.
        """
        self.payload["ceiling"]["of"].update(dict.fromkeys(contenders, ceiling))

    def add_anchor(self, label: str, scenario: str, contender: str, metric: str) -> None:
        """Add a column ``label``: each row's ``metric`` over ``contender``'s median in ``scenario``.

        For a goal stated against one figure of the run (e.g. the best in-process batch-32
        throughput) whatever the row's own scenario. Scenarios run one after another, not
        interleaved, so repetitions are not paired across them: each repetition's value is
        divided by that one median, and the column shows the median of those ratios. Call it
        after the scenarios are recorded; the summaries go to ``anchor_ratios[label]`` in the JSON.

        Raises:
            KeyError: ``scenario`` was not recorded or ``contender`` has no ``metric`` in it.

        """
        record = next(s for s in self.payload["scenarios"] if s["name"] == scenario)
        value = record["results"][contender]["metrics"][metric]["median"]
        self.payload.setdefault("anchors", []).append(
            {"label": label, "scenario": scenario, "contender": contender, "metric": metric, "value": value}
        )
        for each in self.payload["scenarios"]:
            for result in each["results"].values():
                ratios = [
                    ratio(m[metric], value) if m and metric in m else math.nan for m in result["per_rep"]
                ]
                result.setdefault("anchor_ratios", {})[label] = summarize(ratios)

    def warm_up(self, contenders: list[Contender], params: dict[str, Any]) -> None:
        """Send each contender its first request (model load, caches); record how long it took.

        The time goes to ``first_request_s`` in the JSON and is not part of any figure; a
        contender whose first request fails is dropped with the reason.
        """
        for contender in contenders:
            if contender.run is None or contender.reason is not None:
                continue
            self.progress(f"warming {contender.label}")
            start = time.monotonic()
            try:
                contender.run(params)
            except Exception as exc:
                contender.reason = f"warm-up failed: {str(exc)[-300:]}"
                self.add(contender)
                continue
            self.payload.setdefault("first_request_s", {})[contender.name] = time.monotonic() - start

    def peer_python(self, env: PeerEnv) -> Path:
        """The interpreter of the peer ``env`` (installed on first use), recording its versions.

        Raises:
            PeerUnavailableError: ``--no-peers``, or the install failed.

        """
        if not self.cfg.peers:
            raise PeerUnavailableError("skipped (--no-peers)")
        python = ensure(env, log=self.progress)
        peers = self.payload["packages"].setdefault("peers", {})
        peers[env.name] = environment.venv_package_versions(python, list(env.packages))
        return python

    def compare(
        self,
        scenario: str,
        params: dict[str, Any],
        contenders: list[Contender],
        reference: str,
        metrics: Callable[[dict[str, Any]], Metrics],
        vary: Callable[[Contender, int], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Measure ``contenders`` on one scenario, interleaved, ``cfg.reps`` times; record it.

        ``vary(contender, rep)`` gives parameters that change per run (e.g. a salt that makes
        every run's prompts new); they are merged over ``params``. A contender whose run raises
        is dropped from the rest of the run (its reason says where).
        """
        active = [c for c in contenders if c.run is not None and c.reason is None]
        per_rep: dict[str, list[Metrics | None]] = {c.name: [] for c in active}
        errors: dict[str, list[str]] = {c.name: [] for c in active}
        for rep in range(self.cfg.reps):
            shift = rep % max(1, len(active))
            for contender in active[shift:] + active[:shift]:
                if contender.reason is not None:
                    per_rep[contender.name].append(None)
                    continue
                start = time.monotonic()
                try:
                    result = contender.run({**params, **(vary(contender, rep) if vary else {})})  # type: ignore[misc]
                except Exception as exc:
                    contender.reason = f"failed in {scenario}: {str(exc)[-300:]}"
                    self.add(contender)
                    self.progress(f"{scenario} {contender.label}: {contender.reason}")
                    per_rep[contender.name].append(None)
                    continue
                errors[contender.name] += [r.get("error", "?") for r in result["records"] if not r.get("ok")]
                values = metrics(result) if ok_records(result) else None
                per_rep[contender.name].append(values)
                shown = ", ".join(f"{k}={v:.4g}" for k, v in (values or {}).items())
                self.progress(
                    f"{scenario} rep {rep + 1}/{self.cfg.reps} {contender.label}: "
                    f"{len(ok_records(result))} ok in {time.monotonic() - start:.1f}s; {shown}"
                )
            self.checkpoint(f"{scenario} rep {rep + 1}")
        return self.record(scenario, params, reference, per_rep, errors)

    def record(
        self,
        scenario: str,
        params: dict[str, Any],
        reference: str,
        per_rep: dict[str, list[Metrics | None]],
        errors: dict[str, list[str]] | None = None,
    ) -> dict[str, Any]:
        """Summarize per-repetition metrics (aligned by repetition) and add the scenario."""
        ref_reps = per_rep.get(reference) or []
        ceiling = self.payload.get("ceiling")
        out: dict[str, Any] = {}
        for name, reps in per_rep.items():
            keys = sorted({k for m in reps if m for k in m})
            entry: dict[str, Any] = {
                "metrics": {k: summarize([m[k] for m in reps if m and k in m]) for k in keys},
                "per_rep": reps,
                "errors": len((errors or {}).get(name, [])),
                "error_examples": sorted(set((errors or {}).get(name, [])))[:3],
            }
            if name != reference and any(ref_reps):
                entry["ratios"] = {k: paired_ratio(_series(reps, k), _series(ref_reps, k)) for k in keys}
            if ceiling and name not in results.ceiling_names(ceiling):
                own = ceiling["of"].get(name, ceiling["contender"])
                ceiling_reps = per_rep.get(own)
                if ceiling_reps and any(ceiling_reps):
                    metric = ceiling["metric"]
                    ratio = paired_ratio(_series(reps, metric), _series(ceiling_reps, metric))
                    entry["ceiling"], entry["ceiling_ratio"] = own, ratio
            out[name] = entry
        record = {"name": scenario, "params": params, "reference": reference, "results": out}
        self.payload["scenarios"].append(record)
        return record

    def finish(
        self,
        markdown: Callable[[dict[str, Any]], str] = results.markdown,
        plot: Callable[[Path, dict[str, Any]], Path | None] = results.plot,
    ) -> dict[str, Path]:
        """Write ``<area>.json``, ``<area>.png`` and refresh the README section; return the paths.

        ``markdown`` and ``plot`` render the section and the figure (an area with its own
        layout passes its own). The last checkpoint's noise figures join the payload.

        Raises:
            MachineNotQuietError: the machine was busy (:mod:`bench.noise`) and the results were
                meant for ``bench/results/`` or ``bench/README.md``: the section is printed, marked
                noisy, and nothing is written. Elsewhere (``--out``) the files are written and
                marked noisy.

        """
        self.stack.close()
        self.checkpoint("end")
        self.payload["finished"] = environment.utc_now()
        self.payload["wall_s"] = time.monotonic() - self.start
        self.payload["noise"] = self.noise.summary()
        area, out = self.cfg.area, self.cfg.out_dir
        for kind in ("json", "png"):  # as the README links them
            self.payload[f"{kind}_name"] = os.path.relpath(out / f"{area}.{kind}", self.cfg.readme.parent)
        committed = out == DEFAULT_RESULTS.resolve() or self.cfg.readme.resolve() == DEFAULT_README.resolve()
        if self.payload["noise"]["noisy"] and committed:
            print(markdown(self.payload), file=sys.stderr, flush=True)
            raise MachineNotQuietError(
                f"{area}: the machine was not quiet, so nothing was written to bench/results/ "
                "(measure again with nothing else running, or write elsewhere with --out): "
                + "; ".join(self.payload["noise"]["reasons"])
            )
        png = plot(out / f"{area}.png", self.payload)
        json_path = results.write_json(out / f"{area}.json", self.payload)
        readme = results.update_readme(self.cfg.readme, area, markdown(self.payload))
        paths = {"json": json_path, "readme": readme, **({"png": png} if png else {})}
        self.progress("wrote " + ", ".join(str(p) for p in paths.values()))
        return paths
