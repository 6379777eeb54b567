"""Deeply nested client JSON (response_format and tool schemas) is INVALID_ARGUMENT, never INTERNAL.

Thousands of levels make ``json.loads`` or the JSON Schema validator raise RecursionError, which
must not reach the client as INTERNAL.
"""

from __future__ import annotations

import json

import grpc
import pytest
from universal_runtime.v1 import generation_pb2 as g

from engines.errors import InvalidArgumentError
from service.convert.generation import generation_request
from service.convert.validation import MAX_JSON_CHARS, MAX_JSON_DEPTH, json_nesting_depth, parse_json
from tests.conftest import CHAT_MODEL, error_info
from tests.service.core.test_bad_input import assert_healthy

USER = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="hi")]


def nested_schema(depth: int) -> str:
    """An object schema whose property ``a`` nests again, ``depth`` (even) levels of JSON in all.

    Built as text: ``json.dumps`` itself recurses once per level. Before the depth limit, a few
    hundred levels made the JSON Schema validator raise RecursionError (INTERNAL).
    """
    wraps = (depth - 2) // 2
    return '{"type":"object","properties":{"a":' * wraps + '{"type":"object","properties":{}}' + "}}" * wraps


def schema_request(schema: str) -> g.GenerateRequest:
    fmt = g.ResponseFormat(type=g.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, json_schema=schema)
    return g.GenerateRequest(
        model=CHAT_MODEL, messages=USER, parameters=g.GenerationParameters(response_format=fmt)
    )


def tool_request(schema: str) -> g.GenerateRequest:
    tool = g.ToolDefinition(name="lookup", parameters_json_schema=schema)
    return g.GenerateRequest(model=CHAT_MODEL, messages=USER, parameters=g.GenerationParameters(tools=[tool]))


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 2, 300, 900, 5000])
@pytest.mark.parametrize(
    ("build", "field"),
    [
        (schema_request, "parameters.response_format.json_schema"),
        (tool_request, "parameters.tools[0].parameters_json_schema"),
    ],
)
async def test_deep_schemas_are_invalid_argument(inference, depth, build, field):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(build(nested_schema(depth)))
    err = caught.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    info = error_info(err)
    assert info.reason == "INVALID_JSON_SCHEMA"
    assert info.metadata["field"] == field
    assert info.metadata["depth"] == str(depth)
    assert info.metadata["max_depth"] == str(MAX_JSON_DEPTH)
    assert f"at most {MAX_JSON_DEPTH} levels" in err.details()
    await assert_healthy(inference)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (schema_request, "parameters.response_format.json_schema"),
        (tool_request, "parameters.tools[0].parameters_json_schema"),
    ],
)
async def test_overlong_schemas_are_refused_by_length_before_any_scan(inference, build, field):
    schema = '{"type":"object","description":"' + "x" * MAX_JSON_CHARS + '"}'
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(build(schema))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(caught.value)
    assert info.reason == "INPUT_TOO_LONG"
    assert info.metadata["field"] == field
    assert info.metadata["characters"] == str(len(schema))
    assert info.metadata["max_characters"] == str(MAX_JSON_CHARS)


def test_json_loads_itself_fails_on_5000_levels():
    # Why the depth is checked before parsing: the parser recurses once per level.
    with pytest.raises(RecursionError):
        json.loads(nested_schema(5000))


def test_a_schema_at_the_limit_is_accepted():
    # Object properties nested 31 times: 64 levels of JSON, all walked by the schema validator.
    text = nested_schema(MAX_JSON_DEPTH)
    assert json_nesting_depth(text) == MAX_JSON_DEPTH
    converted = generation_request(schema_request(text), "r", max_tokens_limit=100, max_choices=1)
    assert converted.response_format.json_schema == json.loads(text)


def test_brackets_inside_strings_do_not_count():
    schema = json.dumps({"type": "object", "description": "[{" * 5000 + '"\\' + "}]" * 10})
    assert json_nesting_depth(schema) == 1
    converted = generation_request(schema_request(schema), "r", max_tokens_limit=100, max_choices=1)
    assert converted.response_format.json_schema == json.loads(schema)


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ("[]", 1),
        ('[[1], {"a": [2]}]', 3),
        ('"[[["', 0),
        ('"unterminated [[[', 0),
        ('"ends in a backslash \\', 0),
        ("[" * 10_000, 10_000),
    ],
)
def test_json_nesting_depth(text, depth):
    assert json_nesting_depth(text) == depth


def test_escaped_quotes_do_not_make_the_scan_quadratic():
    # Every quote here could start a string that never ends; the scan must stay linear.
    text = '"' + '\\"' * 1_000_000
    assert json_nesting_depth(text) == 0


def test_parse_json_reports_invalid_json_with_its_position():
    with pytest.raises(InvalidArgumentError) as caught:
        parse_json('{"a": }', "parameters.response_format.json_schema")
    assert caught.value.reason == "INVALID_JSON_SCHEMA"
    assert "position 6" in caught.value.message
