"""Chat Completions reasoning fields, gateway logic against the fake server.

Out: ``message.reasoning_content`` / ``delta.reasoning_content`` from the contract's
``reasoning_content`` (as vLLM, llama.cpp's server and DeepSeek's API return the thinking), and
``usage.completion_tokens_details.reasoning_tokens`` from ``Usage.reasoning_tokens``. In:
``reasoning_effort`` (OpenAI's levels), ``reasoning_budget`` / ``thinking_token_budget`` (llama.cpp's
and vLLM's names of an explicit budget) and an assistant message's ``reasoning_content``.
"""

from __future__ import annotations

import httpx
import pytest
from universal_runtime.v1 import common_pb2, generation_pb2

from tests.gateway.gateway_fakes import FakeServer, parse_sse

CHAT_URL = "/v1/chat/completions"
THOUGHT = "The user greets me; greet back."
USAGE = common_pb2.Usage(prompt_tokens=5, completion_tokens=12, total_tokens=17, reasoning_tokens=9)


def chat_body(**extra):
    return {"model": "fake-llm", "messages": [{"role": "user", "content": "Hi"}], **extra}


def thinking_response() -> generation_pb2.GenerateResponse:
    return generation_pb2.GenerateResponse(
        id="gen-7",
        model="fake-llm",
        choices=[
            generation_pb2.GenerateChoice(
                index=0,
                text="Hello!",
                reasoning_content=THOUGHT,
                finish_reason=generation_pb2.FINISH_REASON_STOP,
            )
        ],
        usage=USAGE,
    )


def thinking_stream() -> list[generation_pb2.GenerateStreamResponse]:
    def message(**fields) -> generation_pb2.GenerateStreamResponse:
        return generation_pb2.GenerateStreamResponse(id="gen-8", model="fake-llm", index=0, **fields)

    return [
        message(reasoning_content="The user greets me;"),
        message(reasoning_content=" greet back."),
        message(text="Hel"),
        message(text="lo!", finish_reason=generation_pb2.FINISH_REASON_STOP, usage=USAGE),
    ]


async def sent_parameters(client: httpx.AsyncClient, fake: FakeServer, **extra):
    response = await client.post(CHAT_URL, json=chat_body(**extra))
    assert response.status_code == 200, response.text
    return fake.inference.received[-1].request.parameters


# --- out ---------------------------------------------------------------------------------------


async def test_thinking_is_reasoning_content_not_content(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.generate_response = thinking_response()
    body = (await client.post(CHAT_URL, json=chat_body())).json()
    assert body["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Hello!",
        "reasoning_content": THOUGHT,
    }
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 9}
    assert body["usage"]["completion_tokens"] == 12


async def test_an_answer_without_thinking_has_no_reasoning_content(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    body = (await client.post(CHAT_URL, json=chat_body())).json()
    assert "reasoning_content" not in body["choices"][0]["message"]
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


async def test_streamed_thinking_is_delta_reasoning_content(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    fake.inference.stream_messages = thinking_stream()
    body = chat_body(stream=True, stream_options={"include_usage": True})
    *chunks, done = parse_sse((await client.post(CHAT_URL, json=body)).text)
    assert done == "[DONE]"
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1:3] == [
        {"reasoning_content": "The user greets me;"},
        {"reasoning_content": " greet back."},
    ]
    assert deltas[3:5] == [{"content": "Hel"}, {"content": "lo!"}]
    assert all("reasoning_content" not in delta for delta in deltas[3:])
    assert chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 9}


async def test_completions_usage_has_reasoning_tokens_too(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    fake.inference.generate_response = thinking_response()
    response = await client.post("/v1/completions", json={"model": "fake-llm", "prompt": "Hi"})
    assert response.json()["usage"]["completion_tokens_details"] == {"reasoning_tokens": 9}


# --- in ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("effort", "level"),
    [
        ("none", generation_pb2.REASONING_EFFORT_NONE),
        ("minimal", generation_pb2.REASONING_EFFORT_LOW),
        ("low", generation_pb2.REASONING_EFFORT_LOW),
        ("medium", generation_pb2.REASONING_EFFORT_MEDIUM),
        ("high", generation_pb2.REASONING_EFFORT_HIGH),
        ("xhigh", generation_pb2.REASONING_EFFORT_HIGH),
        ("max", generation_pb2.REASONING_EFFORT_HIGH),
    ],
)
async def test_reasoning_effort_maps_to_the_contracts_level(
    client: httpx.AsyncClient, fake: FakeServer, effort: str, level: int
) -> None:
    params = await sent_parameters(client, fake, reasoning_effort=effort)
    assert params.reasoning_effort == level
    assert not params.HasField("reasoning_budget")


async def test_no_reasoning_fields_leave_the_catalogs_defaults(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    params = await sent_parameters(client, fake)
    assert params.reasoning_effort == generation_pb2.REASONING_EFFORT_UNSPECIFIED
    assert not params.HasField("reasoning_budget")


@pytest.mark.parametrize("name", ["reasoning_budget", "thinking_token_budget"])
@pytest.mark.parametrize("budget", [0, 48])
async def test_explicit_budget_is_sent(
    client: httpx.AsyncClient, fake: FakeServer, name: str, budget: int
) -> None:
    params = await sent_parameters(client, fake, **{name: budget, "reasoning_effort": "high"})
    assert params.HasField("reasoning_budget") and params.reasoning_budget == budget
    assert params.reasoning_effort == generation_pb2.REASONING_EFFORT_HIGH  # the server lets the budget win


async def test_assistant_reasoning_content_goes_to_its_own_field(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": THOUGHT},
        {"role": "user", "content": "How are you?"},
    ]
    response = await client.post(CHAT_URL, json={"model": "fake-llm", "messages": messages})
    assert response.status_code == 200, response.text
    sent = fake.inference.received[0].request.messages
    assert [(m.content, m.reasoning_content) for m in sent] == [
        ("Hi", ""),
        ("Hello!", THOUGHT),
        ("How are you?", ""),
    ]


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"reasoning_effort": "extreme"}, "reasoning_effort", "'low', 'medium', 'high'"),
        ({"reasoning_effort": 3}, "reasoning_effort", "Input should be"),
        ({"reasoning_budget": -1}, "reasoning_budget", "greater than or equal to 0"),
        ({"thinking_token_budget": 2**31}, "thinking_token_budget", "less than or equal to 2147483647"),
        ({"reasoning_budget": "many"}, "reasoning_budget", "valid integer"),
        ({"reasoning_budget": 8, "thinking_token_budget": 9}, None, "both set and differ"),
        (
            {"messages": [{"role": "user", "content": "Hi", "reasoning_content": "no"}]},
            "messages[0]",
            "reasoning_content is only accepted on assistant messages, not user",
        ),
    ],
)
async def test_bad_reasoning_input_is_an_openai_400(
    client: httpx.AsyncClient, fake: FakeServer, extra: dict, param: str | None, words: str
) -> None:
    response = await client.post(CHAT_URL, json=chat_body(**extra))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert words in error["message"], error
    assert fake.inference.received == []
