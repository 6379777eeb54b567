"""Every bench figure the documentation's prose quotes comes from the committed result files.

Each area below renders, from ``bench/results/<area>.json``, the sentences of the documentation that
quote it (``headline``: the front page's, from several areas); the test checks that README.md and
the pages under docs/, joined, hold each one (line breaks aside, as the prose is wrapped). A new
run that moves a figure fails here until the prose is updated from it, so prose and tables cannot
drift apart again. Each file's stamp (clean commit, quiet machine) is tests/docs/test_bench_results.py's.
Figures are rounded as the prose prints them; ratios are the tables' own (medians of the
per-repetition ratios), except where the prose sets two medians side by side (``a against b``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.anomaly import floor_ceiling
from bench.embeddings import paired as paired_record

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
RESULTS = REPO / "bench" / "results"
DASH, TIMES, MINUS = "\u2013", "\u00d7", "\u2212"


def load(area: str) -> dict[str, Any]:
    """The committed results of ``area``."""
    return json.loads((RESULTS / f"{area}.json").read_text())


def result(payload: dict[str, Any], scenario: str, contender: str) -> dict[str, Any]:
    """One contender's summaries in one scenario."""
    (record,) = [s for s in payload["scenarios"] if s["name"] == scenario]
    return record["results"][contender]


def median(payload: dict[str, Any], scenario: str, contender: str, metric: str) -> float:
    """The median over repetitions of ``metric``."""
    return result(payload, scenario, contender)["metrics"][metric]["median"]


def ratio(payload: dict[str, Any], scenario: str, contender: str, metric: str) -> float:
    """The median of the per-repetition ratios of ``metric`` to the scenario's reference (the tables' x)."""
    return result(payload, scenario, contender)["ratios"][metric]["median"]


def span(values: list[float]) -> str:
    """Two figures (two decimals) joined by an en dash, or one when they round alike."""
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return low if low == high else f"{low}{DASH}{high}"


def anomaly() -> list[str]:
    p = load("anomaly")
    iforest, ecod = "IsolationForest (scaled)", "ECOD"
    (ecod_record,) = [s for s in p["scenarios"] if s["name"] == ecod]
    cap = floor_ceiling(ecod_record, "ecod-inprocess", "floor-ecod")
    assert cap is not None
    return [
        f"10,000 rows score at {ratio(p, iforest, 'ours-iforest-numeric', 'rows_s'):.2f}x (isolation forest) "
        f"and {ratio(p, ecod, 'ours-ecod-numeric', 'rows_s'):.2f}x (ECOD) of calling scikit-learn/pyod "
        "in-process",
        f"the gRPC round trip of those bytes alone caps ECOD at {cap['ceiling']:.2f}x",
        f"read straight from the wire as well ({ratio(p, iforest, 'ours-iforest-rows', 'rows_s'):.2f}x and "
        f"{ratio(p, ecod, 'ours-ecod-rows', 'rows_s'):.2f}x)",
    ]


def embeddings() -> list[str]:
    p = load("embeddings")
    big, many = "32/call x 1 client", "1/call x 64 clients"

    def rate(scenario: str, contender: str) -> float:
        return median(p, scenario, contender, "sentences_s")

    served_big, torch_big = rate(big, "ours-grpc"), rate(big, "ours-grpc-torch")
    served_many, torch_many = rate(many, "ours-grpc"), rate(many, "ours-grpc-torch")
    return [
        f"{served_big:.0f} sentences/s at 32 per call against our torch server's {torch_big:.0f} "
        f"(x{served_big / torch_big:.2f}), {served_many:.0f} against {torch_many:.0f} at 64 single-sentence "
        f"clients (x{served_many / torch_many:.2f})",
        f"served, {rate(many, 'ours-grpc-onnx-int8'):.0f} sentences/s at 64 single-sentence clients and "
        f"{rate(big, 'ours-grpc-onnx-int8'):.0f} at 32 per call, against {served_many:.0f} and "
        f"{served_big:.0f} for the default OpenVINO float32",
    ]


def memory() -> list[str]:
    p = load("memory")
    scenario = "all-minilm-l6-v2 alone, fresh process"
    ours, torch = median(p, scenario, "ours", "added_mib"), median(p, scenario, "st-inprocess", "added_mib")
    return [
        f"it adds {ours:.0f} MiB to a fresh server once loaded and touched (torch in-process: {torch:.0f} MiB"
    ]


def generation() -> list[str]:
    p = load("generation")
    ours = ("ours-grpc", "ours-gateway")

    def ceiling(scenario: str) -> str:
        return span([result(p, scenario, name)["ceiling_ratio"]["median"] for name in ours])

    return [
        f"8 cold streams run at {ceiling('cold, 8 streams')}{TIMES} of the bare llama.cpp batched-decode "
        f"loop on the same file, and 16 at {ceiling('cold, 16 streams')}{TIMES}"
    ]


def gguf_quality() -> list[str]:
    p = load("gguf_quality")
    quality, files = p["quality"], p["settings"]["files"]
    prompts = len(p["settings"]["prompts"])

    def change(name: str) -> str:
        return f"{quality[name]['perplexity_change_pct']:+.1f}%".replace("-", MINUS).lstrip("+")

    exact = quality["q4_0"]["agreement"]["exact"]
    matches = "no answer matches" if exact == 0 else f"{exact} of {prompts} answers match"
    claims = [
        f"the perplexity of a fixed {quality['q4_1']['text_tokens']}-token text, and greedy answers to "
        f"{prompts} prompts",
        f"perplexity rises {change('q4_0')} and {matches}",
        f"its perplexity rises {change('q8_0')}",
        f"F16 keeps the weights exactly ({change('f16')}) but is "
        f"{files['f16']['bytes'] / files['q4_1']['bytes']:.2f}{TIMES} the file",
    ]
    if any(s["name"] == "ceiling, 8 sequences" for s in p["scenarios"]):  # not in a --quality-only run
        many = {name: ratio(p, "ceiling, 8 sequences", name, "agg_tok_s") for name in ("q4_0", "q8_0", "f16")}
        one = ratio(p, "ceiling, 1 sequence", "f16", "agg_tok_s")
        claims.append(f"Q4_0 (the fastest batched type: {TIMES}{many['q4_0']:.2f} at 8 sequences)")
        claims.append(f"Q8_0 batches {TIMES}{many['q8_0']:.2f} better than Q4_1 at 8 sequences")
        claims.append(f"batches {TIMES}{many['f16']:.2f} and runs one stream at {TIMES}{one:.2f}")
    return claims


def encoder_runtimes() -> list[str]:
    p = load("encoder_runtimes")
    q = p["quality"]
    int8 = q["onnx-int8"]

    def rate(name: str) -> float:
        return median(p, "batch 32, in-process", name, "sentences_s")

    gains = [rate(f"{runtime}-int8") / rate(runtime) for runtime in ("onnx", "openvino")]
    return [
        f"at {span(gains)}x the float32 speed of its runtime in-process (onnx {rate('onnx'):.0f} -> "
        f"{rate('onnx-int8'):.0f}, openvino {rate('openvino'):.0f} -> {rate('openvino-int8'):.0f} sentences/s "
        "at batch 32, same run)",
        f"with the same vectors as torch (cosine {q['openvino']['cosine_min']:.4f};",
        f"its vectors move (cosine to torch {int8['cosine_min']:.3f} at least, {int8['cosine_mean']:.3f} on "
        f"average), enough to change the top three of {30 - int8['rerank_head_same']} of the bench's 30 "
        f"rerank queries and {60 - int8['zero_shot_labels_same']} of its 60 zero-shot labels",
    ]


def kv_pool_memory() -> list[str]:
    p = load("kv_pool_memory")

    def added(name: str) -> float:
        return median(p, "load + one request", name, "added_mib")

    return [
        f"{added('streams'):.0f} MiB with the default 8 streams x 2048 cells, {added('kv-pool'):.0f} MiB with "
        f"`kv_pool_tokens: 4096`, {added('llama-cpp-python'):.0f} MiB for llama-cpp-python's "
        "`Llama(model_path, n_ctx=4096)` in-process"
    ]


def fig(value: float) -> str:
    """A figure as the prose prints it: whole numbers with thousands commas from 100, else 3 digits."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def goal(value: float, at_least: float | None = None, at_most: float | None = None) -> str:
    """``met`` or ``not met``: whether ``value`` keeps the goal's bound."""
    kept = (at_least is None or value >= at_least) and (at_most is None or value <= at_most)
    return "met" if kept else "not met"


def paired(payload: dict[str, Any], scenario: str, name: str, other: str, metric: str) -> float:
    """The median of per-repetition ratios of ``name``'s ``metric`` to ``other``'s in ``scenario``."""
    (record,) = [s for s in payload["scenarios"] if s["name"] == scenario]
    figure = paired_record(record, name, other, metric)
    assert figure is not None, f"{scenario} lacks {name} or {other}"
    return figure["median"]


def encoder_served() -> list[str]:
    p = load("encoder_served")
    embed, rerank = (
        "64 single-sentence clients (reference: 32/call)",
        "rerank 1 query x 32 documents, 1 client",
    )
    grpc, gateway = median(p, embed, "ours-grpc", "items_s"), median(p, embed, "ours-gateway", "items_s")
    reference, infinity = median(p, embed, "st-inprocess", "items_s"), median(p, embed, "infinity", "items_s")
    served = ratio(p, embed, "ours-grpc", "items_s")
    over_grpc, over_infinity = (
        p["paired_ratios"][k]["median"] for k in ("gateway_over_grpc", "gateway_over_infinity")
    )
    rerank_ratio = ratio(p, rerank, "ours-rerank", "items_s")
    return [
        f"| gRPC `Embed`, 64 single-sentence clients, vs sentence-transformers in-process at 32/call | "
        f"{grpc:.0f} sentences/s | {reference:.0f} | {TIMES}{served:.2f} | {TIMES}0.9: {goal(served, 0.9)} |",
        f"| gateway `/v1/embeddings`, 64 clients, vs our gRPC | {gateway:.0f} | {grpc:.0f} | "
        f"{TIMES}{over_grpc:.2f} | {TIMES}0.9: {goal(over_grpc, 0.9)} |",
        f"| gateway `/v1/embeddings`, 64 clients, vs infinity | {gateway:.0f} | {infinity:.0f} | "
        f"{TIMES}{over_infinity:.2f} | {TIMES}1.5: {goal(over_infinity, 1.5)} |",
        f"| gRPC `Rerank` 1 query {TIMES} 32 documents (1 client), vs `CrossEncoder.predict` in-process | "
        f"{median(p, rerank, 'ours-rerank', 'items_s'):.0f} pairs/s | {median(p, rerank, 'ce-inprocess', 'items_s'):.0f} | "
        f"{TIMES}{rerank_ratio:.2f} | {DASH} |",
    ]


def batch_api() -> list[str]:
    p = load("batch_api")
    rows = []
    for scenario, what in (
        ("embed-lines", f"{p['settings']['embed_lines']:,} embedding lines"),
        (
            "chat-lines",
            f"{p['settings']['chat_lines']} chat lines, {p['settings']['chat_max_tokens']} tokens",
        ),
    ):
        batch = median(p, scenario, "batch", "lines_per_s")
        e2e = median(p, scenario, "batch", "e2e_lines_per_s")
        live4, live8 = (
            median(p, scenario, "live-4", "lines_per_s"),
            median(p, scenario, "live-8", "lines_per_s"),
        )
        over4 = ratio(p, scenario, "batch", "lines_per_s")
        over8 = paired(p, scenario, "batch", "live-8", "lines_per_s")
        rows.append(
            f"| {what} | {fig(batch)} (end to end {fig(e2e)}) | {fig(live4)} | {fig(live8)} | "
            f"{TIMES}{over4:.2f}: {goal(over4, 0.8)} | {TIMES}{over8:.2f} |"
        )
    for metric, label in (
        ("chat_ttft_p99_ms", "chat TTFT p99"),
        ("chat_ttft_p50_ms", "chat TTFT p50"),
        ("embed_p99_ms", "Embed p99"),
        ("embed_p50_ms", "Embed p50"),
    ):
        quiet, beside = median(p, "interactive", "quiet", metric), median(p, "interactive", "beside", metric)
        moved = ratio(p, "interactive", "beside", metric)
        verdict = f": {goal(moved, at_most=1.5)}" if "p99" in metric else ""
        rows.append(f"| {label} | {fig(quiet)} ms | {fig(beside)} ms | {TIMES}{moved:.2f}{verdict} |")
    embed_beside = median(p, "interactive", "beside", "embed_batch_lines_per_s")
    embed_alone = median(p, "embed-lines", "batch", "lines_per_s")
    rows.append(f"keeps MiniLM busy ({fig(embed_beside)} lines/s beside, against {fig(embed_alone)} alone)")
    calls = median(p, "interactive", "beside", "chat_calls")
    rows.append(f"the chat probe made a median {calls:.0f} calls per repetition beside the batches")
    return rows


def fairness() -> list[str]:
    p = load("fairness")
    slices = {"beside": "25 (default)", "beside-slice-50": "50", "beside-slice-0": "0 (whole batches)"}
    rows = []
    for scenario, flood in (
        ("flood-64", "64 clients x 1 sentence"),
        ("flood-64x16", "64 clients x 16 sentences"),
    ):
        for name, fair_batch_ms in slices.items():
            p99 = median(p, scenario, name, "probe_p99_ms")
            moved = ratio(p, scenario, name, "probe_p99_ms")
            rows.append(
                f"| {flood} | {fair_batch_ms} | {fig(p99)} ms | {TIMES}{moved:.2f}: {goal(moved, at_most=1.5)} | "
                f"{fig(median(p, scenario, name, 'probe_p50_ms'))} ms | {median(p, scenario, name, 'flood_per_s'):.0f} |"
            )
    alone = " / ".join(fig(median(p, s, "alone", "probe_p99_ms")) for s in ("flood-64", "flood-64x16"))
    same = [median(p, s, "same-key", "probe_p99_ms") for s in ("flood-64", "flood-64x16")]
    rows.append(f"team-b p99 (alone: {alone} ms)")
    cuts = [
        median(p, s, "beside-slice-0", "probe_p99_ms") / median(p, s, "beside", "probe_p99_ms")
        for s in ("flood-64", "flood-64x16")
    ]
    rows.append(f"The time slices cut that wait {span(cuts)}x against whole batches")
    cost = 1 - median(p, "flood-64x16", "beside", "flood_per_s") / median(
        p, "flood-64x16", "beside-slice-0", "flood_per_s"
    )
    rows.append(f"The default slice costs the bulk flood {cost:.0%} of its whole-batch throughput")
    rows.append(
        f"waits {same[0]:,.0f} ms (one batch of single sentences is all that queues) and {same[1]:,.0f} ms"
    )
    return rows


def quota_accuracy() -> list[str]:
    p = load("quota_accuracy")
    rows = {row[0]: row for row in p["tables"][0]["rows"]}
    return [f"| {' | '.join(row)} |" for row in rows.values()]


def ocr() -> list[str]:
    p = load("ocr")
    (off,) = [row[1] for row in p["tables"][0]["rows"] if "space restoring off" in row[0]]
    (default,) = [row[1] for row in p["tables"][0]["rows"] if row[0].startswith("RapidOCR (")]
    (tesseract,) = [row[1] for row in p["tables"][0]["rows"] if row[0].startswith("Tesseract")]
    return [
        f"word error rate {default} on rendered English pages ({off} with its spaces as the recognizer "
        f"emits them; Tesseract {tesseract}"
    ]


def speculative() -> list[str]:
    p = load("speculative")
    rows = []
    for scenario in (s["name"] for s in p["scenarios"]):
        workload, streams = scenario.split(", ")
        off = median(p, scenario, "reference", "tokens_s")
        on = result(p, scenario, "speculative")
        moved = on["ratios"]["tokens_s"]
        drafted = on["metrics"]["drafted"]["median"]
        accepted = (
            f"{on['metrics']['acceptance']['median']:.2f} ({drafted:.0f} drafted)"
            if drafted
            else "nothing drafted"
        )
        equal = "yes" if on["metrics"]["equal"]["min"] == 1 else "no"
        rows.append(
            f"| {workload} | {streams.split()[0]} | {off:.1f} | {on['metrics']['tokens_s']['median']:.1f} | "
            f"{TIMES}{moved['median']:.2f} ({moved['p5']:.2f}{DASH}{moved['p95']:.2f}) | {accepted} | {equal} |"
        )
    (note,) = [n for n in p["notes"] if "measured at load" in n]
    one, eight = (float(v) for v in re.search(r"measured at load \(([\d.]+), ([\d.]+)\)", note).groups())
    rows.append(f"Row costs measured at load: {one:.2f} (one sequence), {eight:.2f} (8 sequences)")
    return rows


def memory_estimate() -> list[str]:
    p = load("memory_estimate")
    rows = []
    for record in p["scenarios"]:
        m = record["results"]["required_memory"]["metrics"]

        def cell(key: str, m: dict[str, Any] = m) -> str:
            return f"{m[key]['median']:.0f} [{m[key]['min']:.0f}{DASH}{m[key]['max']:.0f}]"

        rows.append(
            f"| {record['name']} | {m['estimate_ram_mib']['median']:.0f} | {m['estimate_vram_mib']['median']:.0f} | "
            f"{cell('measured_mib')} | {m['measured_settled_mib']['median']:.0f} | {m['reported_mib']['median']:.0f} | "
            f"{m['ratio']['median']:.2f} [{m['ratio']['min']:.2f}{DASH}{m['ratio']['max']:.2f}] | "
            f"{m['estimate_ms']['median']:.1f} |"
        )
    return rows


def headline() -> list[str]:  # not an area: figures of several
    """The front page's figures (README.md, "Headline figures"), one per area it quotes."""
    served = load("encoder_served")
    embed = "64 single-sentence clients (reference: 32/call)"
    over_infinity = served["paired_ratios"]["gateway_over_infinity"]["median"]
    return [
        f"single-sentence `Embed` calls from 64 gRPC clients reach {TIMES}"
        f"{ratio(served, embed, 'ours-grpc', 'items_s'):.2f} of sentence-transformers in-process at 32 "
        f"sentences per call, and `/v1/embeddings` serves {TIMES}{over_infinity:.2f} of infinity's rate",
        *generation(),
        *anomaly()[:1],
        *ocr(),
    ]


CLAIMS: dict[str, Callable[[], list[str]]] = {
    "anomaly": anomaly,
    "embeddings": embeddings,
    "memory": memory,
    "generation": generation,
    "gguf_quality": gguf_quality,
    "encoder_runtimes": encoder_runtimes,
    "kv_pool_memory": kv_pool_memory,
    "encoder_served": encoder_served,
    "fairness": fairness,
    "batch_api": batch_api,
    "quota_accuracy": quota_accuracy,
    "ocr": ocr,
    "headline": headline,
    "speculative": speculative,
    "memory_estimate": memory_estimate,
}


def documentation() -> str:
    """README.md and every page under docs/, joined."""
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)


def flat(text: str) -> str:
    """``text`` with every run of whitespace as one space (prose is wrapped anywhere)."""
    return " ".join(text.split())


@pytest.mark.parametrize("area", sorted(CLAIMS))
def test_the_prose_quotes_the_committed_results(area):
    # The results' stamp itself is checked for every file by tests/docs/test_bench_results.py.
    prose = flat(documentation())
    missing = [claim for claim in CLAIMS[area]() if flat(claim) not in prose]
    assert not missing, f"README.md and docs/ do not quote bench/results/ as it stands ({area}): {missing}"
