"""Saved detectors: identical after a restart, skops allow-list on load, tampered files refused."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

import grpc
import numpy as np
import pytest
from universal_runtime.v1 import anomaly_pb2 as pb
from universal_runtime.v1 import inference_service_pb2_grpc

from engines.anomaly.detector import fit_detector
from engines.anomaly.store import TRUSTED_TYPES, DetectorStore
from engines.anomaly.types import AnomalyBackend, FitConfig
from service.server import start_server
from tests.conftest import error_info
from tests.service.anomaly.helpers import CONTAMINATION, MIXED_SCHEMA, mixed_rows, numeric_data, to_rows


async def test_detector_survives_a_restart_with_identical_scores(inference, settings):
    rows = to_rows(mixed_rows(seed=5))
    fitted = await inference.FitAnomalyDetector(
        pb.FitAnomalyDetectorRequest(
            detector="restart-me",
            backend=pb.ANOMALY_BACKEND_KNN,
            schema=MIXED_SCHEMA,
            rows=rows,
            contamination=CONTAMINATION,
        )
    )
    before = await inference.DetectAnomaly(pb.DetectAnomalyRequest(detector="restart-me", rows=rows))

    second = await start_server(settings)  # same data_dir, fresh process state
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{second.port}") as channel:
            stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
            after = await stub.DetectAnomaly(pb.DetectAnomalyRequest(detector="restart-me", rows=rows))
            listed = await stub.ListAnomalyDetectors(pb.ListAnomalyDetectorsRequest())
    finally:
        await second.stop(grace=1.0)
    assert [s.score for s in after.scores] == [s.score for s in before.scores]
    assert [s.is_anomaly for s in after.scores] == [s.is_anomaly for s in before.scores]
    assert after.summary.threshold == fitted.threshold
    info = next(d for d in listed.detectors if d.detector == "restart-me")
    assert info.version == fitted.version and info.backend == pb.ANOMALY_BACKEND_KNN


@pytest.mark.parametrize("backend", list(AnomalyBackend))
def test_every_backend_saves_only_allow_listed_types_and_reloads(tmp_path, backend):
    import skops.io as sio

    rows = [list(map(float, r)) for r in numeric_data()[:120]]
    detector = fit_detector(rows, FitConfig(backend=backend, contamination=0.1))
    store = DetectorStore(tmp_path)
    version = store.save("d", detector)
    data = (tmp_path / "d" / f"v{version}.skops").read_bytes()
    assert set(sio.get_untrusted_types(data=data)) <= set(TRUSTED_TYPES)
    _, reloaded = DetectorStore(tmp_path).load("d")  # a new store: no cache
    np.testing.assert_array_equal(reloaded.score(rows).raw, detector.score(rows).raw)


def _tamper(path, old: bytes, new: bytes) -> bytes:
    """Rewrite schema.json inside a skops zip, replacing ``old`` with ``new``."""
    source = zipfile.ZipFile(io.BytesIO(path.read_bytes()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "schema.json":
                assert old in data
                data = data.replace(old, new)
            target.writestr(item, data)
    path.write_bytes(out.getvalue())
    return out.getvalue()


async def test_tampered_detector_file_is_refused(inference, settings):
    rows = to_rows(numeric_data())
    fitted = await inference.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="tamper-me", rows=rows))
    folder = settings.data_dir / "anomaly" / "tamper-me"
    path = folder / f"v{fitted.version}.skops"
    # Swap the encoder's type for one that runs commands when built.
    data = _tamper(path, b'"__module__": "engines.anomaly.encoding"', b'"__module__": "subprocess"')
    data = _tamper(path, b'"__class__": "TabularEncoder"', b'"__class__": "Popen"')

    # A second server (nothing cached) must refuse: first the checksum differs from the manifest...
    second = await start_server(settings)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{second.port}") as channel:
            stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.DetectAnomaly(pb.DetectAnomalyRequest(detector="tamper-me", rows=rows))
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert error_info(err.value).reason == "DETECTOR_UNTRUSTED"
            assert "checksum" in err.value.details()

            # ...and with the manifest forged to match, skops' allow-list refuses the untrusted type.
            manifest = json.loads((folder / "manifest.json").read_text())
            manifest["versions"][-1]["sha256"] = hashlib.sha256(data).hexdigest()
            (folder / "manifest.json").write_text(json.dumps(manifest))
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.DetectAnomaly(pb.DetectAnomalyRequest(detector="tamper-me", rows=rows))
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert error_info(err.value).reason == "DETECTOR_UNTRUSTED"
            assert "subprocess.Popen" in err.value.details()
            # The server is fine, and a refit replaces the bad version.
            await stub.FitAnomalyDetector(pb.FitAnomalyDetectorRequest(detector="tamper-me", rows=rows))
            response = await stub.DetectAnomaly(pb.DetectAnomalyRequest(detector="tamper-me", rows=rows))
            assert len(response.scores) == len(rows)
    finally:
        await second.stop(grace=1.0)
