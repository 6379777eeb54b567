"""The gateway's answer to a call over its key's quota: 429, Retry-After and OpenAI's x-ratelimit-*.

A real server (quotas on a test clock: no sleeps) behind the gateway, over gRPC and with the
combined process's in-process calls; and X-UR-Priority forwarded as ``x-ur-priority``.
"""

from __future__ import annotations

import math

import pytest

from gateway.errors import openai_duration
from tests.conftest import CHAT_MODEL
from tests.gateway.quota_gateway import quota_gateway

KEY = "gateway-Secret-0001"
INPUTS_KEY = "gateway-Secret-0002"
KEYS = (
    f'metered:\n  key: "{KEY}"\n  requests_per_second: 1\n  burst: 2\n  tokens_per_minute: 20\n'
    f'encoders:\n  key: "{INPUTS_KEY}"\n  inputs_per_minute: 2\n'
)
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module", params=["grpc", "in-process"])
async def metered(settings, tmp_path_factory, request):
    folder = tmp_path_factory.mktemp("gateway-quota")
    async with quota_gateway(settings, KEYS, folder, request.param) as (http, clock, _):
        yield http, clock


async def test_over_the_request_rate_is_429_with_retry_after_and_rate_limit_headers(metered):
    http, clock = metered
    for _ in range(2):
        assert (await http.get("/v1/models", headers=AUTH)).status_code == 200
    answer = await http.get("/v1/models", headers=AUTH)
    assert answer.status_code == 429
    error = answer.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "quota_exceeded")
    assert "'metered' is over its quota of 1 requests a second" in error["message"]
    headers = answer.headers
    assert (headers["retry-after"], headers["retry-after-ms"]) == ("1", "1000")
    assert headers["x-ratelimit-limit-requests"] == "2"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"] == "2s"  # until the bucket of 2 is full at 1/s
    assert headers["x-ratelimit-limit-tokens"] == "20"
    assert headers["x-ratelimit-remaining-tokens"] == "20"
    assert headers["x-ratelimit-reset-tokens"] == "0s"
    clock.now += 2


async def test_tokens_per_minute_429_after_a_big_chat(metered):
    http, clock = metered
    body = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "Name three colours of the rainbow."}],
        "max_tokens": 4,
        "temperature": 0,
    }
    answer = await http.post("/v1/chat/completions", json=body, headers=AUTH)
    assert answer.status_code == 200
    used = answer.json()["usage"]["total_tokens"]
    assert used > 20
    refused = await http.get("/v1/models", headers=AUTH)
    assert refused.status_code == 429
    wait_s = (used - 19) * 3  # one token needed, in debt by used - 20, at 20/60 a second
    assert refused.headers["retry-after"] == str(math.ceil(wait_s))
    assert refused.headers["x-ratelimit-remaining-tokens"] == "0"
    assert refused.headers["x-ratelimit-reset-tokens"] == openai_duration(used * 3)
    assert refused.headers["x-ratelimit-remaining-requests"] == "1"
    clock.now += wait_s + 60  # tokens and requests full again


async def test_request_over_the_whole_inputs_allowance_has_no_retry_after(metered):
    http, _ = metered
    auth = {"authorization": f"Bearer {INPUTS_KEY}"}
    body = {"model": "all-minilm-l6-v2", "input": ["a", "b", "c"]}
    answer = await http.post("/v1/embeddings", json=body, headers=auth)
    assert answer.status_code == 429 and answer.json()["error"]["code"] == "quota_exceeded"
    assert "retry-after" not in answer.headers and "x-ratelimit-limit-requests" not in answer.headers
    body["input"] = ["a", "b"]
    assert (await http.post("/v1/embeddings", json=body, headers=auth)).status_code == 200


async def test_x_ur_priority_is_checked_and_forwarded(metered):
    http, clock = metered
    clock.now += 60
    bad = await http.get("/v1/models", headers={**AUTH, "X-UR-Priority": "urgent"})
    assert bad.status_code == 400
    # Checked once, by the server's admission: its field is the header (names are case-insensitive).
    assert (bad.json()["error"]["code"], bad.json()["error"]["param"]) == (
        "invalid_priority",
        "x-ur-priority",
    )
    ok = await http.get("/v1/models", headers={**AUTH, "X-UR-Priority": "Batch"})
    assert ok.status_code == 200


def test_openai_duration_form():
    assert [openai_duration(s) for s in (0, 0.0004, 0.25, 1, 1.5, 90, 360)] == [
        "0s",
        "1ms",
        "250ms",
        "1s",
        "1.5s",
        "1m30s",
        "6m0s",
    ]
