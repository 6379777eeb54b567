"""Hybrid ranking of page blocks for a question: dense (embedding) ranks fused with lexical ranks.

Dense ranking alone puts "Invoice number: ..." above "Total due: ..." for "What is the invoice
total?" (the shared word "invoice" dominates a short block's vector); the lexical ranking counts
the question's content words that a block holds as whole words ("total", not "subtotal").
The two are fused by reciprocal rank fusion (Cormack, Clarke and Büttcher, "Reciprocal rank
fusion outperforms Condorcet and individual rank learning methods", SIGIR 2009): each block
scores the sum of ``1 / (k + rank)`` over the rankings, with their ``k`` = 60.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

RRF_K = 60
_WORD = re.compile(r"\w+")
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "the",
        "this",
        "that",
        "to",
        "was",
        "were",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "with",
    ]
)


def content_words(text: str) -> set[str]:
    """Lower-cased words of ``text`` without English function words."""
    return {w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOPWORDS}


def lexical_ranking(question: str, texts: Sequence[str]) -> list[int]:
    """Indices of ``texts`` by the number of the question's content words each holds, most first.

    Ties keep document order. Bounded by the texts' total length.
    """
    wanted = content_words(question)
    counts = [len(wanted & content_words(text)) for text in texts]
    return sorted(range(len(texts)), key=lambda i: -counts[i])


def fuse_rankings(*rankings: Sequence[int]) -> list[int]:
    """Reciprocal rank fusion of rankings of the same items (each a list of indices, best first).

    Returns every index that appears in any ranking, best first; an index missing from a
    ranking gets nothing from it.
    """
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, index in enumerate(ranking):
            scores[index] = scores.get(index, 0.0) + 1.0 / (RRF_K + rank + 1)
    return sorted(scores, key=lambda index: (-scores[index], index))
