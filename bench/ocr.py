"""OCR: pages per second of each engine through our ``Ocr`` RPC against the engine called in-process.

Workload: one fixed page (:func:`bench.workloads.ocr_page_png`: 1000x600 PNG, 8 lines of 20 px
DejaVu Sans), sequential calls (one in flight). Engines: the default catalog's ``rapidocr``
(RapidOCR, PP-OCR on ONNX Runtime) and ``tesseract`` (the system program via pytesseract).

Contenders per engine: the engine in-process in a worker of its own (the reference:
``RapidOCR()(image)`` or ``pytesseract.image_to_data(image, output_type=Output.DICT)`` on the
decoded page); ours ``Ocr`` over gRPC (client-streamed: one ``OcrRequest`` with the options and
the PNG as ``chunk``, text only, as ``return_boxes`` defaults to false; one ``OcrResponse`` per
page). Ours includes sending and decoding the PNG and building the page's lines and text.
Target: our overhead at most 5% (pages/s ratio >= 0.95).

Word error rate (a table under the speed table): each engine as the default catalog serves it,
called in this process, on English pages of :data:`WORD_SENTENCES` rendered in every face of
:data:`WORD_FACES` at every size of :data:`WORD_SIZES` (``tests.service.ocr.helpers.render_lines``,
black on white); also ``rapidocr`` with its space restoring off (``space_probability`` 1: the
recognizer's greedy output as it was before). WER: word-level Levenshtein distance (words split
at whitespace, exact match) over the reference's word count, summed over all pages; CER as the
OCR tests count it (whitespace left out). Deterministic, so measured once. Target: WER <= 2%
for the default engine (``tests/service/ocr/test_ocr_word_boundaries.py`` asserts it on the same pages).

Usage: ``python -m bench.ocr [--quick|--tiny] [--no-peers] [--out DIR]``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Iterator
from typing import Any

from bench import servers
from bench.runner import Report, client_contender, item_metrics, parse_config
from bench.workloads import OCR_FONT, OCR_MODELS, OCR_PAGE_SIZE

HEADLINE = [
    {"key": "pages_s", "label": "pages/s", "higher_is_better": True},
    {"key": "latency_p50_ms", "label": "latency p50 ms", "higher_is_better": False},
]
LABELS = {"rapidocr": "RapidOCR", "tesseract": "Tesseract"}

#: The word-error-rate page's lines: a title-case title with a number, then plain sentences.
WORD_SENTENCES = (
    "Quarterly Report 2026",
    "Revenue grew by ten percent in the third quarter",
    "The board approved a new budget for the coming year",
    "Costs stayed within the plan while sales rose in every region",
    "Please send the signed contract to the office before Friday",
    "Our customers ordered more parts and service hours than last year",
)
#: DejaVu faces (Debian fonts-dejavu-core) and text sizes in pixels of the word-error-rate pages.
WORD_FACES = ("DejaVuSans", "DejaVuSerif", "DejaVuSansMono", "DejaVuSans-Bold", "DejaVuSerif-Bold")
WORD_SIZES = (12, 16, 20, 24, 32)
#: Languages each engine reads the pages with (its own codes).
WORD_LANGUAGES = {"rapidocr": ("en",), "tesseract": ("eng",)}


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """Word-level Levenshtein distance between two texts split at whitespace, and the reference's word count.

    WER is the sum of the first over the sum of the second (words compare exactly, case and
    punctuation included).
    """
    from tests.service.ocr.helpers import edit_distance

    words = reference.split()
    return edit_distance(words, hypothesis.split()), len(words)


def word_pages(faces: tuple[str, ...] = WORD_FACES, sizes: tuple[int, ...] = WORD_SIZES) -> Iterator[Any]:
    """The word-error-rate pages: ``(face, size, tests.service.ocr.helpers.Rendered)`` for each face and size.

    Lines start 40 pixels from the left edge; pages are 40 pixels wider than their longest line
    on the right.
    """
    from tests.service.ocr.helpers import font, render_lines

    for face in faces:
        for size in sizes:
            width = 80 + int(max(font(face, size).getlength(line) for line in WORD_SENTENCES))
            yield face, size, render_lines(list(WORD_SENTENCES), face, size, width=width)


def word_error_rates(engine: Any, languages: tuple[str, ...]) -> dict[str, Any]:
    """Read every word page with ``engine`` (an :class:`engines.ocr.base.OcrEngine`, loaded).

    Returns:
        ``wer`` and ``cer`` (fractions), ``word_errors``, ``words``, ``pages``, ``seconds`` (all
        pages, this machine), and ``per_page``: ``{"face", "size", "wer", "text"}`` per page.

    """
    from tests.service.ocr.helpers import cer

    total_errors = total_words = 0
    char_errors = 0.0
    per_page = []
    started = time.monotonic()
    for face, size, page in word_pages():
        text = " ".join(line.text for line in engine.recognize(page.image, languages, words=False))
        errors, words = word_errors(page.text, text)
        total_errors, total_words = total_errors + errors, total_words + words
        char_errors += cer(page.text, text)
        per_page.append({"face": face, "size": size, "wer": errors / words, "text": text})
    return {
        "wer": total_errors / total_words,
        "cer": char_errors / len(per_page),
        "word_errors": total_errors,
        "words": total_words,
        "pages": len(per_page),
        "seconds": time.monotonic() - started,
        "per_page": per_page,
    }


def measure_word_error_rates(progress: Any) -> dict[str, dict[str, Any]]:
    """WER of the default catalog's OCR engines (and rapidocr without space restoring), in this process."""
    from engines.registry import engine_class
    from service.catalog import load_catalog

    specs = load_catalog().specs
    variants = {
        "rapidocr-no-space-restoring": dataclasses.replace(
            specs["rapidocr"], options={**specs["rapidocr"].options, "space_probability": 1.0}
        ),
        **{name: specs[name] for name in OCR_MODELS},
    }
    figures = {}
    for name, spec in variants.items():
        progress(f"word error rate of {name}")
        engine = engine_class(spec.backend)(spec, "cpu", None)
        engine.load()
        try:
            figures[name] = word_error_rates(engine, WORD_LANGUAGES[spec.backend])
        finally:
            engine.unload()
    return figures


def word_error_table(figures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The WER table (a row per engine) for :func:`bench.results.markdown`'s ``tables``."""
    labels = {
        "rapidocr": "RapidOCR (rapidocr, default)",
        "rapidocr-no-space-restoring": "RapidOCR, space restoring off (before)",
        "tesseract": "Tesseract (tesseract)",
    }
    rows = []
    for name, f in figures.items():
        worst = max(f["per_page"], key=lambda page: page["wer"])
        rows.append(
            [
                labels[name],
                f"{f['wer']:.2%}",
                f"{f['word_errors']} of {f['words']}",
                f"{f['cer']:.2%}",
                f"{worst['wer']:.1%} ({worst['face']} {worst['size']} px)",
                f"{f['seconds'] / f['pages']:.2f}",
            ]
        )
    faces = ", ".join(WORD_FACES)
    sizes = ", ".join(str(size) for size in WORD_SIZES)
    return {
        "title": (
            f"Word error rate — {len(WORD_SENTENCES)} English lines on a page per face ({faces}) "
            f"and size ({sizes} px), {len(WORD_FACES) * len(WORD_SIZES)} pages, in-process"
        ),
        "header": ["engine", "WER", "word errors", "CER (no whitespace)", "worst page WER", "s/page"],
        "rows": rows,
    }


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-repetition figures: pages read / wall time, and per-call latency."""
    return item_metrics(result, "pages_s")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the OCR comparison; write its JSON, plot and README section."""
    cfg = parse_config("ocr", argv, __doc__, reps={"full": 5, "quick": 3, "tiny": 1})
    # Runs are bounded by pages, so the slow engine (Tesseract, seconds a page) gets as many
    # samples as the fast one; the duration is only a safety bound.
    pages = cfg.pick(full=15, quick=5, tiny=1)
    duration = cfg.pick(full=120.0, quick=60.0, tiny=0.1)
    warmup = cfg.pick(full=1, quick=1, tiny=0)
    settings = {
        "pages_per_run": pages,
        "max_duration_s_per_run": duration,
        "in_flight": 1,
        "page": {"width": OCR_PAGE_SIZE[0], "height": OCR_PAGE_SIZE[1], "font": OCR_FONT, "lines": 8},
        "device": "cpu",
    }
    model = {"names": list(OCR_MODELS), "packages": ["rapidocr-onnxruntime", "pytesseract"]}
    title = "OCR — one 1000x600 text page, sequential calls"
    with Report(cfg, title, HEADLINE, model, settings) as report:
        if cfg.mode != "tiny":
            words = measure_word_error_rates(report.progress)
            report.payload["tables"] = [word_error_table(words)]
            report.payload["word_error_rates"] = words
        ours = report.start_server(lambda: servers.start_ours(cfg.log_dir))
        report.note(
            "the in-process references read the page already decoded; ours includes sending and "
            "decoding the PNG and building the page's lines and text (no boxes asked for)"
        )
        report.note(
            f"each run reads {pages} pages after one unmeasured page. Tesseract runs as a program of its "
            "own for every page (pytesseract writes the page to a file and starts `tesseract`): here one "
            "page took 2.1 to 2.9 s from call to call with the same pixels and the same call in one "
            "process, so Tesseract ratios within about 10% of 1 are noise, not our overhead"
        )
        for engine in OCR_MODELS:
            label = LABELS[engine]
            contenders = report.start_reference("ocr", f"{engine}-inprocess", f"{label} in-process", "ocr")
            grpc_args = ["--mode", "grpc-ocr", "--target", ours.grpc_target, "--model", engine]
            contenders.append(
                report.add(
                    client_contender(f"ours-grpc-{engine}", f"ours gRPC Ocr ({engine})", "ours", grpc_args)
                )
            )
            params = {"model": engine, "concurrency": 1, "requests": pages, "warmup": 0}
            # One page to load the engine; without a request bound the warm-up ran for the
            # load client's default duration.
            report.warm_up(contenders, {**params, "requests": 1})
            params.update(duration_s=duration, warmup=warmup)
            report.compare(label, params, contenders, f"{engine}-inprocess", metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
