"""response_format json_object / json_schema on the GGUF engine: output always parses and validates."""

from __future__ import annotations

import json

import grpc
import jsonschema
import pytest
from universal_runtime.v1 import generation_pb2 as g

from tests.conftest import CHAT_MODEL, error_info

SCHEMAS = {
    "nested_object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 24}, "zip": {"type": "integer"}},
                "required": ["city", "zip"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "address"],
        "additionalProperties": False,
    },
    "enum": {
        "type": "object",
        "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]}},
        "required": ["sentiment"],
        "additionalProperties": False,
    },
    "array": {
        "type": "object",
        "properties": {
            "colours": {
                "type": "array",
                "items": {"type": "string", "maxLength": 12},
                "minItems": 1,
                "maxItems": 4,
            }
        },
        "required": ["colours"],
        "additionalProperties": False,
    },
}


def json_request(schema: dict | None, seed: int) -> g.GenerateRequest:
    response_format = (
        g.ResponseFormat(type=g.RESPONSE_FORMAT_TYPE_JSON_OBJECT)
        if schema is None
        else g.ResponseFormat(type=g.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, json_schema=json.dumps(schema))
    )
    return g.GenerateRequest(
        model=CHAT_MODEL,
        messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content="Describe something as JSON.")],
        parameters=g.GenerationParameters(
            max_tokens=160, temperature=0.8, seed=seed, response_format=response_format
        ),
    )


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("seed", [1, 2])
async def test_json_schema_output_validates(inference, name, seed):
    response = await inference.Generate(json_request(SCHEMAS[name], seed))
    choice = response.choices[0]
    assert choice.finish_reason == g.FINISH_REASON_STOP, choice.text
    jsonschema.validate(json.loads(choice.text), SCHEMAS[name])


async def test_json_object_output_parses(inference):
    response = await inference.Generate(json_request(None, 7))
    assert isinstance(json.loads(response.choices[0].text), dict)


@pytest.mark.parametrize(
    "bad",
    ['{"type": "object", "properties": ', '{"type": "not-a-type"}', '["a list"]', ""],
)
async def test_invalid_json_schema_is_invalid_argument(inference, bad):
    request = json_request(SCHEMAS["enum"], 1)
    request.parameters.response_format.json_schema = bad
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).reason in ("INVALID_JSON_SCHEMA", "INVALID_ARGUMENT")
