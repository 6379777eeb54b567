"""Shared building blocks of the converters: enum tables and explicit dataclass → message mappings.

The contract names its enum values ``<ENUM>_<NAME>`` (buf's STANDARD lint), and the engines'
enums use the same ``<NAME>``s, so each table is derived from the names instead of being
written out value by value on both sides of the wire.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection
from typing import Any, Generic, TypeVar

from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from google.protobuf.message import Message

E = TypeVar("E", bound=enum.Enum)
M = TypeVar("M", bound=Message)


def enum_table(
    wire: EnumTypeWrapper, prefix: str, values: type[E], unspecified: E | None = None
) -> dict[int, E]:
    """``{wire value: engine value}`` for every member of ``values``, matched by name.

    Args:
        wire: the generated enum (e.g. ``anomaly_pb2.AnomalyBackend``).
        prefix: its value prefix (``"ANOMALY_BACKEND_"``).
        values: the engine enum; every member must have a wire value ``prefix + member.name``.
        unspecified: what ``<prefix>UNSPECIFIED`` (0) means, or None to leave it out (refused).

    Raises:
        ValueError: a member without a wire value (a contract and engine out of step; at import).

    """
    table = {wire.Value(prefix + member.name): member for member in values}
    if unspecified is not None:
        table[wire.Value(prefix + "UNSPECIFIED")] = unspecified
    return table


def wire_values(table: dict[int, E]) -> dict[E, int]:
    """The reverse of an :func:`enum_table`, without its UNSPECIFIED entry."""
    return {member: value for value, member in table.items() if value != 0}


class MessageCopy(Generic[M]):
    """An explicit field mapping from the engine dataclass ``source_type`` to ``message_type``.

    Every field of both sides is accounted for when the mapping is declared (at import): a
    field both have is copied as it is; ``given`` names the message fields the caller fills
    itself (nested messages, values the source does not hold); ``dropped`` names fields of
    either side deliberately not copied (filled later, or not sent). A field renamed on one
    side is then neither shared, given nor dropped, and the declaration raises instead of the
    value silently going missing.

    Copied values are passed as they are, so shared fields must be scalars or lists of scalars.
    """

    def __init__(
        self,
        message_type: type[M],
        source_type: type,
        *,
        given: Collection[str] = (),
        dropped: Collection[str] = (),
    ) -> None:
        """Check the mapping.

        Raises:
            ValueError: a field of either side that is neither shared, given nor dropped; a
                given field the message lacks; a dropped field neither side has.

        """
        message_fields = set(message_type.DESCRIPTOR.fields_by_name)
        source_fields = {f.name for f in dataclasses.fields(source_type)}
        self.message_type = message_type
        self.given = frozenset(given)
        dropped = frozenset(dropped)
        what = f"{source_type.__name__} -> {message_type.DESCRIPTOR.full_name}"
        problems = [
            *(f"{name!r} is not a field of the message" for name in sorted(self.given - message_fields)),
            *(
                f"dropped {name!r} is a field of neither"
                for name in sorted(dropped - message_fields - source_fields)
            ),
            *(
                f"{name!r} of the source is neither a message field nor dropped"
                for name in sorted(source_fields - message_fields - dropped)
            ),
            *(
                f"{name!r} of the message is neither copied, given nor dropped"
                for name in sorted(message_fields - source_fields - self.given - dropped)
            ),
        ]
        if problems:
            raise ValueError(f"{what}: " + "; ".join(problems))
        self.copied = tuple(sorted((source_fields & message_fields) - self.given - dropped))

    def __call__(self, source: Any, **given: Any) -> M:
        """The message for ``source``, with the ``given`` fields the mapping names (no others).

        Raises:
            TypeError: ``given`` does not name exactly the mapping's given fields.

        """
        if given.keys() != self.given:
            raise TypeError(
                f"{self.message_type.__name__} needs given fields {sorted(self.given)}, got {sorted(given)}"
            )
        return self.message_type(**{name: getattr(source, name) for name in self.copied}, **given)
