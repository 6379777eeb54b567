"""Helpers every translator uses: copying body fields into proto constructors, protos to JSON.

Protobuf's JSON mapping writes 64-bit integers as strings (JavaScript numbers hold 53 bits), but
the gateway's answers are for clients that read numbers as Python, Go or JSON Schema do, and
other answers already give the same kind of value (a classifier's ``created_at_unix_ms``) as a
number: :func:`proto_json` gives every integer as a JSON number.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from pydantic import BaseModel


def set_fields(body: BaseModel, *names: str) -> dict[str, Any]:
    """Return ``{name: getattr(body, name)}`` for the named body fields that are not ``None``.

    Meant as keyword arguments of a proto constructor whose fields have the body's names. A
    ``None`` field is left out, so the proto field stays unset: its zero value, and for an
    ``optional`` field no presence, which lets the server apply its default.

    Raises:
        AttributeError: ``body`` has no attribute of one of the names.

    """
    values = {name: getattr(body, name) for name in names}
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
