"""Helpers every translator uses: explicit body-to-proto field mappings, protos to JSON.

Protobuf's JSON mapping writes 64-bit integers as strings (JavaScript numbers hold 53 bits), but
the gateway's answers are for clients that read numbers as Python, Go or JSON Schema do, and
other answers already give the same kind of value (a classifier's ``created_at_unix_ms``) as a
number: :func:`proto_json` gives every integer as a JSON number.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from pydantic import BaseModel


class BodyFields:
    """An explicit field mapping from a request body model to the proto built from it.

    Every field of ``body_type`` is accounted for when the mapping is declared (at import):
    ``copied`` ones go as they are into the same-named fields of ``message_type``;
    ``by_hand`` ones the translator converts itself (other names, other types, nested messages);
    ``dropped`` ones are deliberately not sent (they steer the gateway, not the server). A body
    field renamed or added is in none of them, and a copied field the proto renamed is not one
    of its fields: either way the declaration raises instead of the value silently going missing.
    """

    def __init__(
        self,
        body_type: type[BaseModel],
        message_type: type[Message],
        copied: Collection[str],
        *,
        by_hand: Collection[str] = (),
        dropped: Collection[str] = (),
    ) -> None:
        """Check the mapping.

        Raises:
            ValueError: a body field in none of the three, or in more than one; a name that is
                not a body field; a copied name that is not a field of ``message_type``.

        """
        self.copied = tuple(copied)
        body_fields = set(body_type.model_fields)
        message_fields = set(message_type.DESCRIPTOR.fields_by_name)
        named = [*self.copied, *by_hand, *dropped]
        problems = [
            *(f"{name!r} is not a field of the body" for name in sorted(set(named) - body_fields)),
            *(f"{name!r} is named twice" for name in sorted({n for n in named if named.count(n) > 1})),
            *(
                f"{name!r} is neither copied, converted by hand nor dropped"
                for name in sorted(body_fields - set(named))
            ),
            *(
                f"copied {name!r} is not a field of the message"
                for name in self.copied
                if name not in message_fields
            ),
        ]
        if problems:
            what = f"{body_type.__name__} -> {message_type.DESCRIPTOR.full_name}"
            raise ValueError(f"{what}: " + "; ".join(problems))

    def values(self, body: BaseModel) -> dict[str, Any]:
        """Return ``{name: value}`` for the copied fields that are not ``None``.

        Meant as keyword arguments of the proto constructor. A ``None`` field is left out, so
        the proto field stays unset: its zero value, and for an ``optional`` field no presence,
        which lets the server apply its default.
        """
        values = {name: getattr(body, name) for name in self.copied}
        return {name: value for name, value in values.items() if value is not None}


_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def _well_known(descriptor: Descriptor) -> bool:
    """``google.protobuf`` types (Struct, Timestamp...) have JSON forms of their own, not field objects."""
    return descriptor.full_name.startswith("google.protobuf.")


def _int64_as_numbers(descriptor: Descriptor, data: dict[str, Any]) -> None:
    """Turn the 64-bit integers of ``data`` (``MessageToDict`` of a ``descriptor``) into ints, in place."""
    for name, value in data.items():
        field = descriptor.fields_by_name.get(name)
        if field is None:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            if value_field.type in _INT64_TYPES:
                data[name] = {key: int(item) for key, item in value.items()}
            elif value_field.message_type is not None:
                for item in value.values():
                    _int64_as_numbers(value_field.message_type, item)
        elif field.type in _INT64_TYPES:
            data[name] = [int(item) for item in value] if isinstance(value, list) else int(value)
        elif field.message_type is not None and not field.message_type.full_name.startswith(
            "google.protobuf."
        ):
            for item in value if isinstance(value, list) else [value]:
                _int64_as_numbers(field.message_type, item)


def proto_json(message: Message) -> dict[str, Any]:
    """Return a message as JSON-ready data with proto field names, fields at default values included.

    As protobuf's JSON mapping (``MessageToDict``), except that 64-bit integers are numbers, not
    strings (see the module docstring).
    """
    data = MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    _int64_as_numbers(message.DESCRIPTOR, data)
    return data
