"""Credentials drawn as a hostile client sends them: repeated, mixed, wrong, in any order.

Why the fuzz missed two ``authorization`` entries on one call (the first wrong, the second right,
let through): every fuzz module called a keyless server, and the key checks were tested with one
credential per call. Here a server with two keys and a gateway in front of it get 0-3 credential
entries per call, each a right key, a wrong one or a malformed one, drawn with their order. The
pass condition is the rule, written once below (:func:`_grpc_accepts`, :func:`_http_accepts`):

* gRPC: exactly one ``authorization`` entry, ``Bearer`` and a key; ``x-api-key`` metadata never
  authenticates. Anything else is UNAUTHENTICATED, on unary and streaming methods alike.
* HTTP: no ``Authorization`` and no ``x-api-key`` header sent twice; then ``Authorization: Bearer
  <key>``, or failing it ``x-api-key: <key>``. Anything else is 401.
"""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import SecretStr

from gateway.app import create_app
from service.server import start_server
from tests.conftest import EMBED_MODEL
from tests.fuzz.calls import BAD_CODES, STATS
from tests.fuzz.strategies import FUZZ_SETTINGS
from tests.gateway.gateway_fakes import asgi_client

KEY_A = "cred-Secret-a-0001"
KEY_B = "cred-Secret-b-0002"

#: ``(value, whether it is a valid credential)`` for each header; the header names' case is drawn too.
AUTHORIZATION_VALUES = [
    (f"Bearer {KEY_A}", True),
    (f"bearer  {KEY_B} ", True),
    ("Bearer wrong", False),
    (f"Bearer {KEY_A[:-1]}", False),
    (f"Basic {KEY_A}", False),
    (KEY_A, False),
    ("", False),
]
API_KEY_VALUES = [(KEY_A, True), (KEY_B, True), ("wrong", False), (f"Bearer {KEY_A}", False), ("", False)]

Entry = tuple[str, str, bool]  # (header, value, valid)


def _entries() -> st.SearchStrategy[list[Entry]]:
    authorization = st.tuples(
        st.sampled_from(["authorization", "Authorization"]), st.sampled_from(AUTHORIZATION_VALUES)
    )
    api_key = st.tuples(st.sampled_from(["x-api-key", "X-Api-Key"]), st.sampled_from(API_KEY_VALUES))
    entry = st.one_of(authorization, api_key).map(lambda drawn: (drawn[0], *drawn[1]))
    return st.lists(entry, max_size=3)


def _kind(entries: list[Entry], name: str) -> list[Entry]:
    return [entry for entry in entries if entry[0].lower() == name]


def _grpc_accepts(entries: list[Entry]) -> bool:
    authorization = _kind(entries, "authorization")
    return len(authorization) == 1 and authorization[0][2]


def _http_accepts(entries: list[Entry]) -> bool:
    authorization, api_key = _kind(entries, "authorization"), _kind(entries, "x-api-key")
    if len(authorization) > 1 or len(api_key) > 1:
        return False
    return any(valid for _, _, valid in authorization) or any(valid for _, _, valid in api_key)


@pytest.fixture(scope="module", autouse=True)
def forget_fitted():
    """Nothing to forget: this module fits nothing."""


@pytest.fixture(scope="module")
async def keyed(settings, tmp_path_factory):
    keys_file = tmp_path_factory.mktemp("credential-keys") / "keys.yaml"
    keys_file.write_text(f'team-b: "{KEY_B}"\n')
    running = await start_server(
        settings.model_copy(update={"api_key": SecretStr(KEY_A), "api_keys_file": keys_file})
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        app = create_app(f"127.0.0.1:{running.port}", api_key=KEY_A, api_keys_file=keys_file)
        async with asgi_client(app) as http:
            yield channel, http
    await running.stop(grace=0.5)


#: Methods of each kind, with a request a valid key gets a non-UNAUTHENTICATED answer to, quickly.
GRPC_CALLS = {
    "ListModels": ("/universal_runtime.v1.ModelService/ListModels", "unary"),
    "GenerateStream": ("/universal_runtime.v1.InferenceService/GenerateStream", "server_streaming"),
    "AskDocument": ("/universal_runtime.v1.InferenceService/AskDocument", "client_streaming"),
    "Ocr": ("/universal_runtime.v1.InferenceService/Ocr", "bidi"),
}


async def _grpc_code(channel: grpc.aio.Channel, method: str, metadata: tuple) -> grpc.StatusCode:
    path, kind = GRPC_CALLS[method]
    kwargs = {"request_serializer": None, "response_deserializer": None}
    try:
        if kind == "unary":
            await channel.unary_unary(path, **kwargs)(b"", metadata=metadata, timeout=30)
        elif kind == "server_streaming":
            async for _ in channel.unary_stream(path, **kwargs)(b"", metadata=metadata, timeout=30):
                pass
        elif kind == "client_streaming":
            await channel.stream_unary(path, **kwargs)(iter([b""]), metadata=metadata, timeout=30)
        else:
            async for _ in channel.stream_stream(path, **kwargs)(iter([b""]), metadata=metadata, timeout=30):
                pass
    except grpc.aio.AioRpcError as err:
        assert KEY_A not in (err.details() or "") and KEY_B not in (err.details() or "")
        return err.code()
    return grpc.StatusCode.OK


def _run(loop: asyncio.AbstractEventLoop, coroutine) -> object:
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


async def test_repeated_or_mixed_credentials_over_grpc(keyed):
    channel, _ = keyed
    loop = asyncio.get_running_loop()

    @FUZZ_SETTINGS
    @given(entries=_entries(), method=st.sampled_from(sorted(GRPC_CALLS)))
    @example(
        entries=[("authorization", "Bearer wrong", False), ("authorization", f"Bearer {KEY_A}", True)],
        method="ListModels",
    )
    def case(entries: list[Entry], method: str) -> None:
        # gRPC metadata keys are lower case; x-api-key travels as metadata but opens nothing.
        metadata = tuple((header.lower(), value) for header, value, _ in entries)
        code = _run(loop, _grpc_code(channel, method, metadata))
        STATS[f"credentials {method}:{code.name}"] += 1
        assert code not in BAD_CODES, f"{code.name} for {method} with {entries}"
        if _grpc_accepts(entries):
            assert code is not grpc.StatusCode.UNAUTHENTICATED, f"{method} refused one valid key {entries}"
        else:
            assert code is grpc.StatusCode.UNAUTHENTICATED, f"{code.name} for {method} with {entries}"

    await asyncio.to_thread(case)


HTTP_CALLS = {
    "GET /v1/models": ("GET", "/v1/models", None),
    "POST /v1/embeddings": ("POST", "/v1/embeddings", {"model": EMBED_MODEL, "input": "hi"}),
    "POST /v1/messages/count_tokens": (
        "POST",
        "/v1/messages/count_tokens",
        {"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]},
    ),
}


async def test_repeated_or_mixed_credential_headers_over_http(keyed):
    _, http = keyed
    loop = asyncio.get_running_loop()

    async def send(route: str, headers: list[tuple[str, str]]) -> httpx.Response:
        verb, path, body = HTTP_CALLS[route]
        return await http.request(verb, path, json=body, headers=headers)

    @FUZZ_SETTINGS
    @given(entries=_entries(), route=st.sampled_from(sorted(HTTP_CALLS)))
    @example(entries=[("x-api-key", KEY_A, True), ("x-api-key", "wrong", False)], route="GET /v1/models")
    def case(entries: list[Entry], route: str) -> None:
        answer = _run(loop, send(route, [(header, value) for header, value, _ in entries]))
        assert answer.status_code < 500, f"{answer.status_code} for {route} with {entries}: {answer.text}"
        assert KEY_A not in answer.text and KEY_B not in answer.text
        if _http_accepts(entries):
            assert answer.status_code != 401, f"{route} refused one valid key {entries}: {answer.text}"
        else:
            assert answer.status_code == 401, f"{answer.status_code} for {route} with {entries}"

    await asyncio.to_thread(case)
