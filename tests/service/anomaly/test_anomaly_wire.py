"""The per-row form's wire fast paths give exactly what the protobuf API gives, or step aside.

References: ``rows_from_pb`` (the general reader) and ``AnomalyScore`` messages added one by one.
"""

from __future__ import annotations

import numpy as np
import pytest
from universal_runtime.v1 import anomaly_pb2 as pb

from engines.anomaly.types import FeatureField, FeatureKind
from engines.errors import InvalidArgumentError
from service.convert.anomaly import request_rows, rows_from_pb
from service.convert.anomaly_wire import merge_score_messages, uniform_numeric_rows

EDGE_VALUES = [0.0, -0.0, 1e-310, -1e308, np.finfo(np.float64).max, 2.0**-1074, 123.456]


def _rows(matrix) -> list[pb.FeatureRow]:
    return [pb.FeatureRow(values=[pb.FeatureValue(number_value=v) for v in row]) for row in matrix]


def _general(request) -> np.ndarray:
    return np.array(rows_from_pb(request.rows, max_features=10**4), dtype=np.float64)


def _requests(rows: list[pb.FeatureRow]):
    """Every request type with rows, with the fields that come before rows on the wire set."""
    schema = [pb.FeatureField(name=f"c{j}") for j in range(len(rows[0].values))]
    return [
        pb.DetectAnomalyRequest(detector="d", rows=rows, threshold=0.3, explain=True),
        pb.FitAnomalyDetectorRequest(detector="d", backend=1, schema=schema, rows=rows, contamination=0.2),
        pb.StreamDetectAnomalyRequest(config=pb.StreamDetectorConfig(window_size=50), rows=rows),
    ]


@pytest.mark.parametrize("width", [1, 8, 12, 40])  # 12+ cells: a two-byte row length
def test_uniform_rows_are_read_bit_for_bit(width):
    rng = np.random.default_rng(width)
    matrix = rng.normal(size=(300, width)) * 10.0 ** rng.integers(-200, 200, size=(300, width))
    matrix.flat[: len(EDGE_VALUES)] = EDGE_VALUES[: matrix.size]
    for request in _requests(_rows(matrix.tolist())):
        fast = uniform_numeric_rows(request)
        assert fast is not None and fast.dtype == np.float64 and fast.shape == (300, width)
        assert fast.tobytes() == _general(request).tobytes() == matrix.tobytes()


def _with_cell(rows: list[pb.FeatureRow], row: int, cell: pb.FeatureValue | None) -> list[pb.FeatureRow]:
    rows = [pb.FeatureRow(values=list(r.values)) for r in rows]
    if cell is None:
        del rows[row].values[-1]
    else:
        rows[row].values[0].CopyFrom(cell)
    return rows


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(lambda rows: _with_cell(rows, 7, pb.FeatureValue(string_value="red")), id="string cell"),
        pytest.param(
            lambda rows: _with_cell(rows, 0, pb.FeatureValue(string_value="")), id="empty string cell"
        ),
        pytest.param(lambda rows: _with_cell(rows, 9, pb.FeatureValue()), id="unset cell"),
        pytest.param(lambda rows: _with_cell(rows, 19, None), id="shorter last row"),
        pytest.param(lambda rows: _with_cell(rows, 3, pb.FeatureValue(number_value=float("nan"))), id="nan"),
        pytest.param(lambda rows: _with_cell(rows, 3, pb.FeatureValue(number_value=float("-inf"))), id="inf"),
        pytest.param(lambda rows: [pb.FeatureRow(), *rows[1:]], id="empty first row"),
    ],
)
def test_anything_irregular_takes_the_general_path(case):
    rows = case(_rows(np.arange(60.0).reshape(20, 3).tolist()))
    for request in _requests(rows):
        assert uniform_numeric_rows(request) is None


def test_no_rows_takes_the_general_path():
    assert uniform_numeric_rows(pb.DetectAnomalyRequest(detector="d")) is None


def test_request_rows_keeps_cells_when_the_schema_wants_them():
    request = pb.DetectAnomalyRequest(detector="d", rows=_rows([[1.0, 2.0], [3.0, 4.0]]))
    kwargs = {"max_rows": 100, "max_features": 100}
    assert isinstance(request_rows(request, **kwargs), np.ndarray)
    numeric = (FeatureField("a"), FeatureField("b"))
    assert isinstance(request_rows(request, schema=numeric, **kwargs), np.ndarray)
    # A categorical or differently wide schema gets the cells, so the engine words the error.
    categorical = (FeatureField("a"), FeatureField("b", FeatureKind.CATEGORICAL))
    assert request_rows(request, schema=categorical, **kwargs) == [[1.0, 2.0], [3.0, 4.0]]
    assert request_rows(request, schema=numeric[:1], **kwargs) == [[1.0, 2.0], [3.0, 4.0]]
    # A width over the limit takes the general path too, whose error names the row.
    with pytest.raises(InvalidArgumentError) as caught:
        request_rows(request, max_rows=100, max_features=1)
    assert caught.value.metadata["field"] == "rows[0]"


def _scores_by_add(raw, normalized, flags) -> pb.DetectAnomalyResponse:
    response = pb.DetectAnomalyResponse()
    for i, (r, n, f) in enumerate(zip(raw.tolist(), normalized.tolist(), flags.tolist(), strict=True)):
        response.scores.add(index=i, score=r, normalized_score=n, is_anomaly=f)
    return response


@pytest.mark.parametrize("count", [0, 1, 127, 128, 129, 16_384 + 3])  # varint widths 1, 2 and 3
def test_score_messages_equal_the_ones_added_one_by_one(count):
    rng = np.random.default_rng(count)
    raw, normalized = rng.normal(size=count), rng.uniform(size=count)
    raw[: min(count, 2)] = [-0.0, 0.0][: min(count, 2)]
    flags = raw > 0.8
    response = pb.DetectAnomalyResponse(summary=pb.AnomalySummary(row_count=count))
    merge_score_messages(response, "scores", raw, normalized, flags)
    expected = _scores_by_add(raw, normalized, flags)
    expected.summary.row_count = count
    assert response == expected
    assert response.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
    if count:
        assert [s.index for s in response.scores] == list(range(count))
        assert np.signbit(response.scores[0].score)
