"""``GET /v1/models`` and ``/v1/models/{name}`` show the status string and the memory estimate
beside the measured use, from a real server of this module's own: MiniLM and an entry
whose source is missing."""

from __future__ import annotations

import grpc
import pytest
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc

from gateway.app import create_app
from tests.conftest import MINILM_SOURCE
from tests.gateway.gateway_fakes import asgi_client
from tests.service.admin.conftest import started, write_catalog

EMBED = "status-minilm"
MISSING = "status-missing"
CATALOG = {
    "models": {
        EMBED: {"tasks": ["embed"], "backend": "sentence_transformers", "source": MINILM_SOURCE},
        MISSING: {"tasks": ["embed"], "backend": "sentence_transformers", "source": "/nonexistent/model"},
    }
}


@pytest.fixture(scope="module")
async def address(tmp_path_factory):
    folder = tmp_path_factory.mktemp("status")
    server = await started(folder, catalog_path=write_catalog(folder, CATALOG))
    yield f"127.0.0.1:{server.port}"
    await server.stop(grace=1.0)


async def test_models_show_status_and_estimate_beside_measured_memory(address):
    async with asgi_client(create_app(address)) as http:
        listed = await http.get("/v1/models")
        assert listed.status_code == 200
        by_id = {model["id"]: model for model in listed.json()["data"]}
        assert by_id[EMBED]["status"] == "not_loaded" and by_id[EMBED]["status_detail"] == "Not Loaded"
        estimate = by_id[EMBED]["required_memory"]
        assert estimate["ram_bytes"] > 10_000_000 and estimate["vram_bytes"] == 0
        assert by_id[EMBED]["memory"] == {"ram_bytes": 0, "vram_bytes": 0}  # nothing measured yet
        # An unusable entry still lists, with its error and no estimate.
        assert by_id[MISSING]["status"] == "error"
        assert (
            by_id[MISSING]["status_detail"].startswith("Error: ")
            and by_id[MISSING]["required_memory"] is None
        )

        async with grpc.aio.insecure_channel(address) as channel:
            models = model_service_pb2_grpc.ModelServiceStub(channel)
            await models.LoadModel(m.LoadModelRequest(name=EMBED), timeout=120)
        one = (await http.get(f"/v1/models/{EMBED}")).json()
        assert one["status"] == "ready"
        assert one["status_detail"] == "Running: sentence_transformers on cpu"
        assert one["required_memory"] == estimate
        assert one["memory"]["ram_bytes"] > 10_000_000  # measured, beside the estimate

        missing = await http.get(f"/v1/models/{MISSING}")
        assert missing.status_code == 200 and missing.json()["required_memory"] is None
        assert (await http.get("/v1/models/no-such-model")).status_code == 404
