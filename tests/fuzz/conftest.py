"""Fixtures of the fuzz tests: what a fuzz module fits is deleted when it ends; the launched server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from universal_runtime.v1 import anomaly_pb2 as a
from universal_runtime.v1 import encoders_pb2 as e

from tests.conftest import DOCUMENT_EMBED_MODEL
from tests.fuzz.calls import STATS
from tests.fuzz.launched_server import LaunchedServer


async def _fitted(inference) -> tuple[set[str], set[str]]:
    classifiers = (await inference.ListClassifiers(e.ListClassifiersRequest())).classifiers
    detectors = (await inference.ListAnomalyDetectors(a.ListAnomalyDetectorsRequest())).detectors
    return {item.name for item in classifiers}, {item.detector for item in detectors}


@pytest.fixture(scope="module", autouse=True)
async def forget_fitted(inference):
    """Delete the classifiers and detectors a fuzz module fitted, so other tests' listings and
    store quotas are as they would be without the fuzz run. (Modules that only call the launched
    server override it with a fixture that does nothing, and leave the session server alone.)"""
    classifiers_before, detectors_before = await _fitted(inference)
    yield
    classifiers, detectors = await _fitted(inference)
    for name in classifiers - classifiers_before:
        await inference.DeleteClassifier(e.DeleteClassifierRequest(name=name))
    for name in detectors - detectors_before:
        await inference.DeleteAnomalyDetector(a.DeleteAnomalyDetectorRequest(detector=name))


@pytest.fixture(scope="module", autouse=True)
def report_stats(request):
    """Print the module's gRPC cases by RPC and status (seen with ``pytest -s``)."""
    STATS.clear()
    yield
    if STATS:
        print(f"\n{request.module.__name__}: gRPC fuzz cases by RPC and status:", dict(sorted(STATS.items())))


@pytest.fixture(scope="session")
def launched(catalog_path, tmp_path_factory) -> Iterator[LaunchedServer]:
    """The test catalog served by a ``universal-runtime`` process of its own (gRPC and gateway),
    for cases that may crash it: each case calls ``launched.ensure()`` first, which restarts it."""
    server = LaunchedServer(
        catalog_path,
        tmp_path_factory.mktemp("launched"),
        env={"UR_DOCUMENT_EMBEDDING_MODEL": DOCUMENT_EMBED_MODEL},
    )
    server.start()
    yield server
    server.stop()
