"""Prometheus metrics: scraped over HTTP after real calls on real models, parsed with
``prometheus_client.parser``, and checked to have moved by what was sent.

The registry is the process's, shared with the session server: every check is a difference
between two scrapes around the calls.
"""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path

import grpc
import httpx
import pytest
from prometheus_client import REGISTRY
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc, model_service_pb2_grpc
from universal_runtime.v1 import model_service_pb2 as m

from engines.metrics import set_enabled
from gateway.app import create_app
from service.server import start_server
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES, free_port
from tests.scrape import Samples, parse, value
from tests.streams import POLL_INTERVAL_S, POLLS, read_then_cancel

OBSERVABILITY_PAGE = Path(__file__).resolve().parents[3] / "docs" / "operate" / "observability.md"
FINISHED = "ur_generation_sequences_finished_total"
TEXT_LIMIT = 64 * 1024  # the scraped server's text request limit, to see a rejection counted


@pytest.fixture(scope="module")
async def scraped(settings):
    """A server with its own /metrics port, its stubs, and a scrape function."""
    port = free_port()
    limits = {"grpc_port": 0, "metrics_port": port, "max_text_request_bytes": TEXT_LIMIT}
    running = await start_server(settings.model_copy(update=limits))
    assert running.metrics_port == port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel, httpx.AsyncClient() as http:

        async def scrape() -> Samples:
            response = await http.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
            assert response.status_code == 200
            return parse(response.text)

        yield (
            inference_service_pb2_grpc.InferenceServiceStub(channel),
            model_service_pb2_grpc.ModelServiceStub(channel),
            scrape,
        )
    await running.stop(grace=1.0)


async def test_rpc_counts_durations_and_rejections_move_by_what_was_sent(scraped):
    inference, _, scrape = scraped
    before = await scrape()
    for text in ("one", "two", "three"):
        await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=[text]), timeout=60)
    with pytest.raises(grpc.aio.AioRpcError):
        await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=[]), timeout=60)
    with pytest.raises(grpc.aio.AioRpcError) as too_large:
        await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=["x" * 2 * TEXT_LIMIT]), timeout=60)
    assert too_large.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    after = await scrape()

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("ur_requests_total", method="Embed", code="OK") == 3
    assert moved("ur_requests_total", method="Embed", code="INVALID_ARGUMENT") == 1
    assert moved("ur_requests_total", method="Embed", code="RESOURCE_EXHAUSTED") == 1
    assert moved("ur_rejected_requests_total", method="Embed", reason="message_too_large") == 1
    assert moved("ur_request_duration_seconds_count", method="Embed") == 5
    assert moved("ur_request_duration_seconds_sum", method="Embed") > 0
    assert value(after, "ur_requests_in_flight", method="Embed") == 0
    # The three single-input calls ran as batches of one input each (sent one after another).
    assert moved("ur_encoder_batch_size_sum", model=EMBED_MODEL) == 3
    assert moved("ur_encoder_queue_time_seconds_count", model=EMBED_MODEL) == 3
    assert moved("ur_encoder_compute_time_seconds_count", model=EMBED_MODEL) == 3
    assert value(after, "ur_encoder_queue_depth", model=EMBED_MODEL) == 0
    assert value(after, "ur_model_memory_bytes", model=EMBED_MODEL, memory="ram") > 10_000_000


async def test_generation_metrics_count_the_tokens_the_response_reports(scraped):
    inference, _, scrape = scraped
    before = await scrape()
    request = g.GenerateRequest(
        model=CHAT_MODEL,
        prompt="Count to ten:",
        # Ban end-of-text so that exactly max_tokens tokens come out.
        parameters=g.GenerationParameters(
            max_tokens=12, temperature=0.0, logit_bias=[g.LogitBias(token_id=t, bias=-100) for t in (0, 1, 2)]
        ),
    )
    response = await inference.Generate(request, timeout=120)
    after = await scrape()

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    usage = response.usage
    assert usage.completion_tokens == 12
    assert moved("ur_generation_tokens_total", model=CHAT_MODEL) == usage.completion_tokens
    assert moved("ur_prompt_tokens_total", model=CHAT_MODEL) == usage.prompt_tokens
    assert moved("ur_prompt_tokens_cached_total", model=CHAT_MODEL) == usage.cached_prompt_tokens
    assert moved("ur_time_to_first_token_seconds_count", model=CHAT_MODEL) == 1
    # One gap per token after the first.
    assert moved("ur_inter_token_latency_seconds_count", model=CHAT_MODEL) == usage.completion_tokens - 1
    assert moved("ur_e2e_request_latency_seconds_count", model=CHAT_MODEL) == 1
    assert value(after, "ur_generation_sequences_running", model=CHAT_MODEL) == 0
    assert value(after, "ur_generation_sequences_waiting", model=CHAT_MODEL) == 0
    total = value(after, "ur_kv_cache_cells_total", model=CHAT_MODEL)
    used = value(after, "ur_kv_cache_cells_used", model=CHAT_MODEL)
    assert total >= 2048 and 0 < used <= total  # the slot keeps its prompt's cells cached


async def test_sequences_leaving_the_batch_are_counted_by_reason_beside_the_steps(scraped):
    inference, _, scrape = scraped
    no_end = [g.LogitBias(token_id=t, bias=-100) for t in (0, 1, 2)]  # only max_tokens ends them

    def generate(max_tokens: int, request=g.GenerateRequest, prompt: str = "Count to ten:"):
        parameters = g.GenerationParameters(max_tokens=max_tokens, temperature=0.0, logit_bias=no_end)
        return request(model=CHAT_MODEL, prompt=prompt, parameters=parameters)

    async def counted(since: Samples, *reasons: str) -> Samples:
        """A scrape once, since ``since``, a sequence finished with each of ``reasons``.

        A sequence is counted when it leaves the batch, at the loop's next step, after its last
        token went out.
        """
        for _ in range(POLLS):
            now = await scrape()
            if all(moved(since, now, FINISHED, reason=reason) >= 1 for reason in reasons):
                return now
            await asyncio.sleep(POLL_INTERVAL_S)
        raise AssertionError(f"no sequence of {CHAT_MODEL} counted for each of {reasons}")

    def moved(earlier: Samples, later: Samples, name: str, **labels: str) -> float:
        return value(later, name, model=CHAT_MODEL, **labels) - value(
            earlier, name, model=CHAT_MODEL, **labels
        )

    def long_stream():
        return inference.GenerateStream(
            generate(400, g.GenerateStreamRequest, "Count to 1000: one,"), timeout=120
        )

    # A cancelled warm-up loads the model; once it is counted, so is every sequence that left the
    # batch before it (earlier tests' included: sequences are counted in the order they leave).
    start = await scrape()
    await read_then_cancel(long_stream(), 1)
    before = await counted(start, "cancelled")
    finished = await inference.Generate(generate(5), timeout=120)
    received = await read_then_cancel(long_stream(), 3)
    after = await counted(before, "length", "cancelled")

    assert moved(before, after, FINISHED, reason="length") == 1
    assert moved(before, after, FINISHED, reason="cancelled") == 1
    assert moved(before, after, FINISHED, reason="stop") == 0
    # The cancelled one generated what was read and at most the step in flight at the cancel.
    assert received <= moved(before, after, "ur_generation_cancelled_tokens_total") <= received + 2
    # A step per token at least (prefill steps add some), each of one sequence: they ran one after the other.
    steps = moved(before, after, "ur_generation_batch_size_count")
    assert steps >= finished.usage.completion_tokens + received
    assert moved(before, after, "ur_generation_batch_size_sum") == steps
    assert moved(before, after, "ur_generation_batch_size_bucket", le="1.0") == steps


async def test_lifecycle_metrics_follow_loads_and_unloads(scraped):
    inference, models, scrape = scraped
    await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=["loaded"]), timeout=60)
    before = await scrape()
    await models.UnloadModel(m.UnloadModelRequest(name=EMBED_MODEL), timeout=60)
    unloaded = await scrape()
    await models.LoadModel(m.LoadModelRequest(name=EMBED_MODEL), timeout=120)
    after = await scrape()
    assert value(unloaded, "ur_model_unloads_total", model=EMBED_MODEL, reason="explicit") == (
        value(before, "ur_model_unloads_total", model=EMBED_MODEL, reason="explicit") + 1
    )
    assert value(unloaded, "ur_models_loaded") == value(before, "ur_models_loaded") - 1
    assert value(after, "ur_models_loaded") == value(before, "ur_models_loaded")
    loads = "ur_model_load_duration_seconds_count"
    assert value(after, loads, model=EMBED_MODEL) == value(before, loads, model=EMBED_MODEL) + 1


async def test_the_gateway_serves_the_same_registry(server):
    app = create_app(f"127.0.0.1:{server.port}", max_message_bytes=MAX_MESSAGE_BYTES)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
            response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = parse(response.text)
    assert any(name == "ur_requests_total" for name, _ in samples)
    # The model-server protocol's pod gauges, one series each, on the port an InferencePool targets.
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
        assert [labels for sample, labels in samples if sample == name] == [()]


async def test_metrics_can_be_switched_off(settings):
    running = await start_server(settings.model_copy(update={"grpc_port": 0, "metrics_enabled": False}))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            before = REGISTRY.get_sample_value("ur_requests_total", {"method": "Embed", "code": "OK"}) or 0
            stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
            await stub.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=["off"]), timeout=60)
            after = REGISTRY.get_sample_value("ur_requests_total", {"method": "Embed", "code": "OK"}) or 0
        assert after == before
    finally:
        await running.stop(grace=1.0)
        set_enabled(True)


async def test_a_metrics_port_in_use_stops_start_up_with_a_clear_error(settings):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=rf"metrics port 127.0.0.1:{port} .*UR_METRICS_PORT"):
            await start_server(settings.model_copy(update={"grpc_port": 0, "metrics_port": port}))


def documented_metrics() -> set[str]:
    """Metric names in the metrics table of docs/operate/observability.md (``a_used`` / ``_total`` names two)."""
    names = set()
    for line in OBSERVABILITY_PAGE.read_text(encoding="utf-8").splitlines():
        cells = line.split("|")
        if len(cells) < 3 or not cells[1].strip().startswith("`ur_"):
            continue
        first, *others = re.findall(r"`([a-z0-9_]+)`", cells[1])
        names.add(first)
        names.update(first.rsplit("_", 1)[0] + other for other in others)
    return names


async def test_the_docs_list_every_metric_the_server_exports(scraped):
    *_, scrape = scraped
    await scrape()  # the server's collector registered
    exported = set()
    for family in REGISTRY.collect():
        if family.name.startswith("ur_"):
            exported.add(f"{family.name}_total" if family.type == "counter" else family.name)
    documented = documented_metrics()
    assert exported - documented == set(), "metrics missing from the docs' metrics table"
    assert documented - exported == set(), "the docs' metrics table lists metrics that do not exist"
