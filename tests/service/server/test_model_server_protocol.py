"""The model-server protocol's per-pod gauges (Gateway API Inference Extension proposal 003).

The endpoint picker (EPP) scrapes each pod's ``/metrics`` for one series each of queued requests,
running requests and KV-cache use as a fraction (``vllm:num_requests_waiting``,
``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``), the models a pod holds
(``vllm:lora_requests_info``) and its cache's block size (``vllm:cache_config_info``); we serve each
under our ``ur_`` name too. The conformance test runs the real ``universal-runtime`` process (gRPC
server with the gateway in its process, and the metrics port) on the real llama.cpp model, and reads
both HTTP ports during a burst of streams; the sums themselves are checked on a collector over
stand-in engines, and the encoder request counts on a real batcher.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace

import grpc
import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc, model_service_pb2_grpc
from universal_runtime.v1 import model_service_pb2 as m

from engines.base import ModelSpec
from engines.batching import BatchingConfig, DynamicBatcher
from engines.executor import DeviceExecutor
from engines.stats import EncoderStats, EngineStats, GenerationStats, KvCacheStats
from service.metrics import PROTOCOL_BLOCK_SIZE, ModelStateCollector
from service.model_manager import ManagedModel, ModelState
from tests.conftest import EMBED_MODEL, GGUF_SOURCE, MINILM_SOURCE, REPO_ROOT, child_server_env, free_port
from tests.launched import serving
from tests.scrape import Samples, parse, value

MODEL = "protocol-chat"
SLOTS, CONTEXT = 2, 512  # sequences decoded together, and KV cells per sequence
#: The conformance server's catalog: the chat model with two slots, and an encoder never loaded
#: (a model the pod can serve: max_lora counts it).
CATALOG = {
    "models": {
        MODEL: {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": CONTEXT, "max_sequences": SLOTS, "max_waiting": 8, "n_threads": 2},
        },
        "protocol-embed": {"tasks": ["embed"], "backend": "sentence_transformers", "source": MINILM_SOURCE},
    }
}
STREAMS = SLOTS + 3  # more streams than slots: three wait
NO_END = [
    g.LogitBias(token_id=t, bias=-100) for t in (0, 1, 2)
]  # SmolLM2's special tokens: only max_tokens ends
CALL_TIMEOUT_S = 120.0
#: Bounded polls of the gauges: every 20 ms, up to 10 s (a step in flight on a busy CPU).
POLL_INTERVAL_S, POLL_S = 0.02, 10.0
WAITING, RUNNING, KV = "ur_requests_waiting", "ur_requests_running", "ur_kv_cache_usage_ratio"
TWINS = {
    WAITING: "vllm:num_requests_waiting",
    RUNNING: "vllm:num_requests_running",
    KV: "vllm:kv_cache_usage_perc",
    "ur_lora_requests_info": "vllm:lora_requests_info",
    "ur_cache_config_info": "vllm:cache_config_info",
}


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The protocol families of an exposition text: (labels, value) of each series, by name.

    Every protocol family must be a gauge, as the EPP reads a gauge's value.
    """
    found = {}
    for family in text_string_to_metric_families(text):
        if family.name in TWINS or family.name in TWINS.values():
            assert family.type == "gauge", family
            found[family.name] = [(sample.labels, sample.value) for sample in family.samples]
    return found


def pod_gauges(text: str) -> dict[str, tuple[dict[str, str], float]]:
    """The one series of each protocol family, by our name; its vLLM-named twin must be equal."""
    found = families(text)
    gauges = {}
    for ours, theirs in TWINS.items():
        assert len(found.get(ours, ())) == 1, f"{ours}: {found.get(ours)}"
        assert found[theirs] == found[ours], (ours, found[ours], found[theirs])
        gauges[ours] = found[ours][0]
    return gauges


# -- the sums, on stand-in engines -----------------------------------------------------------


class StatsEngine:
    """Stands in for a loaded engine: only ``stats()``, which the collector reads."""

    def __init__(self, stats: EngineStats) -> None:
        self._stats = stats

    def stats(self) -> EngineStats:
        return self._stats


def managed(name: str, state: ModelState, stats: EngineStats | None = None) -> ManagedModel:
    spec = ModelSpec(name=name, backend="stand-in", tasks=(), source="")
    engine = StatsEngine(stats) if stats is not None else None
    return ManagedModel(spec=spec, keep_alive_s=0.0, pinned=False, state=state, engine=engine)  # type: ignore[arg-type]


def collected(*models: ManagedModel) -> str:
    """The exposition text of a collector over a manager holding ``models``."""
    registry = CollectorRegistry()
    registry.register(ModelStateCollector(SimpleNamespace(models=lambda: list(models))))
    return generate_latest(registry).decode()


def test_the_pod_totals_add_generation_sequences_encoder_requests_and_held_kv_cells():
    llama = GenerationStats(
        running=2, waiting=3, kv_cache=KvCacheStats(cells_used=300, cells_total=1024, cells_cached=100)
    )
    torch_generation = GenerationStats(running=1, waiting=1)  # counts no KV cells
    encoder = EncoderStats(queue_depth=9, requests_running=1, requests_waiting=4)
    text = collected(
        managed("b-llama", ModelState.READY, EngineStats(generation=llama)),
        managed("c-torch", ModelState.READY, EngineStats(generation=torch_generation)),
        managed("a-embed", ModelState.READY, EngineStats(encoder=encoder)),
        managed("d-loading", ModelState.LOADING),
        managed("e-unloaded", ModelState.NOT_LOADED),
        managed(
            "f-unloading", ModelState.UNLOADING, EngineStats(generation=GenerationStats(running=0, waiting=0))
        ),
    )
    gauges = pod_gauges(text)
    assert gauges[WAITING] == ({}, 3 + 1 + 4)  # encoder requests, not its 9 queued inputs
    assert gauges[RUNNING] == ({}, 2 + 1 + 1)
    # Cells running sequences hold (cached prompts excluded) over the cells of models that count them.
    assert gauges[KV] == ({}, (300 - 100) / 1024)
    adapters, updated = gauges["ur_lora_requests_info"]
    assert adapters == {
        "running_lora_adapters": "a-embed,b-llama,c-torch",  # serving now; not the one unloading
        "waiting_lora_adapters": "d-loading",
        "max_lora": "6",  # every model the pod can serve
    }
    assert abs(updated - time.time()) < 60  # the time it was read: the EPP keeps the latest by value
    blocks = str(1024 // PROTOCOL_BLOCK_SIZE)
    assert gauges["ur_cache_config_info"] == (
        {"block_size": str(PROTOCOL_BLOCK_SIZE), "num_gpu_blocks": blocks},
        1,
    )
    # The per-model series stay: the encoder's depth in inputs, the llama model's cells with its cache.
    samples = parse(text)
    assert value(samples, "ur_encoder_queue_depth", model="a-embed") == 9
    assert value(samples, "ur_kv_cache_cells_used", model="b-llama") == 300
    assert value(samples, "ur_generation_sequences_waiting", model="c-torch") == 1
    assert value(samples, "ur_models_loaded") == 4


def test_an_idle_pod_reports_zeros_and_no_generation_model_means_no_kv_use():
    encoder = EncoderStats(queue_depth=0)
    gauges = pod_gauges(collected(managed("embed", ModelState.READY, EngineStats(encoder=encoder))))
    assert (gauges[WAITING][1], gauges[RUNNING][1], gauges[KV][1]) == (0, 0, 0)
    assert gauges["ur_cache_config_info"][0]["num_gpu_blocks"] == "0"
    assert gauges["ur_lora_requests_info"][0]["running_lora_adapters"] == "embed"


@pytest.fixture
def executor() -> Iterator[DeviceExecutor]:
    lane = DeviceExecutor("cpu-protocol-test")
    yield lane
    lane.shutdown()


async def test_the_batcher_counts_requests_running_and_waiting_not_inputs(executor):
    started, release = threading.Event(), threading.Event()

    def run(items: list[str]) -> list[str]:
        started.set()
        assert release.wait(10), "the test did not release the batch"
        return items

    batcher = DynamicBatcher(run, executor, BatchingConfig(max_batch_size=2), name="t")
    first = asyncio.ensure_future(batcher.submit(["a1", "a2", "a3"], [1, 1, 1]))
    assert await asyncio.to_thread(started.wait, 10)
    second = asyncio.ensure_future(batcher.submit(["b1"], [1]))
    preparing = batcher.reserve(2)  # a request tokenizing its two inputs
    await asyncio.sleep(0)  # the second submit queues its input
    try:
        # The batch on the lane holds two of the first request's inputs: it runs. The second
        # request and the one preparing wait; the first's third input does not make it wait too.
        assert batcher.request_counts() == (1, 2)
        assert batcher.queue_depth == 2 + 2  # inputs: a3 and b1 queued, two places held
    finally:
        release.set()
        preparing.release()
    assert await first == ["a1", "a2", "a3"]
    assert await second == ["b1"]
    assert batcher.request_counts() == (0, 0)
    batcher.close()


async def test_a_real_encoders_requests_wait_while_its_lane_is_busy(server, inference):
    """Embed calls queued behind a held lane: three requests waiting, six inputs queued."""
    await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=["loaded"]), timeout=CALL_TIMEOUT_S)
    engine = server.manager.get(EMBED_MODEL).engine
    # This server's collector, whichever server the process registered last.
    registry = CollectorRegistry()
    registry.register(ModelStateCollector(server.manager))

    async def gauges_until(test, what: str) -> tuple[dict, Samples]:
        deadline = time.monotonic() + POLL_S
        while True:
            text = generate_latest(registry).decode()
            gauges = pod_gauges(text)
            if test(gauges):
                return gauges, parse(text)
            assert time.monotonic() < deadline, f"not {what} within {POLL_S} s: {gauges}"
            await asyncio.sleep(POLL_INTERVAL_S)

    gate = threading.Event()
    blocker = asyncio.ensure_future(engine.executor.run(gate.wait, CALL_TIMEOUT_S))
    calls = [
        asyncio.ensure_future(
            inference.Embed(
                e.EmbedRequest(model=EMBED_MODEL, inputs=[f"text {i}", "x"]), timeout=CALL_TIMEOUT_S
            )
        )
        for i in range(3)
    ]
    try:
        gauges, samples = await gauges_until(lambda gauges: gauges[WAITING][1] == 3, "three requests waiting")
        assert gauges[RUNNING][1] == 0
        assert value(samples, "ur_encoder_queue_depth", model=EMBED_MODEL) == 6  # the per-model gauge: inputs
    finally:
        gate.set()
        await blocker
    assert all(len(answer.embeddings) == 2 for answer in await asyncio.gather(*calls))
    await gauges_until(lambda gauges: (gauges[WAITING][1], gauges[RUNNING][1]) == (0, 0), "idle")


# -- conformance on the real server ----------------------------------------------------------


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> Iterator[SimpleNamespace]:
    """The ``universal-runtime`` process: its gRPC target, gateway URL and metrics-port URL."""
    tmp = tmp_path_factory.mktemp("protocol")
    catalog = tmp / "catalog.yaml"
    catalog.write_text(yaml.safe_dump(CATALOG))
    grpc_port, gateway_port, metrics_port = free_port(), free_port(), free_port()
    log = tmp / "log"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "service.cli",
            "--grpc-host", "127.0.0.1", "--grpc-port", str(grpc_port),
            "--gateway-host", "127.0.0.1", "--gateway-port", str(gateway_port),
            "--metrics-port", str(metrics_port),
            "--catalog", str(catalog), "--data-dir", str(tmp / "data"),
        ],
        cwd=REPO_ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env=child_server_env(UR_SHUTDOWN_GRACE_S="1"),
    )  # fmt: skip
    gateway = f"http://127.0.0.1:{gateway_port}"
    with serving(process, log, f"{gateway}/health"):
        yield SimpleNamespace(
            target=f"127.0.0.1:{grpc_port}",
            ports={"gateway": gateway, "metrics": f"http://127.0.0.1:{metrics_port}"},
        )


@pytest.fixture
async def pod(launched) -> AsyncIterator[SimpleNamespace]:
    """gRPC stubs to the launched server and a scrape of either HTTP port."""
    async with grpc.aio.insecure_channel(launched.target) as channel, httpx.AsyncClient() as http:

        async def scrape(port: str) -> str:
            response = await http.get(f"{launched.ports[port]}/metrics", timeout=10)
            assert response.status_code == 200, response.text
            return response.text

        async def until(test, what: str) -> dict[str, str]:
            """Scrapes of both ports taken back to back for which ``test(port, text)`` holds."""
            deadline = time.monotonic() + POLL_S
            while True:
                texts = {port: await scrape(port) for port in launched.ports}
                if all(test(port, text) for port, text in texts.items()):
                    return texts
                assert time.monotonic() < deadline, f"not {what} within {POLL_S} s:\n{load_lines(texts)}"
                await asyncio.sleep(POLL_INTERVAL_S)

        yield SimpleNamespace(
            inference=inference_service_pb2_grpc.InferenceServiceStub(channel),
            models=model_service_pb2_grpc.ModelServiceStub(channel),
            scrape=scrape,
            until=until,
        )


def stream(pod, prompt: str, max_tokens: int):
    parameters = g.GenerationParameters(max_tokens=max_tokens, temperature=0.0, logit_bias=NO_END)
    request = g.GenerateStreamRequest(model=MODEL, prompt=prompt, parameters=parameters)
    return pod.inference.GenerateStream(request, timeout=CALL_TIMEOUT_S)


async def first_token(call) -> None:
    """Read ``call`` until its first token: its prompt is in the KV cache by then."""
    async for message in call:
        if message.token_ids:
            return
    raise AssertionError("the stream ended before its first token")


async def last_message(call) -> g.GenerateStreamResponse:
    messages = [message async for message in call]
    return messages[-1]


def model_sample(text: str, name: str) -> float:
    samples: Samples = parse(text)
    return value(samples, name, model=MODEL)


def load_lines(texts: dict[str, str]) -> str:
    """The lines of each port's scrape that tell its load (for a failure's message)."""
    prefixes = ("ur_requests_waiting", "ur_requests_running", "ur_kv_cache", "ur_generation_sequences_")
    return "\n".join(
        f"{port}: {line}"
        for port, text in texts.items()
        for line in text.splitlines()
        if line.startswith(prefixes)
    )


def idle(port: str, text: str) -> bool:
    gauges = pod_gauges(text)
    return (gauges[WAITING][1], gauges[RUNNING][1], gauges[KV][1]) == (0, 0, 0)


async def test_an_idle_pod_lists_its_loaded_model_and_its_cache_layout(pod):
    for port in ("gateway", "metrics"):
        assert idle(port, await pod.scrape(port))
    await pod.models.LoadModel(m.LoadModelRequest(name=MODEL), timeout=CALL_TIMEOUT_S)
    for port in ("gateway", "metrics"):
        text = await pod.scrape(port)
        gauges = pod_gauges(text)
        assert gauges["ur_lora_requests_info"][0] == {
            "running_lora_adapters": MODEL,
            "waiting_lora_adapters": "",
            "max_lora": str(len(CATALOG["models"])),
        }
        cells = model_sample(text, "ur_kv_cache_cells_total")
        assert cells == SLOTS * CONTEXT
        assert gauges["ur_cache_config_info"][0] == {
            "block_size": str(PROTOCOL_BLOCK_SIZE),
            "num_gpu_blocks": str(int(cells) // PROTOCOL_BLOCK_SIZE),
        }


async def held_kv(pod, call, max_tokens: int) -> tuple[float, float, g.GenerateStreamResponse]:
    """KV use while ``call`` (the only stream) runs, from both ports; then its last message.

    Returns the smaller and the larger of the two ports' readings (the stream grows between them).
    """
    await first_token(call)

    def one_running(port: str, text: str) -> bool:
        return model_sample(text, "ur_generation_sequences_running") == 1

    texts = await pod.until(one_running, "one sequence running")
    readings = []
    for text in texts.values():
        ratio = pod_gauges(text)[KV][1]
        cells = model_sample(text, "ur_kv_cache_cells_total")
        held = ratio * cells
        assert 0 < ratio <= 1
        assert held == pytest.approx(round(held)), "a fraction of whole cells"
        assert held <= model_sample(text, "ur_kv_cache_cells_used")
        readings.append(ratio)
    last = await last_message(call)
    assert last.usage.completion_tokens == max_tokens
    return min(readings), max(readings), last


async def test_kv_use_rises_with_the_prompt_length(pod):
    # Enough tokens that each stream is still running at the scrapes after its first token.
    short_tokens, long_tokens = 120, 150
    _, short_high, short = await held_kv(pod, stream(pod, "Hi.", short_tokens), short_tokens)
    long_low, _, long = await held_kv(pod, stream(pod, "apples and pears, " * 60, long_tokens), long_tokens)
    cells = SLOTS * CONTEXT
    # A running sequence holds its prompt from its first token on, and at most what it generated
    # besides (one step may run ahead of the tokens handed out).
    assert short_high * cells <= short.usage.prompt_tokens + short_tokens + 1
    assert long_low * cells >= long.usage.prompt_tokens
    assert long.usage.prompt_tokens > short.usage.prompt_tokens + short_tokens + 1
    assert long_low > short_high
    await pod.until(idle, "idle")


async def test_a_burst_queues_past_the_slots_and_the_gauges_return_to_zero(pod):
    # Prompts of a few tokens and 400 tokens each: the two running sequences hold their slots for
    # seconds, so the three others wait that long.
    calls = [stream(pod, f"Count from {i}:", 400) for i in range(STREAMS)]
    try:

        def queued(port: str, text: str) -> bool:
            gauges = pod_gauges(text)
            return gauges[RUNNING][1] == SLOTS and gauges[WAITING][1] == STREAMS - SLOTS

        texts = await pod.until(queued, f"{SLOTS} running and {STREAMS - SLOTS} waiting")
        for text in texts.values():
            gauges = pod_gauges(text)
            # Running and queued are the engine's own counts, summed over the pod's one loaded model.
            assert gauges[RUNNING][1] == model_sample(text, "ur_generation_sequences_running")
            assert gauges[WAITING][1] == model_sample(text, "ur_generation_sequences_waiting") > 0
            assert 0 < gauges[KV][1] <= 1
            assert gauges["ur_lora_requests_info"][0]["running_lora_adapters"] == MODEL
    finally:
        for call in calls:
            call.cancel()
    # Cancelled sequences leave the batch at the next step; the prompts their slots keep cached
    # are not KV use (a new sequence may take those cells).
    texts = await pod.until(idle, "idle after the streams were cancelled")
    assert all(model_sample(text, "ur_kv_cache_cells_used") > 0 for text in texts.values())
