"""Grammar work is bounded before it starts, off the model's lane, and cancellable.

A short schema whose quantifiers are each within the 1,000 bound but nested
(``^((a{0,1000}){0,1000}){0,30}$``) holds a model's lane at 100% CPU long after its client has gone
(see docs/architecture/design-notes.md#nested-repetitions-multiply). Nested repetitions multiply, so
their product is bounded, and so is each pattern's ambiguity (how many places its match can be at at
once: llama.cpp's parse stacks, what each decoding step costs); the compile runs in a worker thread
that a cancelled call stops.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import grpc
import httpx
import pytest
from universal_runtime.v1 import generation_pb2 as g

from engines.errors import InvalidArgumentError
from engines.generation import json_grammar
from engines.generation.json_grammar import gbnf_grammar
from engines.generation.json_schema_bounds import (
    MAX_LIVE_ALTERNATIVES,
    MAX_REPETITION_PRODUCT,
    check_schema_bounds,
)
from engines.generation.pattern_bounds import (
    MAX_LIVE_POSITIONS,
    MAX_PATTERN_POSITIONS,
    CompileBudget,
    CompileCancelled,
)
from engines.generation.structured import OutputConstraint
from tests.conftest import CHAT_MODEL, error_info

NESTED_REPEAT_SCHEMA = {"type": "string", "pattern": "^((a{0,1000}){0,1000}){0,30}$"}
#: Seconds before a call that should answer at once counts as hung (a hang detector, not a speed test).
HANG_S = 30
ONE_SLOT_MODEL = "tiny-queue-chat"  # one sequence at a time: a held lane blocks the next call


def _in_object(schema: dict) -> dict:
    return {"type": "object", "properties": {"value": schema}, "required": ["value"]}


# name: (schema, reason, bound metadata, words the message must contain)
REFUSED: dict[str, tuple[dict, str, str, tuple[str, ...]]] = {
    "nested_repeats": (
        NESTED_REPEAT_SCHEMA,
        "JSON_SCHEMA_TOO_COMPLEX",
        "pattern positions",
        ("30000000", "4096"),
    ),
    "nested_in_a_property": (
        _in_object({"type": "string", "pattern": "^(a{0,100}){0,100}$"}),
        "JSON_SCHEMA_TOO_COMPLEX",
        "pattern positions",
        ("#/properties/value", "10000"),
    ),
    "nullable_item_repeated": (
        {"type": "string", "pattern": "^(a?){0,100}$"},
        "JSON_SCHEMA_TOO_COMPLEX",
        "pattern ambiguity",
        (f"more than {MAX_LIVE_POSITIONS} places",),
    ),
    "small_counts_nested": (
        {"type": "string", "pattern": "^(a{0,16}){0,16}$"},
        "JSON_SCHEMA_TOO_COMPLEX",
        "pattern ambiguity",
        ("places at once",),
    ),
    "adjacent_repetitions": (
        {"type": "string", "pattern": "^a{0,500}a{0,500}$"},
        "JSON_SCHEMA_TOO_COMPLEX",
        "pattern ambiguity",
        ("places at once",),
    ),
    "alternation_in_a_repetition": (
        {"type": "string", "pattern": "^(a|aa){0,1000}$"},
        "JSON_SCHEMA_TOO_COMPLEX",
        "pattern ambiguity",
        ("places at once",),
    ),
    "nested_pattern_in_array_items": (
        {"type": "array", "maxItems": 10, "items": {"type": "string", "pattern": "^([a-z]{0,10}){0,50}$"}},
        "JSON_SCHEMA_TOO_COMPLEX",
        "pattern ambiguity",
        ("#/items",),
    ),
    "nested_max_items": (
        {
            "type": "array",
            "maxItems": 1000,
            "items": {"type": "array", "maxItems": 1000, "items": {"type": "string", "maxLength": 1000}},
        },
        "JSON_SCHEMA_TOO_COMPLEX",
        "repetition product",
        ("1000000000", "#/items/items"),
    ),
    "nested_min_items": (
        {
            "type": "array",
            "minItems": 200,
            "items": {"type": "array", "minItems": 200, "items": {"type": "array", "minItems": 200}},
        },
        "JSON_SCHEMA_TOO_COMPLEX",
        "repetition product",
        ("8000000",),
    ),
    "array_of_long_patterns": (
        {
            "type": "array",
            "maxItems": 1000,
            "items": {"type": "string", "pattern": "^[a-z]{0,1000}[0-9]{0,1000}$"},
        },
        "JSON_SCHEMA_TOO_COMPLEX",
        "repetition product",
        ("2000000",),
    ),
    "union_of_ambiguous_patterns": (
        {"anyOf": [{"type": "string", "pattern": f"^(a?){{0,31}}{i}$"} for i in range(9)]},
        "JSON_SCHEMA_TOO_COMPLEX",
        "live alternatives",
        (f"limit is {MAX_LIVE_ALTERNATIVES}",),
    ),
    # The converter looped forever on these (100% CPU in a worker thread per request).
    "unescaped_bracket": (
        {"type": "string", "pattern": "^a]$"},
        "INVALID_JSON_SCHEMA",
        "",
        ("unescaped ']'",),
    ),
    "unescaped_brace": ({"type": "string", "pattern": "^a}$"}, "INVALID_JSON_SCHEMA", "", ("unescaped '}'",)),
    # ... and raised IndexError (an INTERNAL error) on this one.
    "nothing_to_repeat": (
        {"type": "string", "pattern": "^*a$"},
        "INVALID_JSON_SCHEMA",
        "",
        ("nothing to repeat",),
    ),
}

ACCEPTED: dict[str, dict] = {
    "long_class_repetition": {"type": "string", "pattern": "^[a-z]{0,1000}$"},
    "words": {"type": "string", "pattern": "^[a-z]{1,10}( [a-z]{1,10}){0,9}$"},
    "delimited_groups": {"type": "string", "pattern": "^([0-9]{1,3}[.]){3}[0-9]{1,3}$"},
    "date_time": {
        "type": "string",
        "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}(:[0-9]{2})?)?$",
    },
    "stars": {"type": "string", "pattern": "^[A-Za-z0-9_%+-]+@[A-Za-z0-9-]+[.][A-Za-z]{2,}$"},
    "most_ambiguous_allowed": {"type": "string", "pattern": "^(a?){0,31}$"},
    "two_nested_arrays_at_the_product": {
        "type": "array",
        "maxItems": 1000,
        "items": {"type": "array", "maxItems": 1000, "items": {"type": "integer"}},
    },
    "array_of_bounded_strings": {
        "type": "array",
        "maxItems": 100,
        "items": {"type": "string", "maxLength": 1000},
    },
    "big_enum": {"enum": [f"value-{i}" for i in range(1000)]},
    "all_properties_optional": {
        "type": "object",
        "properties": {f"p{i}": {"type": "integer"} for i in range(256)},
    },
    "union_of_patterns": {
        "anyOf": [{"type": "string", "pattern": f"^[a-z]{{0,20}}{i}$"} for i in range(100)]
    },
    # A reference is a grammar rule, not a copy: recursion with bounded arrays is no product.
    "recursive_tree": {
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/node"}},
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "children": {"type": "array", "maxItems": 10, "items": {"$ref": "#/$defs/node"}}
                },
            }
        },
    },
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_over_budget_schemas_are_refused_naming_the_bound(name):
    schema, reason, bound, words = REFUSED[name]
    with pytest.raises(InvalidArgumentError) as caught:
        gbnf_grammar(OutputConstraint(schema))
    assert caught.value.reason == reason, caught.value.message
    if bound:
        assert caught.value.metadata["bound"] == bound, caught.value.message
    for word in words:
        assert word in caught.value.message


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_reasonable_schemas_still_compile(name):
    assert "root ::=" in gbnf_grammar(OutputConstraint(ACCEPTED[name]))


def test_the_request_converters_refuse_repetition_products_with_linear_work_only():
    """Without a budget (the converters, on the event loop) the products are refused, and no
    ambiguity analysis runs: that needs a worker's budget."""
    with pytest.raises(InvalidArgumentError) as caught:
        check_schema_bounds(NESTED_REPEAT_SCHEMA)
    assert caught.value.metadata["bound"] == "pattern positions"
    with pytest.raises(InvalidArgumentError, match="nested repetitions multiply"):
        check_schema_bounds(REFUSED["nested_max_items"][0])
    check_schema_bounds(REFUSED["nullable_item_repeated"][0])  # left to the worker's analysis
    assert MAX_REPETITION_PRODUCT == 1000 * 1000 and MAX_PATTERN_POSITIONS >= 1000


def test_a_set_cancel_flag_stops_the_compile_before_any_work():
    cancel = threading.Event()
    cancel.set()
    schema = {"type": "string", "pattern": "^[a-z]{0,999}cancelled-first$"}  # never compiled before
    with pytest.raises(CompileCancelled):
        gbnf_grammar(OutputConstraint(schema), CompileBudget(cancel=cancel))
    assert gbnf_grammar(OutputConstraint(schema))  # nothing half-built was kept


def test_a_cancel_flag_set_mid_analysis_stops_it():
    """A compile spending its whole budget (hundreds of distinct patterns) stops when cancelled."""
    schema = {
        "type": "object",
        "properties": {
            f"p{i}": {"type": "string", "pattern": f"^[a-z0-9]{{0,100}}{'x' * (i % 7)}{i}$"}
            for i in range(250)
        },
    }
    cancel = threading.Event()
    outcome: list[BaseException] = []

    def compile_it() -> None:
        try:
            gbnf_grammar(OutputConstraint(schema), CompileBudget(cancel=cancel))
        except BaseException as exc:  # recorded for the assertion below
            outcome.append(exc)

    worker = threading.Thread(target=compile_it)
    worker.start()
    time.sleep(0.05)
    cancel.set()
    worker.join(HANG_S)
    assert not worker.is_alive(), "the compile went on after its cancel flag was set"
    # Cancelled, or (on a fast machine) done first and refused for its whole budget: never hung.
    assert outcome and isinstance(outcome[0], (CompileCancelled, InvalidArgumentError)), outcome


# -- the session's server (SmolLM2 GGUF on llama.cpp) and a real gateway in front of it ------------


def _chat_request(schema: dict | None, model: str = CHAT_MODEL, max_tokens: int = 8) -> g.GenerateRequest:
    parameters = g.GenerationParameters(max_tokens=max_tokens, temperature=0)
    if schema is not None:
        parameters.response_format.CopyFrom(
            g.ResponseFormat(type=g.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, json_schema=json.dumps(schema))
        )
    return g.GenerateRequest(
        model=model, messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content="Say hi.")], parameters=parameters
    )


async def _tiny_chat(inference, model: str = CHAT_MODEL) -> None:
    """A small chat on ``model`` answers (within the hang detector's time)."""
    answer = await inference.Generate(_chat_request(None, model, max_tokens=2), timeout=HANG_S)
    assert answer.choices and answer.choices[0].finish_reason


async def test_the_issue_schema_is_refused_over_grpc_and_the_gateway(inference, gateway_url):
    await _tiny_chat(inference)  # the model is loaded: what follows is the refusal alone
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(_chat_request(NESTED_REPEAT_SCHEMA), timeout=HANG_S)
    grpc_s = time.monotonic() - started
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(caught.value)
    assert info.reason == "JSON_SCHEMA_TOO_COMPLEX"
    assert info.metadata["bound"] == "pattern positions" and info.metadata["value"] == "30000000"
    body = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 8,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "s", "schema": NESTED_REPEAT_SCHEMA},
        },
    }
    assert len(json.dumps(body["response_format"])) < 308  # the 308-byte request, or smaller
    async with httpx.AsyncClient(base_url=gateway_url, timeout=HANG_S) as http:
        answer = await http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "json_schema_too_complex"
    assert "30000000" in answer.json()["error"]["message"]
    print(f"the nested-repeat schema refused in {grpc_s * 1000:.1f} ms over gRPC")  # seen with -s
    await _tiny_chat(inference)


@pytest.mark.parametrize(
    "name", ["nested_in_a_property", "nullable_item_repeated", "nested_max_items", "unescaped_bracket"]
)
async def test_over_budget_schemas_are_refused_over_grpc(inference, name):
    schema, reason, _, words = REFUSED[name]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(_chat_request(schema), timeout=HANG_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).reason == reason
    for word in words:
        assert word in caught.value.details()


async def test_the_most_ambiguous_allowed_pattern_still_answers_json(inference):
    answer = await inference.Generate(
        _chat_request(ACCEPTED["most_ambiguous_allowed"], max_tokens=40), timeout=HANG_S
    )
    text = answer.choices[0].text
    if answer.choices[0].finish_reason == g.FINISH_REASON_STOP:
        value = json.loads(text)
        assert set(value) <= {"a"} and len(value) <= 31


async def test_a_call_cancelled_while_its_grammar_compiles_frees_everything(inference, monkeypatch):
    """The compile runs in a worker with the call's cancel flag: cancelling the call stops it and
    the model's next caller is served. A compile that would take 30 s stands in for a costly one."""
    started, stopped = threading.Event(), threading.Event()
    real_check = json_grammar.check_schema_bounds

    def slow_check(schema: object, budget: CompileBudget | None = None) -> None:
        if isinstance(schema, dict) and schema.get("title") == "slow":
            started.set()
            deadline = time.monotonic() + HANG_S
            try:
                while time.monotonic() < deadline:
                    assert budget is not None
                    budget.check_cancelled()
                    time.sleep(0.005)
            except CompileCancelled:
                stopped.set()
                raise
        real_check(schema, budget)

    monkeypatch.setattr(json_grammar, "check_schema_bounds", slow_check)
    await _tiny_chat(inference, ONE_SLOT_MODEL)
    call = asyncio.ensure_future(
        inference.Generate(_chat_request({"title": "slow", "type": "string"}, ONE_SLOT_MODEL), timeout=HANG_S)
    )
    assert await asyncio.to_thread(started.wait, HANG_S), "the compile never started"
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await asyncio.to_thread(stopped.wait, HANG_S), "the compile went on after its call was cancelled"
    await _tiny_chat(inference, ONE_SLOT_MODEL)


async def test_a_client_that_goes_away_mid_generation_frees_the_lane(inference):
    """A long constrained stream on the one-slot model, its client gone after the first token: the
    next caller is served (per-step grammar matching is bounded, so the cancel lands at once)."""
    schema = {"type": "array", "items": {"type": "string", "pattern": "^(a?){0,31}$"}, "maxItems": 1000}
    request = _chat_request(schema, ONE_SLOT_MODEL, max_tokens=400)
    stream = inference.GenerateStream(
        g.GenerateStreamRequest(
            model=request.model, messages=request.messages, parameters=request.parameters
        ),
        timeout=HANG_S * 4,
    )
    first = await asyncio.wait_for(stream.read(), timeout=HANG_S)
    assert first is not grpc.aio.EOF
    stream.cancel()
    await _tiny_chat(inference, ONE_SLOT_MODEL)
