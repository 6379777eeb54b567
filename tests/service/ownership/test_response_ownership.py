"""Stored responses belong to the key that stored them: another key's id is NOT_FOUND / 404 on every
path (gRPC get and delete; the gateway's retrieve, input_items, delete and ``previous_response_id``),
whatever that key's role, and the owner still has its response afterwards. Ids are per key: a second
key may store the same id, so ALREADY_EXISTS tells it nothing. The store's layout keeps a server
without keys where it was and puts each key's responses under a hash of its name.
"""

from __future__ import annotations

import json
import uuid

import grpc
import pytest
from universal_runtime.v1 import generation_pb2
from universal_runtime.v1 import response_store_pb2 as pb

from engines.owners import owner_segment
from engines.state_store import open_state_store
from service.responses import ResponseLimits, ResponseNotFoundError, ResponseStore, StoredResponse
from tests.conftest import CHAT_MODEL
from tests.service.ownership.keys import ADMIN, DOTS, TEAM_A, TEAM_B, bearer, headers, refused

OTHERS = (TEAM_B, ADMIN, DOTS)  # an admin key reads no other key's responses either


def new_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def record(response_id: str, text: str) -> pb.StoredResponse:
    items = [
        {"id": "msg_1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    ]
    return pb.StoredResponse(
        id=response_id,
        response_json=json.dumps({"id": response_id, "object": "response", "output": []}).encode(),
        input_items_json=json.dumps(items).encode(),
    )


async def put(stubs, key: str, message: pb.StoredResponse) -> None:
    await stubs.responses.PutStoredResponse(
        pb.PutStoredResponseRequest(response=message), metadata=bearer(key)
    )


async def text_of(stubs, key: str, response_id: str) -> str:
    got = await stubs.responses.GetStoredResponse(
        pb.GetStoredResponseRequest(id=response_id), metadata=bearer(key)
    )
    return json.loads(got.response.input_items_json)[0]["content"][0]["text"]


async def test_another_keys_id_is_not_found_for_get_and_delete(stubs):
    response_id = new_id()
    await put(stubs, TEAM_A, record(response_id, "team a's words"))
    for key in OTHERS:
        for call in (
            stubs.responses.GetStoredResponse(
                pb.GetStoredResponseRequest(id=response_id), metadata=bearer(key)
            ),
            stubs.responses.DeleteStoredResponse(
                pb.DeleteStoredResponseRequest(id=response_id), metadata=bearer(key)
            ),
        ):
            reason, metadata = await refused(call, grpc.StatusCode.NOT_FOUND)
            assert (reason, metadata["id"]) == ("RESPONSE_NOT_FOUND", response_id)
    assert await text_of(stubs, TEAM_A, response_id) == "team a's words"  # the owner still has it


async def test_ids_are_per_key_so_a_taken_id_tells_another_key_nothing(stubs):
    response_id = new_id()
    await put(stubs, TEAM_A, record(response_id, "a"))
    await put(stubs, TEAM_B, record(response_id, "b"))  # not ALREADY_EXISTS: B has none of that id
    assert (await text_of(stubs, TEAM_A, response_id), await text_of(stubs, TEAM_B, response_id)) == (
        "a",
        "b",
    )
    reason, _ = await refused(
        put(stubs, TEAM_A, record(response_id, "again")), grpc.StatusCode.ALREADY_EXISTS
    )
    assert reason == "RESPONSE_ID_EXISTS"
    await stubs.responses.DeleteStoredResponse(
        pb.DeleteStoredResponseRequest(id=response_id), metadata=bearer(TEAM_B)
    )
    assert await text_of(stubs, TEAM_A, response_id) == "a"  # B deleted its own only


async def test_another_keys_id_is_not_found_when_creating_from_it(stubs):
    response_id = new_id()
    generate = generation_pb2.GenerateRequest(
        model=CHAT_MODEL,
        messages=[generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_USER, content="Hi")],
        parameters=generation_pb2.GenerationParameters(max_tokens=2),
    )

    def request(previous: str = "", own: str | None = None) -> pb.CreateResponseRequest:
        return pb.CreateResponseRequest(
            generate=generate,
            response=pb.NewResponse(
                id=own or new_id(),
                previous_response_id=previous,
                store=True,
                header_json=b"{}",
                input_items_json=b"[]",
            ),
        )

    await stubs.responses.CreateResponse(request(own=response_id), metadata=bearer(TEAM_A))
    for key in OTHERS:
        reason, metadata = await refused(
            stubs.responses.CreateResponse(request(response_id), metadata=bearer(key)),
            grpc.StatusCode.NOT_FOUND,
        )
        assert (reason, metadata["id"]) == ("RESPONSE_NOT_FOUND", response_id)
        stream = stubs.responses.CreateResponseStream(
            pb.CreateResponseStreamRequest(
                generate=generation_pb2.GenerateStreamRequest.FromString(generate.SerializeToString()),
                response=request(response_id).response,
            ),
            metadata=bearer(key),
        )
        reason, _ = await refused(stream.read(), grpc.StatusCode.NOT_FOUND)
        assert reason == "RESPONSE_NOT_FOUND"
    chained = await stubs.responses.CreateResponse(request(response_id), metadata=bearer(TEAM_A))
    assert chained.stored.id  # the owner continues it


# -- the gateway, standalone and in-process ------------------------------------------------------


async def create(gateway, key: str, **extra) -> dict:
    body = {"model": CHAT_MODEL, "input": "Say hello.", "max_output_tokens": 4, **extra}
    response = await gateway.post("/v1/responses", json=body, headers=headers(key), timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


async def test_another_keys_response_is_404_on_every_route_and_the_owner_chains_from_it(gateway):
    first = await create(gateway, TEAM_A)
    url = f"/v1/responses/{first['id']}"
    for key in OTHERS:
        for response, code in (
            (await gateway.get(url, headers=headers(key)), "response_not_found"),
            (await gateway.get(f"{url}/input_items", headers=headers(key)), "response_not_found"),
            (await gateway.delete(url, headers=headers(key)), "response_not_found"),
            (
                await gateway.post(
                    "/v1/responses",
                    json={"model": CHAT_MODEL, "input": "And then?", "previous_response_id": first["id"]},
                    headers=headers(key),
                ),
                "previous_response_not_found",
            ),
        ):
            assert response.status_code == 404, response.text
            assert response.json()["error"]["code"] == code
            assert "Say hello" not in response.text
    # The owner still reads it, lists its input and continues it.
    assert (await gateway.get(url, headers=headers(TEAM_A))).json() == first
    items = (await gateway.get(f"{url}/input_items", headers=headers(TEAM_A))).json()["data"]
    assert items[0]["content"][0]["text"] == "Say hello."
    second = await create(gateway, TEAM_A, input="And then?", previous_response_id=first["id"])
    assert second["previous_response_id"] == first["id"]
    chained = (await gateway.get(f"/v1/responses/{second['id']}/input_items", headers=headers(TEAM_A))).json()
    assert [item["type"] for item in chained["data"]][-1] == "message" and len(chained["data"]) == 3
    assert (await gateway.get(f"/v1/responses/{second['id']}", headers=headers(TEAM_B))).status_code == 404
    assert (await gateway.delete(url, headers=headers(TEAM_A))).status_code == 200
    assert (await gateway.get(url, headers=headers(TEAM_A))).status_code == 404


# -- the store's layout ----------------------------------------------------------------------------


def engine_response(response_id: str, text: str = "x") -> StoredResponse:
    return StoredResponse(
        response_id, 0, "", json.dumps({"id": response_id}).encode(), json.dumps([text]).encode()
    )


def make_store(tmp_path, **limits) -> ResponseStore:
    bounds = {"max_count": 100, "max_bytes": 10_000, "max_total_bytes": 1_000_000, "ttl_s": 60.0, **limits}
    return ResponseStore(open_state_store(tmp_path / "responses"), ResponseLimits(**bounds))


def test_each_owner_has_its_folder_and_the_keyless_layout_is_as_before(tmp_path):
    store = make_store(tmp_path)
    response_id = new_id()
    for owner in ("", "..", "team-a"):
        store.put(engine_response(response_id, owner), owner)
    data = sorted(key for key in store.store.sizes() if key.startswith("data/"))
    assert data == sorted(
        [
            f"data/{response_id}",
            f"data/{owner_segment('..')}/{response_id}",
            f"data/{owner_segment('team-a')}/{response_id}",
        ]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["responses"]  # '..' climbed nowhere
    for owner in ("", "..", "team-a"):
        assert json.loads(store.get(response_id, owner).input_items_json) == [owner]
    with pytest.raises(ResponseNotFoundError):
        store.get(response_id, "team-b")  # a key's lookup never falls back to the keyless response
    store.delete(response_id, "..")
    assert json.loads(store.get(response_id, "team-a").input_items_json) == ["team-a"]


def test_eviction_over_owners_deletes_the_oldest_owners_data(tmp_path):
    store = make_store(tmp_path, max_count=2)
    first, second, third = new_id(), new_id(), new_id()
    store.put(engine_response(first), "team-a")
    store.put(engine_response(second), "team-b")
    assert store.put(engine_response(third), "team-b").evicted == 1  # the bound is the store's
    with pytest.raises(ResponseNotFoundError):
        store.get(first, "team-a")
    assert store.get(second, "team-b").id == second
    assert len([key for key in store.store.sizes() if key.startswith("data/")]) == 2
