"""One results writer for every area: JSON, a PNG plot (matplotlib, Agg) and a Markdown table.

The payload an area hands over (see :class:`bench.runner.Report`) has ``headline`` metrics and
``scenarios``; each scenario has per-contender ``metrics`` (summaries over repetitions) and
``ratios`` (summaries of per-repetition ratios to the scenario's reference).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from bench.stats import UNSTABLE_SPREAD, fmt, is_unstable

GIB = 1024**3
# Typography of the tables (escaped: ruff flags the literal characters as ambiguous).
DASH, TIMES = "\u2013", "\u00d7"
#: Marks a cell whose repetitions disagree (see :func:`bench.stats.is_unstable`).
UNSTABLE_MARK = "\u2021"


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` as indented JSON (NaN written as null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_no_nan(payload), indent=2, sort_keys=False) + "\n")
    return path


def _no_nan(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_no_nan(v) for v in value]
    return value


def _available(scenario: dict[str, Any]) -> list[str]:
    return [name for name, result in scenario["results"].items() if result["metrics"]]


def _reps(payload: dict[str, Any]) -> str:
    count = payload["reps"]
    return f"{count} interleaved repetition{'s' if count != 1 else ''}"


def machine_line(payload: dict[str, Any]) -> str:
    """One line naming the machine: CPU, cores, RAM, GPUs."""
    m = payload["machine"]
    gpus = ", ".join(m.get("gpus") or []) or "no GPU"
    return f"{m['cpu_model']}, {m['usable_cores']} cores, {m['ram_bytes'] / GIB:.0f} GiB RAM, {gpus}"


def plot(path: Path, payload: dict[str, Any]) -> Path | None:
    """Grouped bars (one panel per headline metric): medians with p5-p95 whiskers per contender.

    Returns the PNG's path, or None when matplotlib is not installed (noted in the payload) or the
    payload has no scenarios.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        payload.setdefault("notes", []).append("plot skipped: matplotlib is not installed")
        return None
    headline = payload["headline"]
    scenarios = payload["scenarios"]
    if not scenarios:  # only deterministic tables (e.g. a quality-only run): nothing to plot
        return None
    labels = {name: c["label"] for name, c in payload["contenders"].items()}
    names = [n for n in payload["contenders"] if any(n in _available(s) for s in scenarios)]
    fig, axes = plt.subplots(1, len(headline), figsize=(max(6.0, 4.2 * len(headline)), 5.2), squeeze=False)
    width = 0.8 / max(1, len(names))
    for ax, metric in zip(axes[0], headline, strict=True):
        for k, name in enumerate(names):
            xs, ys, lo, hi = [], [], [], []
            for i, scenario in enumerate(scenarios):
                summary = scenario["results"].get(name, {}).get("metrics", {}).get(metric["key"])
                if not summary or summary["median"] is None or math.isnan(summary["median"]):
                    continue
                xs.append(i + (k - (len(names) - 1) / 2) * width)
                ys.append(summary["median"])
                lo.append(max(0.0, summary["median"] - summary["p5"]))
                hi.append(max(0.0, summary["p95"] - summary["median"]))
            if xs:
                ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=labels[name])
        ax.set_xticks(range(len(scenarios)), [s["name"] for s in scenarios], rotation=20, fontsize=8)
        better = "higher" if metric["higher_is_better"] else "lower"
        ax.set_title(f"{metric['label']} ({better} is better)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    handles, names_shown = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names_shown, loc="lower center", ncol=min(4, max(1, len(names_shown))), fontsize=8)
    fig.suptitle(
        f"{payload['title']}\n{machine_line(payload)}; {payload['mode']} mode, "
        f"{_reps(payload)}; bars: median, whiskers: p5{DASH}p95",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))  # room for the legend below the panels
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _cell(summary: dict[str, float] | None, ratio: dict[str, float] | None, is_reference: bool) -> str:
    if not summary or summary.get("median") is None or math.isnan(summary["median"]):
        return "-"
    text = f"{fmt(summary['median'])} [{fmt(summary['p5'])}{DASH}{fmt(summary['p95'])}]"
    if is_unstable(summary):
        text += f" {UNSTABLE_MARK}"
    if is_reference:
        return text + " (ref)"
    if ratio and ratio.get("median") is not None and not math.isnan(ratio["median"]):
        return text + f" {TIMES}{ratio['median']:.2f}"
    return text


def measured_line(payload: dict[str, Any]) -> str:
    """``Measured <when> at <revision> on <machine>``: how every section's context line starts.

    The line ends with the run's noise figures (:mod:`bench.noise`): the most CPU other processes
    used between checkpoints and the slowest calibration against the first; a noisy run says so
    in bold, as its timings then describe a busy machine. Payloads from before the noise figures
    fall back to the load average at the start.
    """
    line = f"Measured {payload['finished']} at {revision_line(payload)} on {machine_line(payload)}"
    quiet = payload.get("noise")
    if quiet:
        calibration = quiet["calibration_ratio_max"]  # None: no checkpoint's calibration was judged
        figures = f"other processes at most {quiet['foreign_cores_max']:.2f} cores, " + (
            f"calibration at most {TIMES}{calibration:.2f}"
            if calibration is not None
            else "calibration not judged"
        )
        if quiet["noisy"]:
            return line + f" **noisy ({figures}): timings describe a busy machine**"
        return line + f", quiet ({figures})"
    load = (payload["machine"].get("load_average_at_start") or [0.0])[0]
    cores = payload["machine"].get("usable_cores") or 1
    if load > cores:
        line += f" **under load (load average {load:.1f} at the start): timings describe a busy machine**"
    return line


def revision_line(payload: dict[str, Any]) -> str:
    """Which code was measured: ``commit `abc1234``` (and a warning when the tree was dirty)."""
    revision = payload.get("git_revision") or "unknown"
    if payload.get("git_dirty"):
        return f"commit `{revision}` **with uncommitted changes (--allow-dirty): not reproducible**"
    return f"commit `{revision}`"


def unstable_lines(payload: dict[str, Any]) -> list[str]:
    """One line per unstable cell: scenario, contender, metric and its per-repetition values."""
    lines = []
    for scenario in payload["scenarios"]:
        for name in _available(scenario):
            result = scenario["results"][name]
            for metric in payload["headline"]:
                if not is_unstable(result["metrics"].get(metric["key"])):
                    continue
                values = [fmt(m[metric["key"]]) for m in result["per_rep"] if m and metric["key"] in m]
                label = payload["contenders"][name]["label"]
                lines.append(f"{scenario['name']}, {label}, {metric['label']}: {', '.join(values)}")
    return lines


def ceiling_names(ceiling: dict[str, Any]) -> set[str]:
    """Names of the payload's ceiling contenders (see ``Report.set_ceiling`` and ``ceiling_for``)."""
    return {ceiling["contender"], *ceiling.get("of", {}).values()}


def _times_cell(summary: dict[str, float] | None) -> str:
    if not summary or summary.get("median") is None or math.isnan(summary["median"]):
        return "-"
    return f"{TIMES}{summary['median']:.2f}"


def _ceiling_cell(result: dict[str, Any], is_ceiling: bool) -> str:
    return "(ceiling)" if is_ceiling else _times_cell(result.get("ceiling_ratio"))


def _metric_label(payload: dict[str, Any], key: str) -> str:
    return next((m["label"] for m in payload["headline"] if m["key"] == key), key)


def markdown(payload: dict[str, Any]) -> str:
    """The area's section for ``bench/README.md``: context line, table, unavailable contenders, notes.

    With a ``ceiling`` in the payload (:meth:`bench.runner.Report.set_ceiling`), the table has a
    column more: each contender's ratio to its ceiling contender in that scenario (the default
    one, or its engine's own, :meth:`bench.runner.Report.ceiling_for`); and one more per
    ``anchors`` entry (:meth:`bench.runner.Report.add_anchor`): the ratio to one figure of the
    run, named in a line under the table. The payload's
    ``tables`` (each ``{"title", "header": [str], "rows": [[str]]}``: figures that are not
    per-repetition, e.g. deterministic quality scores) follow the main table.
    """
    headline = payload["headline"]
    ceiling = payload.get("ceiling")
    anchors = payload.get("anchors", [])
    extra = [f"{ceiling['label']}"] if ceiling else []
    extra += [anchor["label"] for anchor in anchors]
    if not payload["scenarios"]:  # only the deterministic tables below
        lines = [
            f"### {payload['title']}",
            "",
            f"{measured_line(payload)}; {payload['mode']} mode, wall {payload['wall_s']:.0f} s. "
            f"JSON: `{payload['json_name']}`.",
        ]
    else:
        lines = [
            f"### {payload['title']}",
            "",
            f"{measured_line(payload)}; "
            f"{payload['mode']} mode, "
            f"{_reps(payload)}, wall {payload['wall_s']:.0f} s. "
            f"Cells: median [p5{DASH}p95] over repetitions, {TIMES}: median of the per-repetition ratios to "
            f"the scenario's reference (ref). JSON: `{payload['json_name']}`, plot: `{payload['png_name']}`.",
            "",
            "| scenario | contender | "
            + " | ".join([*(m["label"] for m in headline), *extra])
            + " | errors |",
            "|---|---|" + "---|" * (len(headline) + len(extra)) + "---|",
        ]
    for scenario in payload["scenarios"]:
        for name in _available(scenario):
            result = scenario["results"][name]
            is_ref = name == scenario["reference"] and len(_available(scenario)) > 1
            cells = [
                _cell(result["metrics"].get(m["key"]), result.get("ratios", {}).get(m["key"]), is_ref)
                for m in headline
            ]
            if ceiling:
                cells.append(_ceiling_cell(result, name in ceiling_names(ceiling)))
            cells += [_times_cell(result.get("anchor_ratios", {}).get(a["label"])) for a in anchors]
            label = payload["contenders"][name]["label"]
            lines.append(
                f"| {scenario['name']} | {label} | " + " | ".join(cells) + f" | {result['errors']} |"
            )
    for anchor in anchors:
        contender = payload["contenders"][anchor["contender"]]["label"]
        lines += [
            "",
            f"{anchor['label']}: each repetition's {_metric_label(payload, anchor['metric'])} over "
            f"the median of {contender} at {anchor['scenario']} ({fmt(anchor['value'])}), median "
            "over repetitions (scenarios are not interleaved, so not paired by repetition).",
        ]
    for table in payload.get("tables", []):
        lines += ["", f"{table['title']}:", "", "| " + " | ".join(table["header"]) + " |"]
        lines.append("|" + "---|" * len(table["header"]))
        lines += ["| " + " | ".join(row) + " |" for row in table["rows"]]
    unavailable = {n: c["reason"] for n, c in payload["contenders"].items() if c.get("reason")}
    if unavailable:
        lines += [
            "",
            "Not measured: "
            + "; ".join(f"{payload['contenders'][n]['label']} — {r}" for n, r in unavailable.items()),
        ]
    unstable = unstable_lines(payload)
    if unstable:
        lines += [
            "",
            f"{UNSTABLE_MARK} unstable: the repetitions of these cells spread (max {DASH} min) over more "
            f"than {UNSTABLE_SPREAD:.0%} of their median, so the median alone does not describe them "
            "(per-repetition values, in run order):",
            *(f"  - {line}" for line in unstable),
        ]
    for note in payload.get("notes", []):
        lines += ["", f"- {note}"]
    return "\n".join(lines) + "\n"


def update_readme(readme: Path, area: str, section: str) -> Path:
    """Replace the text between ``<!-- bench:<area>:begin -->`` and ``...:end -->`` (append if absent)."""
    begin, end = f"<!-- bench:{area}:begin -->", f"<!-- bench:{area}:end -->"
    block = f"{begin}\n{section}{end}"
    text = readme.read_text() if readme.exists() else "# Benchmark results\n"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    text = (
        pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip("\n") + f"\n\n{block}\n"
    )
    readme.parent.mkdir(parents=True, exist_ok=True)
    readme.write_text(text)
    return readme
