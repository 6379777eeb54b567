"""Speculative decoding in the llama.cpp engine (engines.generation.speculative).

On the real default GGUF (SmolLM2-135M Q4_1): greedy output token for token the same with and
without speculation, alone and with 4 streams (2 speculating, 2 not); a sequence whose drafts
keep failing stops drafting (its drafted-token count); a draft model with the target's vocabulary
(the same GGUF) and one whose vocabulary differs (refused at load); the usage fields through
the contract and the gateway; bad catalog and request values refused.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from universal_runtime.v1 import common_pb2, generation_pb2

from engines.base import ModelSpec
from engines.errors import FailedPreconditionError, InvalidArgumentError, ModelLoadError
from engines.executor import DeviceExecutor
from engines.generation import speculative
from engines.generation.llama_cpp_engine import LlamaCppGenerationEngine
from engines.generation.speculative import (
    MIN_DRAFTED_FOR_CUTOFF,
    NgramDrafter,
    SpeculationState,
    accepted_prefix,
    equal_lengths,
)
from engines.sources import resolve_source
from engines.types import ChatMessage, GenerationRequest, GenerationUsage, SamplingParams, Task
from gateway.translate.generation import usage_dict
from service.convert.generation import _usage_and_timings, generation_request
from service.tasks.generation import Timings
from tests.conftest import GGUF_SOURCE
from tests.scrape import moved, scrape

NUM_TOKENS = 4
ROW_COST = 0.5  # a verified row costs half a one-token step (2 CPU cores; see speculative.row_cost)
DOCUMENT = (
    "Invoice number: INV-2024-0193\nCustomer: Acme Robotics GmbH, Hauptstrasse 12, 10115 Berlin\n"
    "Date of issue: 14 March 2024\nTotal due: 969.00 EUR\nContact: Maria Keller, maria.keller@acme-robotics.de"
)
COPY = f"Copy this text, replacing 'Berlin' with 'Munich':\n\n{DOCUMENT}"
FREE = "Write a short poem about the sea."
QUESTION = f"{DOCUMENT}\n\nWho is the customer and what is their address?"


def make_engine(**options) -> LlamaCppGenerationEngine:
    spec = ModelSpec(
        name="spec-test",
        backend="llama_cpp",
        tasks=(Task.GENERATE,),
        source=GGUF_SOURCE,
        options={"n_ctx": 1024, "max_sequences": 4, **options},
    )
    LlamaCppGenerationEngine.check_spec(spec)
    engine = LlamaCppGenerationEngine(spec, "cpu", DeviceExecutor("cpu"))
    engine.load()
    assert all(0.01 <= cost <= 2.0 for cost in engine.row_costs)
    # The measured cost of a verified row depends on the machine's load; a fixed one keeps the
    # draft lengths (and the counts asserted here) the same on every run.
    engine.row_costs = (ROW_COST, ROW_COST)
    return engine


async def close(engine) -> None:
    """Unload once the scheduler's last step (queued one ahead) has run."""
    await engine.drain()
    await engine.executor.run(engine.unload)
    engine.executor.shutdown(wait=False)


@pytest.fixture(scope="module")
async def engine():
    # Speculation off unless a request asks: the same engine serves both sides of each comparison.
    engine = make_engine(speculative={"enabled": False, "num_tokens": NUM_TOKENS, "min_acceptance_rate": 0.5})
    yield engine
    await close(engine)


_references: dict[tuple, list[int]] = {}


async def reference(engine, prompt: str, **params) -> list[int]:
    """Greedy output without speculation, generated once per prompt and parameters."""
    key = (prompt, repr(sorted(params.items())))
    if key not in _references:
        _references[key] = (await generate(engine, prompt, False, **params))[0]
    return _references[key]


async def generate(engine, prompt: str, speculate: bool | None, max_tokens: int = 64, **params):
    request = GenerationRequest(
        request_id="spec",
        messages=[ChatMessage(role="user", content=prompt)],
        params=SamplingParams(**{"temperature": 0, "max_tokens": max_tokens, **params}),
        speculative_enabled=speculate,
    )
    tokens: list[int] = []
    usage = None
    async with contextlib.aclosing(engine.stream(request)) as deltas:
        async for delta in deltas:
            tokens += delta.token_ids
            usage = delta.usage or usage
    return tokens, usage


# -- drafting and acceptance (no model) -------------------------------------------------------


def test_prompt_lookup_proposes_what_followed_the_latest_longest_match():
    drafter = NgramDrafter()
    drafter.extend([1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3])
    # The suffix 1 2 3 occurred at the start (followed by 4 5 ...); 2 3 alone last occurred before 7 8.
    assert drafter.draft(3) == [4, 5, 9]
    drafter.extend([6])
    assert drafter.draft(4) == []  # 3 6 never occurred, and single tokens do not count
    assert NgramDrafter().draft(4) == []
    assert drafter.draft(0) == []


def test_acceptance_is_the_common_prefix_and_a_poor_rate_stops_drafting():
    assert accepted_prefix([5, 6, 7], [5, 6, 8, 9]) == 2
    assert accepted_prefix([5, 6], [5, 6, 1]) == 2
    assert accepted_prefix([5], [4, 1]) == 0
    state = SpeculationState(num_tokens=4, min_acceptance_rate=0.5)
    state.record(4, 0)
    assert state.active  # too few drafted to judge
    for _ in range(3):
        state.record(4, 1)
    assert (state.drafted, state.accepted, state.active) == (16, 3, False)
    good = SpeculationState(num_tokens=4, min_acceptance_rate=0.5)
    for _ in range(8):
        good.record(4, 3)
    assert good.active


def test_drafts_are_as_long_as_their_acceptance_makes_worth_it():
    fresh = SpeculationState(num_tokens=8, min_acceptance_rate=0)
    assert fresh.length(0.5) == 3  # the prior (0.8): 0.8, 0.64 and 0.51 are worth a row
    assert fresh.length(0.1) == 8  # cheap rows (a GPU's): up to num_tokens
    assert fresh.length(1.2) == 0  # rows dearer than a step: no drafts
    copying = SpeculationState(num_tokens=8, min_acceptance_rate=0)
    copying.record(8, 8)
    copying.record(8, 8)
    assert copying.length(0.5) == 8
    failing = SpeculationState(num_tokens=8, min_acceptance_rate=0)
    failing.record(3, 0)
    assert failing.length(0.5) == 1
    failing.record(1, 0)
    assert failing.length(0.5) == 1  # 3.2 / 6 = 0.53
    assert equal_lengths([[1, 2, 3], [], [4, 5]]) == [[1, 2], [], [4, 5]]
    assert equal_lengths([[1, 2], []]) == [[1, 2], []]


# -- catalog and request values ---------------------------------------------------------------

BAD_OPTIONS = {
    "speculative.num_tokens": ({"speculative": {"num_tokens": 17}}, "speculative.num_tokens"),
    "speculative.num_tokens zero": ({"speculative": {"num_tokens": 0}}, "speculative.num_tokens"),
    "speculative.min_acceptance_rate": (
        {"speculative": {"min_acceptance_rate": 1.5}},
        "speculative.min_acceptance_rate",
    ),
    "speculative unknown key": ({"speculative": {"draft": "x.gguf"}}, "speculative.draft"),
    "speculative without flash_attn": ({"speculative": {}, "flash_attn": False}, "speculative"),
    "cache_type_k": ({"cache_type_k": "q3_k"}, "cache_type_k"),
    "cache_type_v quantized without flash_attn": ({"cache_type_v": "q8_0"}, "cache_type_v"),
    "n_ubatch over n_batch": ({"n_ubatch": 1024, "n_batch": 512}, "n_ubatch"),
    "n_ubatch zero": ({"n_ubatch": 0}, "n_ubatch"),
    "use_mmap": ({"use_mmap": "sometimes"}, "use_mmap"),
    "use_mlock": ({"use_mlock": 3}, "use_mlock"),
}


@pytest.mark.parametrize("case", BAD_OPTIONS, ids=list(BAD_OPTIONS))
def test_bad_option_values_are_refused(case):
    options, named = BAD_OPTIONS[case]
    spec = ModelSpec(
        name="bad", backend="llama_cpp", tasks=(Task.GENERATE,), source=GGUF_SOURCE, options=options
    )
    with pytest.raises(InvalidArgumentError) as caught:
        LlamaCppGenerationEngine.check_spec(spec)
    assert caught.value.reason == "INVALID_MODEL_OPTION"
    assert named in str(caught.value)


def test_good_runtime_flags_are_accepted_and_speculation_turns_flash_attention_on():
    flags = {"speculative": {}, "cache_type_k": "q8_0", "cache_type_v": "q8_0", "n_ubatch": 256}
    spec = ModelSpec("good", "llama_cpp", (Task.GENERATE,), GGUF_SOURCE, options=flags)
    LlamaCppGenerationEngine.check_spec(spec)
    options = LlamaCppGenerationEngine(spec, "cpu", DeviceExecutor("cpu")).options
    assert options.flash_attn and options.speculative.num_tokens == 8
    assert (options.cache_type_k, options.cache_type_v, options.n_ubatch) == ("q8_0", "q8_0", 256)


def test_a_missing_draft_model_file_is_refused_by_the_catalog_check(tmp_path):
    spec = ModelSpec(
        name="no-draft",
        backend="llama_cpp",
        tasks=(Task.GENERATE,),
        source=GGUF_SOURCE,
        options={"speculative": {"draft_model": str(tmp_path / "missing.gguf")}},
    )
    with pytest.raises(ModelLoadError) as caught:
        LlamaCppGenerationEngine.check_spec(spec)
    assert caught.value.reason == "MODEL_SOURCE_MISSING"
    assert "speculative.draft_model of model 'no-draft'" in str(caught.value)


@pytest.mark.parametrize("tokens", [-1, 17])
def test_a_request_with_too_many_draft_tokens_is_refused(tokens):
    request = generation_pb2.GenerateRequest(model="m", prompt="hi")
    request.parameters.speculative.num_tokens = tokens
    with pytest.raises(InvalidArgumentError) as caught:
        generation_request(request, "r", max_tokens_limit=100, max_choices=1)
    assert caught.value.metadata["field"] == "parameters.speculative.num_tokens"


def test_the_request_override_reaches_the_engine_request():
    request = generation_pb2.GenerateRequest(model="m", prompt="hi")
    plain = generation_request(request, "r", max_tokens_limit=100, max_choices=1)
    assert (plain.speculative_enabled, plain.speculative_tokens) == (None, 0)
    request.parameters.speculative.enabled = False
    request.parameters.speculative.num_tokens = 16
    converted = generation_request(request, "r", max_tokens_limit=100, max_choices=1)
    assert (converted.speculative_enabled, converted.speculative_tokens) == (False, 16)


def test_usage_carries_drafted_and_accepted_tokens_to_the_contract_and_the_gateway():
    response = generation_pb2.GenerateResponse()
    _usage_and_timings(response, GenerationUsage(10, 40, 0, 0, 30, 24), Timings())
    assert (response.usage.draft_tokens, response.usage.accepted_draft_tokens) == (30, 24)
    details = usage_dict(response.usage)["completion_tokens_details"]
    assert details == {
        "reasoning_tokens": 0,
        "accepted_prediction_tokens": 24,
        "rejected_prediction_tokens": 6,
    }
    # Without speculation the details are what they always were.
    assert usage_dict(common_pb2.Usage(completion_tokens=3))["completion_tokens_details"] == {
        "reasoning_tokens": 0
    }


# -- the real model -----------------------------------------------------------------------------


async def test_greedy_output_is_the_same_with_and_without_speculation(engine):
    plain, plain_usage = await generate(engine, FREE, False)
    assert plain_usage.draft_tokens == 0
    _references[(FREE, "[]")] = plain
    for prompt in (COPY, QUESTION, FREE):
        fast, usage = await generate(engine, prompt, True)
        assert fast == await reference(engine, prompt), prompt
        assert usage.completion_tokens == len(fast)
        assert usage.accepted_draft_tokens <= usage.draft_tokens
        if prompt == COPY:
            # It drafts from its own text, most drafts accepted, past the cut-off's minimum.
            assert usage.draft_tokens > MIN_DRAFTED_FOR_CUTOFF
            assert usage.accepted_draft_tokens > usage.draft_tokens // 2


async def test_greedy_output_is_the_same_under_concurrency(engine):
    prompts = [COPY, FREE, QUESTION, COPY]
    references = [await reference(engine, p) for p in prompts]
    before = scrape()
    mixed = await asyncio.gather(*(generate(engine, p, i % 2 == 0) for i, p in enumerate(prompts)))
    after = scrape()
    assert [tokens for tokens, _ in mixed] == references
    drafted = [usage.draft_tokens for _, usage in mixed]
    assert drafted[1] == drafted[3] == 0 and drafted[0] > 0
    # The metrics count what the usage reports.
    assert moved(before, after, "ur_speculative_draft_tokens_total", model="spec-test") == sum(drafted)
    accepted = sum(usage.accepted_draft_tokens for _, usage in mixed)
    assert moved(before, after, "ur_speculative_accepted_tokens_total", model="spec-test") == accepted


async def test_a_sequence_whose_drafts_keep_failing_stops_drafting(engine, monkeypatch):
    # Drafts of a token the model never picks (banned by the request's logit bias): all rejected.
    banned = 1000
    bias = {banned: -100.0}
    monkeypatch.setattr(speculative.NgramDrafter, "draft", lambda self, limit: [banned] * limit)
    # Rows at half a step: 3 drafts (the prior), then 1, 1, then the acceptance estimate (3.2 / 7)
    # is worth no row.
    tokens, usage = await generate(engine, COPY, True, logit_bias=bias)
    assert tokens == await reference(engine, COPY, logit_bias=bias)
    assert len(tokens) > 20  # many more steps than the drafting ones
    assert (usage.draft_tokens, usage.accepted_draft_tokens) == (5, 0)
    # Rows almost free: 4 drafts a step until 16 were drafted with none accepted (0 < 0.5), then
    # min_acceptance_rate stops the sequence drafting.
    monkeypatch.setattr(engine, "row_costs", (0.01, 0.01))
    tokens, usage = await generate(engine, COPY, True, logit_bias=bias)
    assert tokens == await reference(engine, COPY, logit_bias=bias)
    assert (usage.draft_tokens, usage.accepted_draft_tokens) == (MIN_DRAFTED_FOR_CUTOFF, 0)


async def test_sampled_requests_do_not_speculate(engine):
    _, usage = await generate(engine, COPY, True, max_tokens=24, temperature=0.8, seed=1)
    assert usage.draft_tokens == 0


# -- draft models ---------------------------------------------------------------------------------


async def test_a_draft_model_with_the_same_vocabulary_drafts_and_keeps_greedy_output(engine):
    path = resolve_source(GGUF_SOURCE).path
    drafted = make_engine(max_sequences=2, speculative={"draft_model": str(path), "num_tokens": NUM_TOKENS})
    try:
        assert drafted.estimated_load_bytes() == drafted.required_memory().ram_bytes > 2 * path.stat().st_size
        assert drafted.memory_usage().ram_bytes > 2 * drafted.model.size()
        # Two models' weights against one: more than the 4-sequence engine's estimate.
        assert drafted.required_memory().ram_bytes > engine.required_memory().ram_bytes
        for prompt in (FREE, QUESTION):
            tokens, usage = await generate(drafted, prompt, None)
            assert tokens == await reference(engine, prompt)
            # The draft is the target itself: nearly every draft token is accepted.
            assert usage.accepted_draft_tokens >= usage.draft_tokens * 3 // 4 > 0
    finally:
        await close(drafted)


def mismatched_vocabulary(path: Path) -> Path:
    """A vocabulary-only GGUF: SmolLM2's metadata with the text of token 100 changed."""
    import gguf

    reader = gguf.GGUFReader(resolve_source(GGUF_SOURCE).path)
    writer = gguf.GGUFWriter(str(path), reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field.contents()
        if name == "tokenizer.ggml.tokens":
            value[100] += "X"
        sub_type = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(name, value, field.types[0], sub_type=sub_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_draft_model_with_another_vocabulary_is_refused_at_load(tmp_path):
    draft = mismatched_vocabulary(tmp_path / "other-vocab.gguf")
    with pytest.raises(FailedPreconditionError) as caught:
        make_engine(max_sequences=1, speculative={"draft_model": str(draft)})
    assert caught.value.reason == "DRAFT_VOCABULARY_MISMATCH"
    assert "does not share its vocabulary: token 100" in str(caught.value)
