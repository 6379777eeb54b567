"""Protobuf wire-format helpers: fill or read large numeric fields at memory-copy speed.

``field.extend(array.tolist())`` makes one Python object per value and appends them one by one (see
docs/architecture/design-notes.md#anomaly-rows-on-the-wire). A packed repeated field of fixed-width
values is, on the wire, its key, its byte length and the values' little-endian bytes (protobuf
encoding guide, "Packed Repeated Fields": https://protobuf.dev/programming-guides/encoding/#packed).
:func:`merge_packed` writes that form and lets the protobuf runtime parse it into the message, which
it does as one copy. What callers receive is unchanged: the same fields with the same values.
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
WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32 = 0, 1, 2, 5
"""Wire types (encoding guide, "Message Structure"); groups (3, 4) are never used by our protos."""


def varint(value: int) -> bytes:
    """Base-128 varint of a non-negative int, least significant group first ("Base 128 Varints")."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``data[pos:]`` and the offset after it.

    Raises:
        IndexError: the data ends inside the varint.

    """
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def field_key(field: FieldDescriptor, wire_type: int) -> bytes:
    """The key (tag) bytes that start every occurrence of ``field`` with ``wire_type`` on the wire."""
    return varint(field.number << 3 | wire_type)


def first_field_offset(data: bytes, field_number: int, wire_type: int) -> int | None:
    """Offset of the key of the first top-level occurrence of a field in serialized ``data``.

    Walks the top-level fields only (never into sub-messages), so a byte pattern inside a string
    or a nested message is never mistaken for the field. ``None`` when the field is absent or
    the data is not well formed.
    """
    pos, end = 0, len(data)
    try:
        while pos < end:
            key, after = read_varint(data, pos)
            if key >> 3 == field_number and key & 7 == wire_type:
                return pos
            kind = key & 7
            if kind == WIRE_VARINT:
                _, pos = read_varint(data, after)
            elif kind == WIRE_I64:
                pos = after + 8
            elif kind == WIRE_LEN:
                length, start = read_varint(data, after)
                pos = start + length
            elif kind == WIRE_I32:
                pos = after + 4
            else:
                return None
    except IndexError:
        return None
    return None


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
    return field_key(field, WIRE_LEN) + varint(len(payload)) + payload


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
