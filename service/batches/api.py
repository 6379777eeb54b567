"""BatchService's calls over the batch store, each on a worker lane (never the event loop).

The owner of every file and batch is the caller's API key name (``api_key_name_var``), which
the servicer passes in; :class:`~service.batches.store.BatchApiStore` keeps each key's in a folder
of its own, so another key's id is simply not found.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from engines.errors import InvalidArgumentError, ResourceExhaustedError, clip_text
from engines.executor import DeviceExecutor
from engines.reasons import Reason
from service import metrics
from service.batches.files import PURPOSE_INPUT, FileInfo, expiry_seconds
from service.batches.lines import check_size
from service.batches.records import BatchJob, BatchJobError
from service.batches.runner import BatchRunner
from service.batches.store import BatchApiStore

__all__ = [
    "BatchApi",
    "BatchJob",
    "BatchJobError",
    "BatchSpec",
    "FileInfo",
    "expiry_seconds",
    "invalid_argument",
]


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """What a client asks of a new batch job (OpenAI's ``batches.create`` body; see :class:`BatchApiStore`).

    Attributes:
        input_file_id: the caller's file of purpose ``batch``.
        endpoint: the url of every line.
        completion_window: ``24h`` ("" means it).
        metadata: at most 16 pairs.
        output_expires_after_s: seconds its output and error files are kept after they are
            written; 0: 30 days (OpenAI's default).

    """

    input_file_id: str
    endpoint: str
    completion_window: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    output_expires_after_s: int = 0


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
    """Files and batch jobs of the caller's key.

    Attributes:
        store: where they are kept.
        writes: the lane uploads and batch changes run on.
        reads: the lane reads run on (a 100 MiB upload being checked does not hold them up).
        runner: the runner, woken when a batch job is created or cancelled.

    """

    store: BatchApiStore
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
                reason=Reason.INVALID_FILE_PURPOSE,
                field="purpose",
            )
        check_size(size, self.store.limits.input)

    async def create_file(self, owner: str, filename: str, data: bytes, expires_after_s: int = 0) -> FileInfo:
        """Store an input file, every line checked, kept ``expires_after_s`` (0: 30 days).

        See :meth:`BatchApiStore.create_file`.
        """
        return await self.writes.run(self.store.create_file, owner, filename, data, expires_after_s)

    async def list_files(
        self, owner: str, purpose: str, after: str, limit: int, newest_first: bool
    ) -> tuple[list[FileInfo], bool]:
        """A page of the caller's files (:meth:`BatchApiStore.list_files`)."""
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

    async def create_batch(self, owner: str, spec: BatchSpec) -> BatchJob:
        """Create a batch job (validating) as ``spec`` asks, and wake the runner."""
        batch = await self.writes.run(lambda: self.store.create_batch(owner, **asdict(spec)))
        metrics.batch_status(batch.status)
        self.runner.wake()
        return batch

    async def get_batch(self, owner: str, batch_id: str) -> BatchJob:
        """One of the caller's batch jobs."""
        return await self.reads.run(self.store.get_batch, owner, batch_id)

    async def list_batches(self, owner: str, after: str, limit: int) -> tuple[list[BatchJob], bool]:
        """A page of the caller's batch jobs, newest first."""
        return await self.reads.run(lambda: self.store.list_batches(owner, after=after, limit=limit))

    async def cancel_batch(self, owner: str, batch_id: str) -> BatchJob:
        """Cancel one of the caller's batch jobs; the runner stops starting its lines at once."""
        batch = await self.writes.run(self.store.cancel_batch, owner, batch_id)
        self.runner.wake(cancelled=batch_id)
        return batch
