"""Sorting scored documents into rerank results (shared by the cross-encoder and cosine backends)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engines.encoder_types import RankedDocument, RerankRequest


def ranked(scores: Sequence[float] | np.ndarray, request: RerankRequest) -> list[RankedDocument]:
    """Documents sorted by score, highest first (ties keep request order), cut to ``top_n``.

    Args:
        scores: one relevance score per document of ``request``, in request order.
        request: ``top_n`` (None: all) and ``return_documents`` shape the result.

    """
    values = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-values, kind="stable")
    if request.top_n is not None:
        order = order[: request.top_n]
    return [
        RankedDocument(
            index=int(i),
            relevance_score=float(values[i]),
            document=request.documents[i] if request.return_documents else None,
        )
        for i in order
    ]
