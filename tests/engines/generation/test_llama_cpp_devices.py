"""llama.cpp's placement and memory check ask llama.cpp's own device list, never torch.

torch's view of CUDA (``torch.cuda.mem_get_info``) starts torch's CUDA context, a second CUDA
runtime and cuBLAS beside llama.cpp's in a process that may serve GGUF models only. On this CPU
build llama.cpp sees no CUDA GPU; the CUDA branches are checked with ggml's device list stubbed
(the real thing runs in tests/gpu on a GPU).
"""

from __future__ import annotations

import pytest

from engines.errors import ResourceExhaustedError
from engines.executor import ExecutorPool
from engines.generation import ggml_devices
from engines.generation.llama_cpp_engine import LlamaCppGenerationEngine
from service.catalog import load_catalog
from service.model_manager import ModelManager
from service.settings import Settings
from tests.conftest import CHAT_MODEL


def test_this_cpu_build_sees_no_cuda_gpu_and_serves_on_the_cpu():
    assert ggml_devices.cuda_device_count() == 0
    with pytest.raises(ValueError, match="sees 0 CUDA GPU"):
        ggml_devices.cuda_memory("cuda:0")
    for preference in ("auto", "cuda", "cuda:1", "mps", "cpu"):
        assert LlamaCppGenerationEngine.select_device(preference) == "cpu"


@pytest.mark.parametrize("device", ["mps", "cuda:x", "cuda:-1", "vulkan:0"])
def test_a_device_that_is_not_cuda_has_no_ggml_index(device):
    with pytest.raises(ValueError, match="not a CUDA device"):
        ggml_devices.cuda_index(device)


@pytest.fixture
def two_cuda_gpus(monkeypatch):
    """A GPU build that sees two CUDA devices (ggml's list stubbed; no device is touched)."""
    import llama_cpp

    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: True)
    monkeypatch.setattr(ggml_devices, "_cuda_handles", lambda: [101, 102])


def test_a_gpu_build_places_on_the_cuda_gpus_llama_cpp_sees(two_cuda_gpus):
    assert LlamaCppGenerationEngine.select_device("auto") == "cuda"
    assert LlamaCppGenerationEngine.select_device("cuda:1") == "cuda:1"
    assert ggml_devices.cuda_index("cuda") == 0
    assert ggml_devices.cuda_index("cuda:1") == 1
    assert LlamaCppGenerationEngine.select_device("mps") == "cpu"
    with pytest.raises(ValueError, match="sees 2 CUDA GPU"):
        LlamaCppGenerationEngine.select_device("cuda:2")


async def test_the_load_check_uses_the_engines_own_view_of_its_device(tmp_path, monkeypatch):
    """A GGUF bigger than what its engine reports free is refused before any weight is read."""
    monkeypatch.setattr(LlamaCppGenerationEngine, "free_memory_bytes", lambda self: 1000)
    executors = ExecutorPool()
    manager = ModelManager(
        {CHAT_MODEL: load_catalog().specs[CHAT_MODEL]},
        Settings(data_dir=tmp_path, memory_headroom_bytes=0),
        executors,
    )
    try:
        with pytest.raises(ResourceExhaustedError) as refused:
            await manager.load(CHAT_MODEL)
        assert refused.value.reason == "INSUFFICIENT_MEMORY"
        assert refused.value.metadata["free_bytes"] == "1000"
        assert int(refused.value.metadata["needed_bytes"]) > 50_000_000  # the 135M model's GGUF
    finally:
        await manager.close()
        executors.shutdown(wait=True)
