"""Stored responses against the fake server and its in-memory store: store, chain, fetch, list, delete.

Creating a response is one ``CreateResponse`` call whatever it continues: the fake does the
server's part (chain, generation, store) over the fake Generate, so ``fake.inference.received``
shows the conversation the server sent the model.
"""

from __future__ import annotations

import json

import grpc
import httpx
from universal_runtime.v1 import generation_pb2

from tests.gateway.gateway_fakes import FakeServer, RpcFailure

URL = "/v1/responses"


async def create(client: httpx.AsyncClient, **extra) -> dict:
    response = await client.post(URL, json={"model": "fake-llm", "input": "Hi", **extra})
    assert response.status_code == 200, response.text
    return response.json()


async def test_store_is_the_default_and_get_returns_the_response(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    first = await create(client, metadata={"ticket": "7"})
    assert fake.responses.calls == ["CreateResponse"]
    record = fake.responses.stored[first["id"]]
    assert record.created_at == first["created_at"] and record.previous_response_id == ""
    # The server keeps the response before its answer and the answer itself, and renders neither.
    template = json.loads(record.response_json)
    assert (template["status"], template["output"], template["usage"]) == ("in_progress", [], None)
    assert {k: v for k, v in template.items() if k not in ("status", "output", "usage")} == {
        k: v for k, v in first.items() if k not in ("status", "output", "usage")
    }
    [turn] = record.turns
    assert turn.response_id == first["id"] and turn.answer == fake.inference.generate_response
    assert json.loads(turn.input_items_json)[0]["content"] == [{"type": "input_text", "text": "Hi"}]
    fetched = await client.get(f"{URL}/{first['id']}")
    assert fetched.status_code == 200 and fetched.json() == first


async def test_a_chained_create_is_one_call(client: httpx.AsyncClient, fake: FakeServer) -> None:
    first = await create(client)
    fake.responses.calls.clear()
    second = await create(client, input="And then?", previous_response_id=first["id"])
    assert fake.responses.calls == ["CreateResponse"]
    sent = fake.responses.stored[second["id"]]
    assert [turn.response_id for turn in sent.turns] == [first["id"], second["id"]]


async def test_store_false_keeps_nothing(client: httpx.AsyncClient, fake: FakeServer) -> None:
    first = await create(client, store=False)
    assert fake.responses.stored == {}
    missing = await client.get(f"{URL}/{first['id']}")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "response_not_found"


async def test_chain_sends_previous_input_and_output(client: httpx.AsyncClient, fake: FakeServer) -> None:
    first = await create(client, instructions="Only the first turn's.")
    second = await create(client, input="And then?", previous_response_id=first["id"])
    assert second["previous_response_id"] == first["id"]
    messages = fake.inference.received[1].request.messages
    # instructions are not carried over, as in OpenAI's API
    assert [(m.role, m.content) for m in messages] == [
        (generation_pb2.CHAT_ROLE_USER, "Hi"),
        (generation_pb2.CHAT_ROLE_ASSISTANT, "Hello there!"),
        (generation_pb2.CHAT_ROLE_USER, "And then?"),
    ]
    third = await create(client, input="Last.", previous_response_id=second["id"])
    assert len(fake.inference.received[2].request.messages) == 5
    assert fake.responses.stored[third["id"]].previous_response_id == second["id"]


async def test_function_call_round_trip_over_a_chain(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.generate_response = generation_pb2.GenerateResponse(
        id="gen-3",
        model="fake-llm",
        choices=[
            generation_pb2.GenerateChoice(
                tool_calls=[generation_pb2.ToolCall(id="call_7", name="weather", arguments_json="{}")],
                finish_reason=generation_pb2.FINISH_REASON_TOOL_CALLS,
            )
        ],
    )
    tools = [{"type": "function", "name": "weather", "parameters": {"type": "object"}}]
    first = await create(client, tools=tools, tool_choice="required")
    [call] = first["output"]
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny"}
    await create(client, tools=tools, input=[output], previous_response_id=first["id"])
    messages = fake.inference.received[1].request.messages
    assert [m.role for m in messages] == [
        generation_pb2.CHAT_ROLE_USER,
        generation_pb2.CHAT_ROLE_ASSISTANT,
        generation_pb2.CHAT_ROLE_TOOL,
    ]
    assert messages[1].tool_calls[0].id == "call_7"
    assert (messages[2].tool_call_id, messages[2].name, messages[2].content) == ("call_7", "weather", "Sunny")


async def test_input_items_list(client: httpx.AsyncClient, fake: FakeServer) -> None:
    first = await create(client)
    second = await create(client, input="And then?", previous_response_id=first["id"])
    listed = (await client.get(f"{URL}/{second['id']}/input_items", params={"order": "asc"})).json()
    assert listed["object"] == "list" and listed["has_more"] is False
    assert [(item["type"], item["role"]) for item in listed["data"]] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert listed["data"][0]["content"] == [{"type": "input_text", "text": "Hi"}]
    assert listed["data"][1] == first["output"][0]
    assert listed["first_id"] == listed["data"][0]["id"] and listed["last_id"] == listed["data"][-1]["id"]
    newest = (await client.get(f"{URL}/{second['id']}/input_items", params={"limit": 1})).json()
    assert newest["data"][0]["content"][0]["text"] == "And then?" and newest["has_more"] is True
    after = (
        await client.get(f"{URL}/{second['id']}/input_items", params={"after": newest["last_id"]})
    ).json()
    assert [item["id"] for item in after["data"]] == [item["id"] for item in reversed(listed["data"][:2])]
    too_many = await client.get(f"{URL}/{second['id']}/input_items", params={"limit": 101})
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "query.limit"


async def test_delete(client: httpx.AsyncClient, fake: FakeServer) -> None:
    first = await create(client)
    deleted = await client.delete(f"{URL}/{first['id']}")
    assert deleted.status_code == 200
    assert deleted.json() == {"id": first["id"], "object": "response", "deleted": True}
    assert (await client.get(f"{URL}/{first['id']}")).status_code == 404
    again = await client.delete(f"{URL}/{first['id']}")
    assert again.status_code == 404 and again.json()["error"]["type"] == "not_found_error"


async def test_missing_previous_response_is_404(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(
        URL, json={"model": "fake-llm", "input": "Hi", "previous_response_id": "resp_doesnotexist"}
    )
    assert response.status_code == 404
    assert response.json()["error"] == {
        "message": "Previous response with id 'resp_doesnotexist' not found.",
        "type": "not_found_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }
    assert fake.inference.received == []


async def test_malformed_previous_response_id_is_400(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.responses.fail = RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, "bad id '../x'", "INVALID_RESPONSE_ID")
    response = await client.post(
        URL, json={"model": "fake-llm", "input": "Hi", "previous_response_id": "../x"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "previous_response_id"


async def test_over_limit_store_is_400(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.responses.fail = RpcFailure(
        grpc.StatusCode.INVALID_ARGUMENT,
        "the response is 900000 bytes, over the 800000 bytes a stored response may have",
        "RESPONSE_TOO_LARGE",
    )
    response = await client.post(URL, json={"model": "fake-llm", "input": "Hi"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "response_too_large"


async def test_full_store_is_507(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.responses.fail = RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED, "disk full", "STORAGE_FULL")
    response = await client.post(URL, json={"model": "fake-llm", "input": "Hi"})
    assert response.status_code == 507
    assert response.json()["error"]["code"] == "storage_full"


async def test_function_call_output_of_no_call_in_the_chain_is_400(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    first = await create(client)
    output = {"type": "function_call_output", "call_id": "call_none", "output": "Sunny"}
    response = await client.post(
        URL,
        json={
            "model": "fake-llm",
            "input": [{"role": "user", "content": "x"}, output],
            "previous_response_id": first["id"],
        },
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "No function call found for function_call_output with call_id 'call_none'",
        "type": "invalid_request_error",
        "param": "input[1].call_id",
        "code": "invalid_value",
    }


async def test_over_limit_before_generation_is_400_and_generates_nothing(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    fake.responses.fail = RpcFailure(
        grpc.StatusCode.INVALID_ARGUMENT, "the conversation is over the bound", "RESPONSE_TOO_LARGE"
    )
    response = await client.post(URL, json={"model": "fake-llm", "input": "Hi"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "response_too_large"
    assert fake.inference.received == []
