"""Entity filters shared by the NER backends."""

from __future__ import annotations

from collections.abc import Iterable

from engines.encoder_types import Entity, EntityRequest


def kept(entities: Iterable[Entity], request: EntityRequest) -> list[Entity]:
    """Entities scoring >= ``request.min_score`` labelled in ``request.labels`` (any if empty), by offset."""
    wanted = set(request.labels)
    return sorted(
        (e for e in entities if e.score >= request.min_score and (not wanted or e.label in wanted)),
        key=lambda e: (e.start, e.end),
    )
