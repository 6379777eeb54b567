"""The transformers engine's helpers on small inputs: batched KV cache, torch sampling, token bytes."""

from __future__ import annotations

import pytest
import torch

from engines.generation.hf_batch_cache import MIN_CAPACITY, BatchKVCache
from engines.generation.hf_vocab import gpt2_byte_decoder
from engines.generation.torch_sampling import SequenceSampler
from engines.types import SamplingParams


@pytest.fixture(scope="module")
def tiny_model():
    """A randomly initialised two-layer Llama with grouped-query attention (no download, milliseconds)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_config(LlamaConfig, max_position_embeddings=256)).eval()


def tiny_config(config_class, **extra):
    return config_class(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        **extra,
    )


def full_logits(model, tokens: list[int]) -> torch.Tensor:
    """Last-position logits of ``tokens`` run from scratch, without any cache."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([tokens]), use_cache=False).logits[0, -1]


def prefill(model, tokens: list[int]) -> tuple[BatchKVCache, torch.Tensor]:
    cache = BatchKVCache()
    cache.mask = torch.ones(1, len(tokens), dtype=torch.long)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([tokens]), past_key_values=cache, use_cache=True).logits[0, -1]
    return cache, logits


def decode(model, cache: BatchKVCache, next_tokens: list[int], positions: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(
            input_ids=torch.tensor([[t] for t in next_tokens]),
            attention_mask=cache.step_mask(1),
            position_ids=torch.tensor([[p] for p in positions]),
            past_key_values=cache,
            use_cache=True,
        ).logits[:, -1]


def test_rows_joined_and_dropped_decode_as_if_alone(tiny_model):
    short, long = [1, 2, 3, 4, 5], [9, 8, 7, 6, 5, 4, 3, 2, 1]
    batch, _ = prefill(tiny_model, short)
    other, _ = prefill(tiny_model, long)
    batch.extend(other)
    assert batch.batch_size == 2
    assert batch.mask.tolist()[0] == [0, 0, 0, 0, 1, 1, 1, 1, 1]

    logits = decode(tiny_model, batch, [10, 11], [len(short), len(long)])
    torch.testing.assert_close(logits[0], full_logits(tiny_model, [*short, 10]), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(logits[1], full_logits(tiny_model, [*long, 11]), atol=1e-5, rtol=1e-4)

    # The long row leaves: the short row keeps its cells and the shared left padding goes.
    batch.keep([0])
    assert batch.mask.tolist() == [[1] * (len(short) + 1)]
    assert batch.layers[0].keys.shape[-2] == len(short) + 1
    logits = decode(tiny_model, batch, [12], [len(short) + 1])
    torch.testing.assert_close(logits[0], full_logits(tiny_model, [*short, 10, 12]), atol=1e-5, rtol=1e-4)


def test_cache_grows_past_its_capacity_in_place(tiny_model):
    tokens = [3, 1, 4]
    cache, logits = prefill(tiny_model, tokens)
    for _ in range(MIN_CAPACITY + 5):
        tokens.append(int(logits.argmax()))
        logits = decode(tiny_model, cache, [tokens[-1]], [len(tokens) - 1])[0]
    assert cache.layers[0].keys.shape[-2] == len(tokens)
    assert cache.allocated_bytes > 0
    torch.testing.assert_close(logits, full_logits(tiny_model, tokens), atol=1e-4, rtol=1e-4)


def test_full_attention_check(tiny_model):
    from transformers import MistralConfig

    assert BatchKVCache.supports(tiny_model.config)
    assert not BatchKVCache.supports(tiny_config(MistralConfig, sliding_window=16))


LOGITS = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))


def draws(params: SamplingParams, n: int = 300, logits: torch.Tensor = LOGITS) -> set[int]:
    sampler = SequenceSampler(params, logits.shape[0], "cpu")
    return {sampler.sample(logits) for _ in range(n)}


def test_greedy_and_logit_bias():
    assert draws(SamplingParams(temperature=0), 3) == {0}
    assert draws(SamplingParams(temperature=0, logit_bias={0: -100.0, 2: 5.0}), 3) == {2}


def test_truncation_filters_keep_the_right_tokens():
    assert draws(SamplingParams(temperature=1.0, top_k=2, seed=1)) == {0, 1}
    assert draws(SamplingParams(temperature=1.0, top_p=0.6, seed=2)) == {0, 1}  # 0.5 < 0.6 <= 0.8
    assert draws(SamplingParams(temperature=1.0, top_p=0.4, seed=3)) == {0}
    assert draws(SamplingParams(temperature=1.0, min_p=0.5, seed=4)) == {0, 1}  # >= 0.25
    assert draws(SamplingParams(temperature=1.0, seed=5), 2000) == {0, 1, 2, 3}


def test_same_seed_same_draws():
    params = SamplingParams(temperature=1.5, seed=77)
    a, b = SequenceSampler(params, 4, "cpu"), SequenceSampler(params, 4, "cpu")
    assert [a.sample(LOGITS) for _ in range(50)] == [b.sample(LOGITS) for _ in range(50)]


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0, repetition_penalty=1.9),
        SamplingParams(temperature=0, presence_penalty=2.0),
        SamplingParams(temperature=0, frequency_penalty=1.0),
    ],
)
def test_penalties_push_away_from_generated_tokens(params):
    logits = torch.tensor([2.0, 1.5, 0.0, -1.0])
    sampler = SequenceSampler(params, 4, "cpu")
    assert sampler.sample(logits) == 0
    sampler.accept(0)
    assert sampler.sample(logits) == 1


def test_repetition_penalty_is_ctrl_style():
    sampler = SequenceSampler(SamplingParams(temperature=0, repetition_penalty=2.0), 3, "cpu")
    for token in (0, 1):
        sampler.accept(token)
    scores = sampler._penalized(torch.tensor([4.0, -1.0, 3.0]))
    assert scores.tolist() == [2.0, -2.0, 3.0]  # positive divided, negative multiplied, unseen kept


def test_byte_decoder_covers_every_byte():
    decoder = gpt2_byte_decoder()
    assert sorted(decoder.values()) == list(range(256))
    assert decoder["Ġ"] == ord(" ") and decoder["Ċ"] == ord("\n")
