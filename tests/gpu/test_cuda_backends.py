"""A torch embedder and a llama.cpp chat model on one GPU, each in its own backend process.

In one process, llama.cpp's CUDA build segfaulted in ``llama_model_load`` once torch had
started CUDA (two CUDA/cuBLAS builds in one address space). With backend processes each engine
starts only its own runtime. Skipped where torch sees no CUDA device (CI has none); run on a GPU
machine with ``pytest tests/gpu -s`` for the ``FIGURE`` lines (load seconds, device memory).
"""

from __future__ import annotations

import time

import grpc
import pytest
import yaml

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from universal_runtime.v1 import encoders_pb2 as e  # noqa: E402 (after the skip)
from universal_runtime.v1 import generation_pb2 as g  # noqa: E402
from universal_runtime.v1 import (  # noqa: E402
    inference_service_pb2_grpc,
    model_service_pb2,
    model_service_pb2_grpc,
)

from service.server import start_server  # noqa: E402
from service.settings import Settings  # noqa: E402
from tests.conftest import GGUF_SOURCE, MINILM_SOURCE  # noqa: E402

CATALOG = {
    "models": {
        "gpu-embed": {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
            "device": "cuda",
        },
        "gpu-chat": {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "device": "cuda",
            "options": {"n_ctx": 1024},
        },
    }
}


async def test_torch_and_llama_cpp_share_a_gpu_in_their_own_processes(tmp_path):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(yaml.safe_dump(CATALOG))
    settings = Settings(grpc_port=0, catalog_path=catalog, data_dir=tmp_path / "data", backend_processes=True)
    running = await start_server(settings)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
            models = model_service_pb2_grpc.ModelServiceStub(channel)
            started = time.perf_counter()
            embedded = await inference.Embed(e.EmbedRequest(model="gpu-embed", inputs=["on the gpu"]))
            embed_s = time.perf_counter() - started
            started = time.perf_counter()
            answer = await inference.Generate(
                g.GenerateRequest(
                    model="gpu-chat",
                    messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content="Name a colour.")],
                    parameters=g.GenerationParameters(max_tokens=16, temperature=0.0),
                )
            )
            chat_s = time.perf_counter() - started
            assert len(embedded.embeddings[0].values) == 384 and answer.choices[0].text
            for name, seconds in (("gpu-embed", embed_s), ("gpu-chat", chat_s)):
                model = (await models.GetModel(model_service_pb2.GetModelRequest(name=name))).model
                assert model.device.startswith("cuda") and model.backend_process.pid > 0
                print(
                    f"FIGURE {name}: first call {seconds:.2f} s, rss {model.backend_process.rss_bytes / 2**20:.0f} MiB, "
                    f"vram {model.memory.vram_bytes / 2**20:.0f} MiB"
                )
            # The server itself never started CUDA: each backend holds its own runtime.
            assert not torch.cuda.is_initialized()
    finally:
        await running.stop(grace=1.0)
