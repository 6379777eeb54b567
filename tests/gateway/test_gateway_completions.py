from __future__ import annotations

import httpx
import pytest
from universal_runtime.v1 import generation_pb2

from tests.gateway.gateway_fakes import FakeServer, parse_sse

URL = "/v1/completions"


async def test_unary_completion(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(
        URL, json={"model": "fake-llm", "prompt": "Once", "max_tokens": 4, "stop": ["."]}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "text_completion"
    assert body["id"] == "cmpl-1"
    assert body["choices"] == [
        {"index": 0, "text": "Hello there!", "finish_reason": "stop", "logprobs": None}
    ]
    assert body["usage"]["total_tokens"] == 8
    request = fake.inference.received[0].request
    assert request.prompt == "Once"
    assert len(request.messages) == 0
    assert request.parameters.max_tokens == 4
    assert list(request.parameters.stop) == ["."]


async def test_prompt_list_of_one(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(URL, json={"model": "fake-llm", "prompt": ["Only"]})
    assert response.status_code == 200
    assert fake.inference.received[0].request.prompt == "Only"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"echo": True}, "echo"),
        ({"suffix": "tail"}, "suffix"),
        ({"best_of": 3}, "best_of"),
    ],
)
async def test_unsupported_options_rejected(
    client: httpx.AsyncClient, fake: FakeServer, extra, param
) -> None:
    response = await client.post(URL, json={"model": "fake-llm", "prompt": "x", **extra})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert fake.inference.received == []


async def test_legacy_logprobs(client: httpx.AsyncClient, fake: FakeServer) -> None:
    choice = fake.inference.generate_response.choices[0]
    for token, logprob in (("Hel", -0.1), ("lo", -0.2)):
        choice.logprobs.append(
            generation_pb2.TokenLogprobs(
                sampled=generation_pb2.TokenLogprob(token=token, logprob=logprob),
                top_logprobs=[generation_pb2.TokenLogprob(token=token, logprob=logprob)],
            )
        )
    body = (await client.post(URL, json={"model": "fake-llm", "prompt": "x", "logprobs": 1})).json()
    params = fake.inference.received[0].request.parameters
    assert params.logprobs is True and params.top_logprobs == 1
    logprobs = body["choices"][0]["logprobs"]
    assert logprobs["tokens"] == ["Hel", "lo"]
    assert logprobs["token_logprobs"] == pytest.approx([-0.1, -0.2])
    assert logprobs["text_offset"] == [0, 3]
    assert list(logprobs["top_logprobs"][1]) == ["lo"]


async def test_stream_completion(client: httpx.AsyncClient, fake: FakeServer) -> None:
    body = {"model": "fake-llm", "prompt": "x", "stream": True, "stream_options": {"include_usage": True}}
    response = await client.post(URL, json=body)
    assert response.status_code == 200
    events = parse_sse(response.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(chunk["object"] == "text_completion" for chunk in chunks)
    assert "".join(chunk["choices"][0]["text"] for chunk in chunks if chunk["choices"]) == "Hello there!"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
    assert fake.inference.received[0].request.prompt == "x"
