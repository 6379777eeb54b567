"""BatchService over gRPC on a real server with two keys: uploads in chunks, refusals with their
reasons, per-key isolation, batches and cancel, and a small embeddings batch through the real runner
(the gateway's line executor, calls of the core in process) on the real model."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
from universal_runtime.v1 import batch_pb2 as b
from universal_runtime.v1 import batch_pb2_grpc, inference_service_pb2_grpc
from universal_runtime.v1 import encoders_pb2 as inf

from service.cli import start_batch_lines
from service.server import start_server
from tests.conftest import EMBED_MODEL, error_info
from tests.service.batches.helpers import jsonl, line, parse_jsonl

TEAM_A = "teamA-Secret-batches-1"
TEAM_B = "teamB-Secret-batches-2"
FILE_MAX_BYTES = 2 * 1024 * 1024


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.yaml"
    path.write_text(f'team-a: "{TEAM_A}"\nteam-b: "{TEAM_B}"\n')
    return path


@pytest.fixture(scope="module")
async def running(settings, keys_file, tmp_path_factory):
    server = await start_server(
        settings.model_copy(
            update={
                "api_keys_file": keys_file,
                "data_dir": tmp_path_factory.mktemp("batch-data"),
                "batch_file_max_bytes": FILE_MAX_BYTES,
                "batch_line_concurrency": 2,
            }
        )
    )
    yield server
    await server.stop(grace=1.0)


@pytest.fixture(scope="module")
async def stub(running):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield (
            batch_pb2_grpc.BatchServiceStub(channel),
            inference_service_pb2_grpc.InferenceServiceStub(channel),
        )


async def upload(stub, key: str, data: bytes, chunk: int = 64 * 1024, purpose: str = "batch") -> b.File:
    messages = [b.CreateFileRequest(filename="in.jsonl", purpose=purpose, data=data[:chunk])]
    messages += [b.CreateFileRequest(data=data[i : i + chunk]) for i in range(chunk, len(data), chunk)]
    return (await stub.CreateFile(iter(messages), metadata=bearer(key))).file


async def refused(call, code: grpc.StatusCode) -> tuple[str, dict[str, str], str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, caught.value.details()
    info = error_info(caught.value)
    return info.reason, dict(info.metadata), caught.value.details()


async def test_an_upload_in_chunks_reads_back_whole_in_1_mib_messages(stub):
    batches, _ = stub
    data = jsonl(*(line(f"row-{i}", input="x" * 5000) for i in range(300)))  # ~1.5 MiB
    file = await upload(batches, TEAM_A, data)
    assert (file.bytes, file.line_count, file.purpose, file.filename) == (len(data), 300, "batch", "in.jsonl")
    assert file.id.startswith("file-")
    assert (await batches.GetFile(b.GetFileRequest(id=file.id), metadata=bearer(TEAM_A))).file == file
    chunks = [
        m async for m in batches.GetFileContent(b.GetFileContentRequest(id=file.id), metadata=bearer(TEAM_A))
    ]
    assert chunks[0].file == file and len(chunks) == 2
    assert b"".join(m.data for m in chunks) == data
    listed = await batches.ListFiles(b.ListFilesRequest(), metadata=bearer(TEAM_A))
    assert file.id in [f.id for f in listed.data]
    assert (await batches.DeleteFile(b.DeleteFileRequest(id=file.id), metadata=bearer(TEAM_A))).deleted
    reason, meta, _ = await refused(
        batches.GetFile(b.GetFileRequest(id=file.id), metadata=bearer(TEAM_A)), grpc.StatusCode.NOT_FOUND
    )
    assert (reason, meta["id"]) == ("FILE_NOT_FOUND", file.id)


async def test_bad_uploads_are_refused_with_the_line_or_the_limit(stub):
    batches, _ = stub
    duplicate = jsonl(line("a"), line("b"), line("a"))
    reason, meta, details = await refused(
        upload(batches, TEAM_A, duplicate, chunk=10), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert (reason, meta["line"]) == ("INVALID_BATCH_LINE", "3")
    assert "custom_id 'a' is already used on line 1" in details
    wrong_url = jsonl(line("a"), {"custom_id": "b", "method": "POST", "url": "/v1/audio", "body": {}})
    reason, meta, _ = await refused(upload(batches, TEAM_A, wrong_url), grpc.StatusCode.INVALID_ARGUMENT)
    assert (reason, meta["line"]) == ("INVALID_BATCH_LINE", "2")
    malformed = jsonl(line("a"), '{"custom_id": "b",')
    reason, meta, details = await refused(
        upload(batches, TEAM_A, malformed), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert (reason, meta["line"]) == ("INVALID_BATCH_LINE", "2") and "not valid JSON" in details
    too_big = b"x" * (FILE_MAX_BYTES + 1)
    reason, meta, _ = await refused(
        upload(batches, TEAM_A, too_big, chunk=1 << 20), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert (reason, meta["limit"]) == ("BATCH_FILE_TOO_LARGE", str(FILE_MAX_BYTES))
    reason, _, _ = await refused(
        upload(batches, TEAM_A, jsonl(line("a")), purpose="fine-tune"), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert reason == "INVALID_FILE_PURPOSE"
    reason, _, _ = await refused(
        batches.CreateFile(iter([]), metadata=bearer(TEAM_A)), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert reason == "FILE_CHUNKS_INCONSISTENT"
    reason, _, _ = await refused(
        batches.GetFile(b.GetFileRequest(id="file-../../x"), metadata=bearer(TEAM_A)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert reason == "INVALID_FILE_ID"


async def test_a_key_sees_only_its_own_files_and_batches(stub, running):
    batches, _ = stub
    file = await upload(batches, TEAM_A, jsonl(line("a")))
    batch = (
        await batches.CreateBatch(
            b.CreateBatchRequest(input_file_id=file.id, endpoint="/v1/embeddings", metadata={"team": "a"}),
            metadata=bearer(TEAM_A),
        )
    ).batch
    # The runner has no executor in this module until the real-model test: the batch waits.
    assert (batch.status, batch.request_counts.total, batch.completion_window) == (
        b.BATCH_STATUS_VALIDATING,
        1,
        "24h",
    )
    as_b = bearer(TEAM_B)
    for call, reason in (
        (batches.GetFile(b.GetFileRequest(id=file.id), metadata=as_b), "FILE_NOT_FOUND"),
        (batches.DeleteFile(b.DeleteFileRequest(id=file.id), metadata=as_b), "FILE_NOT_FOUND"),
        (batches.GetBatch(b.GetBatchRequest(id=batch.id), metadata=as_b), "BATCH_NOT_FOUND"),
        (batches.CancelBatch(b.CancelBatchRequest(id=batch.id), metadata=as_b), "BATCH_NOT_FOUND"),
        (
            batches.CreateBatch(
                b.CreateBatchRequest(input_file_id=file.id, endpoint="/v1/embeddings"), metadata=as_b
            ),
            "FILE_NOT_FOUND",
        ),
    ):
        assert (await refused(call, grpc.StatusCode.NOT_FOUND))[0] == reason
    assert list((await batches.ListBatches(b.ListBatchesRequest(), metadata=as_b)).data) == []
    assert list((await batches.ListFiles(b.ListFilesRequest(), metadata=as_b)).data) == []
    mine = await batches.ListBatches(b.ListBatchesRequest(), metadata=bearer(TEAM_A))
    assert batch.id in [x.id for x in mine.data]
    assert (
        await refused(batches.ListBatches(b.ListBatchesRequest()), grpc.StatusCode.UNAUTHENTICATED)
    ) is not None
    cancelled = (await batches.CancelBatch(b.CancelBatchRequest(id=batch.id), metadata=bearer(TEAM_A))).batch
    assert cancelled.status == b.BATCH_STATUS_CANCELLING and cancelled.cancelling_at >= batch.created_at


async def test_create_batch_refusals(stub):
    batches, _ = stub
    file = await upload(batches, TEAM_A, jsonl(line("a")))
    for request, code, reason in (
        (
            b.CreateBatchRequest(input_file_id=file.id, endpoint="/v1/moderations"),
            "INVALID_ARGUMENT",
            "INVALID_BATCH_ENDPOINT",
        ),
        (
            b.CreateBatchRequest(input_file_id=file.id, endpoint="/v1/embeddings", completion_window="1h"),
            "INVALID_ARGUMENT",
            "INVALID_COMPLETION_WINDOW",
        ),
        (
            b.CreateBatchRequest(
                input_file_id=file.id, endpoint="/v1/embeddings", metadata={str(i): "" for i in range(17)}
            ),
            "INVALID_ARGUMENT",
            "INVALID_BATCH_METADATA",
        ),
        (
            b.CreateBatchRequest(input_file_id="file-000000000000abcdefabcdef", endpoint="/v1/embeddings"),
            "NOT_FOUND",
            "FILE_NOT_FOUND",
        ),
    ):
        got, _, _ = await refused(
            batches.CreateBatch(request, metadata=bearer(TEAM_A)), grpc.StatusCode[code]
        )
        assert got == reason
    reason, _, _ = await refused(
        batches.ListBatches(b.ListBatchesRequest(limit=101), metadata=bearer(TEAM_A)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert reason == "INVALID_PAGINATION"


async def test_a_small_embeddings_batch_runs_through_the_real_runner_on_the_real_model(stub, running):
    batches, inference = stub
    texts = ["the cat sat on the mat", "batch inference at night", "a third sentence"]
    data = jsonl(*(line(f"emb-{i}", model=EMBED_MODEL, input=text) for i, text in enumerate(texts)))
    file = await upload(batches, TEAM_B, data)
    executor = await start_batch_lines(running.settings, f"127.0.0.1:{running.port}", running)
    assert executor is not None
    async with executor:
        created = await batches.CreateBatch(
            b.CreateBatchRequest(input_file_id=file.id, endpoint="/v1/embeddings"), metadata=bearer(TEAM_B)
        )
        batch = created.batch
        for _ in range(600):  # at most 60 s; three sentences take well under one
            if batch.status == b.BATCH_STATUS_COMPLETED:
                break
            await asyncio.sleep(0.1)
            batch = (await batches.GetBatch(b.GetBatchRequest(id=batch.id), metadata=bearer(TEAM_B))).batch
    assert batch.status == b.BATCH_STATUS_COMPLETED, batch
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (
        3,
        3,
        0,
    )
    assert batch.error_file_id == ""
    content = [
        m.data
        async for m in batches.GetFileContent(
            b.GetFileContentRequest(id=batch.output_file_id), metadata=bearer(TEAM_B)
        )
    ]
    out = parse_jsonl(b"".join(content))
    assert [x["custom_id"] for x in out] == ["emb-0", "emb-1", "emb-2"]
    direct = await inference.Embed(inf.EmbedRequest(model=EMBED_MODEL, inputs=texts), metadata=bearer(TEAM_B))
    for record, expected in zip(out, direct.embeddings, strict=True):
        assert record["response"]["status_code"] == 200 and record["error"] is None
        assert record["response"]["body"]["model"] == EMBED_MODEL
        vector = np.array(record["response"]["body"]["data"][0]["embedding"])
        reference = np.array(expected.values)
        assert vector.shape == (384,)
        # The same model on the same text: the same direction (the route may normalize).
        cosine = vector @ reference / np.linalg.norm(vector) / np.linalg.norm(reference)
        assert cosine > 0.9999
