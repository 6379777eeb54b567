"""Parity details clients check: id prefixes, timestamps and fingerprints.

The shapes come from the APIs' own objects: OpenAI Chat Completions (``chatcmpl-``), legacy
Completions (``cmpl-``), Responses (``resp_``, ``msg_``, ``fc_``, ``rs_``, ``call_``), Anthropic
Messages (``msg_``, ``toolu_``); ``system_fingerprint`` is ``fp_`` and hex.
"""

from __future__ import annotations

import re
import time

import grpc
import httpx
import pytest

from gateway import ids
from tests.gateway.gateway_fakes import FakeServer, RpcFailure, parse_sse

SERVER_HEX = "0123456789abcdef0123456789abcdef"
CHAT = {"messages": [{"role": "user", "content": "Hi"}]}
COMPLETION = {"prompt": "Once"}


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (ids.chat_completion_id, r"chatcmpl-[0-9a-f]{32}"),
        (ids.completion_id, r"cmpl-[0-9a-f]{32}"),
        (ids.response_id, r"resp_[0-9a-f]{48}"),
        (ids.message_id, r"msg_[0-9a-f]{48}"),
        (ids.function_call_id, r"fc_[0-9a-f]{48}"),
        (ids.reasoning_id, r"rs_[0-9a-f]{48}"),
        (ids.tool_call_id, r"call_[0-9a-f]{24}"),
        (ids.tool_use_id, r"toolu_[0-9A-Za-z]{24}"),
    ],
)
def test_fresh_ids_have_the_apis_prefix_and_differ(make, pattern):
    first, second = make(), make()
    assert re.fullmatch(pattern, first), first
    assert re.fullmatch(pattern, second), second
    assert first != second


def test_completion_ids_keep_the_server_ids_hex_part():
    assert ids.chat_completion_id(f"gen-{SERVER_HEX}") == f"chatcmpl-{SERVER_HEX}"
    assert ids.completion_id(f"gen-{SERVER_HEX}") == f"cmpl-{SERVER_HEX}"


def test_unix_now_is_whole_seconds():
    before = int(time.time())
    now = ids.unix_now()
    assert isinstance(now, int) and before <= now <= int(time.time())


def test_system_fingerprint_is_stable_per_model_and_runtime_version():
    first = ids.system_fingerprint("smollm2-135m")
    assert re.fullmatch(r"fp_[0-9a-f]{10}", first)
    assert ids.system_fingerprint("smollm2-135m") == first
    assert ids.system_fingerprint("another-model") != first
    assert ids.runtime_version() != ""


# --- on the chat and completions routes (fake server) ---------------------------------------------


@pytest.mark.parametrize(("url", "prompt"), [("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)])
async def test_answers_carry_created_seconds_and_the_models_fingerprint(
    client: httpx.AsyncClient, fake: FakeServer, url: str, prompt: dict
) -> None:
    body = (await client.post(url, json={"model": "fake-llm", **prompt})).json()
    assert isinstance(body["created"], int) and abs(body["created"] - time.time()) < 60
    assert body["system_fingerprint"] == ids.system_fingerprint("fake-llm")


@pytest.mark.parametrize(("url", "prompt"), [("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)])
async def test_every_chunk_carries_one_id_created_and_fingerprint(
    client: httpx.AsyncClient, fake: FakeServer, url: str, prompt: dict
) -> None:
    body = {"model": "fake-llm", **prompt, "stream": True, "stream_options": {"include_usage": True}}
    *chunks, done = parse_sse((await client.post(url, json=body)).text)
    assert done == "[DONE]" and len(chunks) >= 4
    assert {chunk["system_fingerprint"] for chunk in chunks} == {ids.system_fingerprint("fake-llm")}
    assert len({(chunk["id"], chunk["created"]) for chunk in chunks}) == 1
    assert isinstance(chunks[0]["created"], int)


# --- across the four generation APIs (fake server) ------------------------------------------------

MESSAGES_BODY = {"model": "fake-llm", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
#: Each API's route, a valid body, and how its answer names itself: id pattern and time field.
APIS = {
    "chat": ("/v1/chat/completions", {"model": "fake-llm", **CHAT}, r"chatcmpl-[0-9a-f]+", "created"),
    "completions": ("/v1/completions", {"model": "fake-llm", **COMPLETION}, r"cmpl-[0-9a-f]+", "created"),
    "responses": ("/v1/responses", {"model": "fake-llm", "input": "Hi"}, r"resp_[0-9a-f]{48}", "created_at"),
    "messages": ("/v1/messages", MESSAGES_BODY, r"msg_[0-9a-f]{48}", None),  # Anthropic sends no time
}


@pytest.mark.parametrize("api", APIS)
async def test_each_api_names_its_answer_as_that_api_does(
    client: httpx.AsyncClient, fake: FakeServer, api: str
):
    url, body, id_pattern, time_field = APIS[api]
    response = await client.post(url, json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert re.fullmatch(id_pattern, answer["id"]), answer["id"]
    if time_field is not None:
        assert isinstance(answer[time_field], int) and abs(answer[time_field] - time.time()) < 60


def openai_error(body: dict) -> bool:
    error = body.get("error")
    return set(body) == {"error"} and set(error) == {"message", "type", "param", "code"}


def anthropic_error(body: dict) -> bool:
    return body.get("type") == "error" and {"type", "message"} <= set(body["error"])


@pytest.mark.parametrize(
    ("api", "shape"),
    [
        ("chat", openai_error),
        ("completions", openai_error),
        ("responses", openai_error),
        ("messages", anthropic_error),
    ],
)
async def test_each_api_has_one_error_shape(
    client: httpx.AsyncClient, fake: FakeServer, api: str, shape
) -> None:
    url, body, _, _ = APIS[api]
    bad = await client.post(url, json={**body, "model": 7})
    assert bad.status_code == 400 and shape(bad.json()), bad.text
    fake.inference.fail = RpcFailure(
        grpc.StatusCode.NOT_FOUND, "model 'nope' is not in the catalog", "MODEL_NOT_FOUND"
    )
    missing = await client.post(url, json={**body, "model": "nope"})
    assert missing.status_code == 404 and shape(missing.json()), missing.text
    assert fake.inference.received, "the request reached the server"
