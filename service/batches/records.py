"""Batch jobs' records (OpenAI's Batch objects): statuses, creation, reads, changes and cancels.

Keys, under the state store's ``batches/`` folder:

* ``owners/<owner>/batches/<batch_id>``: a batch job's record (JSON; :class:`BatchJob`); every
  state change is a compare-and-swap of it (:meth:`BatchJobStore.update`), so a cancel and the
  runner's progress never overwrite each other;
* ``active/<batch_id>``: a marker per batch job not yet ended (naming its owner), written before
  the record and deleted after its last change: what runners scan for work, without listing
  every key.

Statuses and field names are OpenAI's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from engines.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
    RuntimeServiceError,
    UnavailableError,
    clip_text,
)
from engines.reasons import Reason
from engines.state_store import StateStore
from service.batches.files import DEFAULT_FILE_EXPIRY_S, PURPOSE_INPUT, FileStore, expiry_seconds
from service.batches.ids import (
    BATCH_JOB_ID,
    check_batch_job_id,
    check_file_id,
    new_id,
    owner_dir,
    page_limit,
    page_order,
)
from service.batches.lines import MAX_LISTED_ERRORS, SUPPORTED_URLS, InputLine

VALIDATING = "validating"
FAILED = "failed"
IN_PROGRESS = "in_progress"
FINALIZING = "finalizing"
COMPLETED = "completed"
EXPIRED = "expired"
CANCELLING = "cancelling"
CANCELLED = "cancelled"
#: Statuses of a batch job a runner still has work on (it holds an ``active/`` marker).
ACTIVE = frozenset({VALIDATING, IN_PROGRESS, FINALIZING, CANCELLING})
STATUSES = (VALIDATING, FAILED, IN_PROGRESS, FINALIZING, COMPLETED, EXPIRED, CANCELLING, CANCELLED)

COMPLETION_WINDOW = "24h"
COMPLETION_WINDOW_S = 24 * 3600
#: OpenAI's metadata bounds: 16 pairs, keys up to 64 characters, values up to 512.
METADATA_MAX_PAIRS, METADATA_KEY_MAX_CHARS, METADATA_VALUE_MAX_CHARS = 16, 64, 512
#: Page sizes (OpenAI's: batches up to 100 a page, 20 by default).
BATCH_JOBS_PAGE_MAX, BATCH_JOBS_PAGE_DEFAULT = 100, 20
#: Compare-and-swap attempts of one record change before STATE_STORE_CONFLICT.
UPDATE_ATTEMPTS = 16


class BatchJobNotFoundError(RuntimeServiceError, status="NOT_FOUND", reason=Reason.BATCH_NOT_FOUND):
    """No batch job of this id belongs to the caller (absent, or another key's)."""


@dataclass(frozen=True, slots=True)
class BatchJobError:
    """A problem with a batch job's input (OpenAI's batch ``errors.data`` item; a record, not an exception).

    Attributes:
        code: ``invalid_url``, ``input_file_deleted``...
        message: in words.
        param: the field at fault, or "".
        line: the input file's line (1-based), or 0.

    """

    code: str
    message: str
    param: str = ""
    line: int = 0


@dataclass(frozen=True, slots=True)
class BatchJob:
    """A batch job's record (OpenAI's Batch object, plus what runners need).

    Times are Unix seconds, 0 when the job has not been there; ``request_counts`` are
    ``total``, ``completed`` (2xx) and ``failed``.

    Attributes:
        owner: the name of the API key that created it ("" without keys); lines run under it.
        planned_output_file_id: the ids its output files get, chosen (and saved) before they are
            written, so that a finalize resumed after a crash writes the same files.
        planned_error_file_id: see ``planned_output_file_id``.
        output_expires_after_s: seconds its output and error files are kept after they are written
            (OpenAI's ``output_expires_after``; records written before it load with 30 days).

    """

    id: str
    owner: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: int
    expires_at: int
    metadata: dict[str, str] = field(default_factory=dict)
    errors: tuple[BatchJobError, ...] = ()
    output_file_id: str = ""
    error_file_id: str = ""
    in_progress_at: int = 0
    finalizing_at: int = 0
    completed_at: int = 0
    failed_at: int = 0
    expired_at: int = 0
    cancelling_at: int = 0
    cancelled_at: int = 0
    total: int = 0
    completed: int = 0
    failed: int = 0
    planned_output_file_id: str = ""
    planned_error_file_id: str = ""
    output_expires_after_s: int = DEFAULT_FILE_EXPIRY_S

    def to_json(self) -> bytes:
        """The stored form."""
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BatchJob:
        """The stored form read back."""
        value = json.loads(data)
        value["errors"] = tuple(BatchJobError(**error) for error in value.get("errors", ()))
        return cls(**value)


def check_metadata(metadata: dict[str, str]) -> None:
    """Refuse metadata over OpenAI's bounds (INVALID_ARGUMENT INVALID_BATCH_METADATA)."""
    problem = ""
    if len(metadata) > METADATA_MAX_PAIRS:
        problem = f"{len(metadata)} pairs; at most {METADATA_MAX_PAIRS}"
    for key, value in metadata.items():  # bounded: checked after the count
        if problem:
            break
        if len(key) > METADATA_KEY_MAX_CHARS:
            problem = f"key {clip_text(key, 32)!r} is over {METADATA_KEY_MAX_CHARS} characters"
        elif len(value) > METADATA_VALUE_MAX_CHARS:
            problem = f"the value of {clip_text(key, 32)!r} is over {METADATA_VALUE_MAX_CHARS} characters"
    if problem:
        raise InvalidArgumentError(
            f"metadata: {problem}", reason=Reason.INVALID_BATCH_METADATA, field="metadata"
        )


def errors_of(lines: list[InputLine], endpoint: str) -> tuple[BatchJobError, ...]:
    """The errors of lines whose url is not the batch job's ``endpoint`` (OpenAI's rule), at most 1,000."""
    errors: list[BatchJobError] = []
    wrong = [line for line in lines if line.url != endpoint]
    for line in wrong[:MAX_LISTED_ERRORS]:
        errors.append(
            BatchJobError(
                "invalid_url",
                f"line {line.line}: url {line.url!r} is not the batch's endpoint {endpoint!r}; every line "
                "of a batch calls its endpoint",
                "url",
                line.line,
            )
        )
    if len(wrong) > MAX_LISTED_ERRORS:
        errors[-1] = replace(
            errors[-1], message=f"{errors[-1].message} ({len(wrong) - MAX_LISTED_ERRORS} more lines like it)"
        )
    return tuple(errors)


class BatchJobStore:
    """Batch jobs' records and ``active/`` markers in a state store folder (see the module's keys).

    Args:
        state: the folder (the Batch API's, ``state.child("batches")``).
        files: the same folder's files (a job's input file is checked when the job is created).
        max_batches: most batch jobs a key keeps: a new one over it forgets the key's oldest ended
            job (its files stay); when none has ended, RESOURCE_EXHAUSTED TOO_MANY_BATCHES.
        clock: seconds since the epoch (tests move time forward).

    """

    def __init__(
        self, state: StateStore, files: FileStore, max_batches: int, clock: Callable[[], float] = time.time
    ) -> None:
        self.state = state
        self.files = files
        self.max_batches = max_batches
        self.clock = clock

    def _key(self, owner: str, batch_id: str) -> str:
        return f"{owner_dir(owner)}/batches/{batch_id}"

    def _ids(self, owner: str) -> list[str]:
        return [key.rpartition("/")[2] for key in self.state.sizes(f"{owner_dir(owner)}/batches")]

    def create(
        self,
        owner: str,
        input_file_id: str,
        endpoint: str,
        completion_window: str,
        metadata: dict[str, str],
        output_expires_after_s: int = DEFAULT_FILE_EXPIRY_S,
    ) -> BatchJob:
        """Create a batch job (status validating) over the caller's input file.

        ``output_expires_after_s`` is how long its output and error files are kept after they are
        written (0: :data:`~service.batches.files.DEFAULT_FILE_EXPIRY_S`, 30 days). A job whose
        input file expires while it runs keeps running: the runner holds its lines (a job not yet
        started, or resumed by another runner after the file expired, fails ``input_file_deleted``).

        Raises:
            InvalidArgumentError: an unsupported endpoint (INVALID_BATCH_ENDPOINT), a window other
                than 24h (INVALID_COMPLETION_WINDOW), metadata over its bounds
                (INVALID_BATCH_METADATA), not a file id (INVALID_FILE_ID),
                ``output_expires_after_s`` out of 3600 to 2,592,000 (INVALID_EXPIRES_AFTER).
            FileNotFoundInStoreError: no such file of this key, or it expired.
            FailedPreconditionError: the file is not of purpose batch (INPUT_FILE_NOT_BATCH).
            ResourceExhaustedError: the key keeps ``max_batches`` jobs and none has ended
                (TOO_MANY_BATCHES).

        """
        if endpoint not in SUPPORTED_URLS:
            raise InvalidArgumentError(
                f"endpoint {clip_text(endpoint, 64)!r} is not supported; one of {', '.join(SUPPORTED_URLS)}",
                reason=Reason.INVALID_BATCH_ENDPOINT,
                field="endpoint",
            )
        if completion_window not in ("", COMPLETION_WINDOW):
            raise InvalidArgumentError(
                f"completion_window must be {COMPLETION_WINDOW!r}, not {clip_text(completion_window, 32)!r}",
                reason=Reason.INVALID_COMPLETION_WINDOW,
                field="completion_window",
            )
        check_metadata(metadata)
        output_expires_after_s = expiry_seconds(output_expires_after_s, "output_expires_after")
        check_file_id(input_file_id, "input_file_id")
        info = self.files.get(owner, input_file_id)
        if info.purpose != PURPOSE_INPUT:
            raise FailedPreconditionError(
                f"file {input_file_id!r} has purpose {info.purpose!r}; a batch's input must have purpose "
                f"{PURPOSE_INPUT!r}",
                reason=Reason.INPUT_FILE_NOT_BATCH,
                id=input_file_id,
            )
        self._make_room(owner)
        now = self.clock()
        job = BatchJob(
            id=new_id("batch_", now),
            owner=owner,
            endpoint=endpoint,
            input_file_id=input_file_id,
            completion_window=COMPLETION_WINDOW,
            status=VALIDATING,
            created_at=int(now),
            expires_at=int(now) + COMPLETION_WINDOW_S,
            metadata=dict(metadata),
            total=info.line_count,
            output_expires_after_s=output_expires_after_s,
        )
        # The marker first: a crash before the record leaves a marker the runners drop.
        self.state.create(f"active/{job.id}", json.dumps({"owner": owner}).encode())
        self.state.create(self._key(owner, job.id), job.to_json())
        return job

    def _make_room(self, owner: str) -> None:
        """Forget the key's oldest ended jobs until it keeps fewer than ``max_batches``."""
        ids = sorted(self._ids(owner))
        excess = len(ids) - self.max_batches + 1
        for batch_id in ids:  # bounded: the key's jobs, at most max_batches (plus racing creates)
            if excess <= 0:
                return
            data = self.state.read(self._key(owner, batch_id))
            if data is not None and BatchJob.from_json(data).status in ACTIVE:
                continue
            self.state.delete(self._key(owner, batch_id))
            excess -= 1
        if excess > 0:
            raise ResourceExhaustedError(
                f"this key has {self.max_batches} batches running, the most it may "
                "(UR_BATCH_MAX_BATCHES); wait for some to end",
                reason=Reason.TOO_MANY_BATCHES,
                limit=self.max_batches,
            )

    def get(self, owner: str, batch_id: str) -> BatchJob:
        """The caller's batch job ``batch_id``.

        Raises:
            InvalidArgumentError: not a batch id (INVALID_BATCH_ID).
            BatchJobNotFoundError: no such job of this key (NOT_FOUND BATCH_NOT_FOUND).

        """
        check_batch_job_id(batch_id)
        data = self.state.read(self._key(owner, batch_id))
        if data is None:
            raise BatchJobNotFoundError(f"no batch {batch_id!r}", id=batch_id)
        return BatchJob.from_json(data)

    def page(self, owner: str, *, after: str = "", limit: int = 0) -> tuple[list[BatchJob], bool]:
        """A page of the caller's batch jobs, newest first, and whether more follow.

        Raises:
            InvalidArgumentError: a limit out of 0 to 100 (INVALID_PAGINATION); an ``after`` that
                is not a batch id (INVALID_BATCH_ID).

        """
        limit = page_limit(limit, BATCH_JOBS_PAGE_MAX, BATCH_JOBS_PAGE_DEFAULT)
        if after:
            check_batch_job_id(after, "after")
        ids = page_order(self._ids(owner), after, newest_first=True)
        found: list[BatchJob] = []
        for batch_id in ids[: limit + 1]:  # bounded: one page (and one more to know there is more)
            data = self.state.read(self._key(owner, batch_id))
            if data is not None:
                found.append(BatchJob.from_json(data))
        return found[:limit], len(ids) > limit

    def update(self, owner: str, batch_id: str, change: Callable[[BatchJob], BatchJob | None]) -> BatchJob:
        """Change a batch job's record by compare-and-swap: ``change`` gets the current record.

        ``change`` returns the new record, or None to leave it; it runs again on the newer record
        when another writer changed it in between (at most 16 times).

        Returns:
            The record as it now is.

        Raises:
            BatchJobNotFoundError: the record is gone.
            UnavailableError: it changed under every attempt (STATE_STORE_CONFLICT), or the store failed.
            Whatever ``change`` raises.

        """
        key = self._key(owner, batch_id)
        for _ in range(UPDATE_ATTEMPTS):
            blob = self.state.read_tagged(key)
            if blob is None:
                raise BatchJobNotFoundError(f"no batch {batch_id!r}", id=batch_id)
            current = BatchJob.from_json(blob.data)
            new = change(current)
            if new is None or new == current:
                return current
            if self.state.swap(key, new.to_json(), blob):
                return new
        raise UnavailableError(
            f"batch {batch_id!r} changed under {UPDATE_ATTEMPTS} updates in a row; retry later",
            reason=Reason.STATE_STORE_CONFLICT,
            id=batch_id,
        )

    def cancel(self, owner: str, batch_id: str) -> BatchJob:
        """Ask the caller's batch job to cancel: validating or in_progress turn cancelling.

        A job already cancelling or cancelled is answered as it is.

        Raises:
            FailedPreconditionError: the job ended otherwise, or is finalizing
                (BATCH_NOT_CANCELLABLE).
            Errors of :meth:`get`.

        """
        check_batch_job_id(batch_id)
        now = int(self.clock())

        def cancel(job: BatchJob) -> BatchJob | None:
            if job.status in (CANCELLING, CANCELLED):
                return None
            if job.status in (VALIDATING, IN_PROGRESS):
                return replace(job, status=CANCELLING, cancelling_at=now)
            raise FailedPreconditionError(
                f"batch {batch_id!r} is {job.status}; only a validating or in_progress batch "
                "can be cancelled",
                reason=Reason.BATCH_NOT_CANCELLABLE,
                id=batch_id,
                status=job.status,
            )

        return self.update(owner, batch_id, cancel)

    def active(self) -> list[tuple[str, str]]:
        """``(batch_id, owner)`` of every batch job some runner has work on (from ``active/``)."""
        found = []
        for key in self.state.sizes("active"):  # bounded by the jobs not ended
            batch_id = key.rpartition("/")[2]
            data = self.state.read(f"active/{batch_id}")
            if BATCH_JOB_ID.fullmatch(batch_id) and data is not None:
                found.append((batch_id, str(json.loads(data)["owner"])))
        return sorted(found)

    def read(self, owner: str, batch_id: str) -> BatchJob | None:
        """A batch job's record, or None (a marker whose record was never written, or was forgotten)."""
        data = self.state.read(self._key(owner, batch_id))
        return None if data is None else BatchJob.from_json(data)

    def drop_marker(self, batch_id: str) -> None:
        """Delete an ended batch job's ``active/`` marker (its record stays)."""
        self.state.delete(f"active/{batch_id}")
