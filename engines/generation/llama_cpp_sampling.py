"""Samplers of llama.cpp sequences: a request's llama.cpp sampler chain, or a numpy argmax for plain greedy.

:func:`new_sampler` builds a request's sampler: llama.cpp's chain (GBNF grammar of the output
constraint, penalties, logit bias, then greedy, or top-k/top-p/min-p, temperature and a seeded
draw), or :class:`ArgmaxSampler` when the request is greedy with no grammar and no penalties.
Both answer ``sample(ctx, index)`` and ``close()``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from engines.errors import InvalidArgumentError
from engines.generation.json_grammar import gbnf_grammar
from engines.generation.structured import output_constraint
from engines.reasons import Reason
from engines.types import GenerationRequest, SamplingParams

PENALTY_LAST_N = 64  # tokens the repetition/presence/frequency penalties look back over


class ArgmaxSampler:
    """Greedy decoding (temperature 0, no grammar, no penalties) straight from the logits.

    Picks what llama.cpp's ``logit_bias`` + ``greedy`` chain picks (the biases added in float32,
    then the first index of the largest logit) with one numpy pass over the row, about a tenth
    of the chain's cost (which copies the whole vocabulary into a candidate array per call; see
    docs/architecture/design-notes.md#other-costs-behind-bounds).
    """

    def __init__(self, vocab_size: int, logit_bias: dict[int, float]) -> None:
        self._vocab_size = vocab_size
        self._bias_ids = np.fromiter(logit_bias.keys(), dtype=np.int64, count=len(logit_bias))
        self._bias = np.fromiter(logit_bias.values(), dtype=np.float32, count=len(logit_bias))

    def sample(self, ctx: Any, index: int) -> int:
        """The token with the largest (biased) logit in row ``index`` of the last decode's output."""
        import llama_cpp

        logits = np.ctypeslib.as_array(
            llama_cpp.llama_get_logits_ith(ctx.ctx, index), shape=(self._vocab_size,)
        )
        if self._bias.size:
            logits = logits.copy()  # the context's buffer is left as decoded (logprobs read it)
            logits[self._bias_ids] += self._bias
        return int(logits.argmax())

    def close(self) -> None:
        """Nothing to free (the chain's counterpart owns a C sampler)."""


def new_sampler(request: GenerationRequest, vocab: Any, vocab_size: int, *, constrained: bool = True) -> Any:
    """The sampler of ``request``: an :class:`ArgmaxSampler` or a llama-cpp-python ``LlamaSampler`` chain.

    ``vocab`` is the model's ``llama_vocab`` pointer (the grammar's), ``vocab_size`` the token ids
    it scores. ``constrained=False`` leaves the request's output constraint out (the sampler of a
    reasoning model's think block).

    Raises:
        InvalidArgumentError: llama.cpp refused the constraint's grammar (reason INVALID_JSON_SCHEMA).

    """
    import llama_cpp
    from llama_cpp._internals import LlamaSampler

    params: SamplingParams = request.params
    constraint = output_constraint(request) if constrained else None
    penalized = params.repetition_penalty != 1.0 or params.presence_penalty or params.frequency_penalty
    if params.temperature == 0 and constraint is None and not penalized:
        return ArgmaxSampler(vocab_size, params.logit_bias)
    sampler = LlamaSampler()
    if constraint is not None:
        # Strict JSON and bounded before the native parser sees it (cached: the request's
        # validation built it already).
        grammar = gbnf_grammar(constraint)
        handle = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        if not handle:
            raise InvalidArgumentError(
                "the JSON schema produced an invalid grammar", reason=Reason.INVALID_JSON_SCHEMA
            )
        llama_cpp.llama_sampler_chain_add(sampler.sampler, handle)
    if penalized:
        sampler.add_penalties(
            vocab_size,
            PENALTY_LAST_N,
            params.repetition_penalty,
            params.frequency_penalty,
            params.presence_penalty,
        )
    if params.logit_bias:
        sampler.add_logit_bias(vocab_size, params.logit_bias)
    if params.temperature == 0:
        sampler.add_greedy()
        return sampler
    if params.top_k > 0:
        sampler.add_top_k(params.top_k)
    if params.top_p < 1.0:
        sampler.add_top_p(params.top_p, 1)
    if params.min_p > 0:
        sampler.add_min_p(params.min_p, 1)
    sampler.add_temp(params.temperature)
    sampler.add_dist(params.seed if params.seed is not None else random.randrange(2**31))
    return sampler
