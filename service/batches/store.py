"""The Batch API's state in one object: files, batch jobs, line results and leases.

:class:`BatchApiStore` is what the service holds (:mod:`service.batches.api`,
:mod:`service.batches.runner`); each concern keeps its own keys under the state store's
``batches/`` folder (:mod:`engines.state_store`; shared by replicas when ``UR_STATE_URL`` is set):

* files and their expiry (``owners/<owner>/files/``, ``file_data/``, ``expiry/``):
  :mod:`service.batches.files`;
* batch job records and the markers of jobs not ended (``owners/<owner>/batches/``,
  ``active/``): :mod:`service.batches.records`;
* per-line results (``results/``) and the output files written from them:
  :mod:`service.batches.results`;
* which runner runs a job (``leases/``): :mod:`service.batches.leases`.

Every method is blocking (the service runs them on a worker lane) and each store call is bounded
by the store's ``timeout_s``; the store's own failures raise UnavailableError
(STATE_STORE_UNAVAILABLE) or ResourceExhaustedError (STORAGE_FULL).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from engines.state_store import StateStore
from service.batches.files import DEFAULT_FILE_EXPIRY_S, FileInfo, FileStore
from service.batches.leases import LeaseStore
from service.batches.lines import InputLimits, InputLine, LineResult
from service.batches.records import BatchJob, BatchJobStore
from service.batches.results import OutputFiles, ResultStore


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """What the Batch API's store accepts.

    Attributes:
        input: bounds of an uploaded file.
        max_files: most files a key keeps (batch job outputs count, but are never refused).
        max_batches: most batch jobs a key keeps: a new one over it forgets the key's oldest ended
            job (its files stay); when none has ended, RESOURCE_EXHAUSTED TOO_MANY_BATCHES.

    """

    input: InputLimits
    max_files: int
    max_batches: int


class BatchApiStore:
    """The Batch API's state in a :class:`~engines.state_store.StateStore` folder (see the module).

    Each method hands its work to the part that keeps it (``files``, ``jobs``, ``line_results``,
    ``leases``), all on the same folder and clock.

    Args:
        state: the folder (``state.child("batches")``).
        limits: the bounds.
        clock: seconds since the epoch (tests move time forward).

    """

    def __init__(
        self, state: StateStore, limits: StoreLimits, clock: Callable[[], float] = time.time
    ) -> None:
        self.state = state
        self.limits = limits
        self.clock = clock
        self.files = FileStore(state, limits.input, limits.max_files, clock)
        self.jobs = BatchJobStore(state, self.files, limits.max_batches, clock)
        self.line_results = ResultStore(state, self.files, clock)
        self.leases = LeaseStore(state, clock)

    # Files: see FileStore.

    def create_file(
        self, owner: str, filename: str, data: bytes, expires_after_s: int = DEFAULT_FILE_EXPIRY_S
    ) -> FileInfo:
        """Store an uploaded input file, every line checked first (:meth:`FileStore.create`)."""
        return self.files.create(owner, filename, data, expires_after_s)

    def get_file(self, owner: str, file_id: str) -> FileInfo:
        """The description of the caller's file (:meth:`FileStore.get`)."""
        return self.files.get(owner, file_id)

    def file_content(self, owner: str, file_id: str) -> tuple[FileInfo, bytes]:
        """The caller's file and its bytes (:meth:`FileStore.content`)."""
        return self.files.content(owner, file_id)

    def delete_file(self, owner: str, file_id: str) -> None:
        """Delete the caller's file (:meth:`FileStore.delete`)."""
        self.files.delete(owner, file_id)

    def list_files(
        self, owner: str, *, purpose: str = "", after: str = "", limit: int = 0, newest_first: bool = True
    ) -> tuple[list[FileInfo], bool]:
        """A page of the caller's files, and whether more follow (:meth:`FileStore.page`)."""
        return self.files.page(owner, purpose=purpose, after=after, limit=limit, newest_first=newest_first)

    def input_lines(self, owner: str, file_id: str) -> list[InputLine]:
        """The request lines of the caller's input file (:meth:`FileStore.input_lines`)."""
        return self.files.input_lines(owner, file_id)

    def sweep_expired(self, now: float, limit: int) -> int:
        """Delete up to ``limit`` files due at ``now``, of any key (:meth:`FileStore.sweep_expired`)."""
        return self.files.sweep_expired(now, limit)

    # Batch jobs: see BatchJobStore.

    def create_batch(
        self,
        owner: str,
        input_file_id: str,
        endpoint: str,
        completion_window: str,
        metadata: dict[str, str],
        output_expires_after_s: int = DEFAULT_FILE_EXPIRY_S,
    ) -> BatchJob:
        """Create a batch job over the caller's input file (:meth:`BatchJobStore.create`)."""
        return self.jobs.create(
            owner, input_file_id, endpoint, completion_window, metadata, output_expires_after_s
        )

    def get_batch(self, owner: str, batch_id: str) -> BatchJob:
        """The caller's batch job (:meth:`BatchJobStore.get`)."""
        return self.jobs.get(owner, batch_id)

    def list_batches(self, owner: str, *, after: str = "", limit: int = 0) -> tuple[list[BatchJob], bool]:
        """A page of the caller's batch jobs, newest first (:meth:`BatchJobStore.page`)."""
        return self.jobs.page(owner, after=after, limit=limit)

    def update_batch(
        self, owner: str, batch_id: str, change: Callable[[BatchJob], BatchJob | None]
    ) -> BatchJob:
        """Change a batch job's record by compare-and-swap (:meth:`BatchJobStore.update`)."""
        return self.jobs.update(owner, batch_id, change)

    def cancel_batch(self, owner: str, batch_id: str) -> BatchJob:
        """Ask the caller's batch job to cancel (:meth:`BatchJobStore.cancel`)."""
        return self.jobs.cancel(owner, batch_id)

    def active_batches(self) -> list[tuple[str, str]]:
        """``(batch_id, owner)`` of every batch job not ended (:meth:`BatchJobStore.active`)."""
        return self.jobs.active()

    def read_record(self, owner: str, batch_id: str) -> BatchJob | None:
        """A batch job's record, or None (:meth:`BatchJobStore.read`)."""
        return self.jobs.read(owner, batch_id)

    def retire(self, batch_id: str) -> None:
        """Drop an ended batch job's marker, results and lease (its record and files stay)."""
        self.jobs.drop_marker(batch_id)
        self.line_results.drop(batch_id)
        self.leases.drop(batch_id)

    # Line results: see ResultStore.

    def put_results(self, batch_id: str, results: dict[int, LineResult]) -> None:
        """Save the results of lines that completed together (:meth:`ResultStore.put`)."""
        self.line_results.put(batch_id, results)

    def results(self, batch_id: str) -> dict[int, LineResult]:
        """Every saved result of a batch job, by line index (:meth:`ResultStore.saved`)."""
        return self.line_results.saved(batch_id)

    def write_outputs(self, job: BatchJob, lines: list[InputLine], missing: tuple[str, str]) -> OutputFiles:
        """Write a batch job's output and error files (:meth:`ResultStore.write_outputs`)."""
        return self.line_results.write_outputs(job, lines, missing)

    # Leases: see LeaseStore.

    def take_lease(self, batch_id: str, holder: str, lease_s: float) -> bool:
        """Hold or take ``batch_id``'s lease for ``lease_s`` (:meth:`LeaseStore.take`)."""
        return self.leases.take(batch_id, holder, lease_s)

    def release_lease(self, batch_id: str, holder: str) -> None:
        """Give the lease up at once, if ``holder`` still holds it (:meth:`LeaseStore.release`)."""
        self.leases.release(batch_id, holder)
