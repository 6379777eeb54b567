"""Large bodies to the token-count, tokenize and anomaly routes never hold the event loop.

The gateway shares its event loop with the server in the combined process, so while one of these
bodies is parsed, translated and refused or answered, every other call waits for the loop: a
Tokenize request with 128 tools of 16 KB must be converted off the loop as Generate's is, and a
13 MB anomaly ``schema`` or a million empty anomaly rows bounded before pydantic validates the list in
one call that holds the GIL (see docs/architecture/design-notes.md#large-bodies-and-the-event-loop).
Each body is sent through the gateway in front of the real server, standalone and in-process, at the
combined process's 16 MB body limit; the loop's longest lateness meanwhile is the measure
(:func:`tests.loop_lag.lag_while`), not the call's time.
"""

from __future__ import annotations

import json

import httpx
import pytest

from gateway.app import create_app
from gateway.json_body import MAX_JSON_CONTAINERS
from gateway.schemas.anomaly import MAX_COLUMNS, MAX_ROWS
from tests.conftest import CHAT_MODEL, EMBED_MODEL
from tests.gateway.gateway_fakes import asgi_client
from tests.loop_lag import MAX_LAG_S, lag_while

#: The combined process's HTTP body limit (its gRPC receive limit, 16 MiB by default).
BODY_LIMIT = 16 * 1024 * 1024


@pytest.fixture(scope="module", params=["grpc", "in-process"])
async def http(server, request):
    wrap = server.in_process.channel if request.param == "in-process" else None
    app = create_app(f"127.0.0.1:{server.port}", max_message_bytes=BODY_LIMIT, wrap_channel=wrap)
    async with asgi_client(app) as client:
        # The models load before any measure: a load is not what is measured.
        assert (await client.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": "warm"})).is_success
        assert (await client.post("/tokenize", json={"model": CHAT_MODEL, "prompt": "warm"})).is_success
        yield client


async def _lag(http: httpx.AsyncClient, route: str, body: dict) -> tuple[httpx.Response, float]:
    """The answer to ``body`` (encoded first, not measured) and the loop's longest lateness meanwhile."""
    data = json.dumps(body).encode()
    assert len(data) <= BODY_LIMIT
    send = http.post(route, content=data, headers={"content-type": "application/json"}, timeout=120)
    answer, took, lag = await lag_while(send)
    assert answer.status_code < 500, answer.text
    assert lag <= MAX_LAG_S, f"{route} with {len(data)} bytes ({took:.2f} s) held the loop {lag:.2f} s"
    return answer, lag


def _tools(count: int, size: int) -> list[dict]:
    """``count`` Anthropic tools of about ``size`` bytes each (their schemas' property descriptions)."""
    properties = {f"p{i:03d}": {"type": "string", "description": "x" * 140} for i in range(size // 160)}
    schema = {"type": "object", "properties": properties}
    return [{"name": f"tool_{t}", "description": "A tool.", "input_schema": schema} for t in range(count)]


async def test_count_tokens_with_128_tools_of_16_kb(http):
    # 128 tools of 16 KB: the tools alone are over the prompt's character limit for the model's
    # context, so it is refused by its size, neither on the loop nor tokenized on the model's lane.
    body = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": _tools(128, 16_000),
    }
    answer, _ = await _lag(http, "/v1/messages/count_tokens", body)
    assert answer.status_code == 400, answer.text
    assert "characters" in answer.json()["error"]["message"]


async def test_count_tokens_with_128_tools_within_the_context(http):
    body = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": _tools(128, 330),  # ~46,000 characters: within 32 a token of a 2,048-token context
    }
    answer, _ = await _lag(http, "/v1/messages/count_tokens", body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["input_tokens"] > 128 * 100


async def test_tokenize_with_a_hundred_thousand_messages(http):
    messages = [{"role": "user", "content": f"message {i}"} for i in range(100_000)]
    answer, _ = await _lag(http, "/tokenize", {"model": CHAT_MODEL, "messages": messages})
    assert answer.status_code == 400, answer.text  # over the model's context, refused on its lane


async def test_detokenize_with_a_million_ids(http):
    answer, _ = await _lag(http, "/detokenize", {"model": CHAT_MODEL, "tokens": [1] * 1_000_000})
    assert answer.status_code == 400, answer.text


@pytest.mark.parametrize("route", ["/v1/anomaly/detect", "/v1/anomaly/fit"])
async def test_a_long_anomaly_schema_is_refused_from_its_length(http, route):
    # Under the body's container limit (330,000 fields are refused by it, unread).
    schema = [{"name": f"feature_{i}", "type": "numeric"} for i in range(MAX_JSON_CONTAINERS - 16)]
    body = {"schema": schema, "rows": [[1.0]], **({"detector": "stalls"} if route.endswith("fit") else {})}
    answer, _ = await _lag(http, route, body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "schema"
    assert f"at most {MAX_COLUMNS}" in answer.json()["error"]["message"]


@pytest.mark.parametrize("route", ["/v1/anomaly/detect", "/v1/anomaly/fit"])
async def test_the_most_anomaly_rows_are_validated_and_translated_in_steps(http, route):
    body = {"rows": [[]] * (MAX_ROWS - 1), **({"detector": "stalls"} if route.endswith("fit") else {})}
    answer, _ = await _lag(http, route, body)
    assert answer.status_code == 400, answer.text  # over the server's anomaly_max_rows


async def test_a_bad_cell_deep_in_many_rows_is_named_where_it_is(http):
    rows: list[list] = [[float(i % 7), 1.0] for i in range(100_000)]
    rows[70_001][1] = None
    answer = await http.post("/v1/anomaly/detect", json={"rows": rows}, timeout=120)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "rows[70001][1]"


@pytest.mark.parametrize("route", ["/v1/embeddings", "/v1/anomaly/detect", "/v1/chat/completions"])
async def test_a_body_of_millions_of_empty_arrays_is_refused_before_it_is_decoded(http, route):
    data = b'{"input": [' + b",".join([b"[]"] * 4_000_000) + b"]}"  # 12 MB: long to decode
    send = http.post(route, content=data, headers={"content-type": "application/json"}, timeout=120)
    answer, _, lag = await lag_while(send)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_json"
    assert f"at most {MAX_JSON_CONTAINERS}" in answer.json()["error"]["message"]
    assert lag <= MAX_LAG_S, f"{route}: the loop was held {lag:.2f} s"
