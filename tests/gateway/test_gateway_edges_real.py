"""The gateway's edges against the real server: one type for 64-bit times, and anomaly
rows sent packed and scores read packed with the same answers as cells.
"""

from __future__ import annotations

import time

from universal_runtime.v1 import anomaly_pb2

ROWS = [[float(i % 7), float(i % 5) * 0.5, float(i % 3)] for i in range(200)] + [[40.0, -30.0, 25.0]]


async def test_times_are_numbers_for_detectors_as_for_classifiers(gateway_to_server):
    http = gateway_to_server
    before_ms = time.time() * 1000
    fit = await http.post("/v1/anomaly/fit", json={"detector": "edges-times", "rows": ROWS})
    assert fit.status_code == 200, fit.text
    listed = (await http.get("/v1/anomaly/detectors")).json()["data"]
    [detector] = [d for d in listed if d["detector"] == "edges-times"]
    assert isinstance(detector["created_at_ms"], int)
    assert before_ms - 5000 < detector["created_at_ms"] < time.time() * 1000 + 5000
    await http.delete("/v1/anomaly/detectors/edges-times")


async def test_packed_rows_and_scores_answer_as_cells_do(gateway_to_server, inference):
    http = gateway_to_server
    fit = await http.post(
        "/v1/anomaly/fit", json={"detector": "edges-packed", "rows": ROWS, "backend": "hbos"}
    )
    assert fit.status_code == 200, fit.text
    cells = anomaly_pb2.DetectAnomalyRequest(
        detector="edges-packed",
        rows=[
            anomaly_pb2.FeatureRow(values=[anomaly_pb2.FeatureValue(number_value=v) for v in row])
            for row in ROWS
        ],
    )
    expected = await inference.DetectAnomaly(cells)  # one AnomalyScore message per row
    detected = await http.post("/v1/anomaly/detect", json={"detector": "edges-packed", "rows": ROWS})
    assert detected.status_code == 200, detected.text
    body = detected.json()
    assert "columns" not in body
    assert body["scores"] == [
        {
            "index": s.index,
            "score": s.score,
            "normalized_score": s.normalized_score,
            "is_anomaly": s.is_anomaly,
            "explanation": [],
        }
        for s in expected.scores
    ]
    assert body["summary"]["anomaly_count"] == expected.summary.anomaly_count
    assert body["scores"][-1]["is_anomaly"]
    await http.delete("/v1/anomaly/detectors/edges-packed")
