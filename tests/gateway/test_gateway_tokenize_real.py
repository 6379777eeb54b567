"""``/tokenize``, ``/detokenize`` and ``/v1/embeddings`` encodings through the gateway, on the real models."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from gateway.app import create_app
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES
from tests.gateway.gateway_fakes import asgi_client

MESSAGES = [{"role": "user", "content": "Name three primary colours."}]


@pytest.fixture
async def http(server):
    async with asgi_client(
        create_app(f"127.0.0.1:{server.port}", max_message_bytes=MAX_MESSAGE_BYTES)
    ) as client:
        yield client


async def test_tokenize_prompt_in_vllms_shape(http):
    response = await http.post(
        "/tokenize", json={"model": CHAT_MODEL, "prompt": "Hello world", "return_token_strs": True}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"count", "max_model_len", "tokens", "token_strs"}
    assert body["count"] == len(body["tokens"]) == len(body["token_strs"])
    assert body["max_model_len"] == 2048
    back = await http.post("/detokenize", json={"model": CHAT_MODEL, "tokens": body["tokens"]})
    assert back.status_code == 200, back.text
    assert back.json() == {"prompt": "Hello world"}


async def test_tokenize_messages_counts_a_chat_completions_prompt(http):
    tokenized = (await http.post("/tokenize", json={"model": CHAT_MODEL, "messages": MESSAGES})).json()
    completion = await http.post(
        "/v1/chat/completions", json={"model": CHAT_MODEL, "messages": MESSAGES, "max_tokens": 1}
    )
    assert completion.status_code == 200, completion.text
    assert tokenized["count"] == completion.json()["usage"]["prompt_tokens"]
    assert tokenized["token_strs"] is None
    shorter = await http.post(
        "/tokenize",
        json={
            "model": CHAT_MODEL,
            "messages": MESSAGES,
            "add_generation_prompt": False,
            "return_offsets": True,
        },
    )
    body = shorter.json()
    assert body["count"] < tokenized["count"]
    assert "".join(body["prompt"][a:b] for a, b in body["offsets"]) == body["prompt"]


async def test_encoder_tokenize_with_offsets(http):
    body = (
        await http.post(
            "/tokenize", json={"model": EMBED_MODEL, "prompt": "Hello world", "return_offsets": True}
        )
    ).json()
    assert body["count"] == 4 and body["max_model_len"] == 256
    assert body["offsets"] == [[0, 0], [0, 5], [6, 11], [0, 0]]


@pytest.mark.parametrize(
    ("path", "payload", "status"),
    [
        ("/tokenize", {"model": "no-such-model", "prompt": "hi"}, 404),
        ("/detokenize", {"model": "no-such-model", "tokens": [1]}, 404),
        ("/tokenize", {"model": "rapidocr", "prompt": "hi"}, 400),
        ("/detokenize", {"model": CHAT_MODEL, "tokens": [1, 10_000_000]}, 400),
        ("/detokenize", {"model": CHAT_MODEL, "tokens": [-1]}, 400),
        ("/detokenize", {"model": CHAT_MODEL, "tokens": ["x"]}, 400),
        ("/tokenize", {"model": CHAT_MODEL}, 400),
        ("/tokenize", {"model": CHAT_MODEL, "prompt": "hi", "messages": MESSAGES}, 400),
        ("/tokenize", {"model": EMBED_MODEL, "messages": MESSAGES}, 400),
        ("/tokenize", {"model": CHAT_MODEL, "prompt": "a" * (MAX_MESSAGE_BYTES + 1)}, 413),
    ],
    ids=[
        "unknown-model",
        "unknown-model-detokenize",
        "ocr-model",
        "id-over-vocabulary",
        "negative-id",
        "id-not-a-number",
        "no-prompt",
        "prompt-and-messages",
        "messages-to-encoder",
        "too-long",
    ],
)
async def test_bad_requests(http, path, payload, status):
    response = await http.post(path, json=payload)
    assert response.status_code == status, response.text
    assert "error" in response.json()


# -- /v1/embeddings encodings -------------------------------------------------------------------


async def embeddings(http, encoding_format: str, **extra) -> list:
    response = await http.post(
        "/v1/embeddings",
        json={"model": EMBED_MODEL, "input": ["a cat", "a dog"], "encoding_format": encoding_format, **extra},
    )
    assert response.status_code == 200, response.text
    return [item["embedding"] for item in response.json()["data"]]


@pytest.mark.parametrize(
    ("encoding_format", "width", "low", "high"),
    [("int8", 384, -128, 127), ("uint8", 384, 0, 255), ("binary", 48, -128, 127), ("ubinary", 48, 0, 255)],
)
async def test_quantized_encodings(http, encoding_format, width, low, high):
    vectors = np.array(await embeddings(http, encoding_format))
    assert vectors.shape == (2, width)
    assert vectors.dtype.kind == "i" and vectors.min() >= low and vectors.max() <= high


async def test_binary_is_ubinary_minus_128(http):
    signed = np.array(await embeddings(http, "binary", dimensions=100))
    unsigned = np.array(await embeddings(http, "ubinary", dimensions=100))
    assert signed.shape == (2, 13)  # ceil(100 / 8)
    assert (signed == unsigned - 128).all()


async def test_base64_is_the_float_vector(http):
    floats = np.array(await embeddings(http, "float"), dtype=np.float32)
    decoded = np.array(
        [np.frombuffer(base64.b64decode(s), dtype="<f4") for s in await embeddings(http, "base64")]
    )
    np.testing.assert_allclose(decoded, floats, atol=1e-6)


async def test_unknown_encoding_format_is_400(http):
    response = await http.post(
        "/v1/embeddings", json={"model": EMBED_MODEL, "input": "x", "encoding_format": "int4"}
    )
    assert response.status_code == 400, response.text
