"""Per-sequence next-token sampling over torch logits, in llama.cpp's and vLLM's order.

Order of transforms (each optional): output constraint mask, ``logit_bias``, penalties over
the generated tokens (repetition: CTRL-style, Keskar et al. 2019, positive logits divided and
negative ones multiplied by the penalty; presence/frequency: OpenAI's additive form,
``logit -= presence * (count > 0) + frequency * count``), then greedy argmax when the
temperature is 0, else temperature, top-k, top-p (nucleus, Holtzman et al. 2019), min-p
(tokens below ``min_p`` times the best probability) and a draw from the per-sequence
``torch.Generator`` seeded with ``seed``, so the same seed and request give the same text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from engines.types import SamplingParams

if TYPE_CHECKING:
    from engines.generation.grammar_constraint import GrammarConstraint


@dataclass(eq=False)
class SequenceSampler:
    """Sampling state of one sequence.

    Args:
        params: the request's sampling parameters.
        vocab_size: rows of the model's logits (the output layer's width).
        device: where the logits live (the generator and counts go there too).
        constraint: token mask enforcing structured output, or None.

    """

    params: SamplingParams
    vocab_size: int
    device: str
    constraint: GrammarConstraint | None = None
    generator: torch.Generator | None = field(default=None, init=False)
    counts: torch.Tensor | None = field(default=None, init=False)  # [vocab] generated-token counts
    bias: torch.Tensor | None = field(default=None, init=False)  # [vocab] logit_bias as a dense row

    def __post_init__(self) -> None:
        params = self.params
        if params.temperature > 0:
            self.generator = torch.Generator(device=self.device)
            self.generator.manual_seed(params.seed if params.seed is not None else random.randrange(2**63))
        if params.repetition_penalty != 1.0 or params.presence_penalty or params.frequency_penalty:
            self.counts = torch.zeros(self.vocab_size, dtype=torch.float32, device=self.device)
        if params.logit_bias:
            self.bias = torch.zeros(self.vocab_size, dtype=torch.float32, device=self.device)
            ids = torch.tensor(list(params.logit_bias), dtype=torch.long, device=self.device)
            values = torch.tensor(list(params.logit_bias.values()), dtype=torch.float32, device=self.device)
            self.bias[ids] = values

    def sample(self, logits: torch.Tensor) -> int:
        """The next token id from one row of raw logits (``[vocab]``, any float dtype)."""
        scores = logits.float()
        modified = False
        if self.constraint is not None:
            scores = scores.masked_fill(
                ~self.constraint.allowed(scores.shape[0], scores.device), float("-inf")
            )
            modified = True
        if self.bias is not None:
            scores = scores + self.bias
            modified = True
        if self.counts is not None:
            scores = self._penalized(scores if modified else scores.clone())
        params = self.params
        if params.temperature == 0:
            return int(torch.argmax(scores))
        scores = scores / params.temperature
        if params.top_k > 0 and params.top_k < scores.shape[0]:
            kth = torch.topk(scores, params.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            # Keep the smallest prefix whose mass reaches top_p (the best token always stays).
            drop_sorted = (sorted_probs.cumsum(0) - sorted_probs) >= params.top_p
            probs = probs.masked_fill(torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted), 0.0)
        if params.min_p > 0:
            probs = probs.masked_fill(probs < params.min_p * probs.max(), 0.0)
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def _penalized(self, scores: torch.Tensor) -> torch.Tensor:
        assert self.counts is not None
        params = self.params
        seen = self.counts > 0
        if params.repetition_penalty != 1.0:
            penalized = torch.where(
                scores > 0, scores / params.repetition_penalty, scores * params.repetition_penalty
            )
            scores = torch.where(seen, penalized, scores)
        if params.presence_penalty:
            scores = scores - params.presence_penalty * seen.float()
        if params.frequency_penalty:
            scores = scores - params.frequency_penalty * self.counts
        return scores

    def accept(self, token: int) -> None:
        """Record a generated token (penalty counts, constraint state)."""
        if self.counts is not None and 0 <= token < self.vocab_size:
            self.counts[token] += 1
        if self.constraint is not None:
            self.constraint.accept(token)
