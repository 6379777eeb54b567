"""``/v1/files`` and ``/v1/batches`` against a fake ``BatchService``: the HTTP side alone.

The OpenAI SDK's own types check the answers' shapes; the fake records what reached the server.
The real server's behaviour (validation, runs, keys) is tested in tests/gateway/test_batches_sdk.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import grpc
import openai
import pytest
from openai.types import Batch, FileObject
from universal_runtime.v1 import batch_pb2, batch_pb2_grpc

from gateway.app import create_app
from tests.gateway.gateway_fakes import RpcFailure, asgi_client, serve_with_uvicorn

CHUNK = 1024 * 1024


class FakeBatchService(batch_pb2_grpc.BatchServiceServicer):
    """Files and batches in memory, as the proto describes them (no owners, no runs)."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[batch_pb2.File, bytes]] = {}
        self.batches: dict[str, batch_pb2.Batch] = {}
        self.calls: list[str] = []
        self.fail: RpcFailure | None = None

    async def _abort(self, context, failure: RpcFailure):
        await context.abort(failure.code, failure.message, failure.trailing_metadata())

    async def CreateFile(self, request_iterator, context):
        self.calls.append("CreateFile")
        messages = [message async for message in request_iterator]
        if self.fail is not None:
            await self._abort(context, self.fail)
        data = b"".join(message.data for message in messages)
        for number, line in enumerate(data.decode().splitlines(), 1):
            if line.strip() and not line.startswith("{"):
                failure = RpcFailure(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"line {number}: not a JSON object",
                    "INVALID_BATCH_LINE",
                    {"line": str(number), "problem": "not a JSON object"},
                )
                await self._abort(context, failure)
        file = batch_pb2.File(
            id=f"file-{len(self.files):024d}",
            bytes=len(data),
            created_at=int(time.time()),
            filename=messages[0].filename,
            purpose=messages[0].purpose,
            line_count=len(data.splitlines()),
        )
        self.files[file.id] = (file, data)
        return batch_pb2.CreateFileResponse(file=file)

    async def _file(self, context, file_id: str) -> tuple[batch_pb2.File, bytes]:
        if file_id not in self.files:
            await self._abort(
                context, RpcFailure(grpc.StatusCode.NOT_FOUND, "no such file", "FILE_NOT_FOUND")
            )
        return self.files[file_id]

    async def ListFiles(self, request, context):
        files = [file for file, _ in reversed(self.files.values())]
        return batch_pb2.ListFilesResponse(
            data=files,
            has_more=False,
            first_id=files[0].id if files else "",
            last_id=files[-1].id if files else "",
        )

    async def GetFile(self, request, context):
        file, _ = await self._file(context, request.id)
        return batch_pb2.GetFileResponse(file=file)

    async def GetFileContent(self, request, context):
        file, data = await self._file(context, request.id)
        yield batch_pb2.GetFileContentResponse(file=file, data=data[:CHUNK])
        for start in range(CHUNK, len(data), CHUNK):
            yield batch_pb2.GetFileContentResponse(data=data[start : start + CHUNK])

    async def DeleteFile(self, request, context):
        await self._file(context, request.id)
        del self.files[request.id]
        return batch_pb2.DeleteFileResponse(id=request.id, deleted=True)

    async def CreateBatch(self, request, context):
        self.calls.append("CreateBatch")
        await self._file(context, request.input_file_id)
        now = int(time.time())
        batch = batch_pb2.Batch(
            id=f"batch_{len(self.batches):024d}",
            endpoint=request.endpoint,
            input_file_id=request.input_file_id,
            completion_window=request.completion_window or "24h",
            status=batch_pb2.BATCH_STATUS_VALIDATING,
            created_at=now,
            expires_at=now + 86400,
            request_counts=batch_pb2.BatchRequestCounts(total=2),
            metadata=request.metadata,
        )
        self.batches[batch.id] = batch
        return batch_pb2.CreateBatchResponse(batch=batch)

    async def _batch(self, context, batch_id: str) -> batch_pb2.Batch:
        if batch_id not in self.batches:
            await self._abort(
                context, RpcFailure(grpc.StatusCode.NOT_FOUND, "no such batch", "BATCH_NOT_FOUND")
            )
        return self.batches[batch_id]

    async def GetBatch(self, request, context):
        return batch_pb2.GetBatchResponse(batch=await self._batch(context, request.id))

    async def ListBatches(self, request, context):
        ids = sorted(self.batches, reverse=True)
        if request.after:
            ids = ids[ids.index(request.after) + 1 :]
        limit = request.limit or 20
        page = [self.batches[batch_id] for batch_id in ids[:limit]]
        return batch_pb2.ListBatchesResponse(
            data=page,
            has_more=len(ids) > limit,
            first_id=page[0].id if page else "",
            last_id=page[-1].id if page else "",
        )

    async def CancelBatch(self, request, context):
        batch = await self._batch(context, request.id)
        batch.status = batch_pb2.BATCH_STATUS_CANCELLING
        batch.cancelling_at = int(time.time())
        batch.errors.add(code="invalid_url", message="line 2: url differs", param="url", line=2)
        return batch_pb2.CancelBatchResponse(batch=batch)


@pytest.fixture(scope="module")
async def fake_batches() -> AsyncIterator[tuple[str, FakeBatchService]]:
    server = grpc.aio.server()
    service = FakeBatchService()
    batch_pb2_grpc.add_BatchServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", service
    finally:
        await server.stop(None)


@pytest.fixture
async def fake(fake_batches) -> FakeBatchService:
    _, service = fake_batches
    service.__init__()
    return service


@pytest.fixture(scope="module")
async def sdk(fake_batches) -> AsyncIterator[openai.AsyncOpenAI]:
    target, _ = fake_batches
    async with (
        serve_with_uvicorn(create_app(target, max_message_bytes=8 * CHUNK)) as url,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client,
    ):
        yield client


LINES = b'{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}}\n'


async def test_file_round_trip_through_the_sdk(sdk, fake):
    data = LINES * (int(2.5 * CHUNK) // len(LINES))  # three chunks each way
    created = await sdk.files.create(file=("requests.jsonl", data), purpose="batch")
    assert isinstance(created, FileObject) and created.purpose == "batch" and created.status == "processed"
    assert created.bytes == len(data) and created.filename == "requests.jsonl"
    FileObject.model_validate(created.model_dump())  # every field as the SDK's type requires
    assert (await sdk.files.retrieve(created.id)).id == created.id
    listed = [file.id async for file in sdk.files.list(purpose="batch")]
    assert listed == [created.id]
    content = await sdk.files.content(created.id)
    assert content.content == data
    deleted = await sdk.files.delete(created.id)
    assert deleted.deleted and deleted.id == created.id
    with pytest.raises(openai.NotFoundError) as caught:
        await sdk.files.retrieve(created.id)
    assert caught.value.code == "file_not_found"
    with pytest.raises(openai.NotFoundError):
        await sdk.files.content(created.id)


async def test_other_purposes_are_400_before_the_server(sdk, fake):
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.files.create(file=("x.jsonl", LINES), purpose="fine-tune")
    assert caught.value.code == "invalid_file_purpose" and caught.value.param == "purpose"
    assert fake.calls == []


async def test_a_bad_line_is_400_naming_it(sdk, fake):
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.files.create(file=("x.jsonl", LINES + b"oops\n"), purpose="batch")
    assert caught.value.code == "invalid_batch_line" and "line 2" in caught.value.message


async def test_too_many_files_is_507_not_a_retry(sdk, fake):
    fake.fail = RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED, "at most 2 files per key", "TOO_MANY_FILES")
    with pytest.raises(openai.APIStatusError) as caught:
        await sdk.files.create(file=("x.jsonl", LINES), purpose="batch")
    assert caught.value.status_code == 507 and caught.value.code == "too_many_files"
    assert "retry-after" not in caught.value.response.headers


async def test_batch_lifecycle_through_the_sdk(sdk, fake):
    file = await sdk.files.create(file=("x.jsonl", LINES), purpose="batch")
    created = await sdk.batches.create(
        input_file_id=file.id, endpoint="/v1/embeddings", completion_window="24h", metadata={"team": "search"}
    )
    assert isinstance(created, Batch) and created.status == "validating"
    Batch.model_validate(created.model_dump())
    assert created.metadata == {"team": "search"} and created.request_counts.total == 2
    assert created.output_file_id is None and created.in_progress_at is None and created.errors is None
    assert (await sdk.batches.retrieve(created.id)).id == created.id
    others = [
        await sdk.batches.create(input_file_id=file.id, endpoint="/v1/embeddings", completion_window="24h")
    ]
    others.append(
        await sdk.batches.create(input_file_id=file.id, endpoint="/v1/embeddings", completion_window="24h")
    )
    page = await sdk.batches.list(limit=2)
    assert [batch.id for batch in page.data] == [others[1].id, others[0].id] and page.has_more
    assert [batch.id async for batch in sdk.batches.list(limit=2)] == [others[1].id, others[0].id, created.id]
    cancelled = await sdk.batches.cancel(created.id)
    assert cancelled.status == "cancelling" and cancelled.cancelling_at is not None
    assert cancelled.errors is not None and cancelled.errors.data[0].line == 2
    with pytest.raises(openai.NotFoundError) as caught:
        await sdk.batches.retrieve("batch_missing")
    assert caught.value.code == "batch_not_found"


async def test_bad_requests_are_400(fake_batches, fake):
    target, _ = fake_batches
    async with asgi_client(create_app(target, max_message_bytes=CHUNK)) as http:
        for query in ("limit=0", "limit=101", "after=" + "x" * 65):
            response = await http.get(f"/v1/batches?{query}")
            assert response.status_code == 400, query
        response = await http.post("/v1/batches", json={"input_file_id": "f", "endpoint": "/v1/embeddings"})
        assert response.status_code == 400 and response.json()["error"]["param"] == "completion_window"
        window = {"input_file_id": "f", "endpoint": "/v1/embeddings", "completion_window": "1h"}
        assert (await http.post("/v1/batches", json=window)).status_code == 400
        response = await http.post("/v1/files", json={"purpose": "batch"})
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_file"
        response = await http.post("/v1/files", data={"purpose": "batch"}, files={"other": ("x", b"{}")})
        assert response.status_code == 400 and response.json()["error"]["param"] == "file"
        fields = {f"f{i}": "x" for i in range(20)}
        response = await http.post(
            "/v1/files", data={"purpose": "batch", **fields}, files={"file": ("x", b"{}")}
        )
        assert response.status_code == 400
        # Over the body limit: refused while it arrives, before the server sees a byte.
        response = await http.post(
            "/v1/files", data={"purpose": "batch"}, files={"file": ("x", b"{}" * CHUNK)}
        )
        assert response.status_code == 413 and response.json()["error"]["code"] == "message_too_large"
    assert fake.calls == []


async def test_an_unknown_status_is_502(fake_batches, fake):
    target, _ = fake_batches
    fake.batches["batch_odd"] = batch_pb2.Batch(id="batch_odd", status=batch_pb2.BATCH_STATUS_UNSPECIFIED)
    async with asgi_client(create_app(target)) as http:
        response = await http.get("/v1/batches/batch_odd")
    assert response.status_code == 502 and response.json()["error"]["code"] == "bad_answer"


def test_the_document_describes_the_upload_and_the_content():
    paths = create_app("127.0.0.1:1").openapi()["paths"]
    form = paths["/v1/files"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert form["required"] == ["file", "purpose"] and form["properties"]["file"]["format"] == "binary"
    content = paths["/v1/files/{file_id}/content"]["get"]["responses"]["200"]["content"]
    assert "application/octet-stream" in content
    batch = paths["/v1/batches/{batch_id}"]["get"]["responses"]["200"]["content"]["application/json"]
    assert batch["schema"]["$ref"].endswith("/BatchObject")
    limit = next(p for p in paths["/v1/batches"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"]["maximum"] == 100 and limit["schema"]["default"] == 20
    assert "507" in paths["/v1/files"]["post"]["responses"]


async def test_json_lines_keep_their_bytes(fake_batches, fake):
    target, _ = fake_batches
    data = "".join(json.dumps({"custom_id": f"é{i}", "body": {}}) + "\n" for i in range(3)).encode()
    async with asgi_client(create_app(target)) as http:
        created = await http.post("/v1/files", data={"purpose": "batch"}, files={"file": ("ü.jsonl", data)})
        assert created.status_code == 200, created.text
        file_id = created.json()["id"]
        content = await http.get(f"/v1/files/{file_id}/content")
    assert content.content == data and content.headers["content-length"] == str(len(data))
