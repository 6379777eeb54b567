"""``/v1/responses`` in front of the real server (over gRPC and in-process): every bad input a clear
4xx in OpenAI's shape, never a 500, and the stored routes' answers for unknown ids."""

from __future__ import annotations

import pytest

from gateway.schemas.base import MAX_JSON_DEPTH
from tests.conftest import CHAT_MODEL
from tests.gateway.test_gateway_bad_input_real import nested

URL = "/v1/responses"


@pytest.fixture(scope="module")
def http(gateway_to_server):
    return gateway_to_server


def body(**extra) -> dict:
    return {"model": CHAT_MODEL, "input": "hi", "max_output_tokens": 4, "store": False, **extra}


@pytest.mark.parametrize(
    ("extra", "status", "code", "param"),
    [
        ({"model": "no-such-model"}, 404, "model_not_found", "model"),
        ({"temperature": -1}, 400, "invalid_argument", "temperature"),
        ({"top_p": 7}, 400, "invalid_argument", "top_p"),
        ({"tool_choice": "required"}, 400, "invalid_argument", "tool_choice"),
        (
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": nested(MAX_JSON_DEPTH + 2)}}},
            400,
            None,
            "text.format.schema",
        ),
        (
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nope"}}}},
            400,
            "invalid_json_schema",
            "text.format.schema",
        ),
        (
            {"previous_response_id": "resp_0123456789abcdef"},
            404,
            "previous_response_not_found",
            "previous_response_id",
        ),
        ({"previous_response_id": "../../etc/passwd"}, 400, "invalid_value", "previous_response_id"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
            400,
            "invalid_value",
            "input[0].call_id",
        ),
        ({"input": "word " * 5000}, 400, "context_length_exceeded", "input"),
    ],
)
async def test_bad_input_is_a_clear_4xx(http, extra, status, code, param):
    response = await http.post(URL, json=body(**extra))
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if code is not None:
        assert error["code"] == code, error
    assert error["param"] == param, error
    assert error["message"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/responses/resp_0123456789abcdef", 404),
        ("DELETE", "/v1/responses/resp_0123456789abcdef", 404),
        ("GET", "/v1/responses/resp_0123456789abcdef/input_items", 404),
        ("GET", "/v1/responses/not-an-id", 400),
        ("GET", f"/v1/responses/resp_{'a' * 300}", 400),
    ],
)
async def test_stored_routes_unknown_ids(http, method, path, status):
    response = await http.request(method, path)
    assert response.status_code == status, response.text
    assert response.json()["error"]["message"]
