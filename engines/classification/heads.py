"""Scikit-learn classifier heads over sentence embeddings: scoring, fitting, and safe files.

Two kinds of heads use this module:

* heads shipped in an installed package and named by the operator's catalog (the
  ``rag-intent-classifier`` package's joblib files): trusted like any installed code;
* custom heads fitted through the API (``FitClassifier``): clients cause these files to be
  written and loaded, so they are saved with skops (https://skops.readthedocs.io/en/stable/persistence.html),
  never pickle, and loaded only when ``skops.io.get_untrusted_types`` finds nothing outside
  :data:`TRUSTED_TYPES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engines.capabilities import Embedder
from engines.encoder_types import ClassificationRequest, ClassificationResult
from engines.errors import FailedPreconditionError, ModelLoadError
from engines.executor import DeviceExecutor
from engines.reasons import Reason
from engines.scoring import classifications, probabilities
from engines.types import EmbeddingRequest, Truncation

# Types a custom head file may contain beyond skops' defaults (which already cover scikit-learn's
# linear models and numpy arrays): none.
TRUSTED_TYPES: frozenset[str] = frozenset()


def head_scores(head: Any, vectors: np.ndarray, *, multi_label: bool) -> np.ndarray:
    """Scores in [0, 1] of shape (n, n_classes), columns in ``head.classes_`` order.

    ``predict_proba`` when the head has it (logistic regression, naive Bayes); otherwise the
    ``decision_function`` margins through softmax, or sigmoid when ``multi_label`` (linear SVMs,
    ridge, SGD with hinge loss, whose margins are not probabilities).
    """
    if hasattr(head, "predict_proba"):
        return np.asarray(head.predict_proba(vectors), dtype=np.float64)
    margins = np.asarray(head.decision_function(vectors), dtype=np.float64)
    if margins.ndim == 1:  # binary: the margin of classes_[1]
        margins = np.stack([-margins, margins], axis=1)
    return probabilities(margins, multi_label=multi_label)


def label_names(classes: Sequence[Any], label_map: Mapping[Any, Any] | None) -> list[str]:
    """Human-readable names of a head's classes.

    ``label_map`` maps class ids to names; entries written the other way round (name → id, as
    some packages do for labels added later) are read both ways: whichever side is a number is
    the id. Classes with no name keep their own string.
    """
    names: dict[str, str] = {}
    for key, value in (label_map or {}).items():
        key_s, value_s = str(key), str(value)
        if _is_int(key_s) and not _is_int(value_s):
            names[key_s] = value_s
        elif _is_int(value_s) and not _is_int(key_s):
            names[value_s] = key_s
    return [names.get(str(c), str(c)) for c in classes]


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


def fit_logistic_head(vectors: np.ndarray, labels: Sequence[str]) -> tuple[Any, float]:
    """Fit a multinomial logistic regression on unit-norm embeddings (blocking).

    Returns:
        the fitted head and its accuracy on the training examples.

    """
    from sklearn.linear_model import LogisticRegression

    # A large C: a few examples per class on unit vectors need little regularisation to separate.
    head = LogisticRegression(C=10.0, max_iter=2000)
    head.fit(vectors, np.asarray(labels))
    accuracy = float(np.mean(head.predict(vectors) == np.asarray(labels)))
    return head, accuracy


def dump_head(head: Any) -> bytes:
    """``head`` as skops bytes (what :func:`load_head` reads back from a file)."""
    import skops.io as sio

    return sio.dumps(head)


def load_head(path: Path) -> Any:
    """Load a skops head, refusing files that hold types outside skops' defaults and :data:`TRUSTED_TYPES`.

    Raises:
        ModelLoadError: unreadable file, or untrusted types in it (reason UNTRUSTED_MODEL_FILE).

    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelLoadError(
            f"classifier file {path.name} is unreadable", reason=Reason.MODEL_FILE_INVALID
        ) from exc
    return load_head_bytes(data, path.name)


def load_head_bytes(data: bytes, label: str) -> Any:
    """:func:`load_head` of a head's skops bytes; ``label`` names it in errors (a file or key name).

    Raises:
        ModelLoadError: unreadable bytes, or untrusted types in them (reason UNTRUSTED_MODEL_FILE).

    """
    import skops.io as sio

    try:
        untrusted = set(sio.get_untrusted_types(data=data))
    except Exception as exc:
        raise ModelLoadError(
            f"classifier file {label} is unreadable", reason=Reason.MODEL_FILE_INVALID
        ) from exc
    refused = untrusted - TRUSTED_TYPES
    if refused:
        raise ModelLoadError(
            f"classifier file {label} holds untrusted types: {', '.join(sorted(refused))}",
            reason=Reason.UNTRUSTED_MODEL_FILE,
        )
    return sio.loads(data, trusted=sorted(untrusted))


class HeadClassifier:
    """A :class:`~engines.capabilities.Classifier`: an embedder's vectors scored by a fitted head.

    Serves both the catalog's embedding-head models and custom classifiers fitted through the
    API; the embedder is borrowed (its owner loads and unloads it).

    Args:
        embedder: turns texts into vectors (batched by its own engine).
        head: a fitted scikit-learn classifier over those vectors.
        labels: names of ``head.classes_``, in order.
        executor: where the head's (blocking, small) scoring runs.
        normalize: scale vectors to unit norm first (as they were for fitting).

    """

    def __init__(
        self,
        embedder: Embedder,
        head: Any,
        labels: Sequence[str],
        executor: DeviceExecutor,
        *,
        normalize: bool,
    ) -> None:
        self._embedder = embedder
        self._head = head
        self._labels = list(labels)
        self._executor = executor
        self._normalize = normalize

    async def classify(self, request: ClassificationRequest) -> ClassificationResult:
        """One classification per input, in order.

        Raises:
            FailedPreconditionError: ``candidate_labels`` given (a head has fixed labels).
            InputTooLongError, ResourceExhaustedError: from the embedder.

        """
        if request.candidate_labels:
            raise FailedPreconditionError(
                "this classifier has fixed labels; candidate_labels need an embedding model",
                reason=Reason.ZERO_SHOT_NOT_SUPPORTED,
                field="candidate_labels",
            )
        embedded = await self._embedder.embed(
            EmbeddingRequest(
                inputs=request.inputs,
                normalize=self._normalize,
                truncation=request.truncation or Truncation.END,
            )
        )
        scores = await self._executor.run(
            head_scores, self._head, embedded.vectors, multi_label=request.multi_label
        )
        return ClassificationResult(
            classifications(scores, self._labels, request), prompt_tokens=embedded.prompt_tokens
        )
