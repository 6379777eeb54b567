"""BatchService: the OpenAI Batch API's files and batches, for the gateway and internal callers.

Every call acts for the caller's API key (``context.caller.name``; "" without keys): it sees and
changes only its own files and batches. Errors (statuses with ``google.rpc.ErrorInfo`` reasons)
are listed in ``protos/universal_runtime/v1/batch.proto``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from universal_runtime.v1 import batch_pb2 as pb
from universal_runtime.v1 import batch_pb2_grpc

from engines.reasons import Reason
from service.batches.api import (
    BatchApi,
    BatchJob,
    BatchJobError,
    BatchSpec,
    FileInfo,
    expiry_seconds,
    invalid_argument,
    too_many_transfers,
)
from service.convert.messages import MessageCopy
from service.core.context import CallContext

#: Bytes of each GetFileContent message.
CONTENT_CHUNK_BYTES = 1024 * 1024
#: Seconds an upload or download waits for one of the ``batch_max_file_transfers`` places before it
#: is refused: a client's few concurrent uploads queue briefly instead of failing.
TRANSFER_WAIT_S = 30.0
#: Most messages of one upload: a 100 MiB file in chunks of 1 KiB; more (a stream of empty
#: messages) is refused rather than read forever.
MAX_UPLOAD_MESSAGES = 100_000

_STATUS = {
    "validating": pb.BATCH_STATUS_VALIDATING,
    "failed": pb.BATCH_STATUS_FAILED,
    "in_progress": pb.BATCH_STATUS_IN_PROGRESS,
    "finalizing": pb.BATCH_STATUS_FINALIZING,
    "completed": pb.BATCH_STATUS_COMPLETED,
    "expired": pb.BATCH_STATUS_EXPIRED,
    "cancelling": pb.BATCH_STATUS_CANCELLING,
    "cancelled": pb.BATCH_STATUS_CANCELLED,
}


file_pb = MessageCopy(pb.File, FileInfo)
"""A stored file as its message."""
_ERROR = MessageCopy(pb.BatchError, BatchJobError)
# The record's owner and planned file ids stay in the server; the counts become request_counts.
_BATCH = MessageCopy(
    pb.Batch,
    BatchJob,
    given=("errors", "status", "request_counts", "metadata"),
    dropped=(
        "owner",
        "total",
        "completed",
        "failed",
        "planned_output_file_id",
        "planned_error_file_id",
        "output_expires_after_s",
    ),
)


def batch_pb(batch: BatchJob) -> pb.Batch:
    """A batch job as its message."""
    return _BATCH(
        batch,
        errors=[_ERROR(error) for error in batch.errors],
        status=_STATUS[batch.status],
        request_counts=pb.BatchRequestCounts(
            total=batch.total, completed=batch.completed, failed=batch.failed
        ),
        metadata=batch.metadata,
    )


def _ends(items: list[Any]) -> dict[str, str]:
    """``first_id`` and ``last_id`` of a page (empty when it is)."""
    return {"first_id": items[0].id if items else "", "last_id": items[-1].id if items else ""}


def _bad_chunks(problem: str) -> Exception:
    return invalid_argument(problem, Reason.FILE_CHUNKS_INCONSISTENT)


class BatchServicer(batch_pb2_grpc.BatchServiceServicer):
    """Implements ``universal_runtime.v1.BatchService`` over :class:`~service.batches.api.BatchApi`.

    Args:
        api: The files and batches.
        max_file_transfers: Most uploads and downloads in flight at once (setting
            ``batch_max_file_transfers``): each holds its whole file in memory (an upload up to
            ``batch_file_max_bytes``, twice while it is stored), so this bounds their memory.
            One more waits for a place, up to ``transfer_wait_s``; then it is refused:
            RESOURCE_EXHAUSTED, reason OVERLOADED (HTTP 429 with ``Retry-After`` at the gateway).
        transfer_wait_s: Seconds a transfer waits for a place (:data:`TRANSFER_WAIT_S`).

    """

    def __init__(
        self, api: BatchApi, max_file_transfers: int = 4, transfer_wait_s: float = TRANSFER_WAIT_S
    ) -> None:
        self._api = api
        self._max_transfers = max_file_transfers
        self._transfers = asyncio.Semaphore(max_file_transfers)
        self._transfer_wait_s = transfer_wait_s

    @contextlib.asynccontextmanager
    async def _transfer(self) -> AsyncIterator[None]:
        """One upload or download in flight: waits up to ``transfer_wait_s`` for a place, else refused.

        A waiting upload has not read its stream: HTTP/2 flow control holds the client's bytes.
        """
        try:
            async with asyncio.timeout(self._transfer_wait_s):
                await self._transfers.acquire()
        except TimeoutError:
            raise too_many_transfers(self._max_transfers) from None
        try:
            yield
        finally:
            self._transfers.release()

    async def CreateFile(self, request_iterator: AsyncIterator[pb.CreateFileRequest], context: CallContext):
        """Upload an input file in chunks; checked whole, then stored (kept ``expires_after_seconds``)."""
        owner = context.caller.name
        filename = purpose = None
        expires_after_s = 0
        data = bytearray()
        messages = 0
        async with self._transfer():
            async for message in request_iterator:  # bounded: MAX_UPLOAD_MESSAGES, and the size limit
                messages += 1
                if filename is None:
                    filename, purpose = message.filename, message.purpose
                    expires_after_s = message.expires_after_seconds
                    self._api.check_upload(filename, purpose, 0)
                    expiry_seconds(expires_after_s, "expires_after")  # refused before the bytes are read
                elif message.filename or message.purpose or message.expires_after_seconds:
                    raise _bad_chunks(
                        "filename, purpose and expires_after_seconds go in the first message only"
                    )
                if messages > MAX_UPLOAD_MESSAGES:
                    raise _bad_chunks(f"an upload may be at most {MAX_UPLOAD_MESSAGES} messages")
                chunk = message.data  # read once: each read copies the bytes
                self._api.check_upload(filename, purpose or "", len(data) + len(chunk))
                data += chunk
            if filename is None:
                raise _bad_chunks("no message received: send the filename, the purpose and the file's bytes")
            info = await self._api.create_file(owner, filename, bytes(data), expires_after_s)
        return pb.CreateFileResponse(file=file_pb(info))

    async def ListFiles(self, request: pb.ListFilesRequest, context: CallContext):
        """The caller's files, a page at a time."""
        if request.order not in ("", "asc", "desc"):
            raise invalid_argument(
                f"order must be 'asc' or 'desc', not {request.order[:32]!r}", Reason.INVALID_PAGINATION
            )
        files, more = await self._api.list_files(
            context.caller.name, request.purpose, request.after, request.limit, request.order != "asc"
        )
        return pb.ListFilesResponse(data=[file_pb(f) for f in files], has_more=more, **_ends(files))

    async def GetFile(self, request: pb.GetFileRequest, context: CallContext):
        """One of the caller's files."""
        return pb.GetFileResponse(file=file_pb(await self._api.get_file(context.caller.name, request.id)))

    async def GetFileContent(self, request: pb.GetFileContentRequest, context: CallContext):
        """One of the caller's files' bytes, 1 MiB a message, its description in the first."""
        async with self._transfer():
            info, data = await self._api.file_content(context.caller.name, request.id)
            yield pb.GetFileContentResponse(file=file_pb(info), data=data[:CONTENT_CHUNK_BYTES])
            for start in range(CONTENT_CHUNK_BYTES, len(data), CONTENT_CHUNK_BYTES):  # bounded by its size
                yield pb.GetFileContentResponse(data=data[start : start + CONTENT_CHUNK_BYTES])

    async def DeleteFile(self, request: pb.DeleteFileRequest, context: CallContext):
        """Delete one of the caller's files."""
        await self._api.delete_file(context.caller.name, request.id)
        return pb.DeleteFileResponse(id=request.id, deleted=True)

    async def CreateBatch(self, request: pb.CreateBatchRequest, context: CallContext):
        """Create a batch over one of the caller's input files."""
        spec = BatchSpec(
            input_file_id=request.input_file_id,
            endpoint=request.endpoint,
            completion_window=request.completion_window,
            metadata=dict(request.metadata),
            output_expires_after_s=request.output_expires_after_seconds,
        )
        batch = await self._api.create_batch(context.caller.name, spec)
        return pb.CreateBatchResponse(batch=batch_pb(batch))

    async def GetBatch(self, request: pb.GetBatchRequest, context: CallContext):
        """One of the caller's batches."""
        return pb.GetBatchResponse(batch=batch_pb(await self._api.get_batch(context.caller.name, request.id)))

    async def ListBatches(self, request: pb.ListBatchesRequest, context: CallContext):
        """The caller's batches, newest first, a page at a time."""
        batches, more = await self._api.list_batches(context.caller.name, request.after, request.limit)
        return pb.ListBatchesResponse(data=[batch_pb(b) for b in batches], has_more=more, **_ends(batches))

    async def CancelBatch(self, request: pb.CancelBatchRequest, context: CallContext):
        """Cancel one of the caller's batches."""
        batch = await self._api.cancel_batch(context.caller.name, request.id)
        return pb.CancelBatchResponse(batch=batch_pb(batch))
