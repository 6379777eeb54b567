"""Wire-format fast paths of the anomaly RPCs' per-row form: ``FeatureRow`` cells in, ``AnomalyScore`` out.

Through the protobuf API, reading rows costs a wrapper object and a ``HasField`` per cell, and
building the scores a message per row: as much Python as the scoring itself (see
docs/architecture/design-notes.md#anomaly-rows-on-the-wire). Both directions have a fixed byte layout
when every cell is a number (encoding guide: https://protobuf.dev/programming-guides/encoding/):

- a numeric cell is a ``FeatureRow.values`` entry of 9 bytes holding ``number_value``: key, length,
  key, 8 little-endian bytes. Rows of one width are equal-size records, checked and read by
  numpy in one pass (:func:`uniform_numeric_rows`);
- a score without explanation is ``index`` (varint), two doubles and a bool: records of one size
  for each varint length of the index, built as numpy byte rows and parsed by the protobuf runtime
  in one call (:func:`merge_score_messages`).

Anything else (a string cell, rows of different widths, an unset cell, a non-finite value, an
unknown field) makes the reader return ``None``; the caller then takes the general path, which
words any error. The fast paths change neither what a request means nor what a caller receives.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import Message
from universal_runtime.v1 import anomaly_pb2 as pb

from service.convert.wire import (
    WIRE_I64,
    WIRE_LEN,
    WIRE_VARINT,
    field_key,
    first_field_offset,
    read_varint,
    varint,
)

_ROW_VALUES = pb.FeatureRow.DESCRIPTOR.fields_by_name["values"]
_NUMBER_VALUE = pb.FeatureValue.DESCRIPTOR.fields_by_name["number_value"]
_NUMBER_CELL = field_key(_NUMBER_VALUE, WIRE_I64)
#: Bytes before the double in every numeric cell: values key, entry length, number_value key.
_CELL_PREFIX = field_key(_ROW_VALUES, WIRE_LEN) + varint(len(_NUMBER_CELL) + 8) + _NUMBER_CELL
_CELL_BYTES = len(_CELL_PREFIX) + 8

_SCORE_FIELDS = pb.AnomalyScore.DESCRIPTOR.fields_by_name
_INDEX_KEY = field_key(_SCORE_FIELDS["index"], WIRE_VARINT)
_SCORE_KEY = field_key(_SCORE_FIELDS["score"], WIRE_I64)
_NORMALIZED_KEY = field_key(_SCORE_FIELDS["normalized_score"], WIRE_I64)
_FLAG_KEY = field_key(_SCORE_FIELDS["is_anomaly"], WIRE_VARINT)


def uniform_numeric_rows(request: Message) -> np.ndarray | None:
    """The request's ``rows`` as a float64 matrix (rows, width), or ``None`` to take the general path.

    A matrix comes back only when every row has the same number (at least one) of cells, every
    cell holds a finite ``number_value`` and nothing else is set in the rows; the values are the
    doubles on the wire, bit for bit.

    Args:
        request: a message with a ``repeated FeatureRow rows`` field.

    """
    count = len(request.rows)  # type: ignore[attr-defined]
    if count == 0:
        return None
    rows_field = request.DESCRIPTOR.fields_by_name["rows"]
    data = request.SerializeToString()
    start = first_field_offset(data, rows_field.number, WIRE_LEN)
    if start is None:
        return None
    key = field_key(rows_field, WIRE_LEN)
    length, _ = read_varint(data, start + len(key))
    if length == 0 or length % _CELL_BYTES:
        return None
    header = key + varint(length)
    stride = len(header) + length
    if start + count * stride > len(data):
        return None
    # Entries of a repeated field keep their order on the wire, and the walk started at the first
    # one: count records that all match are exactly the rows.
    block = np.frombuffer(data, dtype=np.uint8, count=count * stride, offset=start).reshape(count, stride)
    if not (block[:, : len(header)] == np.frombuffer(header, dtype=np.uint8)).all():
        return None
    cells = block[:, len(header) :].reshape(count, length // _CELL_BYTES, _CELL_BYTES)
    if not (cells[:, :, : len(_CELL_PREFIX)] == np.frombuffer(_CELL_PREFIX, dtype=np.uint8)).all():
        return None
    doubles = np.ascontiguousarray(cells[:, :, len(_CELL_PREFIX) :]).view("<f8")
    matrix = doubles.reshape(count, -1).astype(np.float64, copy=False)
    return matrix if np.isfinite(matrix).all() else None


def _index_varints(indices: np.ndarray, width: int) -> np.ndarray:
    """Varints of ``indices`` (all of the same encoded ``width``), one row of bytes each."""
    out = np.empty((len(indices), width), dtype=np.uint8)
    for k in range(width):
        group = (indices >> (7 * k)) & 0x7F
        out[:, k] = group | 0x80 if k < width - 1 else group
    return out


def merge_score_messages(
    message: Message, field_name: str, raw: np.ndarray, normalized: np.ndarray, flags: np.ndarray
) -> None:
    """Append one ``AnomalyScore`` per row (index i, raw, normalized, flag) to ``message.<field_name>``.

    Equivalent to ``add(index=i, score=..., normalized_score=..., is_anomaly=...)`` for each row in
    order, without explanations; ``raw``, ``normalized`` and ``flags`` have shape (rows,).
    """
    key = field_key(message.DESCRIPTOR.fields_by_name[field_name], WIRE_LEN)
    count, parts, low, width = len(raw), [], 0, 1
    while low < count:
        high = min(count, 1 << (7 * width))  # indices below 128**width take ``width`` varint bytes
        body = len(_INDEX_KEY) + width + len(_SCORE_KEY) + 8 + len(_NORMALIZED_KEY) + 8 + len(_FLAG_KEY) + 1
        header = key + varint(body)
        record = np.empty((high - low, len(header) + body), dtype=np.uint8)
        column = 0
        for piece in (
            header + _INDEX_KEY,
            _index_varints(np.arange(low, high, dtype=np.int64), width),
            _SCORE_KEY,
            np.ascontiguousarray(raw[low:high], dtype="<f8").view(np.uint8).reshape(-1, 8),
            _NORMALIZED_KEY,
            np.ascontiguousarray(normalized[low:high], dtype="<f8").view(np.uint8).reshape(-1, 8),
            _FLAG_KEY,
            (np.asarray(flags[low:high]) != 0).astype(np.uint8)[:, None],
        ):
            block = np.frombuffer(piece, dtype=np.uint8) if isinstance(piece, bytes) else piece
            size = block.shape[-1]
            record[:, column : column + size] = block
            column += size
        parts.append(record.tobytes())
        low, width = high, width + 1
    message.MergeFromString(b"".join(parts))
