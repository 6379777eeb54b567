"""``GET /metrics``: Prometheus text exposition of this process's metrics.

When the gateway runs beside the gRPC server (``universal-runtime``), this is the server's whole
registry (RPCs, generation, encoders, models; docs/operate/observability.md's metrics table), the per-pod
gauges of the model-server protocol included (``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
``vllm:kv_cache_usage_perc``, ``vllm:lora_requests_info``, ``vllm:cache_config_info`` and their
``ur_`` twins, :mod:`service.metrics`): an InferencePool that targets this HTTP port has its
endpoint picker scrape them here. A standalone gateway has no server metrics of its own to show.
With ``PROMETHEUS_MULTIPROC_DIR`` set (several gateway worker processes), every process's files
are merged through prometheus_client's ``MultiProcessCollector`` (files hold recorded metrics
only: no gauge read at scrape time, so no protocol gauge).
"""

from __future__ import annotations

import os

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
async def metrics() -> Response:
    """The metrics in Prometheus' text format (``text/plain; version=0.0.4``). Never requires the API key."""
    registry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
