"""Each kind of bad input gets a clear status with ErrorInfo, and the server stays healthy."""

from __future__ import annotations

import sys

import grpc
import pytest
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g

from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES, error_info

USER = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="hi")]


async def assert_healthy(inference) -> None:
    response = await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=["still alive"]))
    assert len(response.embeddings) == 1


async def expect_error(call, code: grpc.StatusCode, reason: str) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, caught.value.details()
    assert error_info(caught.value).reason == reason
    assert error_info(caught.value).domain == "universal-runtime"
    return caught.value


async def test_unknown_model_is_not_found(inference):
    err = await expect_error(
        inference.Generate(g.GenerateRequest(model="no-such-model", messages=USER)),
        grpc.StatusCode.NOT_FOUND,
        "MODEL_NOT_FOUND",
    )
    assert error_info(err).metadata["model"] == "no-such-model"
    await assert_healthy(inference)


async def test_unknown_model_on_a_stream_is_not_found(inference):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in inference.GenerateStream(
            g.GenerateStreamRequest(model="no-such-model", messages=USER)
        ):
            pass
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(caught.value).reason == "MODEL_NOT_FOUND"
    await assert_healthy(inference)


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (g.GenerateRequest(model=CHAT_MODEL), "messages"),
        (
            g.GenerateRequest(model=CHAT_MODEL, messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content="")]),
            "messages[0].content",
        ),
        (
            g.GenerateRequest(model=CHAT_MODEL, messages=[g.ChatMessage(content="no role")]),
            "messages[0].role",
        ),
        (g.GenerateRequest(model=CHAT_MODEL, prompt="p", messages=USER), "messages"),
        (
            g.GenerateRequest(
                model=CHAT_MODEL, messages=USER, parameters=g.GenerationParameters(max_tokens=-5)
            ),
            "parameters.max_tokens",
        ),
        (
            g.GenerateRequest(
                model=CHAT_MODEL, messages=USER, parameters=g.GenerationParameters(max_tokens=10**6)
            ),
            "parameters.max_tokens",
        ),
        (
            g.GenerateRequest(
                model=CHAT_MODEL, messages=USER, parameters=g.GenerationParameters(temperature=2.5)
            ),
            "parameters.temperature",
        ),
        (
            g.GenerateRequest(
                model=CHAT_MODEL, messages=USER, parameters=g.GenerationParameters(temperature=-0.1)
            ),
            "parameters.temperature",
        ),
        (
            g.GenerateRequest(model=CHAT_MODEL, messages=USER, parameters=g.GenerationParameters(top_p=0)),
            "parameters.top_p",
        ),
        (g.GenerateRequest(messages=USER), "model"),
    ],
)
async def test_invalid_generation_requests(inference, request_, field):
    err = await expect_error(
        inference.Generate(request_), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"
    )
    assert error_info(err).metadata["field"] == field
    await assert_healthy(inference)


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (e.EmbedRequest(model=EMBED_MODEL), "inputs"),
        (e.EmbedRequest(model=EMBED_MODEL, inputs=["ok", "  "]), "inputs[1]"),
        (e.EmbedRequest(model=EMBED_MODEL, inputs=["x"] * 5000), "inputs"),
    ],
)
async def test_invalid_embed_requests(inference, request_, field):
    err = await expect_error(inference.Embed(request_), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert error_info(err).metadata["field"] == field
    await assert_healthy(inference)


class _DiskWatch:
    """Records every file the process opens or stats while armed (via audit hooks)."""

    events: list[str] = []
    armed = False

    @classmethod
    def hook(cls, event: str, args: tuple) -> None:
        if cls.armed and event in ("open", "os.stat", "os.listdir", "os.scandir") and args:
            cls.events.append(str(args[0]))


sys.addaudithook(_DiskWatch.hook)


@pytest.mark.parametrize(
    "name", ["../x", "/etc/passwd", "..\\..\\secrets", "a/../../etc/passwd", "~/.ssh/id_rsa"]
)
async def test_path_like_model_names_are_rejected_before_touching_disk(inference, name):
    _DiskWatch.events.clear()
    _DiskWatch.armed = True
    try:
        err = await expect_error(
            inference.Embed(e.EmbedRequest(model=name, inputs=["x"])),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_MODEL_NAME",
        )
    finally:
        _DiskWatch.armed = False
    assert not [path for path in _DiskWatch.events if "passwd" in path or "ssh" in path or path.endswith("x")]
    assert "paths are not allowed" in err.details()
    await assert_healthy(inference)


async def test_classify_on_an_embed_only_catalog_entry_is_failed_precondition(inference):
    # Classify is built now (tests/engines/encoders); an entry that lists only embed still cannot do it.
    await expect_error(
        inference.Classify(e.ClassifyRequest(model=EMBED_MODEL, inputs=["x"])),
        grpc.StatusCode.FAILED_PRECONDITION,
        "TASK_NOT_SUPPORTED",
    )
    await assert_healthy(inference)


async def test_message_over_the_size_limit_is_resource_exhausted(inference):
    huge = "a" * (MAX_MESSAGE_BYTES + 1024)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=[huge]))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await assert_healthy(inference)


async def test_model_used_for_a_task_it_cannot_do(inference):
    await expect_error(
        inference.Embed(e.EmbedRequest(model=CHAT_MODEL, inputs=["x"])),
        grpc.StatusCode.FAILED_PRECONDITION,
        "TASK_NOT_SUPPORTED",
    )
    await assert_healthy(inference)


async def test_prompt_longer_than_context_is_input_too_long(inference):
    err = await expect_error(
        inference.Generate(g.GenerateRequest(model="tiny-ctx-chat", prompt="word " * 200)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INPUT_TOO_LONG",
    )
    info = error_info(err)
    assert info.metadata["context_length"] == "64"
    assert int(info.metadata["prompt_tokens"]) > 64
    assert info.metadata["prompt_tokens"] in err.details() and "64" in err.details()
    await assert_healthy(inference)


async def test_invalid_keep_alive(inference):
    await expect_error(
        inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=["x"], keep_alive="soon")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_KEEP_ALIVE",
    )


async def test_hub_ids_are_not_found_unless_the_server_allows_them(inference):
    err = await expect_error(
        inference.Embed(e.EmbedRequest(model="sentence-transformers/all-mpnet-base-v2", inputs=["x"])),
        grpc.StatusCode.NOT_FOUND,
        "MODEL_NOT_FOUND",
    )
    assert "not in the catalog" in err.details()
