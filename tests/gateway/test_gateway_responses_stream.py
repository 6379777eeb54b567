"""``POST /v1/responses`` with ``stream: true`` against the fake server: typed events in order.

Every event is parsed with the openai SDK's ``ResponseStreamEvent`` union (strictly), so a field
the SDK needs and we leave out fails here.
"""

from __future__ import annotations

import re

import grpc
import httpx
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter
from universal_runtime.v1 import common_pb2, generation_pb2

from tests.gateway.gateway_fakes import FakeServer, RpcFailure, parse_sse

URL = "/v1/responses"
EVENTS = TypeAdapter(ResponseStreamEvent)


def body(**extra):
    return {"model": "fake-llm", "input": "Hi", "stream": True, **extra}


async def stream(client: httpx.AsyncClient, **extra) -> list[dict]:
    """The events of a streamed response: names match types, sequence numbers count from 0."""
    response = await client.post(URL, json=body(**extra))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    assert "[DONE]" not in events
    assert re.findall(r"^event: (\S+)", response.text, re.MULTILINE) == [event["type"] for event in events]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    for event in events:
        EVENTS.validate_python(event)
    return events


def message(text: str = "", **fields) -> generation_pb2.GenerateStreamResponse:
    return generation_pb2.GenerateStreamResponse(id="gen-5", model="fake-llm", index=0, text=text, **fields)


async def test_text_stream_event_order(client: httpx.AsyncClient, fake: FakeServer) -> None:
    events = await stream(client, store=False)
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    created = events[0]["response"]
    assert created["status"] == "in_progress" and created["output"] == [] and created["usage"] is None
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == [
        "Hel",
        "lo",
        " there!",
    ]
    item_id = events[2]["item"]["id"]
    assert all(e["item_id"] == item_id for e in events[3:9])
    assert events[7]["text"] == "Hello there!"
    final = events[-1]["response"]
    assert final["id"] == created["id"] and final["status"] == "completed"
    assert final["output"] == [events[9]["item"]]
    assert final["output"][0]["content"][0]["text"] == "Hello there!"
    assert final["usage"]["input_tokens"] == 5 and final["usage"]["output_tokens"] == 3
    assert fake.inference.received[0].method == "GenerateStream"


async def test_reasoning_then_text_then_calls(client: httpx.AsyncClient, fake: FakeServer) -> None:
    call = generation_pb2.ToolCallDelta
    fake.inference.stream_messages = [
        message(reasoning_content="Think"),
        message(reasoning_content="ing."),
        message("Sure."),
        message(tool_calls=[call(index=0, id="call_a", name="weather", arguments_json_delta='{"city":')]),
        message(tool_calls=[call(index=0, arguments_json_delta='"Paris"}')]),
        message(tool_calls=[call(index=1, id="call_b", name="clock", arguments_json_delta="{}")]),
        message(
            finish_reason=generation_pb2.FINISH_REASON_TOOL_CALLS,
            usage=common_pb2.Usage(prompt_tokens=4, completion_tokens=9, total_tokens=13, reasoning_tokens=2),
        ),
    ]
    events = await stream(client, store=False)
    kinds = [event["type"] for event in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.done"] == [0, 1, 2, 3]
    assert events[6]["text"] == "Thinking."
    assert events[18]["arguments"] == '{"city":"Paris"}'
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    assert final["output"][0]["content"] == [{"type": "reasoning_text", "text": "Thinking."}]
    assert [(i["call_id"], i["name"], i["arguments"]) for i in final["output"][2:]] == [
        ("call_a", "weather", '{"city":"Paris"}'),
        ("call_b", "clock", "{}"),
    ]
    assert final["usage"]["output_tokens_details"] == {"reasoning_tokens": 2}


async def test_cut_stream_is_incomplete(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.stream_messages[-1].finish_reason = generation_pb2.FINISH_REASON_LENGTH
    events = await stream(client, store=False, max_output_tokens=3)
    final = events[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["status"] == "incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["output"][0]["status"] == "incomplete"


async def test_failure_mid_stream_is_error_then_failed(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.stream_fail_after = 2
    events = await stream(client)
    assert [event["type"] for event in events][-3:] == [
        "response.output_text.delta",
        "error",
        "response.failed",
    ]
    error = events[-2]
    assert error["code"] == "engine_failed" and error["message"] == "engine crashed"
    failed = events[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {
        "code": "server_error",
        "message": "engine crashed",
        "param": None,
        "type": "engine_failed",
    }
    assert fake.responses.stored == {}  # a failed response is not kept


async def test_error_before_the_stream_is_an_http_error(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.fail = RpcFailure(grpc.StatusCode.NOT_FOUND, "no such model", "MODEL_NOT_FOUND")
    response = await client.post(URL, json=body(model="nope"))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


async def test_streamed_response_is_stored_before_completed(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    events = await stream(client)
    final = events[-1]["response"]
    assert list(fake.responses.stored) == [final["id"]]
    fetched = await client.get(f"{URL}/{final['id']}")
    assert fetched.json() == final


async def test_chained_stream_is_one_call_and_continues_the_chain(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    first = (await stream(client, instructions="Be brief."))[-1]["response"]
    fake.responses.calls.clear()
    second = (await stream(client, input="And then?", previous_response_id=first["id"]))[-1]["response"]
    assert fake.responses.calls == ["CreateResponseStream"]
    assert second["previous_response_id"] == first["id"] and second["status"] == "completed"
    messages = fake.inference.received[1].request.messages
    assert [(m.role, m.content) for m in messages] == [
        (generation_pb2.CHAT_ROLE_USER, "Hi"),
        (generation_pb2.CHAT_ROLE_ASSISTANT, "Hello there!"),
        (generation_pb2.CHAT_ROLE_USER, "And then?"),
    ]
    assert (await client.get(f"{URL}/{second['id']}")).json() == second


async def test_chained_stream_of_an_unknown_response_is_404(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    response = await client.post(URL, json=body(previous_response_id="resp_missing"))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "previous_response_not_found"
    assert response.json()["error"]["param"] == "previous_response_id"
    assert fake.inference.received == []


async def test_failed_store_ends_the_stream_failed(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.responses.store_fail = RpcFailure(
        grpc.StatusCode.INVALID_ARGUMENT, "response too large", "RESPONSE_TOO_LARGE", {"max_bytes": "10"}
    )
    events = await stream(client)
    assert [event["type"] for event in events][-2:] == ["error", "response.failed"]
    assert events[-2]["code"] == "response_too_large"


async def test_thinking_only_answer_still_has_its_message(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    fake.inference.stream_messages = [
        message(reasoning_content="Just thinking."),
        message(finish_reason=generation_pb2.FINISH_REASON_STOP, usage=common_pb2.Usage(completion_tokens=3)),
    ]
    events = await stream(client, store=False)
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["output"][1]["content"][0]["text"] == ""
    assert [event["type"] for event in events][-6:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
