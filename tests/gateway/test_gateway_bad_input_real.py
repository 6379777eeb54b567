"""Hostile bodies through the gateway in front of the real server: a clear 4xx, never 500 or 429.

Reproduces deeply nested JSON crashing the gateway (RecursionError while re-encoding a schema:
500), and a 10 KB model name coming back from the server in trailers too large for the gateway's
gRPC client (RESOURCE_EXHAUSTED: 429).
"""

from __future__ import annotations

import pytest

from gateway.schemas.base import MAX_JSON_DEPTH, json_depth
from tests.conftest import CHAT_MODEL, EMBED_MODEL

HUGE = "a" * 10_000
CLIPPED = HUGE[:256] + "…(10000 chars)"
USER = [{"role": "user", "content": "hi"}]


def nested(depth: int) -> dict:
    """An object schema whose property ``a`` nests again: ``depth`` (even) levels of JSON.

    Before the limit, a few hundred levels made the server's schema validator recurse too deep
    (500 through the gateway).
    """
    value: dict = {"type": "object", "properties": {}}
    for _ in range((depth - 2) // 2):
        value = {"type": "object", "properties": {"a": value}}
    return value


@pytest.fixture(scope="module")
def http(gateway_to_server):
    return gateway_to_server


def chat(**extra) -> dict:
    return {"model": CHAT_MODEL, "messages": USER, **extra}


def schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


def tool(parameters: dict) -> list[dict]:
    return [{"type": "function", "function": {"name": "lookup", "parameters": parameters}}]


def call_history(arguments: dict) -> list[dict]:
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": arguments}}
    return [*USER, {"role": "assistant", "content": None, "tool_calls": [call]}]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 2, 300, 900])
@pytest.mark.parametrize(
    ("body", "param"),
    [
        (lambda d: chat(response_format=schema_format(nested(d))), "response_format.json_schema.schema"),
        (lambda d: chat(tools=tool(nested(d))), "tools[0].function.parameters"),
        (
            lambda d: {"model": CHAT_MODEL, "messages": call_history(nested(d))},
            "messages[1].tool_calls[0].function.arguments",
        ),
    ],
)
async def test_deep_json_fields_are_400(http, depth, body, param):
    response = await http.post("/v1/chat/completions", json=body(depth))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_value"
    assert error["param"].startswith(param)
    assert f"at most {MAX_JSON_DEPTH} levels" in error["message"]


async def test_a_schema_at_the_limit_reaches_the_server(http):
    schema = nested(MAX_JSON_DEPTH)
    assert json_depth(schema) == MAX_JSON_DEPTH
    response = await http.post(
        "/v1/chat/completions", json=chat(response_format=schema_format(schema), max_tokens=4)
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/embeddings", "/v1/ocr"])
async def test_bodies_too_deep_to_parse_are_400(http, route):
    body = '{"model": "m", "input": ' + "[" * 5000 + "]" * 5000 + "}"
    response = await http.post(route, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("route", "body", "code"),
    [
        ("/v1/embeddings", {"model": HUGE, "input": "x"}, "invalid_model_name"),
        ("/v1/classify", {"model": HUGE, "input": "x"}, "invalid_model_name"),
        ("/v1/chat/completions", {"model": HUGE, "messages": USER}, "invalid_model_name"),
        ("/v1/anomaly/detect", {"detector": HUGE, "rows": [[1.0]] * 20}, "invalid_detector_name"),
    ],
)
async def test_a_10kb_name_is_400_not_429(http, route, body, code):
    response = await http.post(route, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert CLIPPED in error["message"]


async def test_a_long_unknown_hub_id_is_404(http):
    name = "o" * 128 + "/" + "n" * 128
    response = await http.post("/v1/embeddings", json={"model": name, "input": "x"})
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "model_not_found"
    ok = await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": "x"})
    assert ok.status_code == 200
