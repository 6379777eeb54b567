"""Two real server processes behind one gateway: calls spread over both replicas, and
killing one under a bounded load loses no unary call (gRPC's retry policy resends the unanswered
ones to the survivor), while a stream on the killed replica ends with UNAVAILABLE, not a hang.

Figures for the closing note are printed (``-s``): calls lost, the slowest call around the kill,
and how soon the replica, restarted, takes calls again.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc

from gateway.app import create_app
from tests.conftest import CHAT_MODEL, EMBED_MODEL, REPO_ROOT, child_server_env, free_port

START_TIMEOUT_S = 90
NO_END = [g.LogitBias(token_id=token, bias=-100) for token in (0, 1, 2)]
#: The cut stream's max_tokens: about the whole 2048-token context of the test catalog's chat model,
#: tens of seconds of decoding on 2 cores (its end tokens are banned by NO_END, so only this ends it).
STREAM_TOKENS = 2000


class Replica:
    """``universal-runtime --no-gateway`` in a child process, with its own ports and data dir."""

    def __init__(self, name: str, catalog: Path, data_dir: Path, log_dir: Path) -> None:
        self.name = name
        self.port, self.metrics_port = free_port(), free_port()
        env = child_server_env(
            UR_CATALOG_PATH=str(catalog),
            UR_DATA_DIR=str(data_dir),
            UR_METRICS_PORT=str(self.metrics_port),
            UR_LOG_LEVEL="WARNING",
        )
        self.command = [sys.executable, "-m", "service.cli", "--no-gateway", "--grpc-host", "127.0.0.1"]
        self.command += ["--grpc-port", str(self.port)]
        self.env = env
        self.log = open(log_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self.start()

    def start(self) -> None:
        """Start the process (again, after :meth:`kill`: same ports, data dir and log)."""
        self.process = subprocess.Popen(
            self.command, cwd=REPO_ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT
        )

    async def wait_serving(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                assert self.process.poll() is None, f"{self.name} exited: {self.process.returncode}"
                try:
                    response = await health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                    if response.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.2)
        raise AssertionError(f"{self.name} did not serve within {START_TIMEOUT_S} s")

    async def embed_directly(self, text: str) -> None:
        """One ``Embed`` call straight to this replica (not through the gateway)."""
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
            await stub.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=[text]), timeout=60)

    def embed_calls(self) -> float:
        """``ur_requests_total{method="Embed",code="OK"}`` on this replica's own /metrics."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "ur_requests_total" and sample.labels == {"method": "Embed", "code": "OK"}:
                    return sample.value
        return 0.0

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.log.close()


@pytest.fixture
async def replicas(catalog_path, tmp_path):
    started = [Replica(name, catalog_path, tmp_path / name, tmp_path) for name in ("a", "b")]
    try:
        await asyncio.gather(*(replica.wait_serving() for replica in started))
        yield started
    finally:
        for replica in started:
            replica.stop()


@pytest.fixture
async def gateway(replicas):
    target = "ipv4:" + ",".join(f"127.0.0.1:{replica.port}" for replica in replicas)
    app = create_app(target)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=60) as http:
            yield http


async def embed(http: httpx.AsyncClient, text: str) -> tuple[int, float]:
    started = time.perf_counter()
    response = await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": text})
    return response.status_code, time.perf_counter() - started


async def warm_up(http: httpx.AsyncClient, replicas: list[Replica]) -> None:
    """Connect the gateway to every replica and load the embedder on each (bounded)."""
    assert (await embed(http, "warm up"))[0] == 200
    await asyncio.sleep(1.0)  # the channel connects to every address; round robin uses the ready ones
    for _ in range(20):
        if all(replica.embed_calls() > 0 for replica in replicas):
            return
        assert (await embed(http, "warm up"))[0] == 200
    raise AssertionError("a replica never served")


async def test_calls_spread_over_both_replicas(replicas, gateway):
    await warm_up(gateway, replicas)
    before = [replica.embed_calls() for replica in replicas]
    results = await asyncio.gather(*(embed(gateway, f"sentence {i}") for i in range(24)))
    assert [status for status, _ in results] == [200] * 24
    served = [replica.embed_calls() - n for replica, n in zip(replicas, before, strict=True)]
    assert sum(served) == 24
    assert min(served) >= 4, f"round robin left a replica nearly idle: {served}"


class StreamProgress:
    """What a stream reader has seen so far: tokens, and whether a final message came."""

    def __init__(self) -> None:
        self.tokens = 0
        self.finished = False
        self.running = asyncio.Event()

    async def read_until_cut(self, stream: grpc.aio.UnaryStreamCall) -> None:
        """Read ``stream`` until it fails; an end (EOF) fails the test: the stream cannot finish."""
        while True:
            message = await stream.read()
            assert message is not grpc.aio.EOF, "the stream ended as if finished"
            self.tokens += len(message.token_ids)
            self.finished |= message.finish_reason != g.FINISH_REASON_UNSPECIFIED
            self.running.set()


async def test_killing_a_replica_under_load_loses_no_unary_call_and_cuts_its_streams_cleanly(
    replicas, gateway
):
    survivor, victim = replicas
    # Models loaded on both replicas first, so that the kill comes within about a second of the
    # stream's start, while the stream has most of its STREAM_TOKENS still to go.
    await warm_up(gateway, replicas)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{victim.port}") as channel:
        stream = inference_service_pb2_grpc.InferenceServiceStub(channel).GenerateStream(
            g.GenerateStreamRequest(
                model=CHAT_MODEL,
                prompt="Count:",
                parameters=g.GenerationParameters(max_tokens=STREAM_TOKENS, logit_bias=NO_END),
            ),
            timeout=120,
        )
        progress = StreamProgress()
        reader = asyncio.create_task(progress.read_until_cut(stream))
        await asyncio.wait_for(progress.running.wait(), timeout=60)
        outcomes: list[tuple[int, float]] = []
        at_kill: list[tuple[int, bool]] = []

        async def worker(index: int) -> None:
            for i in range(15):  # bounded: 4 workers x 15 calls
                outcomes.append(await embed(gateway, f"worker {index} call {i}"))
                if len(outcomes) == 12 and not at_kill:
                    at_kill.append((progress.tokens, progress.finished))
                    victim.kill()

        await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(4))), timeout=120)
        # The premise, checked: the stream was running (tokens came, no final message) and far from
        # its end when its replica died, so what follows is the cut, not a finish.
        [(tokens, finished)] = at_kill
        assert 0 < tokens < STREAM_TOKENS // 2 and not finished, f"not running at the kill: {at_kill}"
        lost = [status for status, _ in outcomes if status != 200]
        slowest = max(seconds for _, seconds in outcomes)
        print(
            f"\nreplica killed under load: {len(outcomes)} calls, {len(lost)} lost, slowest {slowest:.2f} s; "
            f"the stream had {tokens} tokens"
        )
        assert not lost, f"calls failed after the kill: {lost}"
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as cut:
            await asyncio.wait_for(reader, timeout=30)
        assert cut.value.code() == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - started < 30
    # The survivor keeps serving.
    assert (await embed(gateway, "after the kill"))[0] == 200
    assert survivor.process.poll() is None

    # The victim restarts on its address: the gateway's channel reconnects (backoff capped at
    # 5 s) and round robin gives it calls again, without a gateway restart.
    victim.start()
    await victim.wait_serving()
    await victim.embed_directly("load the model")  # so the figure is reconnection, not a load
    serving = time.monotonic()
    for i in range(200):  # bounded: 200 calls, 30 s
        assert (await embed(gateway, f"after the restart {i}"))[0] == 200
        if victim.embed_calls() > 1:
            break
        assert time.monotonic() - serving < 30, "the restarted replica got no calls in 30 s"
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the restarted replica got none of 200 calls")
    print(f"restarted replica served its first call {time.monotonic() - serving:.2f} s after it was ready")


def model_loads(replica: Replica) -> dict[str, float]:
    """``ur_model_load_duration_seconds_count`` by model on this replica."""
    text = httpx.get(f"http://127.0.0.1:{replica.metrics_port}/metrics", timeout=10).text
    return {
        sample.labels["model"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "ur_model_load_duration_seconds_count"
    }


@pytest.mark.parametrize("routing", ["round-robin", "model-affinity"])
async def test_model_affinity_loads_each_model_on_one_replica(replicas, routing):
    """Two embedding models, 16 calls each. Round robin loads both on both replicas (4 loads);
    model affinity sends each model's calls to the replica that loaded it (2 loads)."""
    target = "ipv4:" + ",".join(f"127.0.0.1:{replica.port}" for replica in replicas)
    app = create_app(target, routing=routing)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=60) as http:
            await asyncio.sleep(1.0)  # the balanced channel connects to both
            for model in (EMBED_MODEL, "minilm-burst"):
                first = await http.post("/v1/embeddings", json={"model": model, "input": "first"})
                assert first.status_code == 200
                if app.state.router is not None:
                    await app.state.router.refresh()  # rather than wait for the next look
                for i in range(15):
                    response = await http.post("/v1/embeddings", json={"model": model, "input": f"call {i}"})
                    assert response.status_code == 200
    loads = [model_loads(replica) for replica in replicas]
    print(f"\n{routing}: model loads per replica {loads}")
    total = sum(sum(per_replica.values()) for per_replica in loads)
    assert total == (4 if routing == "round-robin" else 2)


def test_replica_addresses_of_a_target():
    from gateway.routing import replica_addresses

    assert replica_addresses("ipv4:10.0.0.1:50051,10.0.0.2:50051") == ["10.0.0.1:50051", "10.0.0.2:50051"]
    assert replica_addresses("127.0.0.1:50051") == ["127.0.0.1:50051"]
    assert replica_addresses("dns:///localhost:50051") in (
        ["127.0.0.1:50051"],
        ["127.0.0.1:50051", "::1:50051"],
    )


def test_an_unknown_routing_mode_is_refused():
    with pytest.raises(ValueError, match="routing must be one of"):
        create_app("127.0.0.1:1", routing="random")
