"""Creating a Responses API response in one server operation (``CreateResponse``/``CreateResponseStream``).

The workflow (:class:`service.tasks.response_create.ResponseCreateTask`) over a real store and a
recording generation: the chain goes between the instructions and the new messages, a tool result
of an earlier call gets its name, the bounds apply before generation, another owner's or an unknown
id is NOT_FOUND, a response stored whole cannot be continued, a stream stores before it says so.
Then over gRPC on the session server with the real chat model: unary and streamed, chained, and
the record readable as soon as the stream's ``stored`` message arrives.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
from universal_runtime.v1 import generation_pb2, response_store_pb2_grpc
from universal_runtime.v1 import response_store_pb2 as pb

from engines.errors import FailedPreconditionError, InvalidArgumentError, RuntimeServiceError
from engines.executor import DeviceExecutor
from engines.state_store import LocalStateStore
from engines.types import (
    ChatMessage,
    FinishReason,
    GenerationDelta,
    GenerationRequest,
    GenerationUsage,
    ToolCall,
)
from service.responses import ResponseLimits, ResponseNotFoundError, ResponseStore, StoredResponse
from service.tasks.generation import Choice, ChoiceDelta, Completion, Timings
from service.tasks.response_create import ResponseCreateTask, ResponseJob, ResponseStored
from service.tasks.response_store import ResponseStoreTask
from tests.conftest import CHAT_MODEL, error_info

LIMITS = ResponseLimits(max_count=100, max_bytes=64 * 1024, max_total_bytes=1 << 20, ttl_s=3600)


def new_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


class RecordingGeneration:
    """A GenerationTask stand-in: records each request, answers ``text`` (or ``calls``)."""

    def __init__(self) -> None:
        self.requests: list[GenerationRequest] = []
        self.text = "Hello there!"
        self.calls: list[tuple[str, str]] = []  # (id, name) of tool calls to answer with
        self.fail: Exception | None = None

    async def complete(self, model, keep_alive, request, n=1) -> Completion:
        self.requests.append(request)
        if self.fail is not None:
            raise self.fail
        choice = Choice(
            index=0,
            text=self.text,
            tool_calls=[ToolCall(call_id, name, "{}") for call_id, name in self.calls],
            finish_reason=FinishReason.TOOL_CALLS if self.calls else FinishReason.STOP,
        )
        return Completion("gen-1", [choice], GenerationUsage(prompt_tokens=5, completion_tokens=3), Timings())

    async def stream(self, model, keep_alive, request, n=1) -> AsyncIterator[ChoiceDelta]:
        self.requests.append(request)
        for piece in ("Hel", "lo"):
            yield ChoiceDelta("gen-2", 0, GenerationDelta(text=piece))
        if self.fail is not None:
            raise self.fail
        usage = GenerationUsage(prompt_tokens=5, completion_tokens=2)
        yield ChoiceDelta(
            "gen-2", 0, GenerationDelta(finish_reason=FinishReason.STOP, usage=usage), usage, Timings()
        )


@pytest.fixture
def store(tmp_path) -> ResponseStore:
    return ResponseStore(LocalStateStore(tmp_path), LIMITS)


@pytest.fixture
def generation() -> RecordingGeneration:
    return RecordingGeneration()


@pytest.fixture
async def task(store, generation) -> AsyncIterator[ResponseCreateTask]:
    lanes = [DeviceExecutor("cpu", "responses-put"), DeviceExecutor("cpu", "responses-read")]
    yield ResponseCreateTask(ResponseStoreTask(store, *lanes), generation)  # type: ignore[arg-type]
    for lane in lanes:
        lane.shutdown()


def job(
    text: str = "Hi",
    *,
    previous: str = "",
    store: bool = True,
    instructions: str = "",
    messages: list[ChatMessage] | None = None,
    items: bytes | None = None,
    response_id: str | None = None,
) -> ResponseJob:
    own = messages if messages is not None else [ChatMessage(role="user", content=text)]
    return ResponseJob(
        model="fake-llm",
        keep_alive=None,
        request=GenerationRequest(request_id="r", messages=own),
        id=response_id or new_id(),
        created_at=0,
        previous_response_id=previous,
        store=store,
        instructions=instructions,
        header_json=b'{"object": "response"}',
        input_items_json=items
        if items is not None
        else json.dumps([{"type": "message", "text": text}]).encode(),
    )


def roles(request: GenerationRequest) -> list[tuple[str, str]]:
    assert request.messages is not None
    return [(m.role, m.content) for m in request.messages]


async def test_chain_goes_between_instructions_and_the_new_turn(task, generation, store) -> None:
    first = await task.create("", job("Hi", instructions="Only the first turn's."))
    assert first.stored is not None
    assert roles(generation.requests[0]) == [("system", "Only the first turn's."), ("user", "Hi")]
    second_id = new_id()
    await task.create(
        "",
        job("And then?", previous=first.stored.response.id, instructions="Be brief.", response_id=second_id),
    )
    assert roles(generation.requests[1]) == [
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "Hello there!"),
        ("user", "And then?"),
    ]
    third = await task.create("", job("Last.", previous=second_id))
    assert len(generation.requests[2].messages or ()) == 5  # no instructions: none carried over
    record = store.get(third.stored.response.id)  # type: ignore[union-attr]
    assert record.previous_response_id == second_id
    turns = json.loads(record.turns_json)
    assert [turn["answer"]["text"] for turn in turns] == ["Hello there!"] * 3
    assert turns[0]["input_items"] == [{"type": "message", "text": "Hi"}]
    assert record.response_json == b'{"object": "response"}' and record.input_items_json == b"[]"


async def test_a_tool_result_of_an_earlier_call_gets_its_name(task, generation) -> None:
    generation.calls = [("call_7", "weather")]
    first = await task.create("", job("Weather?"))
    generation.calls = []
    result = ChatMessage(role="tool", content="Sunny", tool_call_id="call_7")
    await task.create("", job(messages=[result], previous=first.stored.response.id))  # type: ignore[union-attr]
    sent = generation.requests[1].messages
    assert sent is not None
    assert sent[1].tool_calls[0]["id"] == "call_7"
    assert (sent[2].role, sent[2].name, sent[2].tool_call_id) == ("tool", "weather", "call_7")
    stray = ChatMessage(role="tool", content="?", tool_call_id="call_none")
    with pytest.raises(InvalidArgumentError) as caught:
        await task.create("", job(messages=[stray], previous=first.stored.response.id))  # type: ignore[union-attr]
    assert caught.value.reason == "TOOL_CALL_NOT_FOUND"
    assert caught.value.metadata["field"] == "messages[0].tool_call_id"
    assert len(generation.requests) == 2  # refused before generation


async def test_another_owners_or_an_unknown_id_is_not_found(task, generation) -> None:
    first = await task.create("team-a", job())
    for owner, previous in (
        ("team-b", first.stored.response.id),
        ("", first.stored.response.id),
        ("team-a", new_id()),
    ):  # type: ignore[union-attr]
        with pytest.raises(ResponseNotFoundError) as caught:
            await task.create(owner, job(previous=previous))
        assert caught.value.reason == "RESPONSE_NOT_FOUND"
    with pytest.raises(InvalidArgumentError) as caught:
        await task.create("team-a", job(previous="../etc"))
    assert (caught.value.reason, caught.value.metadata["field"]) == (
        "INVALID_RESPONSE_ID",
        "previous_response_id",
    )
    assert len(generation.requests) == 1
    await task.create("team-a", job(previous=first.stored.response.id))  # type: ignore[union-attr]


async def test_bounds_apply_before_generation(task, generation, store) -> None:
    big = json.dumps([{"text": "x" * LIMITS.max_bytes}]).encode()
    with pytest.raises(InvalidArgumentError) as caught:
        await task.create("", job(items=big))
    assert caught.value.reason == "RESPONSE_TOO_LARGE"
    with pytest.raises(InvalidArgumentError) as caught:
        await task.create("", job(items=b'{"not": "a list"}'))
    assert caught.value.reason == "INVALID_RESPONSE_JSON"
    assert generation.requests == []
    # Without store nothing is checked against the store's bounds, and nothing is kept.
    unstored = job(items=big, store=False)
    created = await task.create("", unstored)
    assert created.stored is None and len(generation.requests) == 1
    with pytest.raises(ResponseNotFoundError):
        store.get(unstored.id)


async def test_a_response_stored_whole_is_not_continuable(task, store, generation) -> None:
    legacy = new_id()
    store.put(StoredResponse(legacy, 0, "", b'{"output": []}', b"[]"))
    with pytest.raises(FailedPreconditionError) as caught:
        await task.create("", job(previous=legacy))
    assert caught.value.reason == "RESPONSE_NOT_CONTINUABLE"
    assert generation.requests == []


async def test_stream_stores_before_it_says_so(task, store) -> None:
    response_id = new_id()
    seen: list[str] = []
    async for event in task.stream("", job(response_id=response_id)):
        if isinstance(event, ResponseStored):
            # The record is readable when the stream announces it.
            assert store.get(response_id).id == response_id
            seen.append("stored")
        else:
            with pytest.raises(ResponseNotFoundError):
                store.get(response_id)
            seen.append("chunk")
    assert seen == ["chunk", "chunk", "chunk", "stored"]
    turns = json.loads(store.get(response_id).turns_json)
    assert turns[0]["answer"]["text"] == "Hello" and turns[0]["answer"]["finish_reason"] == "stop"


async def test_a_failed_stream_stores_nothing(task, store, generation) -> None:
    generation.fail = RuntimeServiceError("engine crashed")
    response_id = new_id()
    with pytest.raises(RuntimeServiceError):
        async for _ in task.stream("", job(response_id=response_id)):
            pass
    with pytest.raises(ResponseNotFoundError):
        store.get(response_id)


# -- over gRPC, with the real chat model -----------------------------------------------------


@pytest.fixture(scope="module")
def stub(channel) -> response_store_pb2_grpc.ResponseStoreServiceStub:
    return response_store_pb2_grpc.ResponseStoreServiceStub(channel)


def turn(text: str) -> generation_pb2.GenerateRequest:
    return generation_pb2.GenerateRequest(
        model=CHAT_MODEL,
        messages=[generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_USER, content=text)],
        parameters=generation_pb2.GenerationParameters(max_tokens=4, temperature=0.0),
    )


def new_response(response_id: str, text: str, previous: str = "", store: bool = True) -> pb.NewResponse:
    return pb.NewResponse(
        id=response_id,
        previous_response_id=previous,
        store=store,
        header_json=json.dumps({"id": response_id, "object": "response", "output": []}).encode(),
        input_items_json=json.dumps([{"type": "message", "role": "user", "content": text}]).encode(),
    )


async def test_create_and_continue_over_grpc(stub) -> None:
    first_id, second_id = new_id(), new_id()
    first = await stub.CreateResponse(
        pb.CreateResponseRequest(
            generate=turn("Name a colour."), response=new_response(first_id, "Name a colour.")
        )
    )
    assert first.stored.id == first_id and first.stored.expires_at > first.stored.created_at > 0
    assert first.answer.model == CHAT_MODEL and first.answer.usage.completion_tokens > 0
    second = await stub.CreateResponse(
        pb.CreateResponseRequest(
            generate=turn("Another?"), response=new_response(second_id, "Another?", previous=first_id)
        )
    )
    # The chain is in the prompt: more prompt tokens than the first turn's own.
    assert second.answer.usage.prompt_tokens > first.answer.usage.prompt_tokens
    got = (await stub.GetStoredResponse(pb.GetStoredResponseRequest(id=second_id))).response
    assert (got.previous_response_id, json.loads(got.response_json)["id"]) == (first_id, second_id)
    assert [t.response_id for t in got.turns] == [first_id, second_id]
    assert got.turns[0].answer.choices[0].text == first.answer.choices[0].text
    assert json.loads(got.turns[1].input_items_json)[0]["content"] == "Another?"


async def test_unknown_previous_and_bad_request_over_grpc(stub) -> None:
    for previous, code, reason in (
        (new_id(), grpc.StatusCode.NOT_FOUND, "RESPONSE_NOT_FOUND"),
        ("../x", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_RESPONSE_ID"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.CreateResponse(
                pb.CreateResponseRequest(generate=turn("Hi"), response=new_response(new_id(), "Hi", previous))
            )
        assert (caught.value.code(), error_info(caught.value).reason) == (code, reason)
    bad = turn("Hi")
    bad.parameters.temperature = -1
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateResponse(
            pb.CreateResponseRequest(generate=bad, response=new_response(new_id(), "Hi"))
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == "parameters.temperature"


async def test_stream_is_stored_before_its_end_over_grpc(stub) -> None:
    first_id = new_id()
    await stub.CreateResponse(
        pb.CreateResponseRequest(generate=turn("Hi"), response=new_response(first_id, "Hi"))
    )
    response_id = new_id()
    generate = generation_pb2.GenerateStreamRequest()
    generate.ParseFromString(turn("And then?").SerializeToString())
    call = stub.CreateResponseStream(
        pb.CreateResponseStreamRequest(
            generate=generate, response=new_response(response_id, "And then?", previous=first_id)
        )
    )
    kinds, text = [], ""
    async for message in call:
        kinds.append(message.WhichOneof("event"))
        if message.HasField("chunk"):
            text += message.chunk.text
        else:
            assert message.stored.id == response_id
            # Readable now, before the stream has even ended.
            got = await stub.GetStoredResponse(pb.GetStoredResponseRequest(id=response_id))
            assert got.response.turns[-1].answer.choices[0].text == text
    assert kinds[-1] == "stored" and set(kinds[:-1]) == {"chunk"}
