"""FitAnomalyDetector, DetectAnomaly, List/Delete over gRPC, on real scikit-learn and pyod detectors."""

from __future__ import annotations

import math

import grpc
import numpy as np
import pytest
from universal_runtime.v1 import anomaly_pb2 as pb

from tests.conftest import error_info
from tests.service.anomaly.helpers import (
    CONTAMINATION,
    MIXED_SCHEMA,
    N_ROWS,
    OUTLIERS,
    mixed_rows,
    numeric_data,
    to_rows,
    top_indices,
)

BACKENDS = [
    pb.ANOMALY_BACKEND_ISOLATION_FOREST,
    pb.ANOMALY_BACKEND_LOCAL_OUTLIER_FACTOR,
    pb.ANOMALY_BACKEND_ONE_CLASS_SVM,
    pb.ANOMALY_BACKEND_ECOD,
    pb.ANOMALY_BACKEND_HBOS,
    pb.ANOMALY_BACKEND_COPOD,
    pb.ANOMALY_BACKEND_KNN,
]


@pytest.mark.parametrize("backend", BACKENDS, ids=[pb.AnomalyBackend.Name(b) for b in BACKENDS])
async def test_every_backend_ranks_injected_outliers_on_top(inference, backend):
    rows = to_rows(numeric_data())
    name = f"outliers-{pb.AnomalyBackend.Name(backend).lower()}"
    fitted = await inference.FitAnomalyDetector(
        pb.FitAnomalyDetectorRequest(detector=name, backend=backend, rows=rows, contamination=CONTAMINATION)
    )
    assert fitted.detector == name and fitted.version >= 1 and fitted.row_count == N_ROWS
    response = await inference.DetectAnomaly(pb.DetectAnomalyRequest(detector=name, rows=rows))
    k = int(CONTAMINATION * N_ROWS)
    assert set(OUTLIERS) <= top_indices(response, k)
    assert all(response.scores[i].is_anomaly for i in OUTLIERS)
    assert [s.index for s in response.scores] == list(range(N_ROWS))
    assert all(0.0 <= s.normalized_score <= 1.0 for s in response.scores)
    summary = response.summary
    assert summary.row_count == N_ROWS
    assert summary.anomaly_count == sum(s.is_anomaly for s in response.scores)
    assert summary.anomaly_rate == pytest.approx(summary.anomaly_count / N_ROWS)
    # The detector's threshold flags about the contamination share of its training rows.
    assert 0.5 * k <= summary.anomaly_count <= 2 * k
    assert summary.threshold == pytest.approx(fitted.threshold)


async def test_one_shot_fit_and_score_with_explanation(inference):
    x = numeric_data(seed=3)
    x[5] = [0.0, 0.0, 9.0, 0.0]  # unusual in x2 only
    response = await inference.DetectAnomaly(
        pb.DetectAnomalyRequest(rows=to_rows(x), contamination=CONTAMINATION, explain=True)
    )
    assert response.scores[5].is_anomaly
    explanation = response.scores[5].explanation
    assert explanation[0].feature == "x2" and explanation[0].contribution > 0.5
    assert math.isclose(sum(c.contribution for c in explanation), 1.0, rel_tol=1e-6)
    assert not any(s.explanation for s in response.scores if not s.is_anomaly)


async def test_per_request_threshold_on_normalized_score(inference):
    rows = to_rows(numeric_data())
    await inference.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="thresholds", rows=rows))
    strict = await inference.DetectAnomaly(
        pb.DetectAnomalyRequest(detector="thresholds", rows=rows, threshold=0.99)
    )
    loose = await inference.DetectAnomaly(
        pb.DetectAnomalyRequest(detector="thresholds", rows=rows, threshold=0.5)
    )
    assert strict.summary.anomaly_count < loose.summary.anomaly_count
    assert all(s.is_anomaly == (s.normalized_score >= 0.99) for s in strict.scores)
    assert strict.summary.threshold > loose.summary.threshold


async def test_categorical_fields_encode_the_same_at_fit_and_detect(inference):
    rows = mixed_rows()
    await inference.FitAnomalyDetector(
        pb.FitAnomalyDetectorRequest(
            detector="mixed", schema=MIXED_SCHEMA, rows=to_rows(rows), contamination=CONTAMINATION
        )
    )
    full = await inference.DetectAnomaly(pb.DetectAnomalyRequest(detector="mixed", rows=to_rows(rows)))
    # The same rows scored alone, in another order, get the same scores: nothing is batch-dependent.
    picked = [OUTLIERS[0], 3, 2, OUTLIERS[1]]
    some = await inference.DetectAnomaly(
        pb.DetectAnomalyRequest(detector="mixed", rows=to_rows([rows[i] for i in picked]))
    )
    for score, i in zip(some.scores, picked, strict=True):
        assert score.score == pytest.approx(full.scores[i].score, rel=1e-9, abs=1e-12)
    assert set(OUTLIERS) <= top_indices(full, int(CONTAMINATION * N_ROWS))
    # An unseen category is scored (all-zero one-hot), not rejected.
    unseen = [[0.1, -0.2, 0.3, 0.0, "lisbon", "fax"]]
    response = await inference.DetectAnomaly(pb.DetectAnomalyRequest(detector="mixed", rows=to_rows(unseen)))
    assert len(response.scores) == 1
    # Label and frequency encodings fit and score too.
    for encoding in (pb.CATEGORICAL_ENCODING_LABEL, pb.CATEGORICAL_ENCODING_FREQUENCY):
        schema = [
            *MIXED_SCHEMA[:4],
            pb.FeatureField(name="city", type=pb.FEATURE_TYPE_CATEGORICAL, encoding=encoding),
            pb.FeatureField(name="channel", type=pb.FEATURE_TYPE_CATEGORICAL, encoding=encoding),
        ]
        response = await inference.DetectAnomaly(
            pb.DetectAnomalyRequest(rows=to_rows(rows), schema=schema, contamination=CONTAMINATION)
        )
        assert set(OUTLIERS) <= top_indices(response, int(CONTAMINATION * N_ROWS))


async def test_a_category_never_seen_together_is_flagged(inference):
    # Numbers are all normal; one row has a category that appears once in 400 rows.
    rng = np.random.default_rng(1)
    rows = [[float(v), "common"] for v in rng.normal(size=N_ROWS)]
    rows[11][1] = "rare"
    schema = [
        pb.FeatureField(name="amount"),
        pb.FeatureField(
            name="kind", type=pb.FEATURE_TYPE_CATEGORICAL, encoding=pb.CATEGORICAL_ENCODING_FREQUENCY
        ),
    ]
    response = await inference.DetectAnomaly(
        pb.DetectAnomalyRequest(
            rows=to_rows(rows),
            schema=schema,
            backend=pb.ANOMALY_BACKEND_HBOS,
            contamination=0.01,
            explain=True,
        )
    )
    assert response.scores[11].is_anomaly
    assert response.scores[11].explanation[0].feature == "kind"


async def test_refit_makes_a_new_version_and_list_and_delete(inference):
    rows = to_rows(numeric_data())
    first = await inference.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="versions", rows=rows))
    second = await inference.FitAnomalyDetector(
        pb.FitAnomalyDetectorRequest(
            detector="versions",
            rows=rows,
            backend=pb.ANOMALY_BACKEND_ECOD,
            normalization=pb.NORMALIZATION_ROBUST,
            contamination=0.2,
        )
    )
    assert second.version == first.version + 1
    listed = await inference.ListAnomalyDetectors(pb.ListAnomalyDetectorsRequest())
    info = next(d for d in listed.detectors if d.detector == "versions")
    assert info.version == second.version
    assert info.backend == pb.ANOMALY_BACKEND_ECOD
    assert info.normalization == pb.NORMALIZATION_ROBUST
    assert info.contamination == pytest.approx(0.2)
    assert info.row_count == N_ROWS and info.created_at_ms > 0
    assert [f.name for f in info.schema] == ["x0", "x1", "x2", "x3"]
    names = [d.detector for d in listed.detectors]
    assert names == sorted(names)

    deleted = await inference.DeleteAnomalyDetector(pb.DeleteAnomalyDetectorRequest(detector="versions"))
    assert deleted.versions_deleted == 2
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await inference.DetectAnomaly(pb.DetectAnomalyRequest(detector="versions", rows=rows))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(err.value).reason == "DETECTOR_NOT_FOUND"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await inference.DeleteAnomalyDetector(pb.DeleteAnomalyDetectorRequest(detector="versions"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
