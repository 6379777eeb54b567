"""InferenceService anomaly-detection RPCs."""

from __future__ import annotations

from engines.errors import NotImplementedYetError
from service.servicers.base import RpcBase


class AnomalyRpcs(RpcBase):
    """Fit, score and stream-score anomaly detectors."""

    async def FitAnomalyDetector(self, request, context):
        """Not built yet: UNIMPLEMENTED."""
        raise NotImplementedYetError("FitAnomalyDetector is not implemented yet in this server build")

    async def DetectAnomaly(self, request, context):
        """Not built yet: UNIMPLEMENTED."""
        raise NotImplementedYetError("DetectAnomaly is not implemented yet in this server build")

    async def StreamDetectAnomaly(self, request_iterator, context):
        """Not built yet: UNIMPLEMENTED."""
        raise NotImplementedYetError("StreamDetectAnomaly is not implemented yet in this server build")
        yield  # pragma: no cover
