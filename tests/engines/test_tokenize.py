"""Tokenize and Detokenize on the real default models (llama.cpp and transformers SmolLM2, MiniLM)."""

from __future__ import annotations

import grpc
import pytest
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import tokenization_pb2 as t

from tests.conftest import CHAT_MODEL, EMBED_MODEL, HF_CHAT_MODEL, error_info

GENERATION_MODELS = [CHAT_MODEL, HF_CHAT_MODEL]
TEXT = "Tokenizers split text into pieces: naïve café, 123 + 456 = 579."
MESSAGES = [
    g.ChatMessage(role=g.CHAT_ROLE_SYSTEM, content="You are terse."),
    g.ChatMessage(role=g.CHAT_ROLE_USER, content="Name three primary colours."),
]


async def expect_error(call, code: grpc.StatusCode, reason: str | None = None) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, caught.value.details()
    if reason is not None:
        assert error_info(caught.value).reason == reason
    return caught.value


@pytest.mark.parametrize("model", GENERATION_MODELS)
async def test_message_count_equals_generate_prompt_tokens(inference, model):
    tokenized = await inference.Tokenize(t.TokenizeRequest(model=model, messages=MESSAGES))
    generated = await inference.Generate(
        g.GenerateRequest(
            model=model, messages=MESSAGES, parameters=g.GenerationParameters(max_tokens=1, temperature=0)
        )
    )
    assert tokenized.count == len(tokenized.token_ids) == generated.usage.prompt_tokens
    assert tokenized.max_context_tokens == 2048
    assert tokenized.rendered_prompt.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("model", GENERATION_MODELS)
async def test_prompt_count_equals_generate_prompt_tokens(inference, model):
    tokenized = await inference.Tokenize(t.TokenizeRequest(model=model, prompt=TEXT))
    generated = await inference.Generate(
        g.GenerateRequest(model=model, prompt=TEXT, parameters=g.GenerationParameters(max_tokens=1))
    )
    assert tokenized.count == generated.usage.prompt_tokens
    assert not tokenized.rendered_prompt


@pytest.mark.parametrize("model", GENERATION_MODELS)
async def test_add_generation_prompt_false_leaves_the_assistant_opening_out(inference, model):
    with_opening = await inference.Tokenize(t.TokenizeRequest(model=model, messages=MESSAGES))
    without = await inference.Tokenize(
        t.TokenizeRequest(model=model, messages=MESSAGES, add_generation_prompt=False)
    )
    assert not without.rendered_prompt.endswith("<|im_start|>assistant\n")
    assert with_opening.rendered_prompt.startswith(without.rendered_prompt)
    assert list(with_opening.token_ids[: without.count]) == list(without.token_ids)
    assert with_opening.count > without.count


@pytest.mark.parametrize("model", GENERATION_MODELS)
async def test_round_trip_gives_the_text_back(inference, model):
    tokenized = await inference.Tokenize(
        t.TokenizeRequest(model=model, prompt=TEXT, add_special_tokens=False)
    )
    detokenized = await inference.Detokenize(t.DetokenizeRequest(model=model, token_ids=tokenized.token_ids))
    assert detokenized.text == TEXT
    assert detokenized.model == model


@pytest.mark.parametrize("model", GENERATION_MODELS)
async def test_strings_and_offsets_spell_the_text(inference, model):
    response = await inference.Tokenize(
        t.TokenizeRequest(model=model, prompt=TEXT, return_token_strings=True, return_offsets=True)
    )
    assert len(response.token_strings) == len(response.offsets) == response.count
    spans = [(o.start, o.end) for o in response.offsets]
    assert "".join(TEXT[a:b] for a, b in spans) == TEXT
    assert all(a <= b for a, b in spans)
    assert "Token" in response.token_strings[0]


async def test_offsets_of_templated_messages_index_the_rendered_prompt(inference):
    response = await inference.Tokenize(
        t.TokenizeRequest(model=CHAT_MODEL, messages=MESSAGES, return_offsets=True, return_token_strings=True)
    )
    rendered = response.rendered_prompt
    assert "".join(rendered[o.start : o.end] for o in response.offsets) == rendered
    assert "<|im_start|>" in response.token_strings


async def test_special_tokens_are_skipped_on_request(inference):
    tokenized = await inference.Tokenize(t.TokenizeRequest(model=CHAT_MODEL, messages=MESSAGES))
    kept = await inference.Detokenize(t.DetokenizeRequest(model=CHAT_MODEL, token_ids=tokenized.token_ids))
    skipped = await inference.Detokenize(
        t.DetokenizeRequest(model=CHAT_MODEL, token_ids=tokenized.token_ids, skip_special_tokens=True)
    )
    assert kept.text == tokenized.rendered_prompt
    assert "<|im_start|>" not in skipped.text and "Name three primary colours." in skipped.text


async def test_encoder_tokenizer(inference):
    response = await inference.Tokenize(
        t.TokenizeRequest(
            model=EMBED_MODEL, prompt="Hello world", return_token_strings=True, return_offsets=True
        )
    )
    assert list(response.token_strings) == ["[CLS]", "hello", "world", "[SEP]"]
    assert [(o.start, o.end) for o in response.offsets] == [(0, 0), (0, 5), (6, 11), (0, 0)]
    assert response.max_context_tokens == 256
    bare = await inference.Tokenize(
        t.TokenizeRequest(model=EMBED_MODEL, prompt="Hello world", add_special_tokens=False)
    )
    assert list(bare.token_ids) == list(response.token_ids[1:-1])
    text = "a lowercase sentence, as the uncased vocabulary spells it."
    ids = (await inference.Tokenize(t.TokenizeRequest(model=EMBED_MODEL, prompt=text))).token_ids
    decoded = await inference.Detokenize(
        t.DetokenizeRequest(model=EMBED_MODEL, token_ids=ids, skip_special_tokens=True)
    )
    assert decoded.text == text


async def test_encoder_count_is_the_embed_token_count(inference):
    from universal_runtime.v1 import encoders_pb2 as e

    tokenized = await inference.Tokenize(t.TokenizeRequest(model=EMBED_MODEL, prompt=TEXT))
    embedded = await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=[TEXT]))
    assert tokenized.count == embedded.usage.prompt_tokens


# -- errors ---------------------------------------------------------------------------------------


async def test_unknown_model_is_not_found(inference):
    await expect_error(
        inference.Tokenize(t.TokenizeRequest(model="no-such-model", prompt="hi")),
        grpc.StatusCode.NOT_FOUND,
        "MODEL_NOT_FOUND",
    )
    await expect_error(
        inference.Detokenize(t.DetokenizeRequest(model="no-such-model", token_ids=[1])),
        grpc.StatusCode.NOT_FOUND,
        "MODEL_NOT_FOUND",
    )


async def test_a_model_without_a_tokenizer_is_failed_precondition(inference, models):
    from universal_runtime.v1 import model_service_pb2 as m

    await expect_error(
        inference.Tokenize(t.TokenizeRequest(model="rapidocr", prompt="hi")),
        grpc.StatusCode.FAILED_PRECONDITION,
        "TASK_NOT_SUPPORTED",
    )
    await expect_error(
        inference.Detokenize(t.DetokenizeRequest(model="rapidocr", token_ids=[1])),
        grpc.StatusCode.FAILED_PRECONDITION,
        "TASK_NOT_SUPPORTED",
    )
    # Refused from the catalog alone: the OCR model was not loaded to find out.
    status = await models.GetModel(m.GetModelRequest(name="rapidocr"))
    assert status.model.status != m.MODEL_STATUS_READY


@pytest.mark.parametrize("model", [CHAT_MODEL, HF_CHAT_MODEL, EMBED_MODEL])
@pytest.mark.parametrize("bad_id", [-1, 10_000_000])
async def test_ids_outside_the_vocabulary_are_invalid_argument(inference, model, bad_id):
    error = await expect_error(
        inference.Detokenize(t.DetokenizeRequest(model=model, token_ids=[1, bad_id])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "TOKEN_OUT_OF_VOCABULARY",
    )
    assert error_info(error).metadata["field"] == "token_ids[1]"


async def test_too_many_ids_are_invalid_argument(inference):
    # MiniLM's window is 256 tokens: at most 256 * 32 ids.
    await expect_error(
        inference.Detokenize(t.DetokenizeRequest(model=EMBED_MODEL, token_ids=[100] * (256 * 32 + 1))),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INPUT_TOO_LONG",
    )


@pytest.mark.parametrize(
    "request_",
    [
        t.TokenizeRequest(model=CHAT_MODEL),
        t.TokenizeRequest(model=CHAT_MODEL, prompt="hi", messages=MESSAGES),
        t.TokenizeRequest(prompt="hi"),
        t.TokenizeRequest(model=CHAT_MODEL, messages=[g.ChatMessage(content="no role")]),
    ],
    ids=["neither", "both", "no-model", "no-role"],
)
async def test_malformed_requests_are_invalid_argument(inference, request_):
    await expect_error(inference.Tokenize(request_), grpc.StatusCode.INVALID_ARGUMENT)


async def test_messages_for_an_encoder_are_invalid_argument(inference):
    await expect_error(
        inference.Tokenize(t.TokenizeRequest(model=EMBED_MODEL, messages=MESSAGES)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "NO_CHAT_TEMPLATE",
    )


async def test_text_that_cannot_fit_the_model_is_refused_unread(inference):
    # 32 characters per token of MiniLM's 256-token window.
    await expect_error(
        inference.Tokenize(t.TokenizeRequest(model=EMBED_MODEL, prompt="a" * (256 * 32 + 1))),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INPUT_TOO_LONG",
    )
