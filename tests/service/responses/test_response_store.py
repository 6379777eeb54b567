"""ResponseStoreService: the Responses API's stored responses over gRPC, in the state store.

Round trips on the session server; two servers sharing one state store (a local folder, and S3 via
moto) see each other's responses; each bound (count, total bytes, per-response bytes, age) and each
bad input with its status and ErrorInfo reason. The store's own rules (sweeping, eviction order,
what a crash leaves) are checked on :class:`service.responses.ResponseStore` with a fake clock.
"""

from __future__ import annotations

import asyncio
import errno
import json
import time
import uuid

import grpc
import pytest
from pydantic import SecretStr
from universal_runtime.v1 import response_store_pb2 as pb
from universal_runtime.v1 import response_store_pb2_grpc

from engines.errors import InvalidArgumentError, ResourceExhaustedError, RuntimeServiceError
from engines.state_store import LocalStateStore, open_state_store
from service.responses import (
    MAX_DELETES_PER_PUT,
    ResponseLimits,
    ResponseNotFoundError,
    ResponseStore,
    StoredResponse,
)
from service.server import start_server
from tests.conftest import error_info
from tests.moto_s3 import REFUSED_SECRET, moto_s3, refused_s3_options


def new_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def stored(
    response_id: str, *, text: str = "hello", previous: str = "", created_at: int = 0
) -> pb.StoredResponse:
    """A Responses API response and its input items, as the gateway would store them."""
    response = {"id": response_id, "object": "response", "status": "completed", "output_text": text}
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]
    return pb.StoredResponse(
        id=response_id,
        created_at=created_at,
        previous_response_id=previous,
        response_json=json.dumps(response).encode(),
        input_items_json=json.dumps(items).encode(),
    )


def put(stub, message: pb.StoredResponse):
    return stub.PutStoredResponse(pb.PutStoredResponseRequest(response=message))


def get(stub, response_id: str):
    return stub.GetStoredResponse(pb.GetStoredResponseRequest(id=response_id))


def delete(stub, response_id: str):
    return stub.DeleteStoredResponse(pb.DeleteStoredResponseRequest(id=response_id))


async def refused(call) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    info = error_info(caught.value)
    return caught.value.code(), info.reason, dict(info.metadata)


async def refused_code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code()


@pytest.fixture(scope="module")
def stub(channel) -> response_store_pb2_grpc.ResponseStoreServiceStub:
    return response_store_pb2_grpc.ResponseStoreServiceStub(channel)


async def start_stubs(settings, count: int = 1, **update):
    """``count`` servers over one settings (one state store) and a stub of each; stop them with the closer."""
    shared = settings.model_copy(update={"grpc_port": 0, **update})
    servers = [await start_server(shared) for _ in range(count)]
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") for s in servers]

    async def close() -> None:
        for channel in channels:
            await channel.close()
        for server in servers:
            await server.stop(grace=0.5)

    return [response_store_pb2_grpc.ResponseStoreServiceStub(c) for c in channels], close


# -- round trip on the session server ---------------------------------------------------------


async def test_put_get_and_delete_round_trip(stub):
    first, second = new_id(), new_id()
    put_first = await put(stub, stored(first, created_at=1_700_000_000))
    assert put_first.id == first and put_first.created_at == 1_700_000_000
    assert put_first.evicted_count == 0
    put_second = await put(stub, stored(second, text="again", previous=first))
    assert put_second.created_at > 1_700_000_000  # 0 means now
    # The default TTL is 30 days from the put.
    assert abs(put_second.expires_at - put_second.created_at - 30 * 24 * 3600) <= 2

    got = (await get(stub, second)).response
    assert got == pb.StoredResponse(
        id=second,
        created_at=put_second.created_at,
        previous_response_id=first,
        response_json=stored(second, text="again").response_json,
        input_items_json=stored(second, text="again").input_items_json,
        expires_at=put_second.expires_at,
    )
    assert json.loads(got.response_json)["output_text"] == "again"

    deleted = await delete(stub, first)
    assert (deleted.id, deleted.deleted) == (first, True)
    for call in (get(stub, first), delete(stub, first)):
        code, reason, metadata = await refused(call)
        assert (code, reason, metadata["id"]) == (grpc.StatusCode.NOT_FOUND, "RESPONSE_NOT_FOUND", first)
    assert (await get(stub, second)).response.id == second  # the other one stays


async def test_an_id_is_stored_once(stub):
    response_id = new_id()
    await put(stub, stored(response_id, text="first"))
    code, reason, _ = await refused(put(stub, stored(response_id, text="second")))
    assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "RESPONSE_ID_EXISTS")
    got = (await get(stub, response_id)).response
    assert json.loads(got.response_json)["output_text"] == "first"


# -- bad input ---------------------------------------------------------------------------------

BAD_IDS = [
    "",
    "resp_",
    "msg_abc",
    "resp_../../classifiers/x",
    "resp_abc/def",
    "resp_a.b",
    "resp_a-b",
    "resp_é",
    "resp_" + "a" * 121,
]


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_a_malformed_id_is_refused_by_every_method(stub, bad):
    for call in (put(stub, stored(bad)), get(stub, bad), delete(stub, bad)):
        code, reason, metadata = await refused(call)
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_RESPONSE_ID")
        assert metadata["field"] == "id"


async def test_the_longest_id_is_accepted(stub):
    longest = "resp_" + "A1" * 60
    await put(stub, stored(longest))
    assert (await get(stub, longest)).response.id == longest


async def test_a_malformed_previous_response_id_is_refused(stub):
    code, reason, metadata = await refused(put(stub, stored(new_id(), previous="resp_../x")))
    assert (code, reason, metadata["field"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_RESPONSE_ID",
        "previous_response_id",
    )


async def test_a_put_without_a_response_is_refused(stub):
    code, reason, metadata = await refused(stub.PutStoredResponse(pb.PutStoredResponseRequest()))
    assert (code, reason, metadata["field"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        "response",
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("response_json", b"not json"),
        ("response_json", b"[1, 2]"),  # an array, not a response object
        ("response_json", b"\xff\xfe{}"),  # not UTF-8
        ("response_json", b"[" * 100_000),  # deeper than the parser recurses
        ("input_items_json", b'{"type": "message"}'),  # an object, not a list of items
        ("input_items_json", b""),
    ],
)
async def test_json_of_the_wrong_kind_is_refused(stub, field, value):
    message = stored(new_id())
    setattr(message, field, value)
    code, reason, metadata = await refused(put(stub, message))
    assert (code, reason, metadata["field"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_RESPONSE_JSON",
        field,
    )
    code, reason, _ = await refused(get(stub, message.id))
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "RESPONSE_NOT_FOUND")  # nothing was stored


async def test_a_negative_created_at_is_refused(stub):
    code, _, metadata = await refused(put(stub, stored(new_id(), created_at=-1)))
    assert (code, metadata["field"]) == (grpc.StatusCode.INVALID_ARGUMENT, "response.created_at")


# -- bounds, on servers of their own -----------------------------------------------------------


@pytest.fixture
async def bounded(settings, tmp_path):
    """A server whose store keeps 3 responses, 1,000 bytes each, 2,000 bytes in all, for 1 s."""
    stubs, close = await start_stubs(
        settings,
        data_dir=tmp_path,
        responses_max_count=3,
        responses_max_bytes=1000,
        responses_max_total_bytes=2000,
        responses_ttl_s=1.0,
    )
    yield stubs[0]
    await close()


async def test_a_response_over_the_byte_bound_is_refused(bounded):
    message = stored(new_id())
    message.input_items_json = json.dumps(["x" * (1000 - len(message.response_json))]).encode()
    code, reason, metadata = await refused(put(bounded, message))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "RESPONSE_TOO_LARGE")
    assert metadata["max_bytes"] == "1000" and int(metadata["bytes"]) > 1000
    code, reason, _ = await refused(get(bounded, message.id))
    assert reason == "RESPONSE_NOT_FOUND"
    message.input_items_json = json.dumps(["x" * (990 - len(message.response_json))]).encode()
    assert len(message.response_json) + len(message.input_items_json) <= 1000
    await put(bounded, message)  # at the bound: kept


async def test_a_put_over_the_count_bound_evicts_the_oldest(bounded):
    ids = [new_id() for _ in range(5)]
    evicted = [(await put(bounded, stored(i))).evicted_count for i in ids]
    assert evicted == [0, 0, 0, 1, 1]
    for gone in ids[:2]:
        code, reason, _ = await refused(get(bounded, gone))
        assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "RESPONSE_NOT_FOUND")
    for kept in ids[2:]:
        assert (await get(bounded, kept)).response.id == kept


async def test_a_put_over_the_total_bytes_evicts_the_oldest_until_it_fits(bounded):
    def sized(response_id: str) -> pb.StoredResponse:
        message = stored(response_id)
        message.input_items_json = json.dumps(["x" * (800 - len(message.response_json))]).encode()
        return message

    ids = [new_id() for _ in range(3)]
    assert [(await put(bounded, sized(i))).evicted_count for i in ids] == [0, 0, 1]  # 3 x ~800 > 2,000
    _, reason, _ = await refused(get(bounded, ids[0]))
    assert reason == "RESPONSE_NOT_FOUND"
    assert [(await get(bounded, i)).response.id for i in ids[1:]] == ids[1:]


async def test_a_response_past_its_age_is_not_found(bounded):
    response_id = new_id()
    answer = await put(bounded, stored(response_id))
    assert answer.expires_at - answer.created_at in (1, 2)  # 1 s, rounded up to whole seconds
    assert (await get(bounded, response_id)).response.id == response_id
    await asyncio.sleep(1.1)
    code, reason, metadata = await refused(get(bounded, response_id))
    assert (code, reason, metadata["id"]) == (grpc.StatusCode.NOT_FOUND, "RESPONSE_EXPIRED", response_id)
    code, reason, _ = await refused(get(bounded, response_id))
    assert reason == "RESPONSE_NOT_FOUND"  # the read that found it expired deleted it


async def test_the_service_needs_the_api_key_as_the_others_do(settings, tmp_path):
    stubs, close = await start_stubs(settings, data_dir=tmp_path, api_key=SecretStr("sekrit"))
    try:
        code = await refused_code(get(stubs[0], new_id()))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        response_id = new_id()
        metadata = (("authorization", "Bearer sekrit"),)
        await stubs[0].PutStoredResponse(
            pb.PutStoredResponseRequest(response=stored(response_id)), metadata=metadata
        )
        got = await stubs[0].GetStoredResponse(pb.GetStoredResponseRequest(id=response_id), metadata=metadata)
        assert got.response.id == response_id
    finally:
        await close()


# -- replicas sharing one state store ----------------------------------------------------------


@pytest.fixture(scope="module")
def s3():
    with moto_s3() as (_, options):
        yield options


@pytest.fixture(params=["folder", "s3"])
async def replicas(request, settings, tmp_path):
    """Two servers over one state store: a local folder (UR_STATE_URL a path) or an S3 prefix."""
    if request.param == "folder":
        update = {"state_url": str(tmp_path / "shared")}
    else:
        s3 = request.getfixturevalue("s3")
        update = {"state_url": f"s3://state/{uuid.uuid4().hex}", "state_storage_options": s3}
    stubs, close = await start_stubs(settings, 2, responses_max_count=4, **update)
    yield stubs
    await close()


async def test_replicas_sharing_a_store_see_each_others_responses(replicas):
    a, b = replicas
    first, second = new_id(), new_id()
    await put(a, stored(first))
    await put(b, stored(second, previous=first))
    assert (await get(b, first)).response.response_json == stored(first).response_json
    assert (await get(a, second)).response.previous_response_id == first
    code, reason, _ = await refused(put(b, stored(first)))  # the id is taken in the shared store
    assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "RESPONSE_ID_EXISTS")

    await delete(b, first)
    code, reason, _ = await refused(get(a, first))
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "RESPONSE_NOT_FOUND")

    # The count bound is the store's, not each replica's: 4 in all, the oldest evicted.
    more = [new_id() for _ in range(4)]
    for i, response_id in enumerate(more):
        await put((a, b)[i % 2], stored(response_id))
    code, reason, _ = await refused(get(a, second))
    assert reason == "RESPONSE_NOT_FOUND"
    for response_id in more:
        assert (await get(b, response_id)).response.id == response_id


# -- the store's rules, with a fake clock ------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def engine_response(response_id: str, size: int = 0) -> StoredResponse:
    body = json.dumps({"id": response_id}).encode()
    items = json.dumps(["x" * size]).encode() if size else b"[]"
    return StoredResponse(response_id, 0, "", body, items)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_store(tmp_path, clock, **limits) -> ResponseStore:
    bounds = {"max_count": 100, "max_bytes": 10_000, "max_total_bytes": 1_000_000, "ttl_s": 60.0, **limits}
    return ResponseStore(open_state_store(tmp_path), ResponseLimits(**bounds), clock=clock)


def test_expired_responses_are_swept_by_puts(tmp_path, clock):
    store = make_store(tmp_path, clock)
    old = [new_id() for _ in range(3)]
    for response_id in old:
        store.put(engine_response(response_id))
    clock.now += 61
    result = store.put(engine_response(new_id()))
    assert result.evicted == 0  # expired ones are swept, not evicted
    data = {key for key in store.store.sizes() if key.startswith("data/")}
    assert data == {f"data/{result.response.id}"}
    assert len([key for key in store.store.sizes() if key.startswith("expiry/")]) == 1


def test_eviction_takes_the_first_to_expire_and_deletes_are_bounded_per_put(tmp_path, clock):
    store = make_store(tmp_path, clock, max_count=MAX_DELETES_PER_PUT + 10)
    ids = []
    for _ in range(MAX_DELETES_PER_PUT + 10):
        ids.append(new_id())
        store.put(engine_response(ids[-1]))
        clock.now += 0.001  # expiry (ms) orders them, not the random ids
    lowered = make_store(tmp_path, clock, max_count=5)
    result = lowered.put(engine_response(new_id()))
    assert result.evicted == MAX_DELETES_PER_PUT  # bounded: the next put goes on
    # 10 left and the one just put: 7 go so that 5 remain with the next.
    assert lowered.put(engine_response(new_id())).evicted == 7
    kept = [i for i in ids if _exists(lowered, i)]
    assert kept == ids[-3:]  # the newest, with the two just put: five


def _exists(store: ResponseStore, response_id: str) -> bool:
    try:
        store.get(response_id)
    except ResponseNotFoundError:
        return False
    return True


def test_a_marker_left_by_a_crash_is_evicted_and_stray_files_are_ignored(tmp_path, clock):
    store = make_store(tmp_path, clock, max_count=2)
    orphan = new_id()
    # A put that crashed after its marker: no data.
    store.store.create(f"expiry/{int((clock.now + 60) * 1000):015d}-10-{orphan}", b"")
    store.store.create("expiry/.tmp-abc", b"")  # a temporary file of a crashed write
    clock.now += 1
    first, second = new_id(), new_id()
    assert store.put(engine_response(first)).evicted == 0
    assert store.put(engine_response(second)).evicted == 1  # the orphan, the oldest, made room
    assert _exists(store, first) and _exists(store, second)


def test_the_total_bytes_bound_caps_one_response_too(tmp_path, clock):
    store = make_store(tmp_path, clock, max_bytes=10_000, max_total_bytes=500)
    with pytest.raises(InvalidArgumentError) as caught:
        store.put(engine_response(new_id(), size=600))
    assert caught.value.reason == "RESPONSE_TOO_LARGE" and caught.value.metadata["max_bytes"] == "500"


# -- faults of the store itself ----------------------------------------------------------------


async def test_a_store_that_is_down_is_unavailable_quickly_with_the_reason(settings):
    with refused_s3_options() as options:
        stubs, close = await start_stubs(
            settings, state_url="s3://state/down", state_storage_options=options, state_timeout_s=2.0
        )
        try:
            response_id = new_id()
            for call in (
                put(stubs[0], stored(response_id)),
                get(stubs[0], response_id),
                delete(stubs[0], response_id),
            ):
                started = time.monotonic()
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call
                assert time.monotonic() - started < 8
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, caught.value.details()
                assert error_info(caught.value).reason == "STATE_STORE_UNAVAILABLE"
                assert REFUSED_SECRET not in caught.value.details()
        finally:
            await close()


def test_a_full_disk_is_storage_full(tmp_path, clock, monkeypatch):
    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    store = make_store(tmp_path, clock)
    monkeypatch.setattr(LocalStateStore, "_create", no_space)
    with pytest.raises(ResourceExhaustedError) as caught:
        store.put(engine_response(new_id()))
    assert caught.value.reason == "STORAGE_FULL"


def test_a_corrupt_stored_response_is_internal_without_its_bytes(tmp_path, clock, caplog):
    store = make_store(tmp_path, clock)
    response_id = new_id()
    store.put(engine_response(response_id))
    (tmp_path / "data" / response_id).write_bytes(b"secret-ish garbage")
    with pytest.raises(RuntimeServiceError) as caught:
        store.get(response_id)
    assert caught.value.status == "INTERNAL" and "garbage" not in caught.value.message
    assert "stored response unreadable" in caplog.text
