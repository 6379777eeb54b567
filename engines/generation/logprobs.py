"""Log probabilities of the next token from raw logits (shared by the engines)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engines.types import TokenLogprob, TokenLogprobs


def token_logprobs(
    logits: np.ndarray, sampled: int, top_n: int, token_text: Callable[[int], str]
) -> TokenLogprobs:
    """Log-softmax of ``logits`` (shape ``(n_vocab,)``) for the sampled token and the ``top_n`` best.

    Values are natural logs of the model's own distribution (before temperature and other
    sampling transforms, as OpenAI and vLLM report them); all are <= 0 and the alternatives are
    sorted most likely first.
    """
    values = logits.astype(np.float64, copy=False)
    peak = float(values.max())
    log_total = peak + float(np.log(np.exp(values - peak).sum()))

    def entry(token_id: int) -> TokenLogprob:
        return TokenLogprob(token_id, token_text(token_id), min(0.0, float(values[token_id]) - log_total))

    top: tuple[TokenLogprob, ...] = ()
    if top_n > 0:
        best = np.argpartition(-values, top_n - 1)[:top_n]
        best = best[np.argsort(-values[best], kind="stable")]
        top = tuple(entry(int(i)) for i in best)
    return TokenLogprobs(entry(sampled), top)
