"""File expiry over gRPC (``BatchService`` on a real server): the new fields and their refusals.

The server and stub are those of tests/service/batches/test_batch_service.py (its fixtures, imported).
"""

from __future__ import annotations

import grpc
from universal_runtime.v1 import batch_pb2 as b

from tests.service.batches.helpers import jsonl, line
from tests.service.batches.test_batch_service import (  # noqa: F401 (keys_file, running, stub: fixtures)
    TEAM_A,
    bearer,
    keys_file,
    refused,
    running,
    stub,
)

THIRTY_DAYS = 30 * 24 * 3600


async def test_create_file_keeps_expires_after_seconds_and_answers_expires_at(stub):  # noqa: F811
    batches, _ = stub
    data = jsonl(line("a"), line("b"))
    first = b.CreateFileRequest(
        filename="in.jsonl", purpose="batch", expires_after_seconds=3600, data=data[:10]
    )
    file = (
        await batches.CreateFile(iter([first, b.CreateFileRequest(data=data[10:])]), metadata=bearer(TEAM_A))
    ).file
    assert file.expires_at == file.created_at + 3600 and file.bytes == len(data)
    got = await batches.GetFile(b.GetFileRequest(id=file.id), metadata=bearer(TEAM_A))
    assert got.file == file
    default = b.CreateFileRequest(filename="in.jsonl", purpose="batch", data=data)
    file = (await batches.CreateFile(iter([default]), metadata=bearer(TEAM_A))).file
    assert file.expires_at == file.created_at + THIRTY_DAYS  # 0: OpenAI's default


async def test_bad_expiries_are_invalid_argument_naming_the_field(stub):  # noqa: F811
    batches, _ = stub
    data = jsonl(line("a"))
    for seconds in (1, 3599, 2_592_001, -3600):
        message = b.CreateFileRequest(
            filename="in.jsonl", purpose="batch", expires_after_seconds=seconds, data=data
        )
        reason, metadata, _ = await refused(
            batches.CreateFile(iter([message]), metadata=bearer(TEAM_A)), grpc.StatusCode.INVALID_ARGUMENT
        )
        assert (reason, metadata["field"]) == ("INVALID_EXPIRES_AFTER", "expires_after.seconds"), seconds
    # The expiry belongs to the first message, as the name and purpose.
    later = [
        b.CreateFileRequest(filename="in.jsonl", purpose="batch", data=data),
        b.CreateFileRequest(expires_after_seconds=3600),
    ]
    reason, _, _ = await refused(
        batches.CreateFile(iter(later), metadata=bearer(TEAM_A)), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert reason == "FILE_CHUNKS_INCONSISTENT"
    message = b.CreateFileRequest(filename="in.jsonl", purpose="batch", data=data)
    file = (await batches.CreateFile(iter([message]), metadata=bearer(TEAM_A))).file
    request = b.CreateBatchRequest(
        input_file_id=file.id, endpoint="/v1/embeddings", output_expires_after_seconds=60
    )
    reason, metadata, _ = await refused(
        batches.CreateBatch(request, metadata=bearer(TEAM_A)), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert (reason, metadata["field"]) == ("INVALID_EXPIRES_AFTER", "output_expires_after.seconds")
    listed = await batches.ListBatches(b.ListBatchesRequest(), metadata=bearer(TEAM_A))
    assert file.id not in {batch.input_file_id for batch in listed.data}
