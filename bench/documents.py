"""Document analysis: pages per second of ``AnalyzeDocument`` next to ``Ocr`` alone, on one page.

Workload: one fixed report page (:func:`bench.workloads.document_page_png`: A4 at 150 dpi, a
title, three paragraphs, a ruled 4 x 3 table of numbers, a footer), sequential calls (one in
flight), the default catalog's ``rapidocr`` for OCR and ``rapid-layout`` for layout.

Contenders, both ours over gRPC on the same page: ``Ocr`` with word boxes (the reference: the
OCR that analysis needs, as ``AnalyzeDocument`` reads it) and ``AnalyzeDocument`` (OCR, then the
layout model, then the structure step: lines into regions, reading order, table cells, Markdown).
The ratio of their pages/s is what analysis costs over OCR; the goal is an overhead of at most 25%
of the OCR time (ratio >= 0.8).

Usage: ``python -m bench.documents [--quick|--tiny] [--out DIR]``.
"""

from __future__ import annotations

import sys
from typing import Any

from bench import servers
from bench.runner import Report, client_contender, item_metrics, parse_config
from bench.workloads import DOCUMENT_PAGE_SIZE

HEADLINE = [
    {"key": "pages_s", "label": "pages/s", "higher_is_better": True},
    {"key": "latency_p50_ms", "label": "latency p50 ms", "higher_is_better": False},
]


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-repetition figures: pages read / wall time, and per-call latency."""
    return item_metrics(result, "pages_s")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the analysis comparison; write its JSON, plot and README section."""
    cfg = parse_config("documents", argv, __doc__, reps={"full": 5, "quick": 3, "tiny": 1})
    pages = cfg.pick(full=15, quick=5, tiny=1)
    duration = cfg.pick(full=180.0, quick=90.0, tiny=0.1)
    settings = {
        "pages_per_run": pages,
        "max_duration_s_per_run": duration,
        "in_flight": 1,
        "page": {
            "width": DOCUMENT_PAGE_SIZE[0],
            "height": DOCUMENT_PAGE_SIZE[1],
            "kind": "report with a table",
        },
        "device": "cpu",
    }
    model = {"names": ["rapidocr", "rapid-layout"], "packages": ["rapidocr-onnxruntime", "rapid-layout"]}
    title = "Document analysis — one A4 report page, sequential calls"
    with Report(cfg, title, HEADLINE, model, settings) as report:
        ours = report.start_server(lambda: servers.start_ours(cfg.log_dir))
        report.note(
            "both contenders are our server on the same page; Ocr returns word boxes, as AnalyzeDocument "
            "reads the page. The ratio is AnalyzeDocument's share of Ocr's speed: 1 - ratio of the time "
            "is what the layout model and the structure step add"
        )
        base = ["--target", ours.grpc_target, "--model", "rapidocr", "--page", "document"]
        contenders = [
            report.add(
                client_contender(
                    "ours-grpc-ocr", "ours gRPC Ocr (word boxes)", "reference", ["--mode", "grpc-ocr", *base]
                )
            ),
            report.add(
                client_contender(
                    "ours-grpc-analyze",
                    "ours gRPC AnalyzeDocument",
                    "ours",
                    ["--mode", "grpc-analyze", *base],
                )
            ),
        ]
        params = {"concurrency": 1, "requests": pages, "warmup": 0}
        report.warm_up(contenders, {**params, "requests": 1})
        params.update(duration_s=duration, warmup=cfg.pick(full=1, quick=1, tiny=0))
        report.compare("report page", params, contenders, "ours-grpc-ocr", metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
