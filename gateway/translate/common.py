"""Helpers every translator uses: copying body fields into proto constructors, protos to JSON."""

from __future__ import annotations

from typing import Any

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


def proto_json(message: Message) -> dict[str, Any]:
    """Return a message as JSON-ready data with proto field names, fields at default values included."""
    return MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
