"""Fuzz every way a JSON Schema reaches a grammar, on a server in its own process.

Schemas come from :func:`tests.fuzz.edge_strategies.json_schemas` (repetition bounds up to 10^6,
``{m,n}`` patterns, deep nesting, many properties, big enums, ``$ref``) and go through chat
``response_format``, a forced tool, gRPC ``Generate``/``GenerateStream`` and ``ExtractDocument``.
A schema can crash native grammar code, so the server is a child process
(:mod:`tests.fuzz.launched_server`): a crash fails the case and the next case gets a new process.

A case passes when the process is alive after it, its event loop was not held past the probe's
bound, and the answer is either a refusal (INVALID_ARGUMENT / HTTP 400) or output that parses as
strict JSON and validates against the schema (when the model finished on its own, not at
``max_tokens``). Budget: ``UR_FUZZ_EDGE_EXAMPLES`` schemas per surface.

A pattern of nested repetitions (``^((a{0,1000}){0,1000}){0,30}$``, each count within its bound)
holds the model's lane for minutes, and a fuzz whose every drawn pattern has one quantifier, and
that never looks at the lane after a case, does not see it: the repetition-product cases below draw
nested, adjacent and alternating repetitions
(:func:`~tests.fuzz.edge_strategies.repetition_products`), compile each in-process under a hang
detector, and send each to the launched server followed by a tiny chat on the same model.
"""

from __future__ import annotations

import json
import threading

import grpc
import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from universal_runtime.v1 import documents_pb2 as d
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc

from engines.errors import InvalidArgumentError
from engines.generation.json_grammar import gbnf_grammar
from engines.generation.json_schema_bounds import MAX_REPETITION_PRODUCT
from engines.generation.pattern_bounds import MAX_PATTERN_POSITIONS, expanded_positions, parse_pattern
from engines.generation.structured import OutputConstraint
from tests.conftest import CHAT_MODEL, HF_CHAT_MODEL
from tests.fuzz.checks import assert_grpc_answer, assert_valid_output, launched_case
from tests.fuzz.edge_strategies import (
    EDGE_EXAMPLES,
    EDGE_SETTINGS,
    HUNT,
    PER_TARGET_SETTINGS,
    describe_schema,
    json_schemas,
    repetition_products,
    text_page,
)

#: Tokens per answer: enough for small objects to finish, few enough to keep a case under a second.
MAX_TOKENS = 48
DEADLINE_S = 60.0
#: A prompt that draws newlines and quotes into strings (the control-character case), and plain ones.
PROMPTS = ["Write a short poem of three lines about the sea.", "Describe a cat.", "Give me JSON."]
REFUSED_HTTP = {400}
#: Sampling seeds (at the server's default temperature): the small ones clients use, and any.
SEEDS = st.one_of(st.integers(0, 16), st.integers(0, 2**16))


@pytest.fixture(scope="module", autouse=True)
def forget_fitted():
    """Nothing to forget: this module calls only the launched server."""


PAGE = text_page()


def _chat_body(schema: dict, seed: int, prompt: str, max_tokens: int) -> dict:
    return {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "seed": seed,
    }


def chat_response_format(
    server, schema: dict, seed: int, prompt: str, what, max_tokens: int = MAX_TOKENS
) -> None:
    body = _chat_body(schema, seed, prompt, max_tokens)
    body["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "s", "strict": True, "schema": schema},
    }
    answer = httpx.post(f"{server.http_base}/v1/chat/completions", json=body, timeout=DEADLINE_S)
    if answer.status_code in REFUSED_HTTP:
        return
    assert answer.status_code == 200, f"HTTP {answer.status_code} ({answer.text[:300]}) for {what()}"
    choice = answer.json()["choices"][0]
    if choice["finish_reason"] == "stop":
        assert_valid_output(choice["message"]["content"], schema, what)


def chat_forced_tool(server, schema: dict, seed: int, prompt: str, what) -> None:
    body = _chat_body(schema, seed, prompt, MAX_TOKENS)
    body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    body["tool_choice"] = {"type": "function", "function": {"name": "f"}}
    answer = httpx.post(f"{server.http_base}/v1/chat/completions", json=body, timeout=DEADLINE_S)
    if answer.status_code in REFUSED_HTTP:
        return
    assert answer.status_code == 200, f"HTTP {answer.status_code} ({answer.text[:300]}) for {what()}"
    choice = answer.json()["choices"][0]
    if choice["finish_reason"] in ("stop", "tool_calls"):
        for call in choice["message"].get("tool_calls") or []:
            assert_valid_output(call["function"]["arguments"], schema, what)


def _parameters(schema: dict, seed: int, max_tokens: int = MAX_TOKENS) -> g.GenerationParameters:
    return g.GenerationParameters(
        max_tokens=max_tokens,
        seed=seed,
        response_format=g.ResponseFormat(
            type=g.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, json_schema=json.dumps(schema), schema_name="s"
        ),
    )


def _grpc(server, call) -> tuple[grpc.StatusCode, str, object]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        try:
            return grpc.StatusCode.OK, "", call(inference_service_pb2_grpc.InferenceServiceStub(channel))
        except grpc.RpcError as err:
            return err.code(), err.details() or "", None


def _refused_or_ok(code: grpc.StatusCode, details: str, what) -> bool:
    assert_grpc_answer(code, details, what)
    assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT), (
        f"{code.name} ({details}) for {what()}"
    )
    return code is grpc.StatusCode.OK


def grpc_generate(
    server, schema: dict, seed: int, prompt: str, what, model: str = CHAT_MODEL, max_tokens: int = MAX_TOKENS
) -> None:
    messages = [g.ChatMessage(role=g.CHAT_ROLE_USER, content=prompt)]
    request = g.GenerateRequest(
        model=model, messages=messages, parameters=_parameters(schema, seed, max_tokens)
    )
    code, details, response = _grpc(server, lambda stub: stub.Generate(request, timeout=DEADLINE_S))
    if _refused_or_ok(code, details, what):
        choice = response.choices[0]
        if choice.finish_reason == g.FINISH_REASON_STOP:
            assert_valid_output(choice.text, schema, what)


def grpc_generate_transformers(
    server, schema: dict, seed: int, prompt: str, what, max_tokens: int = MAX_TOKENS
) -> None:
    grpc_generate(server, schema, seed, prompt, what, model=HF_CHAT_MODEL, max_tokens=max_tokens)


def grpc_generate_stream(server, schema: dict, seed: int, prompt: str, what) -> None:
    messages = [g.ChatMessage(role=g.CHAT_ROLE_USER, content=prompt)]
    request = g.GenerateStreamRequest(
        model=CHAT_MODEL, messages=messages, parameters=_parameters(schema, seed)
    )
    code, details, chunks = _grpc(server, lambda stub: list(stub.GenerateStream(request, timeout=DEADLINE_S)))
    if _refused_or_ok(code, details, what):
        text = "".join(chunk.text for chunk in chunks if chunk.index == 0)
        finish = [chunk.finish_reason for chunk in chunks if chunk.finish_reason]
        if finish and finish[-1] == g.FINISH_REASON_STOP:
            assert_valid_output(text, schema, what)


def extract_document(server, schema: dict, seed: int, prompt: str, what) -> None:
    options = d.ExtractDocumentOptions(json_schema=json.dumps(schema), max_tokens=MAX_TOKENS)
    request = d.ExtractDocumentRequest(options=options, chunk=PAGE)
    code, details, response = _grpc(
        server, lambda stub: stub.ExtractDocument(iter([request]), timeout=DEADLINE_S)
    )
    if _refused_or_ok(code, details, what):
        assert_valid_output(response.json, schema, what)


SURFACES = [
    chat_response_format,
    chat_forced_tool,
    grpc_generate,
    grpc_generate_stream,
    extract_document,
    # The transformers engine is slow on CPU: in `make test` it runs the string schemas below
    # (its grammar path), and every schema in the long hunt.
    *([grpc_generate_transformers] if HUNT else []),
]


@pytest.mark.parametrize("surface", SURFACES, ids=lambda surface: surface.__name__)
def test_a_schema_is_refused_or_obeyed(launched, surface):
    @EDGE_SETTINGS
    @given(schema=json_schemas(), seed=SEEDS, prompt=st.sampled_from(PROMPTS))
    def case(schema: dict, seed: int, prompt: str) -> None:
        def what() -> str:
            return f"{surface.__name__} seed={seed} prompt={prompt!r} schema={describe_schema(schema)}"

        with launched_case(launched, what):
            surface(launched, schema, seed, prompt, what)

    case()


#: Schemas whose values are mostly free strings: where a grammar's string rule decides whether
#: the output is JSON.
STRING_SCHEMAS = [
    {
        "type": "object",
        "properties": {"poem": {"type": "string"}},
        "required": ["poem"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"lines": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
    },
    {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "meta": {"type": "object", "properties": {"mood": {"type": "string"}}},
        },
        "required": ["title"],
    },
    {
        "type": "object",
        "properties": {
            "kind": {"enum": ["haiku", "free"]},
            "text": {"type": "string"},
            "n": {"type": "number"},
        },
    },
]
#: Room for a three-line poem to finish.
STRING_MAX_TOKENS = 80


#: Seeds per case: a string rule that lets raw newlines through shows in only some seeds, so each
#: case tries a few (the first schema in the list is drawn half the time; see
#: docs/architecture/design-notes.md#json-strings-in-grammars).
SEEDS_PER_CASE = 2


@pytest.mark.parametrize(
    ("surface", "budget"),
    [(chat_response_format, EDGE_SETTINGS), (grpc_generate_transformers, PER_TARGET_SETTINGS)],
    ids=["llama_cpp", "transformers"],
)
def test_strings_under_a_schema_are_strict_json(launched, surface, budget):
    """Both engines, many seeds: text in strings is escaped (no raw control characters), so the
    output parses with a strict parser and validates (the transformers engine, 6x slower, gets
    half the cases)."""

    @budget
    @given(schema=st.one_of(st.just(STRING_SCHEMAS[0]), st.sampled_from(STRING_SCHEMAS)), first_seed=SEEDS)
    def case(schema: dict, first_seed: int) -> None:
        for seed in range(first_seed, first_seed + SEEDS_PER_CASE):

            def what(seed: int = seed) -> str:
                return f"{surface.__name__} seed={seed} schema={describe_schema(schema)}"

            with launched_case(launched, what):
                surface(launched, schema, seed, PROMPTS[0], what, max_tokens=STRING_MAX_TOKENS)

    case()


#: Nested repetitions: each count within 1,000, their product 30 million.
NESTED_REPEAT_SCHEMA = {"type": "string", "pattern": "^((a{0,1000}){0,1000}){0,30}$"}
#: Draws the overlapping characters the drawn patterns repeat: an ambiguous grammar costs the
#: matcher more with every character it has matched (the nested schema above holds the lane from the first).
REPEAT_PROMPT = "Reply with the letter a written forty times: aaaaaaaaaaaaaaaaaaaa"
#: Seconds a compile or a tiny chat may take before the case counts as hung (a hang detector).
HANG_S = 30.0
#: Compiles are in-process and cheap (a refusal takes milliseconds): ten times the edge budget.
COMPILE_SETTINGS = settings(EDGE_SETTINGS, max_examples=max(60, EDGE_EXAMPLES * 10))
#: Launched cases of repetition products: most are refused in milliseconds. With the bounds taken
#: out, 18 drawn cases found a held lane (DEADLINE_EXCEEDED on a nested pattern), 6 did not.
PRODUCT_SETTINGS = settings(EDGE_SETTINGS, max_examples=EDGE_EXAMPLES * 3)


def _patterns_of(schema: object) -> list[str]:
    found, stack = [], [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.append(node["pattern"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


@COMPILE_SETTINGS
@example(schema=NESTED_REPEAT_SCHEMA)
@given(schema=repetition_products())
def test_repetition_products_compile_within_budget_or_are_refused(schema: dict):
    """Every drawn schema compiles or is refused (JSON_SCHEMA_TOO_COMPLEX or INVALID_JSON_SCHEMA),
    in a worker joined under a hang detector; a pattern past the expansion bound is never built."""
    outcome: list[object] = []

    def compile_it() -> None:
        try:
            outcome.append(gbnf_grammar(OutputConstraint(schema)))
        except InvalidArgumentError as exc:
            outcome.append(exc)
        except BaseException as exc:  # anything else is the failure this test looks for
            outcome.append(exc)

    worker = threading.Thread(target=compile_it, daemon=True)
    worker.start()
    worker.join(HANG_S)
    assert not worker.is_alive(), f"compiling hung past {HANG_S} s: {describe_schema(schema)}"
    (result,) = outcome
    if isinstance(result, InvalidArgumentError):
        assert result.reason in ("JSON_SCHEMA_TOO_COMPLEX", "INVALID_JSON_SCHEMA"), result.message
        return
    assert isinstance(result, str), f"{type(result).__name__}: {result} for {describe_schema(schema)}"
    for pattern in _patterns_of(schema):
        size = expanded_positions(parse_pattern(pattern))
        assert size <= MAX_PATTERN_POSITIONS <= MAX_REPETITION_PRODUCT, (pattern, size)


def grpc_generate_then_tiny_chat(server, schema: dict, seed: int, what) -> None:
    """The schema's call is refused or obeyed, and the model's lane is free after it."""
    grpc_generate(server, schema, seed, REPEAT_PROMPT, what)
    tiny = g.GenerateRequest(
        model=CHAT_MODEL,
        messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content="Hi")],
        parameters=g.GenerationParameters(max_tokens=2),
    )
    code, details, _ = _grpc(server, lambda stub: stub.Generate(tiny, timeout=HANG_S))
    assert code is grpc.StatusCode.OK, f"a tiny chat after the case got {code.name} ({details}): {what()}"


def test_repetition_products_are_refused_or_obeyed_and_free_the_lane(launched):
    @PRODUCT_SETTINGS
    @example(schema=NESTED_REPEAT_SCHEMA, seed=0)
    @given(schema=repetition_products(), seed=SEEDS)
    def case(schema: dict, seed: int) -> None:
        def what() -> str:
            return f"repetition product seed={seed} schema={describe_schema(schema)}"

        with launched_case(launched, what):
            grpc_generate_then_tiny_chat(launched, schema, seed, what)

    case()
