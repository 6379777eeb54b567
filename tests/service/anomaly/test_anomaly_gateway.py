"""``/v1/anomaly/*`` through the REST gateway to the real server."""

from __future__ import annotations

import pytest

from gateway.app import create_app
from tests.gateway.gateway_fakes import asgi_client
from tests.service.anomaly.helpers import N_ROWS, OUTLIERS, mixed_rows

SCHEMA = [
    *[{"name": f"x{i}"} for i in range(4)],
    {"name": "city", "type": "categorical", "encoding": "one_hot"},
    {"name": "channel", "type": "categorical", "encoding": "hash"},
]


@pytest.fixture
async def http(server):
    async with asgi_client(create_app(f"127.0.0.1:{server.port}")) as client:
        yield client


async def test_fit_detect_list_delete(http):
    rows = mixed_rows(seed=9)
    fit = await http.post(
        "/v1/anomaly/fit",
        json={
            "detector": "gw-detector",
            "backend": "copod",
            "schema": SCHEMA,
            "rows": rows,
            "contamination": 0.05,
        },
    )
    assert fit.status_code == 200, fit.text
    assert fit.json()["detector"] == "gw-detector" and fit.json()["row_count"] == N_ROWS

    detect = await http.post(
        "/v1/anomaly/detect", json={"detector": "gw-detector", "rows": rows, "explain": True}
    )
    assert detect.status_code == 200, detect.text
    body = detect.json()
    assert body["summary"]["row_count"] == N_ROWS
    flagged = {s["index"] for s in body["scores"] if s["is_anomaly"]}
    assert set(OUTLIERS) <= flagged
    assert body["scores"][OUTLIERS[0]]["explanation"]

    listed = await http.get("/v1/anomaly/detectors")
    info = next(d for d in listed.json()["data"] if d["detector"] == "gw-detector")
    assert info["backend"] == "copod" and info["schema"][4]["encoding"] == "one_hot"

    deleted = await http.delete("/v1/anomaly/detectors/gw-detector")
    assert deleted.status_code == 200 and deleted.json()["versions_deleted"] == 1
    again = await http.delete("/v1/anomaly/detectors/gw-detector")
    assert again.status_code == 404 and again.json()["error"]["code"] == "detector_not_found"


async def test_one_shot_and_errors(http):
    rows = [r[:4] for r in mixed_rows()]
    one_shot = await http.post(
        "/v1/anomaly/detect", json={"rows": rows, "backend": "hbos", "contamination": 0.05}
    )
    assert one_shot.status_code == 200, one_shot.text
    cases = [
        ({"rows": rows, "backend": "nope"}, 400),
        ({"rows": rows, "contamination": 0.9}, 400),
        ({"rows": [[1.0, 2.0], [1.0]] * 10}, 400),
        ({"detector": "missing-one", "rows": rows}, 404),
        ({"detector": "..", "rows": rows}, 400),
    ]
    for body, status in cases:
        response = await http.post("/v1/anomaly/detect", json=body)
        assert response.status_code == status, (body.get("detector"), response.text)
    bad_name = await http.post("/v1/anomaly/fit", json={"detector": "../x", "rows": rows})
    assert bad_name.status_code == 400 and bad_name.json()["error"]["param"] == "detector"
