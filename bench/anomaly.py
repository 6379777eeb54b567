"""Anomaly detection: rows/s scoring one batch through our ``DetectAnomaly`` against the libraries in-process.

Workload: seeded standard-normal rows with 8 numeric columns (:func:`bench.workloads.anomaly_matrix`);
a detector is fitted once on the fit rows (5,000) before measuring, then a batch (10,000 rows)
is scored per call, sequentially. Detectors: isolation forest on StandardScaler-scaled rows
(scikit-learn, 100 trees, seed 0) and ECOD (pyod, unscaled: it ranks each column on its own).

Contenders per detector: the library in-process in a worker of its own (the reference:
``IsolationForest.score_samples(StandardScaler.transform(x))`` or ``ECOD.decision_function(x)``);
ours ``DetectAnomaly`` over gRPC with a saved detector, in two request forms: per-row ``rows``
(one ``FeatureRow`` of ``FeatureValue`` cells per row, one ``AnomalyScore`` per row back) and packed
``numeric_rows`` with ``columnar_output``. The requests are built once before timing; ours
includes serializing, sending and parsing them and the responses. Target: >= 0.9x of direct.

The transport floor: the same packed request's bytes sent to :mod:`bench.echo_server`, which
answers as many bytes as our columnar response without doing anything (same client, same
``grpc.aio`` server stack). Its latency is what the round trip alone costs here; the note under
the table turns it into the ceiling any gRPC server could reach against the in-process library,
``ref / (ref + floor)`` per repetition.

Usage: ``python -m bench.anomaly [--quick|--tiny] [--no-peers] [--out DIR]``.
"""

from __future__ import annotations

import sys
from typing import Any

from bench import servers
from bench.runner import Report, client_contender, item_metrics, parse_config
from bench.stats import percentile
from bench.workloads import (
    ANOMALY_COLUMNS,
    ANOMALY_FIT_ROWS,
    ANOMALY_FIT_SEED,
    ANOMALY_SCORE_SEED,
    anomaly_matrix,
)

HEADLINE = [
    {"key": "rows_s", "label": "rows/s", "higher_is_better": True},
    {"key": "latency_p50_ms", "label": "batch latency p50 ms", "higher_is_better": False},
]
#: Reference detector name → (label, AnomalyBackend name, Normalization name).
DETECTORS = {
    "iforest": ("IsolationForest (scaled)", "ANOMALY_BACKEND_ISOLATION_FOREST", "NORMALIZATION_STANDARD"),
    "ecod": ("ECOD", "ANOMALY_BACKEND_ECOD", "NORMALIZATION_NONE"),
}
FORMS = {"rows": "per-row rows", "numeric": "numeric_rows + columnar_output"}
FLOOR_LABEL = "floor: gRPC echo of the packed request's bytes (no scoring)"


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-repetition figures: rows scored / wall time, and per-call latency."""
    return item_metrics(result, "rows_s")


def fit_detector(target: str, name: str, backend: str, normalization: str, rows: int) -> int:
    """``FitAnomalyDetector`` on the fit rows (packed); return the saved version."""
    import grpc
    from universal_runtime.v1 import anomaly_pb2, inference_service_pb2_grpc

    matrix = anomaly_matrix(rows, ANOMALY_FIT_SEED)
    request = anomaly_pb2.FitAnomalyDetectorRequest(
        detector=name,
        backend=anomaly_pb2.AnomalyBackend.Value(backend),
        normalization=anomaly_pb2.Normalization.Value(normalization),
        contamination=0.1,
        numeric_rows=anomaly_pb2.NumericRows(column_count=matrix.shape[1], values=matrix.ravel().tolist()),
    )
    with grpc.insecure_channel(target) as channel:
        stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
        return stub.FitAnomalyDetector(request, timeout=300).version


def columnar_response_bytes(rows: int) -> int:
    """Serialized size of our ``DetectAnomalyResponse`` with ``columnar_output`` for ``rows`` rows."""
    from universal_runtime.v1 import anomaly_pb2

    columns = anomaly_pb2.AnomalyScoreColumns(
        scores=[1.0] * rows, normalized_scores=[0.5] * rows, is_anomaly=[True] * rows
    )
    summary = anomaly_pb2.AnomalySummary(row_count=rows, anomaly_count=rows, anomaly_rate=0.1, threshold=0.5)
    return anomaly_pb2.DetectAnomalyResponse(columns=columns, summary=summary).ByteSize()


def floor_ceiling(record: dict[str, Any], reference: str, floor: str) -> dict[str, float] | None:
    """The ceiling the echo floor sets over gRPC, from a recorded scenario (see :func:`floor_note`).

    Returns ``{"ceiling": median of ref / (ref + floor) per repetition, "echo_ms", "ref_ms"}`` (the
    medians of the floor's and the reference's batch latency p50), or None without both runs.
    """
    reps = record["results"]
    if reference not in reps or floor not in reps:
        return None
    pairs = [
        (r["latency_p50_ms"], f["latency_p50_ms"])
        for r, f in zip(reps[reference]["per_rep"], reps[floor]["per_rep"], strict=True)
        if r and f
    ]
    if not pairs:
        return None
    return {
        "ceiling": percentile([ref / (ref + echo) for ref, echo in pairs], 50),
        "echo_ms": percentile([e for _, e in pairs], 50),
        "ref_ms": percentile([r for r, _ in pairs], 50),
    }


def floor_note(label: str, record: dict[str, Any], reference: str, floor: str) -> str | None:
    """The note that turns the echo floor into a ceiling ratio (per repetition, then the median)."""
    figures = floor_ceiling(record, reference, floor)
    if figures is None:
        return None
    echo_ms, ref_ms = figures["echo_ms"], figures["ref_ms"]
    return (
        f"{label}: the round trip of the same bytes with no work costs {echo_ms:.2f} ms "
        f"({echo_ms / ref_ms:.0%} of the library's {ref_ms:.1f} ms batch): over gRPC on this machine "
        f"the ceiling is x{figures['ceiling']:.2f} of the library's rows/s (median of ref / (ref + floor))."
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the anomaly comparison; write its JSON, plot and README section."""
    cfg = parse_config("anomaly", argv, __doc__)
    fit_rows = ANOMALY_FIT_ROWS
    batch = cfg.pick(full=10_000, quick=10_000, tiny=1000)
    duration = cfg.pick(full=5.0, quick=1.5, tiny=0.2)
    max_requests = cfg.pick(full=10_000, quick=10_000, tiny=2)
    settings = {
        "fit_rows": fit_rows,
        "rows_per_call": batch,
        "columns": ANOMALY_COLUMNS,
        "seeds": {"fit": ANOMALY_FIT_SEED, "score": ANOMALY_SCORE_SEED},
        "contamination": 0.1,
        "duration_s_per_run": duration,
        "max_requests_per_run": max_requests,
        "in_flight": 1,
    }
    model = {"names": list(DETECTORS), "packages": ["scikit-learn", "pyod"]}
    title = f"Anomaly detection — scoring {batch:,} rows x {ANOMALY_COLUMNS} columns per call"
    with Report(cfg, title, HEADLINE, model, settings) as report:
        ours = report.start_server(lambda: servers.start_ours(cfg.log_dir))
        echo = report.start_server(lambda: servers.start_echo(cfg.log_dir, columnar_response_bytes(batch)))
        for detector, (label, backend, normalization) in DETECTORS.items():
            contenders = report.start_reference(
                "anomaly", f"{detector}-inprocess", f"{label} in-process", "anomaly"
            )
            name = detector  # the same key names the reference and our saved detector
            version = fit_detector(ours.grpc_target, name, backend, normalization, fit_rows)
            report.progress(f"fitted {name} version {version} on {fit_rows} rows")
            for form, form_label in FORMS.items():
                grpc_args = ["--mode", "grpc-anomaly", "--target", ours.grpc_target]
                grpc_args += ["--detector", name, "--form", form]
                contenders.append(
                    report.add(
                        client_contender(
                            f"ours-{detector}-{form}",
                            f"ours gRPC DetectAnomaly {form_label}",
                            "ours",
                            grpc_args,
                        )
                    )
                )
            floor = f"floor-{detector}"
            floor_args = ["--mode", "grpc-echo", "--target", echo.grpc_target, "--form", "numeric"]
            contenders.append(report.add(client_contender(floor, FLOOR_LABEL, "floor", floor_args)))
            params = {"detector": detector, "rows": batch, "concurrency": 1}
            report.warm_up(contenders, {**params, "requests": 1, "warmup": 0})
            params.update(requests=max_requests, duration_s=duration, warmup=1)
            record = report.compare(label, params, contenders, f"{detector}-inprocess", metrics)
            note = floor_note(label, record, f"{detector}-inprocess", floor)
            if note:
                report.note(note)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
