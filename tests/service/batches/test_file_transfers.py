"""BatchServicer's bound on file uploads and downloads in flight (``batch_max_file_transfers``).

Servicer logic only, so the store is a stand-in: what is checked is that one transfer more than
the bound waits for a place, that it is refused with RESOURCE_EXHAUSTED OVERLOADED (HTTP 429 with
Retry-After at the gateway) once its wait is over, and that an ended transfer, finished or
failed, frees its place.
"""

from __future__ import annotations

import asyncio

import pytest
from universal_runtime.v1 import batch_pb2 as b

from engines.errors import InvalidArgumentError, ResourceExhaustedError
from service.batches.api import FileInfo
from service.core.context import CallContext, MethodInfo
from service.servicers.batches import BatchServicer

# The servicer reads who calls from its context (a server without keys: no key name).
CALL = CallContext(method=MethodInfo("/universal_runtime.v1.BatchService/CreateFile"), request_id="transfers")


class StandInApi:
    """What the servicer calls for uploads and downloads, holding files in a dict."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def check_upload(self, filename: str, purpose: str, size: int) -> None:
        if purpose != "batch":
            raise InvalidArgumentError("purpose must be batch", reason="INVALID_FILE_PURPOSE")

    async def create_file(self, owner: str, filename: str, data: bytes, expires_after_s: int = 0) -> FileInfo:
        file_id = f"file-{len(self.files):024d}"
        self.files[file_id] = data
        return FileInfo(file_id, len(data), 0, filename, "batch", data.count(b"\n"))

    async def file_content(self, owner: str, file_id: str) -> tuple[FileInfo, bytes]:
        data = self.files[file_id]
        return FileInfo(file_id, len(data), 0, "in.jsonl", "batch", 1), data


async def messages(*requests: b.CreateFileRequest, hold: asyncio.Event | None = None, started=None):
    """The client's stream: the first message, then (with ``hold``) a wait, then the rest."""
    yield requests[0]
    if started is not None:
        started.set()
    if hold is not None:
        await hold.wait()
    for request in requests[1:]:
        yield request


def first(data: bytes, purpose: str = "batch") -> b.CreateFileRequest:
    return b.CreateFileRequest(filename="in.jsonl", purpose=purpose, data=data)


async def test_a_transfer_over_the_bound_is_refused_when_its_wait_is_over():
    servicer = BatchServicer(StandInApi(), max_file_transfers=1, transfer_wait_s=0.0)
    started, hold = asyncio.Event(), asyncio.Event()
    holding = asyncio.create_task(
        servicer.CreateFile(
            messages(first(b"{}"), b.CreateFileRequest(data=b"\n"), hold=hold, started=started), CALL
        )
    )
    await started.wait()  # the first upload's handler is reading its stream: it holds the place
    with pytest.raises(ResourceExhaustedError) as caught:
        await servicer.CreateFile(messages(first(b"{}\n")), CALL)
    assert (caught.value.reason, caught.value.metadata["max_file_transfers"]) == ("OVERLOADED", "1")
    with pytest.raises(ResourceExhaustedError):  # a download counts too
        [m async for m in servicer.GetFileContent(b.GetFileContentRequest(id="file-0"), CALL)]
    hold.set()
    stored = (await holding).file
    assert stored.bytes == 3
    chunks = [m async for m in servicer.GetFileContent(b.GetFileContentRequest(id=stored.id), CALL)]
    assert b"".join(m.data for m in chunks) == b"{}\n"


async def test_a_transfer_over_the_bound_waits_for_a_place_and_then_runs():
    servicer = BatchServicer(StandInApi(), max_file_transfers=1)
    started, hold = asyncio.Event(), asyncio.Event()
    holding = asyncio.create_task(
        servicer.CreateFile(
            messages(first(b"{}"), b.CreateFileRequest(data=b"\n"), hold=hold, started=started), CALL
        )
    )
    await started.wait()
    waiting = asyncio.create_task(servicer.CreateFile(messages(first(b"[]\n")), CALL))
    for _ in range(10):  # it cannot finish while the place is held, whatever the turns
        await asyncio.sleep(0)
    assert not waiting.done()
    hold.set()
    assert (await holding).file.bytes == 3
    assert (await waiting).file.bytes == 3


async def test_a_failed_upload_frees_its_place():
    servicer = BatchServicer(StandInApi(), max_file_transfers=1, transfer_wait_s=0.0)
    with pytest.raises(InvalidArgumentError):
        await servicer.CreateFile(messages(first(b"{}", purpose="fine-tune")), CALL)
    assert (await servicer.CreateFile(messages(first(b"{}\n")), CALL)).file.bytes == 3
