"""Every bench figure the documentation's prose quotes comes from the committed result files.

Each area below renders, from ``bench/results/<area>.json``, the sentences of the documentation that
quote it; the test checks that README.md and the pages under docs/, joined, hold each one (line
breaks aside, as the prose is wrapped) and that the file names the clean commit it measured. A new run that moves a figure
fails here until the prose is updated from it, so prose and tables cannot drift apart again.
Figures are rounded as the prose prints them; ratios are the tables' own (medians of the
per-repetition ratios), except where the prose sets two medians side by side (``a against b``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.anomaly import floor_ceiling

REPO = Path(__file__).resolve().parent.parent
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
    q = load("encoder_runtimes")["quality"]
    int8 = q["onnx-int8"]
    return [
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


CLAIMS: dict[str, Callable[[], list[str]]] = {
    "anomaly": anomaly,
    "embeddings": embeddings,
    "memory": memory,
    "generation": generation,
    "gguf_quality": gguf_quality,
    "encoder_runtimes": encoder_runtimes,
    "kv_pool_memory": kv_pool_memory,
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
    payload = load(area)
    assert payload["git_revision"] and not payload["git_dirty"], "results must name a clean commit"
    prose = flat(documentation())
    missing = [claim for claim in CLAIMS[area]() if flat(claim) not in prose]
    assert not missing, f"README.md and docs/ do not quote bench/results/{area}.json as it stands: {missing}"
