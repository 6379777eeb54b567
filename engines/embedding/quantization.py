"""Quantized embedding encodings: sentence-transformers' ``quantize_embeddings`` with per-model calibration.

``int8``/``uint8`` map each dimension's [min, max] onto 256 steps. Ranges computed from a request's
own vectors would make the bytes of one request incomparable with another's (and a single input
has no range at all), so the ranges come from a fixed calibration set instead: the sentences
below, embedded once per loaded model, then cut and normalized as each request asks. ``binary`` and
``ubinary`` keep each dimension's sign (``value > 0``), 8 dimensions per byte, and need no ranges.
"""

from __future__ import annotations

import itertools

import numpy as np

from engines.types import EmbeddingEncoding

# Subjects from many domains, each said three ways (statement, question, request), so the
# calibration vectors spread over the space that ordinary queries and passages occupy.
_SUBJECTS = (
    "the train to the airport",
    "a recipe for lentil soup",
    "the quarterly sales report",
    "my laptop battery",
    "the new tax rules for freelancers",
    "a hiking trail in the mountains",
    "the symptoms of seasonal flu",
    "the Python function that parses dates",
    "our database backup schedule",
    "the museum's modern art collection",
    "a birthday present for my sister",
    "the football match last night",
    "interest rates on savings accounts",
    "the history of the Roman empire",
    "solar panels on a small roof",
    "the login page of the website",
    "a cheap flight to Lisbon",
    "the contract termination clause",
    "how photosynthesis works in plants",
    "the noise from the neighbours upstairs",
    "a vegan chocolate cake",
    "the printer on the third floor",
    "the election results in the capital",
    "a used electric car",
    "the side effects of this medication",
    "the weather forecast for the weekend",
    "the guitar chords of that song",
    "a refund for a cancelled order",
    "the security patch for the server",
    "the rules of chess for beginners",
    "the rent increase in my building",
    "a good novel for a long holiday",
    "the memory leak in the mobile app",
    "the migration of birds in autumn",
    "a job interview for a nurse position",
    "the speed limit on rural roads",
    "the invoice from the plumber",
    "the black hole photographed by astronomers",
    "a puppy that will not stop barking",
    "the opening hours of the city library",
)
_FRAMES = (
    "I have a question about {}.",
    "What should I know about {}?",
    "Please write a short summary of {}.",
)

#: The calibration sentences (120): every subject in every frame.
CALIBRATION_TEXTS: tuple[str, ...] = tuple(
    frame.format(subject) for subject, frame in itertools.product(_SUBJECTS, _FRAMES)
)


def needs_calibration(encoding: EmbeddingEncoding) -> bool:
    """Whether ``encoding`` maps values through per-dimension ranges (int8, uint8)."""
    return encoding in (EmbeddingEncoding.INT8, EmbeddingEncoding.UINT8)


def quantize(vectors: np.ndarray, encoding: EmbeddingEncoding, calibration: np.ndarray | None) -> np.ndarray:
    """``vectors`` (n, d) float32 in ``encoding``, with sentence-transformers' ``quantize_embeddings``.

    Args:
        vectors: the vectors as the request returns them (cut and normalized as asked).
        encoding: not FLOAT.
        calibration: for int8/uint8, calibration vectors (m, d) processed like ``vectors``; their
            per-dimension min and max are the ranges (values outside are clipped).

    Returns:
        (n, d) int8/uint8 for INT8/UINT8; (n, ceil(d / 8)) int8/uint8 packed sign bits for
        BINARY/UBINARY.

    """
    from sentence_transformers import quantize_embeddings

    return np.asarray(
        quantize_embeddings(
            np.asarray(vectors, dtype=np.float32),
            precision=encoding.value,
            calibration_embeddings=calibration if needs_calibration(encoding) else None,
        )
    )
