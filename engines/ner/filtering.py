"""Input limits and entity filters shared by the NER backends."""

from __future__ import annotations

from collections.abc import Iterable

from engines.encoder_types import Entity, EntityRequest
from engines.errors import InputTooLongError


def kept(entities: Iterable[Entity], request: EntityRequest) -> list[Entity]:
    """Entities scoring >= ``request.min_score`` labelled in ``request.labels`` (any if empty), by offset."""
    wanted = set(request.labels)
    return sorted(
        (e for e in entities if e.score >= request.min_score and (not wanted or e.label in wanted)),
        key=lambda e: (e.start, e.end),
    )


def check_input_characters(texts: Iterable[str], limit: int, model: str) -> None:
    """Refuse a text over ``limit`` characters before any work starts.

    NER reads a whole text (spaCy's pipeline; a transformers pipeline in overlapping windows), so
    its cost grows with the text, not with a model window: the limit bounds one call's work.

    Raises:
        InputTooLongError: the first text over ``limit`` (field ``inputs[i]``, ``input_chars``,
            ``max_chars``).

    """
    for index, text in enumerate(texts):
        if len(text) > limit:
            raise InputTooLongError(
                f"input {index} is {len(text)} characters; model {model!r} takes at most "
                f"{limit} characters per text (split it)",
                field=f"inputs[{index}]",
                index=index,
                input_chars=len(text),
                max_chars=limit,
            )
