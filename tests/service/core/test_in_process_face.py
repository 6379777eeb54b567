"""The gateway's in-process calls (service.faces.in_process): same answers, errors and bounds as gRPC.

Every method of the data plane runs in process, unary and streaming, through the same admission
chain as a gRPC call. The stubs here are built on ``face.channel(dead)``, where ``dead`` is a
channel to a port nobody listens on: a call that answers cannot have gone over the network.

First on the real server (real models), then on fake servicers served both by the gRPC face and
by the in-process face over the real core (:mod:`tests.service.core.core_server`), so that each answer, header,
trailer and error of the in-process face is compared with what a gRPC client gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from universal_runtime.v1 import anomaly_pb2 as a
from universal_runtime.v1 import (
    common_pb2,
    inference_service_pb2_grpc,
    model_service_pb2,
    model_service_pb2_grpc,
)
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g

from engines.errors import InputTooLongError
from engines.fair_share import Caller, current_caller
from service.cli import gateway_app
from service.core.admission.authentication import Authentication
from service.core.admission.concurrency import ConcurrencyLimit
from service.core.admission.quota import Quota
from service.core.chain import AdmissionStep
from service.core.context import CallContext
from service.faces.in_process import InProcessChannel, InProcessFace
from service.faces.request_limits import RequestLimits
from service.quotas import Quotas
from service.shared.api_keys import load_api_keys
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES, error_info, free_port
from tests.service.core.core_server import data_plane, default_steps, grpc_server, in_process_face

isg = inference_service_pb2_grpc


@pytest.fixture(scope="module")
async def dead_channel():
    async with grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}") as channel:
        yield channel


@pytest.fixture(scope="module")
def local(server, dead_channel):
    return server.in_process.channel(dead_channel)


@pytest.fixture(scope="module")
def local_inference(local):
    return isg.InferenceServiceStub(local)


class RecordingChannel:
    """A remote channel that records the calls it is asked to make (health answers NOT_SERVING)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _callable(self, method: str, answer: Callable[[], object]):
        def remote(request, **call_kwargs):
            self.calls.append(method)

            async def answered():
                return answer()

            return answered()

        return remote

    def unary_unary(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return self._callable(
            method, lambda: health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.NOT_SERVING)
        )

    def unary_stream(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        def remote(request, **call_kwargs):
            self.calls.append(method)

            async def answers():
                yield g.GenerateStreamResponse(text="remote")

            return answers()

        return remote

    stream_unary = unary_unary
    stream_stream = unary_stream


# -- the real server ------------------------------------------------------------------------------


async def test_unary_calls_answer_without_the_network(server, local, local_inference, inference):
    request = e.EmbedRequest(model=EMBED_MODEL, inputs=["one sentence", "and another"])
    assert await local_inference.Embed(request) == await inference.Embed(request)
    listed = await model_service_pb2_grpc.ModelServiceStub(local).ListModels(
        model_service_pb2.ListModelsRequest()
    )
    assert EMBED_MODEL in [model.name for model in listed.models]


async def test_health_is_grpcs_own_and_goes_over_the_real_channel(server):
    """Health (and reflection) are gRPC-native services, not operations of the core."""
    remote = RecordingChannel()
    checked = await health_pb2_grpc.HealthStub(server.in_process.channel(remote)).Check(
        health_pb2.HealthCheckRequest()
    )
    assert checked.status == health_pb2.HealthCheckResponse.NOT_SERVING  # the recording remote's
    assert remote.calls == ["/grpc.health.v1.Health/Check"]


BAD_REQUESTS = [
    e.EmbedRequest(model="no-such-model", inputs=["x"]),
    e.EmbedRequest(model=EMBED_MODEL, inputs=[]),
    e.EmbedRequest(model=EMBED_MODEL, inputs=["x" * 10_000], truncation=e.TRUNCATION_POLICY_ERROR),
    e.EmbedRequest(model="Bad Name!", inputs=["x"]),
]


@pytest.mark.parametrize("request_message", BAD_REQUESTS, ids=["unknown", "empty", "too-long", "bad-name"])
async def test_errors_are_the_ones_grpc_gives(local_inference, inference, request_message):
    with pytest.raises(grpc.aio.AioRpcError) as remote:
        await inference.Embed(request_message)
    with pytest.raises(grpc.aio.AioRpcError) as in_process:
        await local_inference.Embed(request_message)
    assert in_process.value.code() == remote.value.code()
    assert in_process.value.details() == remote.value.details()
    assert error_info(in_process.value) == error_info(remote.value)


async def test_a_request_over_the_receive_limit_is_refused_before_any_work(local_inference):
    huge = e.EmbedRequest(model=EMBED_MODEL, inputs=["x" * (MAX_MESSAGE_BYTES + 1)])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await local_inference.Embed(huge)
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in caught.value.details()


def counting(max_tokens: int, kind=g.GenerateRequest):
    """A raw prompt the model goes on counting from: it runs to ``max_tokens``."""
    parameters = g.GenerationParameters(max_tokens=max_tokens, temperature=0.0)
    return kind(model=CHAT_MODEL, prompt="1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", parameters=parameters)


async def test_a_deadline_ends_the_call_with_deadline_exceeded(local_inference):
    await local_inference.Generate(counting(1))  # loaded: the deadline falls on the generation itself
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await local_inference.Generate(counting(512), timeout=0.05)
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_cancelled_call_cancels_the_servicer_and_logs_cancelled(local_inference, caplog):
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    call = local_inference.Generate(counting(512))
    await asyncio.sleep(0.3)
    assert call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.sleep(0)
    codes = [getattr(record, "code", None) for record in caplog.records if record.getMessage() == "rpc"]
    assert codes[-1] == "CANCELLED"
    answer = await local_inference.Generate(counting(4))  # the model is free again
    assert answer.choices[0].text


async def test_streams_run_in_process_too(local_inference, inference):
    """GenerateStream over the dead channel: the same text as over gRPC (greedy), its request id first."""
    remote = [chunk async for chunk in inference.GenerateStream(counting(4, g.GenerateStreamRequest))]
    call = local_inference.GenerateStream(
        counting(4, g.GenerateStreamRequest), metadata=(("x-request-id", "stream-1"),), timeout=60
    )
    assert next(iter(await call.initial_metadata())) == ("x-request-id", "stream-1")
    chunks = [chunk async for chunk in call]
    assert chunks and "".join(c.text for c in chunks) == "".join(c.text for c in remote)
    assert chunks[-1].usage.completion_tokens == remote[-1].usage.completion_tokens == 4
    assert chunks[-1].finish_reason == remote[-1].finish_reason
    assert await call.code() is grpc.StatusCode.OK


@pytest.mark.parametrize(
    ("overrides", "in_process"),
    [
        ({}, True),
        ({"gateway_in_process_calls": False}, False),
        # Tracing no longer takes the gateway off the in-process path: the chain's tracing step
        # makes the core's span under the gateway's.
        ({"otlp_endpoint": "http://127.0.0.1:4317"}, True),
    ],
    ids=["default", "turned-off", "tracing"],
)
async def test_the_gateway_beside_the_server_calls_in_process_unless_off(
    server, settings, overrides, in_process
):
    app = gateway_app(settings.model_copy(update=overrides), f"127.0.0.1:{server.port}", server.in_process)
    async with app.router.lifespan_context(app):
        assert isinstance(app.state.grpc.channel, InProcessChannel) is in_process
        answer = await app.state.grpc.health.Check(health_pb2.HealthCheckRequest())
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


# -- fake servicers, in process and over gRPC -----------------------------------------------------

SECRET = "sekrit-Secret-in-process-01"
KEYS_FILE = f'team:\n  key: "{SECRET}"\n  tokens_per_minute: 1000\n  requests_per_second: 100\n'
AUTH = (("authorization", f"Bearer {SECRET}"),)


class FakeInference(isg.InferenceServiceServicer):
    """Answers from the request's ``model``; records each call's context and each stream's end.

    GenerateStream's ``model``: ``count`` (``max_tokens`` messages, the last with usage),
    ``fail`` (two messages, then a domain error), ``crash`` (two, then an unexpected error),
    ``hang`` (one, then waits), ``flood`` (many, as fast as they are taken), ``big`` (one message
    over a small send limit after a small one).
    """

    def __init__(self) -> None:
        self.contexts: list[CallContext] = []
        self.callers: list[Caller] = []
        self.ended: list[str] = []  # request ids of the streams whose generator finished or closed
        self.started: list[str] = []

    def _seen(self, ctx: CallContext) -> None:
        self.contexts.append(ctx)
        self.callers.append(current_caller())
        self.started.append(ctx.request_id)

    async def Embed(self, request, ctx):
        self._seen(ctx)
        if request.model == "crash":
            raise RuntimeError("database password is hunter2")
        if request.model == "too-long":
            raise InputTooLongError("input is 10 tokens but the model holds 5", tokens=10, limit=5)
        if request.model == "hang":
            await asyncio.sleep(60)
        size = 4096 if request.model == "big" else 1
        return e.EmbedResponse(
            model="x" * size,
            dimensions=len(request.inputs),
            usage=common_pb2.Usage(prompt_tokens=len(request.inputs), total_tokens=len(request.inputs)),
        )

    async def GenerateStream(self, request, ctx) -> AsyncIterator[g.GenerateStreamResponse]:
        self._seen(ctx)
        try:
            kind = request.model
            if kind == "count":
                for i in range(request.parameters.max_tokens):
                    yield g.GenerateStreamResponse(text=str(i), index=i)
                    await asyncio.sleep(0)
                yield g.GenerateStreamResponse(
                    finish_reason=g.FINISH_REASON_LENGTH,
                    usage=common_pb2.Usage(completion_tokens=request.parameters.max_tokens, total_tokens=7),
                )
            elif kind in ("fail", "crash"):
                yield g.GenerateStreamResponse(text="a")
                yield g.GenerateStreamResponse(text="b")
                if kind == "fail":
                    raise InputTooLongError("the prompt outgrew the context", prompt_tokens=10)
                raise RuntimeError("boom: database password is hunter2")
            elif kind == "hang":
                yield g.GenerateStreamResponse(text="a")
                await asyncio.sleep(60)
            elif kind == "flood":
                for i in range(10_000):
                    yield g.GenerateStreamResponse(text=str(i))
                    await asyncio.sleep(0)
            elif kind == "big":
                yield g.GenerateStreamResponse(text="a")
                yield g.GenerateStreamResponse(text="x" * 4096)
                await asyncio.sleep(60)
        finally:
            self.ended.append(ctx.request_id)

    async def StreamDetectAnomaly(self, request_iterator, ctx):
        self._seen(ctx)
        count = 0
        async for message in request_iterator:
            count += 1
            yield a.StreamDetectAnomalyResponse(window_row_count=len(message.rows), fit_count=count)


class Served:
    """One fake servicer behind the in-process face and a gRPC server, each with its own steps."""

    def __init__(self, steps: Callable[[], list[AdmissionStep]], limits: RequestLimits | None) -> None:
        self.fake = FakeInference()
        register = [lambda plane: isg.add_InferenceServiceServicer_to_server(self.fake, plane)]
        self.local_steps = steps()
        self.plane = data_plane(register, self.local_steps)
        self.face: InProcessFace = in_process_face(self.plane, limits)
        self.remote_steps = steps()
        self.server, _ = grpc_server(register, self.remote_steps, limits=limits)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.dead: grpc.aio.Channel | None = None  # set by serving()
        self.local: isg.InferenceServiceStub | None = None
        self.remote: isg.InferenceServiceStub | None = None

    def step(self, name: str) -> AdmissionStep:
        """The in-process chain's step ``name``."""
        return next(step for step in self.local_steps if step.name == name)


SMALL = RequestLimits(max_receive_bytes=1024, max_send_bytes=1024)


def limited_steps() -> list[AdmissionStep]:
    return default_steps(ConcurrencyLimit(4))


def keyed_steps(keys_path) -> Callable[[], list[AdmissionStep]]:
    def steps() -> list[AdmissionStep]:
        keys = load_api_keys(None, keys_path)
        quotas = Quotas(keys, clock=lambda: 1000.0)  # the same state in each: equal headers
        return default_steps(ConcurrencyLimit(4), Authentication(keys), Quota(quotas))

    return steps


@contextlib.asynccontextmanager
async def serving(served: Served) -> AsyncIterator[Served]:
    """``served`` started, its stubs made: in process (over a dead remote) and over gRPC."""
    await served.server.start()
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}") as dead,
        grpc.aio.insecure_channel(f"127.0.0.1:{served.port}") as live,
    ):
        served.dead = dead
        served.local = isg.InferenceServiceStub(served.face.channel(dead))
        served.remote = isg.InferenceServiceStub(live)
        try:
            yield served
        finally:
            await served.face.close(grace=1.0)
            await served.server.stop(0)


@pytest.fixture
async def fakes():
    """The fakes without keys, a concurrency limit of 4, 1 KiB message limits."""
    async with serving(Served(limited_steps, SMALL)) as served:
        yield served


@pytest.fixture
async def keyed(tmp_path):
    """The fakes behind a key with quotas (``AUTH``), a concurrency limit of 4."""
    path = tmp_path / "keys.yaml"
    path.write_text(KEYS_FILE)
    async with serving(Served(keyed_steps(path), None)) as served:
        yield served


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 2.0) -> None:
    """Wait (bounded) until ``condition()``; fails naming ``what`` when it does not come."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def stream_request(model: str, max_tokens: int = 0) -> g.GenerateStreamRequest:
    return g.GenerateStreamRequest(model=model, parameters=g.GenerationParameters(max_tokens=max_tokens))


def rid(value: str) -> tuple[tuple[str, str], ...]:
    return (("x-request-id", value),)


def ours(metadata) -> list[tuple[str, object]]:
    """The entries the runtime sets (gRPC's own transport headers left out)."""
    return [
        (key, value) for key, value in metadata or () if not key.startswith((":", "grpc-accept", "user-"))
    ]


# -- unary ----------------------------------------------------------------------------------------


async def test_api_keys_are_checked_in_process_too(keyed):
    for stub in (keyed.local, keyed.remote):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Embed(e.EmbedRequest(model="m", inputs=["x"]))
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert error_info(caught.value).reason == "UNAUTHENTICATED"
        answer = await stub.Embed(e.EmbedRequest(model="m", inputs=["x"]), metadata=AUTH)
        assert answer.dimensions == 1
    assert [caller.name for caller in keyed.fake.callers] == ["team", "team"]
    assert all(not ctx.credentials for ctx in keyed.fake.contexts)  # checked, then dropped


async def test_a_unary_answers_headers_and_trailers_are_grpcs(keyed):
    answers = []
    for stub in (keyed.local, keyed.remote):
        call = stub.Embed(e.EmbedRequest(model="m", inputs=["x", "y"]), metadata=(*AUTH, *rid("u-1")))
        answer = await call
        answers.append((answer, ours(await call.initial_metadata()), ours(await call.trailing_metadata())))
        assert await call.code() is grpc.StatusCode.OK
    (local, local_headers, local_trailers), (remote, remote_headers, remote_trailers) = answers
    assert local == remote
    assert local_trailers == remote_trailers == [("x-request-id", "u-1")]  # trailers, not headers
    assert local_headers == remote_headers
    assert {key for key, _ in local_headers} >= {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens"}
    assert ("x-request-id", "u-1") not in local_headers


@pytest.mark.parametrize("model", ["too-long", "crash"])
async def test_a_unary_failure_is_the_aio_rpc_error_grpc_gives(fakes, model, caplog):
    errors = []
    for stub in (fakes.local, fakes.remote):
        call = stub.Embed(e.EmbedRequest(model=model, inputs=["x"]), metadata=rid("f-1"))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        errors.append(caught.value)
        assert await call.code() == caught.value.code()
        assert await call.details() == caught.value.details()
    local, remote = errors
    assert local.code() == remote.code()
    assert local.details() == remote.details()
    assert error_info(local) == error_info(remote)
    assert ours(local.trailing_metadata()) == ours(remote.trailing_metadata())
    assert ("x-request-id", "f-1") in tuple(local.trailing_metadata())
    if model == "crash":
        assert local.code() is grpc.StatusCode.INTERNAL
        assert "hunter2" not in local.details() and "f-1" in local.details()
        assert "hunter2" in caplog.text  # the trace is in the server log


async def test_once_closed_new_calls_go_to_the_real_channel(fakes):
    remote = RecordingChannel()
    stub = isg.InferenceServiceStub(fakes.face.channel(remote))
    await fakes.face.close(grace=1.0)
    await stub.Embed(e.EmbedRequest(model="m", inputs=["x"]))
    assert [m async for m in stub.GenerateStream(stream_request("count", 2))] == [
        g.GenerateStreamResponse(text="remote")
    ]
    assert remote.calls == [
        "/universal_runtime.v1.InferenceService/Embed",
        "/universal_runtime.v1.InferenceService/GenerateStream",
    ]
    assert fakes.fake.started == []


async def test_close_gives_calls_in_flight_their_grace_then_cancels_them(fakes):
    """Past the grace, a call in flight ends UNAVAILABLE, as a gRPC client's call at server shutdown."""
    call = fakes.local.GenerateStream(stream_request("hang"), metadata=rid("c-1"))
    unary = fakes.local.Embed(e.EmbedRequest(model="hang", inputs=["x"]))
    assert (await call.read()).text == "a"
    await until(lambda: len(fakes.fake.started) == 2, "the unary call to start")
    await fakes.face.close(grace=0.1)
    for outcome in (call.read(), unary):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await outcome
        assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
        assert caught.value.details() == "the server is shutting down"
    for ended in (call, unary):
        assert await ended.code() is grpc.StatusCode.UNAVAILABLE
        assert await ended.details() == "the server is shutting down"
    await until(lambda: "c-1" in fakes.fake.ended, "the servicer's stream to end")
    assert fakes.step("concurrency").in_flight == 0


async def test_an_answer_over_the_send_limit_is_refused(fakes):
    usage = common_pb2.Usage(prompt_tokens=1, total_tokens=1)
    size = e.EmbedResponse(model="x" * 4096, dimensions=1, usage=usage).ByteSize()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await fakes.local.Embed(e.EmbedRequest(model="big", inputs=["x"]))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.details() == f"Sent message larger than max ({size} vs. 1024)"


async def test_a_unary_deadline_and_cancel(fakes, caplog):
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await fakes.local.Embed(e.EmbedRequest(model="hang", inputs=["x"]), timeout=0.05)
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert caught.value.details() == "Deadline Exceeded"
    call = fakes.local.Embed(e.EmbedRequest(model="hang", inputs=["x"]))
    await until(lambda: len(fakes.fake.started) == 2, "the second call to start")
    assert call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert call.cancelled() and call.done()
    assert await call.code() is grpc.StatusCode.CANCELLED
    assert not call.cancel()  # already ended
    codes = [getattr(record, "code", None) for record in caplog.records if record.getMessage() == "rpc"]
    assert codes == ["CANCELLED", "CANCELLED"]
    assert fakes.step("concurrency").in_flight == 0


async def test_a_trusted_caller_runs_as_the_key_without_credentials(keyed):
    """The batch runner's lines: the submitting key's caller, its current policy applied."""
    stub = isg.InferenceServiceStub(
        keyed.face.channel(keyed.dead, trusted_caller=Caller("team", lane="line"))
    )
    answer = await stub.Embed(e.EmbedRequest(model="m", inputs=["x"]))
    assert answer.dimensions == 1
    [caller] = keyed.fake.callers
    assert (caller.name, caller.role, caller.lane, caller.share.key) == ("team", "user", "line", "team")
    gone = isg.InferenceServiceStub(keyed.face.channel(keyed.dead, trusted_caller=Caller("gone")))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gone.Embed(e.EmbedRequest(model="m", inputs=["x"]))
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED


# -- streamed answers -----------------------------------------------------------------------------


async def test_a_streamed_answer_runs_in_process(fakes):
    call = fakes.local.GenerateStream(stream_request("count", 5), metadata=rid("s-1"))
    texts = [message.text async for message in call]
    assert texts == ["0", "1", "2", "3", "4", ""]
    assert await call.code() is grpc.StatusCode.OK and call.done() and not call.cancelled()
    by_read = fakes.local.GenerateStream(stream_request("count", 2))
    messages = []
    while (message := await by_read.read()) is not grpc.aio.EOF:
        messages.append(message)
    assert [m.text for m in messages] == ["0", "1", ""]
    assert await by_read.read() is grpc.aio.EOF  # and stays at the end
    remote = [m async for m in fakes.remote.GenerateStream(stream_request("count", 2))]
    assert messages == remote
    assert fakes.step("concurrency").in_flight == 0
    assert fakes.fake.ended[0] == "s-1"


async def test_a_streams_headers_and_trailers_are_grpcs(keyed):
    seen = []
    for stub in (keyed.local, keyed.remote):
        call = stub.GenerateStream(stream_request("count", 3), metadata=(*AUTH, *rid("s-2")))
        headers = ours(await call.initial_metadata())  # before any message is read
        messages = [m async for m in call]
        seen.append((headers, messages, ours(await call.trailing_metadata())))
    (local_headers, local_messages, local_trailers), (remote_headers, remote_messages, remote_trailers) = seen
    assert local_messages == remote_messages
    assert local_headers[0] == ("x-request-id", "s-2")  # first of a stream's headers
    assert {key for key, _ in local_headers} >= {"x-ratelimit-limit-tokens", "x-ratelimit-limit-requests"}
    assert local_headers == remote_headers
    assert local_trailers == remote_trailers
    assert ("x-request-id", "s-2") not in local_trailers


@pytest.mark.parametrize("model", ["fail", "crash"])
async def test_a_failure_mid_stream_is_an_aio_rpc_error_after_the_messages(fakes, model):
    errors = []
    for stub in (fakes.local, fakes.remote):
        call = stub.GenerateStream(stream_request(model), metadata=rid("m-1"))
        texts = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for message in call:
                texts.append(message.text)
        assert texts == ["a", "b"]
        assert await call.code() == caught.value.code()
        assert await call.details() == caught.value.details()
        assert next(iter(await call.initial_metadata())) == ("x-request-id", "m-1")
        errors.append(caught.value)
    local, remote = errors
    assert (local.code(), local.details()) == (remote.code(), remote.details())
    assert error_info(local) == error_info(remote)
    assert ours(local.trailing_metadata()) == ours(remote.trailing_metadata())
    if model == "fail":
        assert local.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(local).reason == "INPUT_TOO_LONG"
    else:
        assert local.code() is grpc.StatusCode.INTERNAL
        assert "hunter2" not in local.details() and "boom" not in local.details()
    assert fakes.step("concurrency").in_flight == 0


async def test_a_refused_stream_fails_at_its_first_read_with_its_id_in_the_trailers(keyed):
    for stub in (keyed.local, keyed.remote):
        call = stub.GenerateStream(stream_request("count", 2), metadata=rid("r-1"))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert ("x-request-id", "r-1") in tuple(caught.value.trailing_metadata())
        assert ("x-request-id", "r-1") not in tuple(await call.initial_metadata())
    assert keyed.fake.started == []


async def test_cancelling_a_stream_cancels_the_servicer_frees_its_place_and_logs_cancelled(fakes, caplog):
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    call = fakes.local.GenerateStream(stream_request("hang"), metadata=rid("x-1"))
    assert (await call.read()).text == "a"
    assert fakes.step("concurrency").in_flight == 1
    assert call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call.read()
    assert call.cancelled() and call.done()
    assert await call.code() is grpc.StatusCode.CANCELLED
    await until(lambda: "x-1" in fakes.fake.ended, "the servicer's stream to end")
    assert fakes.step("concurrency").in_flight == 0
    codes = [getattr(record, "code", None) for record in caplog.records if record.getMessage() == "rpc"]
    assert codes == ["CANCELLED"]


async def test_a_streams_deadline_ends_it_with_deadline_exceeded(fakes):
    call = fakes.local.GenerateStream(stream_request("hang"), metadata=rid("d-1"), timeout=0.2)
    assert (await call.read()).text == "a"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert await call.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    await until(lambda: "d-1" in fakes.fake.ended, "the servicer's stream to end")
    assert fakes.step("concurrency").in_flight == 0
    with pytest.raises(grpc.aio.AioRpcError) as remote:
        async for _ in fakes.remote.GenerateStream(stream_request("hang"), timeout=0.2):
            pass
    assert remote.value.code() is caught.value.code()


@pytest.mark.parametrize("end", ["cancel", "deadline"])
async def test_a_stream_the_gateway_stopped_reading_still_ends_in_the_core(fakes, end, caplog):
    """The core waits while the gateway has not read the last message; cancel or deadline then.

    The servicer's stream must end, its place free and its log line be written, as when the
    core was inside the servicer (an HTTP client gone while the gateway was slow to forward).
    """
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    timeout = 0.3 if end == "deadline" else None
    call = fakes.local.GenerateStream(stream_request("flood"), metadata=rid("w-1"), timeout=timeout)
    assert (await call.read()).text == "0"
    await asyncio.sleep(0.05)  # the core has the next message ready and waits for the gateway
    assert "w-1" not in fakes.fake.ended
    if end == "cancel":
        assert call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    else:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    await until(lambda: "w-1" in fakes.fake.ended, "the servicer's stream to end")
    assert fakes.step("concurrency").in_flight == 0
    codes = [getattr(record, "code", None) for record in caplog.records if record.getMessage() == "rpc"]
    assert codes == ["CANCELLED"]


async def test_a_streamed_message_over_the_send_limit_ends_the_stream(fakes):
    call = fakes.local.GenerateStream(stream_request("big"), metadata=rid("b-1"))
    assert (await call.read()).text == "a"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in caught.value.details()
    await until(lambda: "b-1" in fakes.fake.ended, "the servicer's stream to end")
    assert fakes.step("concurrency").in_flight == 0


# -- request streams ------------------------------------------------------------------------------


def rows(count: int) -> a.StreamDetectAnomalyRequest:
    return a.StreamDetectAnomalyRequest(rows=[a.FeatureRow() for _ in range(count)])


async def test_a_request_stream_runs_in_process_from_a_list_or_an_async_iterator(fakes):
    async def produced():
        for count in (1, 2, 3):
            yield rows(count)

    from_list = [m async for m in fakes.local.StreamDetectAnomaly(iter([rows(1), rows(2), rows(3)]))]
    from_async = [m async for m in fakes.local.StreamDetectAnomaly(produced())]
    remote = [m async for m in fakes.remote.StreamDetectAnomaly(iter([rows(1), rows(2), rows(3)]))]
    assert from_list == from_async == remote
    assert [(m.window_row_count, m.fit_count) for m in from_list] == [(1, 1), (2, 2), (3, 3)]


async def test_a_request_streams_message_over_the_receive_limit_is_refused(fakes):
    huge = a.StreamDetectAnomalyRequest(rows=[a.FeatureRow() for _ in range(600)])
    assert huge.ByteSize() > SMALL.max_receive_bytes
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in fakes.local.StreamDetectAnomaly(iter([rows(1), huge])):
            pass
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(caught.value).reason == "MESSAGE_TOO_LARGE"
    assert fakes.step("concurrency").in_flight == 0
