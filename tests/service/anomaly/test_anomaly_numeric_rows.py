"""Packed numeric rows: the same scores as per-cell rows, and their own bad-input errors."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from universal_runtime.v1 import anomaly_pb2 as pb

from tests.conftest import error_info
from tests.service.anomaly.helpers import numeric_data, to_rows


def packed(matrix: np.ndarray) -> pb.NumericRows:
    return pb.NumericRows(column_count=matrix.shape[1], values=matrix.ravel().tolist())


async def test_packed_rows_score_like_cell_rows(inference):
    data = numeric_data()
    await inference.FitAnomalyDetector(
        pb.FitAnomalyDetectorRequest(
            detector="packed-ecod", backend=pb.ANOMALY_BACKEND_ECOD, numeric_rows=packed(data)
        )
    )
    by_cells = await inference.DetectAnomaly(
        pb.DetectAnomalyRequest(detector="packed-ecod", rows=to_rows(data))
    )
    by_matrix = await inference.DetectAnomaly(
        pb.DetectAnomalyRequest(detector="packed-ecod", numeric_rows=packed(data))
    )
    assert [s.score for s in by_matrix.scores] == pytest.approx([s.score for s in by_cells.scores])
    assert [s.is_anomaly for s in by_matrix.scores] == [s.is_anomaly for s in by_cells.scores]


async def test_packed_rows_one_shot(inference):
    data = numeric_data()
    response = await inference.DetectAnomaly(
        pb.DetectAnomalyRequest(numeric_rows=packed(data), backend=pb.ANOMALY_BACKEND_ISOLATION_FOREST)
    )
    assert len(response.scores) == data.shape[0]


@pytest.mark.parametrize(
    ("numeric_rows", "extra", "field"),
    [
        (pb.NumericRows(column_count=3, values=[1.0] * 10), {}, "numeric_rows.values"),
        (pb.NumericRows(column_count=0, values=[1.0]), {}, "numeric_rows.column_count"),
        (pb.NumericRows(column_count=2, values=[1.0, float("nan")] * 30), {}, "rows[0].values[1]"),
        (
            pb.NumericRows(column_count=2, values=[1.0, 2.0] * 30),
            {"rows": to_rows([[1.0, 2.0]])},
            "numeric_rows",
        ),
        (
            pb.NumericRows(column_count=2, values=[1.0, 2.0] * 30),
            {
                "schema": [
                    pb.FeatureField(name="a"),
                    pb.FeatureField(name="b", type=pb.FEATURE_TYPE_CATEGORICAL),
                ]
            },
            "numeric_rows",
        ),
    ],
)
async def test_bad_packed_rows(inference, numeric_rows, extra, field):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.DetectAnomaly(pb.DetectAnomalyRequest(numeric_rows=numeric_rows, **extra))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == field


async def test_columnar_output_carries_the_same_scores(inference):
    data = numeric_data()
    await inference.FitAnomalyDetector(
        pb.FitAnomalyDetectorRequest(detector="packed-iforest", numeric_rows=packed(data))
    )
    rows = await inference.DetectAnomaly(
        pb.DetectAnomalyRequest(detector="packed-iforest", numeric_rows=packed(data))
    )
    columns = await inference.DetectAnomaly(
        pb.DetectAnomalyRequest(detector="packed-iforest", numeric_rows=packed(data), columnar_output=True)
    )
    assert not columns.scores
    assert list(columns.columns.scores) == pytest.approx([s.score for s in rows.scores])
    assert list(columns.columns.normalized_scores) == pytest.approx([s.normalized_score for s in rows.scores])
    assert list(columns.columns.is_anomaly) == [s.is_anomaly for s in rows.scores]
    assert columns.summary == rows.summary


async def test_columnar_output_with_explain_is_refused(inference):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.DetectAnomaly(
            pb.DetectAnomalyRequest(numeric_rows=packed(numeric_data()), columnar_output=True, explain=True)
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == "columnar_output"
