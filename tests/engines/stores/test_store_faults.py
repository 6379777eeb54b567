"""Faults of the fitted-state store answer what they are.

- A store out of space (``ENOSPC``) during a save is RESOURCE_EXHAUSTED, reason STORAGE_FULL, a
  message saying the store is out of space (it was UNAVAILABLE "retry later", which no retry fixes).
- One corrupt detector manifest does not break ``ListAnomalyDetectors``: the others are listed.
- Foreign files in the classifiers folder do not break ``ListClassifiers``.
"""

from __future__ import annotations

import errno
import json
import logging

import grpc
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from universal_runtime.v1 import anomaly_pb2 as pb
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import inference_service_pb2_grpc

from engines.anomaly.store import DetectorStore
from engines.classification.custom import ClassifierStore
from engines.encoder_types import ClassifierInfo
from engines.errors import ResourceExhaustedError
from engines.state_store import LocalStateStore
from service.server import ANOMALY_DIR, CLASSIFIERS_DIR, start_server
from tests.conftest import error_info
from tests.service.anomaly.helpers import numeric_data


def _full_disk(monkeypatch) -> None:
    """Every write of the local store fails as a full disk does."""

    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(LocalStateStore, "_create", no_space)
    monkeypatch.setattr(LocalStateStore, "_swap", no_space)


@pytest.fixture(scope="module")
async def faults(settings, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("faults")
    running = await start_server(settings.model_copy(update={"data_dir": data_dir}))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield data_dir, inference_service_pb2_grpc.InferenceServiceStub(channel)
    await running.stop(grace=0.5)


def _fit_request(name: str) -> pb.FitAnomalyDetectorRequest:
    rows = numeric_data()
    return pb.FitAnomalyDetectorRequest(
        detector=name,
        backend=pb.ANOMALY_BACKEND_ISOLATION_FOREST,
        numeric_rows=pb.NumericRows(column_count=rows.shape[1], values=rows.ravel().tolist()),
    )


def test_a_full_disk_is_storage_full_in_both_stores(tmp_path, monkeypatch):
    _full_disk(monkeypatch)
    detectors = DetectorStore(tmp_path / "anomaly")
    with pytest.raises(ResourceExhaustedError) as caught:
        from engines.anomaly.store import fit_for_store
        from engines.anomaly.types import FitConfig

        detector, data = fit_for_store(numeric_data(), FitConfig())
        detectors.save("d", detector, data)
    assert caught.value.reason == "STORAGE_FULL"
    assert "out of space" in caught.value.message
    classifiers = ClassifierStore(tmp_path / "classifiers")
    head = LogisticRegression().fit(np.array([[0.0], [1.0]]), [0, 1])
    info = ClassifierInfo("c", "m", ["a", "b"], 2, 0, 1.0)
    with pytest.raises(ResourceExhaustedError) as caught:
        classifiers.save(info, head)
    assert caught.value.reason == "STORAGE_FULL"
    assert "No space left" not in caught.value.message  # the errno's text stays in the log


async def test_a_full_disk_during_a_fit_is_resource_exhausted_storage_full(faults, monkeypatch):
    _, inference = faults
    _full_disk(monkeypatch)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.FitAnomalyDetector(_fit_request("full"), timeout=60)
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(caught.value).reason == "STORAGE_FULL"
    assert "out of space" in caught.value.details()
    assert "retry later" not in caught.value.details()


CORRUPT_MANIFESTS = {
    "not-json": b"\x00\xffnot json",
    "a-list": b"[]",
    "infinite-numbers": None,  # a real manifest whose numbers are Infinity (JSON as Python reads it)
    "wrong-types": None,  # a real manifest whose latest summary is a list
}


@pytest.mark.parametrize("corruption", CORRUPT_MANIFESTS)
async def test_one_corrupt_manifest_leaves_the_others_listed(faults, caplog, corruption):
    data_dir, inference = faults
    await inference.FitAnomalyDetector(_fit_request("good"), timeout=60)
    broken = f"broken-{corruption}"
    await inference.FitAnomalyDetector(_fit_request(broken), timeout=60)
    manifest = data_dir / ANOMALY_DIR / broken / "manifest.json"
    raw = CORRUPT_MANIFESTS[corruption]
    if raw is None:
        parsed = json.loads(manifest.read_text())
        if corruption == "infinite-numbers":
            parsed["versions"][-1]["created_at_ms"] = float("inf")
            parsed["latest"]["row_count"] = float("inf")
        else:
            parsed["latest"] = ["not", "a", "summary"]
        raw = json.dumps(parsed).encode()
    manifest.write_bytes(raw)
    caplog.set_level(logging.WARNING)
    listed = await inference.ListAnomalyDetectors(pb.ListAnomalyDetectorsRequest(), timeout=30)
    names = [d.detector for d in listed.detectors]
    assert "good" in names and broken not in names
    # Named in the answer (the module's server keeps the earlier cases' broken ones too).
    assert broken in listed.unreadable_detectors and "good" not in listed.unreadable_detectors
    assert any(getattr(r, "folder", None) == broken for r in caplog.records)


FOREIGN_FILES = {
    "README.txt": b"notes about these classifiers",
    "list.json": b"[1, 2, 3]",
    "binary.json": b"\x89PNG\r\n\x1a\n",
    "wrong-types.json": json.dumps(
        {
            "name": 5,
            "embedding_model": ["x"],
            "labels": "ab",
            "example_count": "many",
            "created_at_unix_ms": "now",
            "training_accuracy": {},
        }
    ).encode(),
    "huge-number.json": json.dumps(
        {
            "name": "huge-number",
            "embedding_model": "m",
            "labels": ["a", "b"],
            "example_count": 10**30,
            "created_at_unix_ms": 0,
            "training_accuracy": 1.0,
        }
    ).encode(),
    "sub/nested.json": b"{}",
    ".hidden.json": b"{}",
}


async def test_foreign_files_in_the_classifiers_folder_are_ignored(faults):
    data_dir, inference = faults
    folder = data_dir / CLASSIFIERS_DIR
    for name, data in FOREIGN_FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    listed = await inference.ListClassifiers(e.ListClassifiersRequest(), timeout=30)
    assert [c.name for c in listed.classifiers] == []
