"""merge_packed: numpy arrays into repeated proto fields through the packed wire form.

The reference for every case is the plain protobuf API (``extend(array.tolist())``): the message
must compare equal and serialize to the same bytes.
"""

from __future__ import annotations

import numpy as np
import pytest
from universal_runtime.v1 import anomaly_pb2, encoders_pb2

from service.convert.wire import merge_packed, packed_field_bytes


def _columns_by_extend(scores, normalized, flags) -> anomaly_pb2.AnomalyScoreColumns:
    message = anomaly_pb2.AnomalyScoreColumns()
    message.scores.extend(np.asarray(scores).tolist())
    message.normalized_scores.extend(np.asarray(normalized).tolist())
    message.is_anomaly.extend(np.asarray(flags).tolist())
    return message


def test_double_and_bool_columns_equal_the_extend_result():
    rng = np.random.default_rng(7)
    scores = rng.normal(size=1000)
    # Values whose bytes exercise the edges: negative zero, extremes, subnormal, a huge count.
    scores[:4] = [-0.0, np.finfo(np.float64).max, np.finfo(np.float64).tiny / 4, -1e300]
    normalized = rng.uniform(size=1000)
    flags = scores > 0.5

    response = anomaly_pb2.DetectAnomalyResponse()
    merge_packed(response.columns, scores=scores, normalized_scores=normalized, is_anomaly=flags)

    expected = _columns_by_extend(scores, normalized, flags)
    assert response.columns == expected
    assert response.columns.SerializeToString() == expected.SerializeToString()
    assert np.array_equal(np.array(response.columns.scores), scores)
    assert np.signbit(response.columns.scores[0])  # -0.0 kept bit for bit


def test_float32_field_rounds_like_the_protobuf_api():
    vector64 = np.random.default_rng(1).normal(size=384) * 1.000000123
    message = encoders_pb2.Embedding(index=5)
    merge_packed(message, values=vector64)
    assert message == encoders_pb2.Embedding(index=5, values=vector64.tolist())
    assert message.index == 5


def test_merge_appends_to_values_already_there():
    message = anomaly_pb2.AnomalyScoreColumns(scores=[1.5])
    merge_packed(message, scores=np.array([2.5, 3.5]))
    assert list(message.scores) == [1.5, 2.5, 3.5]


def test_empty_arrays_leave_the_field_empty():
    field = anomaly_pb2.AnomalyScoreColumns.DESCRIPTOR.fields_by_name["scores"]
    assert packed_field_bytes(field, np.array([])) == b""
    message = anomaly_pb2.AnomalyScoreColumns()
    merge_packed(message, scores=np.array([]), is_anomaly=np.array([], dtype=bool))
    assert message.ByteSize() == 0


def test_bool_from_nonzero_numbers():
    message = anomaly_pb2.AnomalyScoreColumns()
    merge_packed(message, is_anomaly=np.array([0, 2, -1, 0]))
    assert list(message.is_anomaly) == [False, True, True, False]


def test_long_field_length_uses_a_multi_byte_varint():
    # 20,000 doubles are 160,000 bytes: a three-byte length varint.
    values = np.arange(20_000, dtype=np.float64)
    message = anomaly_pb2.AnomalyScoreColumns()
    merge_packed(message, scores=values)
    assert np.array_equal(np.array(message.scores), values)


@pytest.mark.parametrize(
    ("message_type", "field"),
    [
        (anomaly_pb2.AnomalyScore, "index"),  # int32: varint values, no fixed-width form
        (anomaly_pb2.AnomalyScore, "score"),  # a double, but not repeated
        (anomaly_pb2.DetectAnomalyResponse, "scores"),  # repeated messages
    ],
)
def test_fields_without_a_fixed_width_packed_form_are_refused(message_type, field):
    with pytest.raises(TypeError, match="not a repeated fixed-width scalar or bool field"):
        packed_field_bytes(message_type.DESCRIPTOR.fields_by_name[field], np.zeros(3))


def test_unknown_field_name_is_a_key_error():
    with pytest.raises(KeyError):
        merge_packed(anomaly_pb2.AnomalyScoreColumns(), no_such_field=np.zeros(2))
