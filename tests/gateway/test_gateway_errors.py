from __future__ import annotations

import grpc
import httpx
import pytest
from universal_runtime.v1 import encoders_pb2

from gateway.app import create_app
from gateway.errors import http_status_for_grpc, rpc_error_to_http
from tests.gateway.gateway_fakes import FakeServer, RpcFailure, asgi_client

CHAT = {"model": "fake-llm", "messages": [{"role": "user", "content": "Hi"}]}

S = grpc.StatusCode


@pytest.mark.parametrize(
    ("failure", "status", "error"),
    [
        (
            RpcFailure(
                S.INVALID_ARGUMENT, "too long", "INPUT_TOO_LONG", {"field": "messages", "limit": "2048"}
            ),
            400,
            {"type": "invalid_request_error", "code": "input_too_long", "param": "messages"},
        ),
        (
            RpcFailure(
                S.INVALID_ARGUMENT, "bad temperature", "INVALID_ARGUMENT", {"field": "parameters.temperature"}
            ),
            400,
            {"type": "invalid_request_error", "code": "invalid_argument", "param": "temperature"},
        ),
        (
            RpcFailure(S.NOT_FOUND, "no model", "MODEL_NOT_FOUND", {"model": "x"}),
            404,
            {"type": "not_found_error", "code": "model_not_found", "param": None},
        ),
        (
            RpcFailure(S.FAILED_PRECONDITION, "cannot embed", "TASK_NOT_SUPPORTED"),
            400,
            {"type": "invalid_request_error", "code": "task_not_supported", "param": None},
        ),
        (
            RpcFailure(S.RESOURCE_EXHAUSTED, "queue full", "OVERLOADED"),
            429,
            {"type": "rate_limit_error", "code": "overloaded", "param": None},
        ),
        (
            RpcFailure(S.RESOURCE_EXHAUSTED, "too big", "MESSAGE_TOO_LARGE"),
            413,
            {"type": "invalid_request_error", "code": "message_too_large", "param": None},
        ),
        (
            RpcFailure(S.UNAUTHENTICATED, "who are you", "UNAUTHENTICATED"),
            401,
            {"type": "authentication_error", "code": "unauthenticated", "param": None},
        ),
        (
            RpcFailure(S.PERMISSION_DENIED, "nope", "PERMISSION_DENIED"),
            403,
            {"type": "permission_error", "code": "permission_denied", "param": None},
        ),
        (
            RpcFailure(S.UNIMPLEMENTED, "later", "NOT_IMPLEMENTED"),
            501,
            {"type": "server_error", "code": "not_implemented", "param": None},
        ),
        (
            RpcFailure(S.UNAVAILABLE, "shutting down", "UNAVAILABLE"),
            503,
            {"type": "server_error", "code": "unavailable", "param": None},
        ),
        (
            RpcFailure(S.DEADLINE_EXCEEDED, "slow", None),
            504,
            {"type": "server_error", "code": "deadline_exceeded", "param": None},
        ),
        (
            RpcFailure(S.CANCELLED, "cancelled", None),
            499,
            {"type": "invalid_request_error", "code": "cancelled", "param": None},
        ),
        (
            RpcFailure(S.INTERNAL, "load failed", "MODEL_LOAD_FAILED"),
            500,
            {"type": "server_error", "code": "model_load_failed", "param": None},
        ),
        (
            RpcFailure(S.UNKNOWN, "mystery", None),
            500,
            {"type": "server_error", "code": "unknown", "param": None},
        ),
        (
            RpcFailure(S.DATA_LOSS, "lost", None),
            500,
            {"type": "server_error", "code": "data_loss", "param": None},
        ),
    ],
    ids=lambda value: value.reason or value.code.name if isinstance(value, RpcFailure) else None,
)
async def test_grpc_error_mapping(
    client: httpx.AsyncClient, fake: FakeServer, failure, status, error
) -> None:
    fake.inference.fail = failure
    response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == status
    assert response.json() == {"error": {"message": failure.message, **error}}


async def test_embeddings_error_param_renamed(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.fail = RpcFailure(S.INVALID_ARGUMENT, "empty", "INVALID_ARGUMENT", {"field": "inputs[1]"})
    response = await client.post("/v1/embeddings", json={"model": "m", "input": ["a", ""]})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "input[1]"


def rpc_error(code: grpc.StatusCode, details: str, trailing=()) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details)


@pytest.mark.parametrize(
    "details",
    ["Sent message larger than max (2000 vs. 1000)", "Received message larger than max (5000 vs. 4096)"],
)
def test_local_grpc_size_errors_are_413(details: str) -> None:
    status, body = rpc_error_to_http(rpc_error(S.RESOURCE_EXHAUSTED, details))
    assert status == 413
    assert body["error"]["code"] == "message_too_large"
    assert body["error"]["type"] == "invalid_request_error"


def test_garbage_status_details_ignored() -> None:
    error = rpc_error(S.NOT_FOUND, "gone", [("grpc-status-details-bin", b"\xff\xfe not a proto")])
    status, body = rpc_error_to_http(error)
    assert status == 404
    assert body["error"]["code"] == "not_found"


def test_already_exists_is_a_409_conflict_not_a_500() -> None:
    # The response store answers ALREADY_EXISTS (RESPONSE_ID_EXISTS) for an id that is taken.
    assert http_status_for_grpc(S.ALREADY_EXISTS, reason="RESPONSE_ID_EXISTS") == 409


def test_plain_resource_exhausted_is_429() -> None:
    assert http_status_for_grpc(S.RESOURCE_EXHAUSTED, details="queue full") == 429


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", CHAT),
        ("/v1/chat/completions", {**CHAT, "stream": True}),
        ("/v1/embeddings", {"model": "m", "input": "hello"}),
    ],
)
@pytest.mark.parametrize("reason", ["OVERLOADED", "QUEUE_WAIT_EXCEEDED"])
async def test_overloaded_429_tells_when_to_retry(
    client: httpx.AsyncClient, fake: FakeServer, path, body, reason
) -> None:
    fake.inference.fail = RpcFailure(S.RESOURCE_EXHAUSTED, "busy", reason)
    response = await client.post(path, json=body)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == reason.lower()


@pytest.mark.parametrize(
    ("failure", "status"),
    [
        (RpcFailure(S.RESOURCE_EXHAUSTED, "no memory to load", "INSUFFICIENT_MEMORY"), 429),
        (RpcFailure(S.RESOURCE_EXHAUSTED, "too big", "MESSAGE_TOO_LARGE"), 413),
        (RpcFailure(S.RESOURCE_EXHAUSTED, "fit stopped", "FIT_TOO_SLOW"), 413),
        (RpcFailure(S.RESOURCE_EXHAUSTED, "queue full"), 429),  # no ErrorInfo: reason unknown
        (RpcFailure(S.UNAVAILABLE, "shutting down", "UNAVAILABLE"), 503),
    ],
    ids=lambda value: value.message if isinstance(value, RpcFailure) else None,
)
async def test_other_errors_carry_no_retry_after(
    client: httpx.AsyncClient, fake: FakeServer, failure, status
) -> None:
    fake.inference.fail = failure
    response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == status
    assert "retry-after" not in response.headers


async def test_malformed_json_is_400(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(
        "/v1/chat/completions",
        content=b'{"model": "x", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_json"
    assert error["type"] == "invalid_request_error"
    assert fake.inference.received == []


async def test_missing_field_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": response.json()["error"]["message"],
        "type": "invalid_request_error",
        "param": "model",
        "code": "missing_required_parameter",
    }
    assert "model" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "x", "messages": []}, "messages"),
        ({"model": "x", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"model": "x", "messages": "hello"}, "messages"),
        ({**CHAT, "temperature": "hot"}, "temperature"),
        ({**CHAT, "logit_bias": {"abc": 1}}, "logit_bias"),
        ({**CHAT, "max_tokens": 2**40}, "max_tokens"),
        ({**CHAT, "tool_choice": "sometimes"}, "tool_choice"),
        ({**CHAT, "response_format": {"type": "json_schema"}}, "response_format"),
    ],
)
async def test_invalid_values_are_400(client: httpx.AsyncClient, fake: FakeServer, body, param) -> None:
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] is not None and error["param"].startswith(param)
    assert fake.inference.received == []


async def test_non_object_body_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/embeddings", json=[1, 2])
    assert response.status_code == 400


async def test_unknown_route_and_method(client: httpx.AsyncClient) -> None:
    missing = await client.get("/v1/nothing")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    wrong_method = await client.get("/v1/chat/completions")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"


async def test_http_body_over_limit_is_413(fake: FakeServer) -> None:
    async with asgi_client(create_app(fake.target, max_message_bytes=1000)) as http:
        response = await http.post("/v1/embeddings", json={"model": "m", "input": "x" * 2000})
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "message_too_large"
        assert "x-request-id" in response.headers
    assert fake.inference.received == []


async def test_chunked_body_over_limit_is_413(fake: FakeServer) -> None:
    async def chunks():
        yield b'{"model": "m", "input": "'
        for _ in range(10):
            yield b"x" * 200
        yield b'"}'

    async with asgi_client(create_app(fake.target, max_message_bytes=1000)) as http:
        response = await http.post(
            "/v1/embeddings", content=chunks(), headers={"content-type": "application/json"}
        )
        assert "content-length" not in response.request.headers
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "message_too_large"
    assert fake.inference.received == []


async def test_grpc_request_over_limit_is_413(fake: FakeServer) -> None:
    # Each logit_bias entry is 9 bytes of JSON but 10 of protobuf: the HTTP body fits the limit while
    # the gRPC message does not, so the gRPC client refuses to send it ("Sent message larger than max").
    body = {**CHAT, "logit_bias": {str(token): 1 for token in range(1000, 9000)}}
    json_size = len(httpx.Request("POST", "http://x", json=body).content)
    async with asgi_client(create_app(fake.target, max_message_bytes=json_size + 100)) as http:
        response = await http.post("/v1/chat/completions", json=body)
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "message_too_large"
        assert "Sent message larger than max" in response.json()["error"]["message"]
    assert fake.inference.received == []


async def test_grpc_response_over_limit_is_413(fake: FakeServer) -> None:
    fake.inference.embed_response = encoders_pb2.EmbedResponse(
        model="m", embeddings=[encoders_pb2.Embedding(index=0, values=[0.5] * 4096)], dimensions=4096
    )
    async with asgi_client(create_app(fake.target, max_message_bytes=4096)) as http:
        response = await http.post("/v1/embeddings", json={"model": "m", "input": "x"})
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "message_too_large"
        assert "larger than max" in response.json()["error"]["message"]
    assert fake.inference.received[0].method == "Embed"


async def test_storage_quota_is_507_not_429(client: httpx.AsyncClient, fake: FakeServer) -> None:
    # A full store is not rate limiting: retrying later does not help, deleting something does.
    fake.inference.fail = RpcFailure(
        S.RESOURCE_EXHAUSTED, "storage quota exceeded", "STORAGE_QUOTA_EXCEEDED", {"max_items": "256"}
    )
    response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 507
    assert response.json()["error"]["code"] == "storage_quota_exceeded"
    assert http_status_for_grpc(S.RESOURCE_EXHAUSTED, reason="OVERLOADED") == 429


async def test_store_out_of_space_is_507_not_429(client: httpx.AsyncClient, fake: FakeServer) -> None:
    # A full disk is the operator's to fix: not "retry later" (429), and no Retry-After.
    fake.inference.fail = RpcFailure(S.RESOURCE_EXHAUSTED, "the store is out of space", "STORAGE_FULL", {})
    response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 507
    assert response.json()["error"]["code"] == "storage_full"
    assert "retry-after" not in response.headers
