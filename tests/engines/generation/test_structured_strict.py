"""Output under a JSON grammar is strict JSON that validates, for both engines, over many seeds.

Strict: ``json.loads`` with no NaN/Infinity (``parse_constant`` refuses them) and, as the
standard library's parser accepts raw control characters inside strings only with
``strict=False``, its default ``strict=True``; then ``jsonschema`` validation. Prompts invite
newlines and quotes (poems, quotations), which the old string rule let through raw.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from universal_runtime.v1 import generation_pb2 as g

from engines.generation.json_grammar import gbnf_grammar
from engines.generation.structured import OutputConstraint
from tests.conftest import CHAT_MODEL, HF_CHAT_MODEL
from tests.engines.generation.test_structured_output import json_request


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def strict_loads(text: str) -> object:
    """Parse ``text`` as RFC 8259 JSON: no raw control characters in strings, no NaN/Infinity."""
    return json.loads(text, strict=True, parse_constant=_refuse_constant)


POEM = {
    "type": "object",
    "properties": {"poem": {"type": "string"}},
    "required": ["poem"],
    "additionalProperties": False,
}
SCHEMAS = {
    "poem": (POEM, "Write a short poem of three lines about the sea."),
    "quote": (
        {
            "type": "object",
            "properties": {"quote": {"type": "string", "maxLength": 60}, "author": {"type": "string"}},
            "required": ["quote", "author"],
            "additionalProperties": False,
        },
        'Give a famous quotation with its "quotes", a line break and its author.',
    ),
    "record": (
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 20},
                "age": {"type": "integer"},
                "score": {"type": "number"},
                "active": {"type": "boolean"},
                "mood": {"enum": ["happy", "sad", "line\nbreak"]},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
                "address": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
            "required": ["name", "age", "score", "active", "mood", "tags", "address"],
            "additionalProperties": False,
        },
        "Describe a person as JSON, with a multi-line description.",
    ),
    "code": (
        {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^[^x]{1,40}$"}},
            "required": ["code"],
        },
        "Write two lines of Python code with a tab and a quote.",
    ),
}


def _request(schema: dict | None, prompt: str, seed: int, model: str, max_tokens: int) -> g.GenerateRequest:
    request = json_request(schema, seed)
    request.model = model
    request.messages[0].content = prompt
    request.parameters.max_tokens = max_tokens
    request.parameters.temperature = 1.0
    return request


def _check(choice, schema: dict | None) -> None:
    if choice.finish_reason == g.FINISH_REASON_LENGTH:
        # Cut by max_tokens: what was written must still be a strict JSON prefix (no raw controls).
        assert not any(ord(c) < 0x20 for c in choice.text.strip()), repr(choice.text)
        return
    value = strict_loads(choice.text)
    if schema is not None:
        jsonschema.validate(value, schema)
    else:
        assert isinstance(value, dict)


async def test_issue_example_poem_seed_10(inference):
    # Returned a raw newline inside "poem" on every run before the strict string rule.
    response = await inference.Generate(_request(POEM, SCHEMAS["poem"][1], 10, CHAT_MODEL, 80))
    _check(response.choices[0], POEM)
    assert response.choices[0].finish_reason == g.FINISH_REASON_STOP


async def _check_seeds(inference, model: str, name: str | None, seeds: int, max_tokens: int) -> None:
    schema, prompt = SCHEMAS[name] if name else (None, SCHEMAS["poem"][1])
    for seed in range(seeds):
        response = await inference.Generate(_request(schema, prompt, seed, model, max_tokens))
        _check(response.choices[0], schema)


@pytest.mark.parametrize("name", [*sorted(SCHEMAS), None])
async def test_llama_cpp_output_is_strict_json_over_12_seeds(inference, name):
    await _check_seeds(inference, CHAT_MODEL, name, 12, 48)


@pytest.mark.parametrize("name", ["poem", "record"])
async def test_transformers_output_is_strict_json_over_4_seeds(inference, name):
    await _check_seeds(inference, HF_CHAT_MODEL, name, 4, 48)


async def test_forced_tool_arguments_are_strict_json_over_16_seeds(inference):
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string"}, "lines": {"type": "integer"}},
        "required": ["text", "lines"],
    }
    for seed in range(16):
        request = _request(None, "Send a two-line note that says hello and goodbye.", seed, CHAT_MODEL, 64)
        request.parameters.ClearField("response_format")
        request.parameters.tools.add(name="send_note", parameters_json_schema=json.dumps(parameters))
        request.parameters.tool_choice.mode = g.TOOL_CHOICE_MODE_FUNCTION
        request.parameters.tool_choice.function_name = "send_note"
        response = await inference.Generate(request)
        choice = response.choices[0]
        if choice.finish_reason == g.FINISH_REASON_LENGTH:
            continue
        assert len(choice.tool_calls) == 1, choice
        jsonschema.validate(strict_loads(choice.tool_calls[0].arguments_json), parameters)


def test_grammar_strings_admit_no_raw_control_characters():
    schema = {"type": "object", "properties": {"a": {"const": 'x"\n\\'}, "b": {"type": "string"}}}
    grammar = gbnf_grammar(OutputConstraint(schema))
    assert '[^"\\\\\\x00-\\x1F]' in grammar  # the char rule
    # The const's JSON text keeps its escapes: "x\"\n\\" (backslash-n, not a newline).
    assert r"\x22x\x5C\x22\x5Cn\x5C\x5C\x22" in grammar
