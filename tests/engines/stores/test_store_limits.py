"""Disk quotas of the custom classifier and anomaly detector stores, and durable (fsynced) saves."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc
import numpy as np
import pytest
from universal_runtime.v1 import anomaly_pb2 as pb
from universal_runtime.v1 import inference_service_pb2_grpc

import engines.storage
from engines.anomaly.detector import fit_detector
from engines.anomaly.store import DetectorStore
from engines.anomaly.types import AnomalyBackend, FitConfig
from engines.classification.custom import ClassifierStore
from engines.classification.heads import fit_logistic_head
from engines.encoder_types import ClassifierInfo
from engines.errors import ResourceExhaustedError
from engines.storage import StorageLimits
from gateway.app import create_app
from service.server import start_server
from service.settings import Settings
from tests.conftest import error_info
from tests.gateway.gateway_fakes import asgi_client
from tests.service.anomaly.helpers import numeric_data, to_rows

ROWS = [list(map(float, r)) for r in numeric_data()[:120]]


def _head():
    vectors = np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 0, 1]]
    head, _ = fit_logistic_head(vectors, ["a", "b", "c", "d", "a", "b"])
    return head


def _info(name: str) -> ClassifierInfo:
    return ClassifierInfo(
        name=name,
        embedding_model="m",
        labels=["a", "b", "c", "d"],
        example_count=6,
        created_at_unix_ms=0,
        training_accuracy=1.0,
    )


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_classifier_store_refuses_one_too_many_but_replaces_in_place(tmp_path):
    store = ClassifierStore(tmp_path, limits=StorageLimits(max_items=2))
    head = _head()
    store.save(_info("one"), head)
    store.save(_info("two"), head)
    before = _files(tmp_path)
    with pytest.raises(ResourceExhaustedError) as caught:
        store.save(_info("three"), head)
    error = caught.value
    assert error.status == "RESOURCE_EXHAUSTED" and error.reason == "STORAGE_QUOTA_EXCEEDED"
    assert error.metadata["max_items"] == "2" and error.metadata["items"] == "2"
    assert error.metadata["max_bytes"] == str(1 << 30)
    assert "at most 2 custom classifiers" in error.message
    assert _files(tmp_path) == before  # nothing written
    assert store.get("three") is None
    store.save(_info("one"), head)  # a replacement is not a new classifier
    store.delete("two")
    store.save(_info("three"), head)  # room again
    assert [i.name for i in store.list()] == ["one", "three"]


def test_classifier_store_bytes_quota_counts_replaced_files_as_freed(tmp_path):
    probe = ClassifierStore(tmp_path / "probe")
    probe.save(_info("x"), _head())
    one = sum(p.stat().st_size for p in (tmp_path / "probe").iterdir())

    store = ClassifierStore(tmp_path / "store", limits=StorageLimits(max_bytes=one + one // 2))
    store.save(_info("x"), _head())
    store.save(_info("x"), _head())  # same size again: the old files are freed
    with pytest.raises(ResourceExhaustedError) as caught:
        store.save(_info("y"), _head())
    assert caught.value.metadata["used_bytes"] == str(one)
    assert int(caught.value.metadata["needed_bytes"]) == one
    assert _files(tmp_path / "store") == ["x.json", "x.v2.skops"]  # the replaced head is gone


def test_detector_store_counts_detectors_not_versions(tmp_path):
    detector = fit_detector(ROWS, FitConfig(backend=AnomalyBackend.HBOS, contamination=0.1))
    store = DetectorStore(tmp_path, keep_versions=2, limits=StorageLimits(max_items=1))
    assert [store.save("d", detector) for _ in range(3)] == [1, 2, 3]
    with pytest.raises(ResourceExhaustedError) as caught:
        store.save("e", detector)
    assert caught.value.reason == "STORAGE_QUOTA_EXCEEDED"
    assert caught.value.metadata["max_items"] == "1"
    assert not (tmp_path / "e").exists()


def test_detector_store_bytes_quota_frees_the_versions_a_save_drops(tmp_path):
    detector = fit_detector(ROWS, FitConfig(backend=AnomalyBackend.HBOS, contamination=0.1))
    probe = DetectorStore(tmp_path / "probe")
    probe.save("d", detector)
    one = sum(p.stat().st_size for p in (tmp_path / "probe" / "d").iterdir())

    # Room for two versions and a bit: with keep_versions=2 every save frees the oldest version.
    store = DetectorStore(
        tmp_path / "store", keep_versions=2, limits=StorageLimits(max_bytes=2 * one + one // 2)
    )
    for _ in range(4):
        store.save("d", detector)
    assert store.load("d")[0] == 4
    with pytest.raises(ResourceExhaustedError):
        store.save("e", detector)
    assert not (tmp_path / "store" / "e").exists()


def _record_fsyncs(monkeypatch) -> list[tuple[str, bool]]:
    """Patch os.fsync in engines.storage to record (path, is_dir) of every flushed descriptor."""
    flushed: list[tuple[str, bool]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        flushed.append((os.readlink(f"/proc/self/fd/{fd}"), stat.S_ISDIR(os.fstat(fd).st_mode)))
        real(fd)

    monkeypatch.setattr(engines.storage.os, "fsync", fsync)
    return flushed


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name descriptors")
def test_every_saved_file_and_its_folder_are_flushed(tmp_path, monkeypatch):
    flushed = _record_fsyncs(monkeypatch)
    ClassifierStore(tmp_path / "c").save(_info("x"), _head())
    files = [Path(p) for p, is_dir in flushed if not is_dir]
    folders = {p for p, is_dir in flushed if is_dir}
    # Written under temporary names, then renamed: one flushed file per saved file.
    assert [f.suffix for f in files] == [".skops", ".json"]
    assert all(f.parent == tmp_path / "c" for f in files)
    assert str(tmp_path / "c") in folders

    flushed.clear()
    detector = fit_detector(ROWS, FitConfig(backend=AnomalyBackend.HBOS, contamination=0.1))
    DetectorStore(tmp_path / "a").save("d", detector)
    files = [Path(p) for p, is_dir in flushed if not is_dir]
    folders = {p for p, is_dir in flushed if is_dir}
    assert [f.suffix for f in files] == [".skops", ".json"]
    assert {str(tmp_path / "a"), str(tmp_path / "a" / "d")} <= folders  # new folder entry, renames


async def test_full_detector_store_is_resource_exhausted_over_grpc_and_507_over_http(tmp_path):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("models: {}\n")  # detectors need no model
    settings = Settings(
        grpc_port=0, catalog_path=catalog, data_dir=tmp_path / "data", anomaly_store_max_items=1
    )
    running = await start_server(settings)
    rows = to_rows(numeric_data())
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
            await stub.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="first", rows=rows))
            await stub.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="first", rows=rows))
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="second", rows=rows))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        info = error_info(caught.value)
        assert info.reason == "STORAGE_QUOTA_EXCEEDED"
        assert info.metadata["max_items"] == "1" and info.metadata["max_bytes"] == str(1 << 30)

        async with asgi_client(create_app(f"127.0.0.1:{running.port}")) as http:
            response = await http.post("/v1/anomaly/fit", json={"detector": "third", "rows": ROWS})
        assert response.status_code == 507, response.text
        assert response.json()["error"]["code"] == "storage_quota_exceeded"
        assert "delete some first" in response.json()["error"]["message"]
    finally:
        await running.stop(grace=0.5)
