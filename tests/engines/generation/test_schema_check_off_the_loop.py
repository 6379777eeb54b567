"""A JSON Schema with thousands of properties, refused for exceeding the 256-property bound, must
not hold the event loop for the whole call first (as the edge fuzz's stall probe,
tests/fuzz/test_schema_fuzz.py, found it did when the converter meta-validated it with
``jsonschema``'s ``check_schema`` on the loop; see
docs/architecture/design-notes.md#schema-checks-off-the-event-loop). A schema's checks are bounded
work off the loop, cheapest first: the size bounds, then the meta-schema."""

from __future__ import annotations

import json

import grpc
import pytest
from universal_runtime.v1 import generation_pb2 as g

from tests.conftest import CHAT_MODEL
from tests.loop_lag import MAX_LAG_S, lag_while


def _wide_schema(properties: int) -> str:
    names = {f"p{i}": {"type": "integer"} for i in range(properties)}
    return json.dumps(
        {"type": "object", "properties": names, "required": list(names), "additionalProperties": False}
    )


async def _refusal_lag(inference, request: g.GenerateRequest) -> tuple[float, float]:
    """Seconds ``request`` took to be refused (INVALID_ARGUMENT) and the loop's longest lag meanwhile.

    The model is loaded first, so the measured call is the refusal alone.
    """
    await inference.Generate(
        g.GenerateRequest(model=CHAT_MODEL, prompt="Hi", parameters=g.GenerationParameters(max_tokens=1)),
        timeout=60,
    )

    async def refused() -> grpc.StatusCode:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await inference.Generate(request, timeout=120)
        return err.value.code()

    code, took, lag = await lag_while(refused())
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    return took, lag


async def test_a_schema_over_the_bounds_is_refused_without_holding_the_loop(inference):
    schema = _wide_schema(6000)
    request = g.GenerateRequest(
        model=CHAT_MODEL,
        messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content="Hi")],
        parameters=g.GenerationParameters(
            max_tokens=4,
            response_format=g.ResponseFormat(type=g.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, json_schema=schema),
        ),
    )
    took, lag = await _refusal_lag(inference, request)
    assert lag <= MAX_LAG_S, (
        f"refusing a {len(schema)}-character schema ({took:.2f} s) held the event loop {lag:.2f} s"
    )


async def test_a_large_chat_request_is_converted_off_the_loop(inference):
    # Chat messages are converted off the loop every caller shares (200,000 short ones, 3.9 MB,
    # held it for over half a second when converted on it). The call is
    # then refused for its length (the model's context) on the model's lane; only the loop's lag
    # is measured here.
    messages = [g.ChatMessage(role=g.CHAT_ROLE_USER, content=f"message {i}") for i in range(200_000)]
    request = g.GenerateRequest(
        model=CHAT_MODEL, messages=messages, parameters=g.GenerationParameters(max_tokens=1)
    )
    took, lag = await _refusal_lag(inference, request)
    assert lag <= MAX_LAG_S, (
        f"a {request.ByteSize()}-byte chat request ({took:.2f} s) held the loop {lag:.2f} s"
    )
