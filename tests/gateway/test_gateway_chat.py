from __future__ import annotations

import logging

import grpc
import httpx
from universal_runtime.v1 import common_pb2, generation_pb2

from tests.gateway.gateway_fakes import FakeServer, RpcFailure, parse_sse

CHAT_URL = "/v1/chat/completions"

# The fake's usage, in OpenAI's shape (cached prompt tokens under prompt_tokens_details; the
# fake model does not think, so no reasoning tokens).
USAGE = {
    "prompt_tokens": 5,
    "completion_tokens": 3,
    "total_tokens": 8,
    "prompt_tokens_details": {"cached_tokens": 4},
    "completion_tokens_details": {"reasoning_tokens": 0},
}


def chat_body(**extra):
    return {"model": "fake-llm", "messages": [{"role": "user", "content": "Hi"}], **extra}


async def test_unary_chat_completion_shape(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(CHAT_URL, json=chat_body())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == "chatcmpl-1"
    assert body["object"] == "chat.completion"
    assert isinstance(body["created"], int)
    assert body["model"] == "fake-llm"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello there!"},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ]
    assert body["usage"] == USAGE
    assert body["timings"]["total_ms"] == 30.0
    [call] = fake.inference.received
    assert call.method == "Generate"
    assert call.request.messages[0].role == generation_pb2.CHAT_ROLE_USER
    assert call.request.messages[0].content == "Hi"


async def test_chat_request_translation(client: httpx.AsyncClient, fake: FakeServer) -> None:
    schema = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}
    body = {
        "model": "fake-llm",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Dev note."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}],
                "name": "alice",
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q":1}'},
                    }
                ],
            },
            {"role": "tool", "content": "42", "tool_call_id": "call_1"},
        ],
        "max_completion_tokens": 64,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "seed": 1234,
        "stop": "END",
        "n": 2,
        "logprobs": True,
        "top_logprobs": 3,
        "logit_bias": {"50256": -100, "7": 2.5},
        "response_format": {"type": "json_schema", "json_schema": {"name": "thing", "schema": schema}},
        "tools": [
            {
                "type": "function",
                "function": {"name": "lookup", "description": "Look up", "parameters": {"type": "object"}},
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "keep_alive": "10m",
    }
    response = await client.post(CHAT_URL, json=body)
    assert response.status_code == 200, response.text
    request = fake.inference.received[0].request
    assert isinstance(request, generation_pb2.GenerateRequest)
    assert request.model == "fake-llm"
    assert request.keep_alive == "10m"
    roles = [message.role for message in request.messages]
    assert roles == [
        generation_pb2.CHAT_ROLE_SYSTEM,
        generation_pb2.CHAT_ROLE_DEVELOPER,
        generation_pb2.CHAT_ROLE_USER,
        generation_pb2.CHAT_ROLE_ASSISTANT,
        generation_pb2.CHAT_ROLE_TOOL,
    ]
    assert request.messages[2].content == "part one\npart two"
    assert request.messages[2].name == "alice"
    assert request.messages[3].content == ""
    assert request.messages[3].tool_calls[0] == generation_pb2.ToolCall(
        id="call_1", name="lookup", arguments_json='{"q":1}'
    )
    assert request.messages[4].tool_call_id == "call_1"
    params = request.parameters
    assert params.max_tokens == 64
    assert abs(params.temperature - 0.2) < 1e-6
    assert abs(params.top_p - 0.9) < 1e-6
    assert params.top_k == 40
    assert abs(params.min_p - 0.05) < 1e-6
    assert abs(params.repetition_penalty - 1.1) < 1e-6
    assert params.presence_penalty == 0.5
    assert params.frequency_penalty == -0.5
    assert params.seed == 1234
    assert list(params.stop) == ["END"]
    assert params.n == 2
    assert params.logprobs is True
    assert params.top_logprobs == 3
    assert {(bias.token_id, bias.bias) for bias in params.logit_bias} == {(50256, -100.0), (7, 2.5)}
    assert params.response_format.type == generation_pb2.RESPONSE_FORMAT_TYPE_JSON_SCHEMA
    # Key order is preserved: property order steers constrained generation.
    assert params.response_format.json_schema == (
        '{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}'
    )
    assert params.response_format.schema_name == "thing"
    assert params.tools[0] == generation_pb2.ToolDefinition(
        name="lookup", description="Look up", parameters_json_schema='{"type":"object"}'
    )
    assert params.tool_choice.mode == generation_pb2.TOOL_CHOICE_MODE_FUNCTION
    assert params.tool_choice.function_name == "lookup"


async def test_unset_options_use_server_defaults(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(CHAT_URL, json=chat_body(max_tokens=7, tool_choice="required"))
    assert response.status_code == 200
    params = fake.inference.received[0].request.parameters
    assert params.max_tokens == 7
    assert params.tool_choice.mode == generation_pb2.TOOL_CHOICE_MODE_REQUIRED
    for name in ("temperature", "top_p", "top_k", "min_p", "seed", "n", "presence_penalty"):
        assert not params.HasField(name), name
    assert not params.HasField("response_format")
    assert fake.inference.received[0].request.keep_alive == ""


async def test_integer_keep_alive_counts_seconds(client: httpx.AsyncClient, fake: FakeServer) -> None:
    await client.post(CHAT_URL, json=chat_body(keep_alive=300))
    await client.post(CHAT_URL, json=chat_body(keep_alive=-1))
    assert [call.request.keep_alive for call in fake.inference.received] == ["300s", "-1"]


async def test_conflicting_max_tokens_rejected(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(CHAT_URL, json=chat_body(max_tokens=5, max_completion_tokens=6))
    assert response.status_code == 400
    assert "max_completion_tokens" in response.json()["error"]["message"]
    assert fake.inference.received == []


async def test_tool_call_response(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.generate_response = generation_pb2.GenerateResponse(
        id="gen-t",
        model="fake-llm",
        choices=[
            generation_pb2.GenerateChoice(
                index=0,
                tool_calls=[generation_pb2.ToolCall(id="call_9", name="lookup", arguments_json='{"q":"x"}')],
                finish_reason=generation_pb2.FINISH_REASON_TOOL_CALLS,
            )
        ],
        usage=common_pb2.Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3),
    )
    body = (await client.post(CHAT_URL, json=chat_body())).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": '{"q":"x"}'}}
    ]
    assert "timings" not in body


async def test_logprobs_response(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.generate_response.choices[0].logprobs.append(
        generation_pb2.TokenLogprobs(
            sampled=generation_pb2.TokenLogprob(token_id=1, token="Hé", logprob=-0.5),
            top_logprobs=[generation_pb2.TokenLogprob(token_id=2, token="Ho", logprob=-1.0)],
        )
    )
    body = (await client.post(CHAT_URL, json=chat_body(logprobs=True, top_logprobs=1))).json()
    assert body["choices"][0]["logprobs"] == {
        "content": [
            {
                "token": "Hé",
                "logprob": -0.5,
                "bytes": [72, 195, 169],
                "top_logprobs": [{"token": "Ho", "logprob": -1.0, "bytes": [72, 111]}],
            }
        ],
        "refusal": None,
    }


async def test_finish_reason_mapping(client: httpx.AsyncClient, fake: FakeServer) -> None:
    expected = {
        generation_pb2.FINISH_REASON_STOP: "stop",
        generation_pb2.FINISH_REASON_LENGTH: "length",
        generation_pb2.FINISH_REASON_TOOL_CALLS: "tool_calls",
        generation_pb2.FINISH_REASON_CANCELLED: "stop",
    }
    for proto_value, label in expected.items():
        fake.inference.generate_response.choices[0].finish_reason = proto_value
        body = (await client.post(CHAT_URL, json=chat_body())).json()
        assert body["choices"][0]["finish_reason"] == label


async def test_unknown_fields_accepted_and_logged(
    client: httpx.AsyncClient, fake: FakeServer, caplog
) -> None:
    body = chat_body(user="u-1", parallel_tool_calls=False)
    body["messages"][0]["refusal"] = None
    with caplog.at_level(logging.WARNING, logger="gateway.schemas"):
        response = await client.post(CHAT_URL, json=body)
    assert response.status_code == 200, response.text
    warnings = " ".join(record.getMessage() for record in caplog.records)
    assert "parallel_tool_calls" in warnings and "user" in warnings
    assert "refusal" in warnings


async def test_image_content_part_rejected(client: httpx.AsyncClient, fake: FakeServer) -> None:
    body = chat_body()
    body["messages"][0]["content"] = [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]
    response = await client.post(CHAT_URL, json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"].startswith("messages[0].content")
    assert fake.inference.received == []


async def test_stream_chunks(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(CHAT_URL, json=chat_body(stream=True))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert all(chunk["id"] == "chatcmpl-2" and chunk["model"] == "fake-llm" for chunk in chunks)
    assert all("usage" not in chunk for chunk in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks)
    assert content == "Hello there!"
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None}
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert fake.inference.received[0].method == "GenerateStream"
    assert isinstance(fake.inference.received[0].request, generation_pb2.GenerateStreamRequest)


async def test_stream_include_usage(client: httpx.AsyncClient, fake: FakeServer) -> None:
    body = chat_body(stream=True, stream_options={"include_usage": True})
    events = parse_sse((await client.post(CHAT_URL, json=body)).text)
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == USAGE
    assert all(chunk["usage"] is None for chunk in events[:-2])
    assert events[-3]["choices"][0]["finish_reason"] == "stop"


async def test_stream_tool_call_deltas(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.stream_messages = [
        generation_pb2.GenerateStreamResponse(
            id="s",
            index=0,
            tool_calls=[
                generation_pb2.ToolCallDelta(index=0, id="call_1", name="f", arguments_json_delta='{"a"')
            ],
        ),
        generation_pb2.GenerateStreamResponse(
            id="s",
            index=0,
            tool_calls=[generation_pb2.ToolCallDelta(index=0, arguments_json_delta=":1}")],
            finish_reason=generation_pb2.FINISH_REASON_TOOL_CALLS,
        ),
    ]
    events = parse_sse((await client.post(CHAT_URL, json=chat_body(stream=True))).text)
    deltas = [event["choices"][0]["delta"] for event in events[:-1]]
    assert deltas[1] == {
        "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
        ]
    }
    assert deltas[2] == {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert events[0]["model"] == "fake-llm"  # the request's model until the server names one


async def test_stream_multiple_choices(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.stream_messages = [
        generation_pb2.GenerateStreamResponse(id="s", index=0, text="a"),
        generation_pb2.GenerateStreamResponse(id="s", index=1, text="b"),
        generation_pb2.GenerateStreamResponse(
            id="s", index=0, finish_reason=generation_pb2.FINISH_REASON_LENGTH
        ),
        generation_pb2.GenerateStreamResponse(
            id="s", index=1, finish_reason=generation_pb2.FINISH_REASON_STOP
        ),
    ]
    events = parse_sse((await client.post(CHAT_URL, json=chat_body(stream=True, n=2))).text)[:-1]
    role_chunks = [event["choices"][0]["index"] for event in events if "role" in event["choices"][0]["delta"]]
    assert role_chunks == [0, 1]
    finishes = {
        event["choices"][0]["index"]: event["choices"][0]["finish_reason"]
        for event in events
        if event["choices"][0]["finish_reason"]
    }
    assert finishes == {0: "length", 1: "stop"}


async def test_stream_error_before_first_message_is_http_error(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    fake.inference.fail = RpcFailure(
        grpc.StatusCode.NOT_FOUND, "no such model", "MODEL_NOT_FOUND", {"field": "model"}
    )
    response = await client.post(CHAT_URL, json=chat_body(stream=True))
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "message": "no such model",
            "type": "not_found_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


async def test_stream_error_after_start_is_error_event(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.stream_fail_after = 2
    response = await client.post(CHAT_URL, json=chat_body(stream=True))
    assert response.status_code == 200
    events = parse_sse(response.text)
    assert "[DONE]" not in events
    assert events[-1] == {
        "error": {"message": "engine crashed", "type": "server_error", "param": None, "code": "engine_failed"}
    }
    content = "".join(event["choices"][0]["delta"].get("content", "") for event in events[:-1])
    assert content == "Hello"
