"""Tokenize/Detokenize on every encoder backend: cross-encoder, transformers classifier, embedding head.

A spaCy pipeline has no token ids: FAILED_PRECONDITION, as for any model without a tokenizer.
"""

from __future__ import annotations

import grpc
import pytest
from universal_runtime.v1 import tokenization_pb2 as t

from tests.conftest import error_info
from tests.engines.encoders.conftest import CROSS_ENCODER, INTENT, SPACY, TEXT_CLASSIFIER, TINY_QUEUE

TEXT = "book a table for two tonight"


@pytest.mark.parametrize("model", [CROSS_ENCODER, TEXT_CLASSIFIER, INTENT, TINY_QUEUE])
async def test_encoder_backends_tokenize_and_detokenize(enc, model):
    response = await enc.Tokenize(
        t.TokenizeRequest(model=model, prompt=TEXT, return_token_strings=True, return_offsets=True)
    )
    assert response.count == len(response.token_ids) == len(response.token_strings) == len(response.offsets)
    assert response.token_strings[0] == "[CLS]" and response.token_strings[-1] == "[SEP]"
    assert response.max_context_tokens > 0
    words = [TEXT[o.start : o.end] for o in response.offsets if o.end > o.start]
    assert " ".join(words) == TEXT
    text = await enc.Detokenize(
        t.DetokenizeRequest(model=model, token_ids=response.token_ids, skip_special_tokens=True)
    )
    assert text.text == TEXT


async def test_spacy_has_no_tokenizer_ids(enc):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await enc.Tokenize(t.TokenizeRequest(model=SPACY, prompt=TEXT))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(caught.value).reason == "TASK_NOT_SUPPORTED"
