"""Turning classifier outputs into labelled results (shared by every classification backend)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engines.encoder_types import Classification, ClassificationRequest, LabelScore


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of (n, k) logits, computed stably (max subtracted)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Element-wise logistic function."""
    return 1.0 / (1.0 + np.exp(-logits))


def probabilities(logits: np.ndarray, *, multi_label: bool) -> np.ndarray:
    """Scores in [0, 1] from (n, k) logits: sigmoid per label when ``multi_label``, else softmax.

    A single-logit model (k == 1) is a binary scorer and always gets the sigmoid.
    """
    logits = np.asarray(logits, dtype=np.float64)
    return sigmoid(logits) if multi_label or logits.shape[1] == 1 else softmax(logits)


def classifications(
    scores: np.ndarray, labels: Sequence[str], request: ClassificationRequest
) -> list[Classification]:
    """Build one :class:`Classification` per row of ``scores``.

    Args:
        scores: (n_inputs, n_labels) scores in [0, 1], columns in ``labels`` order.
        labels: label names.
        request: ``multi_label``/``threshold`` choose the predicted labels; ``all_scores`` returns
            every label, highest first.

    Single-label: ``label`` is the best label. Multi-label: ``predicted_labels`` are the labels
    scoring at least ``threshold``, highest first, and ``label`` is the first of them (empty
    when none reaches the threshold).

    """
    out = []
    for row in np.asarray(scores, dtype=np.float64):
        ranked = [LabelScore(str(labels[j]), float(row[j])) for j in np.argsort(-row, kind="stable")]
        if request.multi_label:
            predicted = [item for item in ranked if item.score >= request.threshold]
            top = predicted[0] if predicted else LabelScore("", 0.0)
        else:
            predicted, top = [], ranked[0]
        out.append(
            Classification(
                label=top.label,
                score=top.score,
                predicted_labels=predicted,
                scores=ranked if request.all_scores else [],
            )
        )
    return out
