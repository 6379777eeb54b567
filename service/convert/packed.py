"""Filling repeated numeric proto fields from numpy arrays at memory-copy speed.

``field.extend(array.tolist())`` makes one Python object per value and appends them one by one
(about 25 ns a value: 0.25 ms for a 10,000-row score column, 0.75 ms for an anomaly response's
three columns). A packed repeated field of fixed-width values is, on the wire, its key, its byte
length and the values' little-endian bytes (protobuf encoding guide, "Packed Repeated Fields":
https://protobuf.dev/programming-guides/encoding/#packed). :func:`merge_packed` writes that form
and lets the protobuf runtime parse it into the message, which it does as one copy. What callers
receive is unchanged: the same fields with the same values.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

#: Wire layout of each fixed-width scalar type. A bool is a varint, and the varints of 0 and 1
#: are the single bytes 0x00 and 0x01.
_WIRE_DTYPES: dict[int, str] = {
    FieldDescriptor.TYPE_DOUBLE: "<f8",
    FieldDescriptor.TYPE_FLOAT: "<f4",
    FieldDescriptor.TYPE_FIXED64: "<u8",
    FieldDescriptor.TYPE_SFIXED64: "<i8",
    FieldDescriptor.TYPE_FIXED32: "<u4",
    FieldDescriptor.TYPE_SFIXED32: "<i4",
    FieldDescriptor.TYPE_BOOL: "u1",
}
_WIRE_TYPE_LEN = 2  # length-delimited: the wire type of a packed field


def _varint(value: int) -> bytes:
    """Base-128 varint, least significant group first (encoding guide, "Base 128 Varints")."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def packed_field_bytes(field: FieldDescriptor, values: np.ndarray) -> bytes:
    """Wire bytes of the repeated field ``field`` holding ``values`` in packed form.

    Args:
        field: a repeated field of a fixed-width scalar type (double, float, fixed32/64,
            sfixed32/64) or bool.
        values: the values, any shape (flattened in C order); converted to the field's type
            (for bool, nonzero is true).

    Returns:
        ``b""`` for no values (an empty repeated field is absent on the wire).

    Raises:
        TypeError: ``field`` is not repeated or its type has no fixed-width packed form
            (varint integers, strings, messages).

    """
    dtype = _WIRE_DTYPES.get(field.type)
    if dtype is None or not field.is_repeated:
        raise TypeError(f"{field.full_name} is not a repeated fixed-width scalar or bool field")
    array = np.asarray(values)
    if field.type == FieldDescriptor.TYPE_BOOL:
        array = array != 0
    payload = np.ascontiguousarray(array, dtype=dtype).tobytes()
    if not payload:
        return b""
    key = _varint(field.number << 3 | _WIRE_TYPE_LEN)
    return key + _varint(len(payload)) + payload


def merge_packed(message: Message, **columns: np.ndarray) -> None:
    """Append each array to the repeated field of ``message`` that its keyword names.

    Equivalent to ``getattr(message, name).extend(array.tolist())`` for every pair, in one parse
    of the packed wire form (see the module notes). ``message`` may be a sub-message of another
    (``response.columns``); the parent sees the change.

    Raises:
        KeyError: no field of that name.
        TypeError: see :func:`packed_field_bytes`.

    """
    fields = message.DESCRIPTOR.fields_by_name
    message.MergeFromString(
        b"".join(packed_field_bytes(fields[name], values) for name, values in columns.items())
    )
