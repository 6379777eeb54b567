"""Shared building blocks of the converters: enum tables and dataclass → message copies.

The contract names its enum values ``<ENUM>_<NAME>`` (buf's STANDARD lint), and the engines'
enums use the same ``<NAME>``s, so each table is derived from the names instead of being
written out value by value on both sides of the wire.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection
from typing import Any, TypeVar

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


def message_from(message_type: type[M], source: Any, *, skip: Collection[str] = (), **fields: Any) -> M:
    """A ``message_type`` with every field of the dataclass ``source`` that the message also has.

    Fields in ``skip`` are left out and ``fields`` override or add values (e.g. nested messages).
    Values are passed as they are, so shared fields must be scalars or lists of scalars.
    """
    declared = message_type.DESCRIPTOR.fields_by_name
    copied = {
        f.name: getattr(source, f.name)
        for f in dataclasses.fields(source)
        if f.name in declared and f.name not in skip and f.name not in fields
    }
    return message_type(**copied, **fields)
