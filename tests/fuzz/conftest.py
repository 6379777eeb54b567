"""Fixtures of the fuzz tests: what a fuzz module fits is deleted when it ends."""

from __future__ import annotations

import pytest
from universal_runtime.v1 import anomaly_pb2 as a
from universal_runtime.v1 import encoders_pb2 as e

from tests.fuzz.calls import STATS


async def _fitted(inference) -> tuple[set[str], set[str]]:
    classifiers = (await inference.ListClassifiers(e.ListClassifiersRequest())).classifiers
    detectors = (await inference.ListAnomalyDetectors(a.ListAnomalyDetectorsRequest())).detectors
    return {item.name for item in classifiers}, {item.detector for item in detectors}


@pytest.fixture(scope="module", autouse=True)
async def forget_fitted(inference):
    """Delete the classifiers and detectors a fuzz module fitted, so other tests' listings and
    store quotas are as they would be without the fuzz run."""
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
