"""BatchService's calls over the batch store, each on a worker lane (never the event loop).

The owner of every file and batch is the caller's API key name (``api_key_name_var``), which
the servicer passes in; :class:`~engines.batches.store.BatchStore` keeps each key's in a folder
of its own, so another key's id is simply not found.
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.batches.lines import check_size
from engines.batches.store import (
    PURPOSE_INPUT,
    Batch,
    BatchError,
    BatchStore,
    FileInfo,
)
from engines.errors import InvalidArgumentError, ResourceExhaustedError, clip_text
from engines.executor import DeviceExecutor
from service import metrics
from service.batches.runner import BatchRunner

__all__ = ["Batch", "BatchApi", "BatchError", "FileInfo", "invalid_argument"]


def invalid_argument(problem: str, reason: str) -> InvalidArgumentError:
    """INVALID_ARGUMENT with ``reason``: a request the servicer refuses before any store work."""
    return InvalidArgumentError(problem, reason=reason)


def too_many_transfers(limit: int) -> ResourceExhaustedError:
    """RESOURCE_EXHAUSTED OVERLOADED: ``limit`` file uploads and downloads are in flight (retry later)."""
    return ResourceExhaustedError(
        f"{limit} file uploads and downloads are in flight; retry later", max_file_transfers=limit
    )


@dataclass(frozen=True, slots=True)
class BatchApi:
    """Files and batches of the caller's key.

    Attributes:
        store: where they are kept.
        writes: the lane uploads and batch changes run on.
        reads: the lane reads run on (a 100 MiB upload being checked does not hold them up).
        runner: the runner, woken when a batch is created or cancelled.

    """

    store: BatchStore
    writes: DeviceExecutor
    reads: DeviceExecutor
    runner: BatchRunner

    def check_upload(self, filename: str, purpose: str, size: int) -> None:
        """Refuse an upload early: a purpose other than ``batch``, or over the size limit.

        Raises:
            InvalidArgumentError: INVALID_FILE_PURPOSE, or BATCH_FILE_TOO_LARGE.

        """
        if purpose != PURPOSE_INPUT:
            raise InvalidArgumentError(
                f"purpose must be {PURPOSE_INPUT!r} (the only purpose one uploads), "
                f"not {clip_text(purpose, 32)!r}",
                reason="INVALID_FILE_PURPOSE",
                field="purpose",
            )
        check_size(size, self.store.limits.input)

    async def create_file(self, owner: str, filename: str, data: bytes) -> FileInfo:
        """Store an input file, every line checked (:meth:`BatchStore.create_file`)."""
        return await self.writes.run(self.store.create_file, owner, filename, data)

    async def list_files(
        self, owner: str, purpose: str, after: str, limit: int, newest_first: bool
    ) -> tuple[list[FileInfo], bool]:
        """A page of the caller's files (:meth:`BatchStore.list_files`)."""
        return await self.reads.run(
            lambda: self.store.list_files(
                owner, purpose=purpose, after=after, limit=limit, newest_first=newest_first
            )
        )

    async def get_file(self, owner: str, file_id: str) -> FileInfo:
        """One of the caller's files (NOT_FOUND otherwise)."""
        return await self.reads.run(self.store.get_file, owner, file_id)

    async def file_content(self, owner: str, file_id: str) -> tuple[FileInfo, bytes]:
        """One of the caller's files with its bytes."""
        return await self.reads.run(self.store.file_content, owner, file_id)

    async def delete_file(self, owner: str, file_id: str) -> None:
        """Delete one of the caller's files."""
        await self.writes.run(self.store.delete_file, owner, file_id)

    async def create_batch(
        self, owner: str, input_file_id: str, endpoint: str, completion_window: str, metadata: dict[str, str]
    ) -> Batch:
        """Create a batch (validating) and wake the runner."""
        batch = await self.writes.run(
            self.store.create_batch, owner, input_file_id, endpoint, completion_window, metadata
        )
        metrics.batch_status(batch.status)
        self.runner.wake()
        return batch

    async def get_batch(self, owner: str, batch_id: str) -> Batch:
        """One of the caller's batches."""
        return await self.reads.run(self.store.get_batch, owner, batch_id)

    async def list_batches(self, owner: str, after: str, limit: int) -> tuple[list[Batch], bool]:
        """A page of the caller's batches, newest first."""
        return await self.reads.run(lambda: self.store.list_batches(owner, after=after, limit=limit))

    async def cancel_batch(self, owner: str, batch_id: str) -> Batch:
        """Cancel one of the caller's batches; the runner stops starting its lines at once."""
        batch = await self.writes.run(self.store.cancel_batch, owner, batch_id)
        self.runner.wake(cancelled=batch_id)
        return batch
