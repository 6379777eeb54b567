"""The batch line executor: a line answered by its route's own code, as a call of the core made as
the submitting key, on the real models (and on a fake channel for the bounds)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2
from universal_runtime.v1 import batch_pb2 as b
from universal_runtime.v1 import batch_pb2_grpc, encoders_pb2

from engines.reasons import Reason
from gateway.app import create_app
from gateway.batch_lines import LINE_ROUTES, MAX_ATTEMPTS, BatchLineExecutor
from gateway.dependencies import PRIORITY_HEADER
from gateway.errors import STATUS_DETAILS_KEY
from gateway.settings import GatewayConfig
from service.batches.lines import SUPPORTED_URLS
from service.cli import start_batch_lines
from service.server import start_server
from service.shared.api_keys import load_api_keys
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES, REPO_ROOT, child_server_env, free_port
from tests.gateway.gateway_fakes import asgi_client
from tests.service.batches.helpers import jsonl, parse_jsonl

KEYS = {
    "team-a": "team-a-batch-lines-0123456789",
    # One call a second, none saved up: a second line at once is over the key's quota.
    "limited": {"key": "limited-batch-lines-0123456789", "requests_per_second": 1, "burst": 1},
}
URLS = ("/v1/embeddings", "/v1/chat/completions")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
async def keyed(settings, tmp_path_factory):
    """A server with keys, its batch executor wired as ``universal-runtime`` wires it, and a
    gateway app on the same server (the live routes, to compare with)."""
    folder = tmp_path_factory.mktemp("batch-lines")
    keys_file = folder / "keys.yaml"
    keys_file.write_text(yaml.safe_dump(KEYS))
    keyed_settings = settings.model_copy(update={"api_keys_file": keys_file, "data_dir": folder / "data"})
    server = await start_server(keyed_settings)
    target = f"127.0.0.1:{server.port}"
    executor = await start_batch_lines(keyed_settings, target, server)
    assert executor is not None
    app = create_app(
        target,
        max_message_bytes=MAX_MESSAGE_BYTES,
        api_keys=load_api_keys(None, keys_file),
        wrap_channel=server.in_process.channel,
    )
    try:
        async with asgi_client(app) as client:
            yield executor, client
    finally:
        await server.stop(grace=1.0)
        await executor.close()


async def live(client, url: str, body: dict[str, Any], key: str = "team-a") -> tuple[int, dict[str, Any]]:
    """The live route's ``(status, body)`` for ``body``, sent with the key's secret as a client would."""
    # json.dumps escapes a lone surrogate, as a client's encoder does: the route then refuses it.
    headers = {"authorization": f"Bearer {KEYS[key]}", "content-type": "application/json"}
    response = await client.post(url, content=json.dumps(body).encode(), headers=headers)
    return response.status_code, response.json()


def rpc_records(caplog, request_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "universal_runtime.rpc" and r.request_id == request_id]


async def test_a_line_runs_as_the_submitting_key_with_no_credential(keyed, caplog):
    executor, client = keyed
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    body = {"model": EMBED_MODEL, "input": ["a cat", "a dog"]}
    status, answer = await executor.execute("/v1/embeddings", body, "team-a", request_id="line-1")
    assert status == 200, answer
    assert answer["object"] == "list" and [item["index"] for item in answer["data"]] == [0, 1]
    assert len(answer["data"][0]["embedding"]) == 384 and answer["usage"]["prompt_tokens"] > 0
    # The core admitted it as the key (its name in the server's log line), under the line's id.
    [record] = rpc_records(caplog, "line-1")
    assert (record.method, record.code, record.key_name) == (
        "/universal_runtime.v1.InferenceService/Embed",
        "OK",
        "team-a",
    )
    # The same body through the live route answers the same.
    assert await live(client, "/v1/embeddings", body) == (status, answer)


async def test_a_line_is_charged_to_its_key_and_waits_out_the_quota(keyed, caplog):
    executor, _ = keyed
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    body = {"model": EMBED_MODEL, "input": "quota"}
    started = time.monotonic()
    first, second = await asyncio.gather(
        executor.execute("/v1/embeddings", body, "limited", request_id="quota-1"),
        executor.execute("/v1/embeddings", body, "limited", request_id="quota-2"),
    )
    assert first[0] == 200 and second[0] == 200, (first, second)
    # One of the two was over the key's one call a second, and ran again once the bucket refilled.
    codes = sorted(r.code for r in rpc_records(caplog, "quota-1") + rpc_records(caplog, "quota-2"))
    assert codes == ["OK", "OK", "RESOURCE_EXHAUSTED"]
    assert {r.key_name for r in caplog.records if r.name == "universal_runtime.rpc"} >= {"limited"}
    assert time.monotonic() - started >= 0.5


async def test_chat_line_on_the_real_model(keyed):
    executor, _ = keyed
    line = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
    status, body = await executor.execute("/v1/chat/completions", line, "team-a")
    assert status == 200, body
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["role"] == "assistant"
    assert 0 < body["usage"]["completion_tokens"] <= 4


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"input": "no model"}, 400, "missing_required_parameter"),
        ({"model": EMBED_MODEL, "input": "x", "encoding_format": "hex"}, 400, "invalid_value"),
        ({"model": EMBED_MODEL, "input": "lone \ud800 surrogate"}, 400, "invalid_json"),
        ({"model": "no-such-model", "input": "x"}, 404, "model_not_found"),
    ],
)
async def test_errors_are_the_live_routes_own(keyed, body, status, code):
    executor, client = keyed
    answer = await executor.execute("/v1/embeddings", body, "team-a")
    assert answer[0] == status and answer[1]["error"]["code"] == code, answer
    assert await live(client, "/v1/embeddings", body) == answer


async def test_an_upload_line_takes_its_file_in_base64_as_the_route_does(keyed):
    executor, client = keyed
    body = {"file": "not base64!", "question": "what?"}
    answer = await executor.execute("/v1/documents/ask", body, "team-a")
    assert answer[0] == 400 and answer[1]["error"]["code"] == "invalid_file"
    assert await live(client, "/v1/documents/ask", body) == answer
    body = {"file": base64.b64encode(b"%PDF-1.4 nothing").decode(), "model": "no-such-model"}
    answer = await executor.execute("/v1/ocr", body, "team-a")
    assert answer[0] == 404 and answer[1]["error"]["code"] == "model_not_found", answer
    assert await live(client, "/v1/ocr", body) == answer


async def test_a_key_no_longer_configured_is_401(keyed, caplog):
    executor, _ = keyed
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    body = {"model": EMBED_MODEL, "input": "x"}
    status, answer = await executor.execute("/v1/embeddings", body, "gone", request_id="gone-1")
    assert status == 401 and answer["error"]["code"] == "unauthenticated"
    assert "gone" in answer["error"]["message"]
    [record] = rpc_records(caplog, "gone-1")
    assert (record.code, record.key_name) == ("UNAUTHENTICATED", "")


async def test_a_line_past_its_timeout_is_504_and_its_call_is_cancelled(server, caplog):
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")

    def executor(timeout_s: float) -> BatchLineExecutor:
        config = GatewayConfig(f"127.0.0.1:{server.port}", api_key=None, max_message_bytes=MAX_MESSAGE_BYTES)
        wrap = lambda channel, _: server.in_process.channel(channel)  # noqa: E731
        return BatchLineExecutor(config, wrap_channel=wrap, urls=("/v1/completions",), timeout_s=timeout_s)

    # A raw prompt the model goes on counting from: it runs to max_tokens, far past the timeout.
    line = {
        "model": CHAT_MODEL,
        "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,",
        "temperature": 0,
        "max_tokens": 480,
    }
    async with executor(120.0) as loading:  # the model's load is not the line's
        assert (await loading.execute("/v1/completions", {**line, "max_tokens": 1}, ""))[0] == 200
    async with executor(0.5) as short:
        status, body = await short.execute("/v1/completions", line, "", request_id="slow-1")
    assert status == 504 and body["error"]["code"] == "timeout", body
    for _ in range(100):  # the call ends as the line does; its log line follows at once
        if rpc_records(caplog, "slow-1"):
            break
        await asyncio.sleep(0.01)
    assert [r.code for r in rpc_records(caplog, "slow-1")] == ["CANCELLED"]


async def test_a_server_without_the_http_gateway_runs_batches(tmp_path, catalog_path):
    """``universal-runtime --no-gateway``: a batch sent over gRPC runs its lines as its key."""
    keys_file, log = tmp_path / "keys.yaml", tmp_path / "server.log"
    keys_file.write_text(yaml.safe_dump(KEYS))
    port = free_port()
    with log.open("ab") as output:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "service.cli", "--no-gateway", "--grpc-host", "127.0.0.1",
            "--grpc-port", str(port), "--catalog", str(catalog_path), "--data-dir", str(tmp_path / "data"),
            cwd=REPO_ROOT, env=child_server_env(UR_API_KEYS_FILE=str(keys_file), UR_BATCH_SCAN_INTERVAL_S="0.5"),
            stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    metadata = (("authorization", f"Bearer {KEYS['team-a']}"),)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 60)
            batches = batch_pb2_grpc.BatchServiceStub(channel)
            lines = [
                {
                    "custom_id": f"c-{i}",
                    "method": "POST",
                    "url": "/v1/embeddings",
                    "body": {"model": EMBED_MODEL, "input": text},
                }
                for i, text in enumerate(["a cat", "a dog"])
            ]
            upload = b.CreateFileRequest(filename="in.jsonl", purpose="batch", data=jsonl(*lines))
            file = (await batches.CreateFile(iter([upload]), metadata=metadata)).file
            request = b.CreateBatchRequest(input_file_id=file.id, endpoint="/v1/embeddings")
            batch = (await batches.CreateBatch(request, metadata=metadata)).batch
            async with asyncio.timeout(60):
                while batch.status != b.BATCH_STATUS_COMPLETED:
                    await asyncio.sleep(0.2)
                    batch = (await batches.GetBatch(b.GetBatchRequest(id=batch.id), metadata=metadata)).batch
            content = batches.GetFileContent(
                b.GetFileContentRequest(id=batch.output_file_id), metadata=metadata
            )
            out = parse_jsonl(b"".join([m.data async for m in content]))
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)
    assert sorted(x["custom_id"] for x in out) == ["c-0", "c-1"]
    assert all(x["response"]["status_code"] == 200 for x in out), out
    # The server's own log line for each line's call names the key that submitted the batch.
    ids = {x["response"]["request_id"] for x in out}
    embeds = [
        entry
        # The log's JSON lines (gRPC's own C core writes plain text lines to the same stream).
        for entry in (json.loads(text) for text in log.read_text().splitlines() if text.startswith("{"))
        if entry.get("request_id") in ids and entry.get("method", "").endswith("/Embed")
    ]
    assert sorted((e["code"], e["key_name"]) for e in embeds) == [("OK", "team-a"), ("OK", "team-a")]


# -- the executor's own bounds, on a fake channel ---------------------------------------------------


class FakeCall:
    """A unary call's object: awaited for its answer (or its error)."""

    def __init__(self, outcome: Any) -> None:
        self._outcome = outcome

    def __await__(self):
        return self._result().__await__()

    async def _result(self) -> Any:
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome

    def cancel(self) -> bool:
        return False


class FakeChannel:
    """A channel whose every method answers ``outcome(path)``; it keeps each call's path and metadata."""

    def __init__(self, outcome: Callable[[str], Any]) -> None:
        self.outcome = outcome
        self.calls: list[tuple[str, dict[str, str]]] = []

    def _method(self, path: str, *args: Any, **kwargs: Any) -> Callable[..., FakeCall]:
        def call(request: Any, *, metadata: Any = None, timeout: float | None = None) -> FakeCall:
            self.calls.append((path, dict(metadata or ())))
            return FakeCall(self.outcome(path))

        return call

    unary_unary = unary_stream = stream_unary = stream_stream = _method


def over_quota(delay_s: float = 0.0) -> grpc.aio.AioRpcError:
    """RESOURCE_EXHAUSTED with reason QUOTA_EXCEEDED and RetryInfo, as the server sends it."""
    status = status_pb2.Status(code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], message="over quota")
    status.details.add().Pack(error_details_pb2.ErrorInfo(reason=Reason.QUOTA_EXCEEDED, domain="test"))
    delay = Duration()
    delay.FromNanoseconds(int(delay_s * 1e9))
    status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    trailers = grpc.aio.Metadata((STATUS_DETAILS_KEY, status.SerializeToString()))
    return grpc.aio.AioRpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.aio.Metadata(), trailers, "over quota"
    )


def fake_executor(
    outcome: Callable[[str], Any], **kwargs: Any
) -> tuple[BatchLineExecutor, FakeChannel, list[str]]:
    """An executor whose lines run on a :class:`FakeChannel`; also the key names it was asked for."""
    fake, keys = FakeChannel(outcome), []

    def wrap(channel: grpc.aio.Channel, key_name: str) -> FakeChannel:
        keys.append(key_name)
        return fake

    config = GatewayConfig(grpc_target="127.0.0.1:1", api_key=None, max_message_bytes=1024 * 1024)
    return BatchLineExecutor(config, wrap_channel=wrap, urls=URLS, **kwargs), fake, keys


def busy(times: int) -> Callable[[str], Any]:
    """Over quota (retry at once) ``times`` times, then an answer."""
    seen = [0]

    def outcome(path: str) -> Any:
        seen[0] += 1
        return over_quota() if seen[0] <= times else encoders_pb2.EmbedResponse(model="m")

    return outcome


EMBED = {"model": "m", "input": "x"}


async def test_calls_carry_batch_priority_and_the_lines_id_and_no_credential():
    executor, fake, keys = fake_executor(busy(0))
    async with executor:
        status, body = await executor.execute("/v1/embeddings", EMBED, "team-a", request_id="req-1")
    assert status == 200 and body["object"] == "list" and body["model"] == "m"
    assert keys == ["team-a"]
    [(path, metadata)] = fake.calls
    assert path == "/universal_runtime.v1.InferenceService/Embed"
    assert metadata == {"x-request-id": "req-1", PRIORITY_HEADER: "batch"}


async def test_a_429_with_retry_after_runs_again():
    executor, fake, _ = fake_executor(busy(3))
    async with executor:
        assert (await executor.execute("/v1/embeddings", EMBED, ""))[0] == 200
    assert len(fake.calls) == 4


async def test_retries_are_bounded():
    executor, fake, _ = fake_executor(busy(10 * MAX_ATTEMPTS))
    async with executor:
        status, body = await executor.execute("/v1/embeddings", EMBED, "")
    assert status == 429 and body["error"]["code"] == "quota_exceeded"
    assert len(fake.calls) == MAX_ATTEMPTS


async def test_a_retry_past_the_timeout_is_not_waited_for():
    executor, fake, _ = fake_executor(lambda path: over_quota(delay_s=30.0), timeout_s=5.0)
    async with executor:
        status, body = await executor.execute("/v1/embeddings", EMBED, "")
    assert status == 429 and body["error"]["code"] == "quota_exceeded"
    assert len(fake.calls) == 1


async def test_streaming_and_foreign_routes_are_refused_before_any_call():
    executor, fake, keys = fake_executor(busy(0))
    async with executor:
        line = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
        status, body = await executor.execute("/v1/chat/completions", line, "")
        assert status == 400 and body["error"]["code"] == "streaming_unsupported"
        for url in ("/v1/batches", "/v1/files", "/v1/classifiers", "/v1/embeddings/../batches", "/v1/rerank"):
            status, body = await executor.execute(url, {}, "")
            assert status == 400 and body["error"]["code"] == "invalid_url", url
    assert fake.calls == [] and keys == []


async def test_not_started_is_503():
    executor, fake, _ = fake_executor(busy(0))
    status, body = await executor.execute("/v1/embeddings", EMBED, "")
    assert status == 503 and body["error"]["type"] == "server_error"
    assert fake.calls == []


def test_bad_arguments_are_refused():
    config = GatewayConfig(grpc_target="127.0.0.1:1", api_key=None, max_message_bytes=1024)
    with pytest.raises(ValueError, match="timeout_s"):
        BatchLineExecutor(config, wrap_channel=lambda c, k: c, urls=URLS, timeout_s=0)
    with pytest.raises(ValueError, match="/v1/files"):
        BatchLineExecutor(config, wrap_channel=lambda c, k: c, urls=("/v1/files",))


def test_every_batch_endpoint_runs_the_schema_of_its_live_route():
    """Every url the server lets a batch name is a POST route of the gateway, parsed the same way."""
    assert set(SUPPORTED_URLS) <= set(LINE_ROUTES)
    paths = create_app("127.0.0.1:1").openapi()["paths"]
    for url in SUPPORTED_URLS:
        documented = paths[url]["post"]["requestBody"]["content"]["application/json"]["schema"]
        # A JSON route's body model is a component; an upload route's JSON form is inlined.
        name = documented["$ref"].rpartition("/")[2] if "$ref" in documented else documented["title"]
        assert name == LINE_ROUTES[url].parse.args[0].__name__, url


def test_no_key_secret_is_read_back_anywhere():
    """Lines run as their key by name: nothing in the server or gateway asks a key's secret back."""
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("gateway", "service")
        for path in (ROOT / folder).rglob("*.py")
        for number, text in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bsecret\(", text)
    ]
    assert found == []
    assert "authorization" not in (ROOT / "gateway" / "batch_lines.py").read_text().lower()
