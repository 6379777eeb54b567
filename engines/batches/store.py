"""Files, batches, per-line results and run leases of the Batch API, in the state store.

Layout, under the state store's ``batches/`` folder (:mod:`engines.state_store`; shared by replicas
when ``UR_STATE_URL`` is set):

* ``owners/<owner>/files/<file_id>``: a file's description (JSON; :class:`FileInfo`), where
  ``<owner>`` is the first 32 hex digits of the SHA-256 of the owning key's name, so that a key
  finds only its own files and batches, by construction;
* ``file_data/<file_id>``: the file's bytes (written before its description, deleted after it:
  a crash leaves at worst bytes that nothing names, never a description without bytes);
* ``expiry/<expires_at, 12 digits>-<file_id>``: a marker per file that expires (naming its owner),
  written before the bytes and deleted after them, so a sweep (:meth:`BatchStore.sweep_expired`)
  finds every file due, oldest first, even of keys that never come back; it sorts by time, so a
  sweep reads only the markers due. A file expires ``expires_after`` seconds after it was written
  (OpenAI's ``expires_after``: 30 days by default, 1 hour to 30 days); from then on it is gone for
  every reader (NOT_FOUND, as deleted), and the read that finds it so deletes it;
* ``owners/<owner>/batches/<batch_id>``: a batch's record (JSON; :class:`Batch`); every state
  change is a compare-and-swap of it (:meth:`BatchStore.update_batch`), so a cancel and the
  runner's progress never overwrite each other;
* ``active/<batch_id>``: a marker per batch not yet ended (naming its owner), written before the
  record and deleted after its last change: what runners scan for work, without listing every key;
* ``results/<batch_id>/<first index>-<count>-<random>``: the results of lines that completed
  together (JSON lines with each line's ``index``; :class:`~engines.batches.lines.LineResult`),
  saved as they complete (a group commit: one durable write for every line that completed while
  the previous write ran), so a resumed run skips the lines that have one; the output is built
  per input line, so it holds each ``custom_id`` exactly once; deleted once the output files
  are written;
* ``leases/<batch_id>``: which runner runs the batch and until when (:meth:`BatchStore.take_lease`,
  a compare-and-swap), so two replicas never run one batch; a holder that died stops renewing,
  and its lease is taken over once expired.

Ids are ``file-``/``batch_`` and 24 characters: 12 hex digits of the creation time in
milliseconds, then 12 random letters and digits, so ids sort by age and listing newest first
needs no reads.

Every method is blocking (the service runs them on a worker lane) and each store call is bounded
by the store's ``timeout_s``; the store's own failures raise UnavailableError
(STATE_STORE_UNAVAILABLE) or ResourceExhaustedError (STORAGE_FULL).
"""

from __future__ import annotations

import json
import re
import secrets
import string
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from engines.batches.lines import (
    MAX_LISTED_ERRORS,
    SUPPORTED_URLS,
    InputLimits,
    InputLine,
    LineResult,
    output_line,
    parse_input,
)
from engines.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
    RuntimeServiceError,
    UnavailableError,
    clip_text,
)
from engines.owners import owner_segment
from engines.state_store import StateStore

VALIDATING = "validating"
FAILED = "failed"
IN_PROGRESS = "in_progress"
FINALIZING = "finalizing"
COMPLETED = "completed"
EXPIRED = "expired"
CANCELLING = "cancelling"
CANCELLED = "cancelled"
#: Statuses of a batch a runner still has work on (it holds an ``active/`` marker).
ACTIVE = frozenset({VALIDATING, IN_PROGRESS, FINALIZING, CANCELLING})
STATUSES = (VALIDATING, FAILED, IN_PROGRESS, FINALIZING, COMPLETED, EXPIRED, CANCELLING, CANCELLED)

PURPOSE_INPUT = "batch"
PURPOSE_OUTPUT = "batch_output"
COMPLETION_WINDOW = "24h"
COMPLETION_WINDOW_S = 24 * 3600

FILE_ID = re.compile(r"file-[0-9a-f]{12}[A-Za-z0-9]{12}")
BATCH_ID = re.compile(r"batch_[0-9a-f]{12}[A-Za-z0-9]{12}")
#: An expiry marker's name: when (12 digits of Unix seconds), then the file's id.
EXPIRY_MARKER = re.compile(r"([0-9]{12})-(file-[0-9a-f]{12}[A-Za-z0-9]{12})")
FILENAME_MAX_CHARS = 256
#: OpenAI's metadata bounds: 16 pairs, keys up to 64 characters, values up to 512.
METADATA_MAX_PAIRS, METADATA_KEY_MAX_CHARS, METADATA_VALUE_MAX_CHARS = 16, 64, 512
#: Page sizes (OpenAI's: files up to 10,000 a page, batches up to 100, 20 by default).
FILES_PAGE_MAX, BATCHES_PAGE_MAX, BATCHES_PAGE_DEFAULT = 10_000, 100, 20
#: Compare-and-swap attempts of one record change before STATE_STORE_CONFLICT.
UPDATE_ATTEMPTS = 16
#: Seconds a file is kept when the client names no expiry: 30 days, OpenAI's default for batch files
#: (https://platform.openai.com/docs/api-reference/files/create, ``expires_after``).
DEFAULT_FILE_EXPIRY_S = 30 * 24 * 3600
#: OpenAI's bounds of ``expires_after.seconds`` (and of a batch's ``output_expires_after.seconds``):
#: 1 hour to 30 days.
MIN_FILE_EXPIRY_S, MAX_FILE_EXPIRY_S = 3600, 30 * 24 * 3600
#: The only anchor OpenAI accepts: the file's creation time.
EXPIRY_ANCHOR = "created_at"

_ALNUM = string.ascii_letters + string.digits


class FileNotFoundInStoreError(RuntimeServiceError, status="NOT_FOUND", reason="FILE_NOT_FOUND"):
    """No file of this id belongs to the caller (absent, deleted, expired, or another key's)."""


class BatchNotFoundError(RuntimeServiceError, status="NOT_FOUND", reason="BATCH_NOT_FOUND"):
    """No batch of this id belongs to the caller (absent, or another key's)."""


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """What the batch store accepts.

    Attributes:
        input: bounds of an uploaded file.
        max_files: most files a key keeps (batch outputs count, but are never refused).
        max_batches: most batches a key keeps: a new one over it forgets the key's oldest ended
            batch (its files stay); when none has ended, RESOURCE_EXHAUSTED TOO_MANY_BATCHES.

    """

    input: InputLimits
    max_files: int
    max_batches: int


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A stored file (OpenAI's File object).

    Attributes:
        id: ``file-`` and 24 characters.
        bytes: its size.
        created_at: Unix seconds.
        filename: as uploaded (or the server's name of an output).
        purpose: ``batch`` or ``batch_output``.
        line_count: its JSON lines.
        expires_at: Unix seconds when it is deleted; 0 never (descriptions written before files
            expired load with 0: they stay until deleted).

    """

    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    line_count: int
    expires_at: int = 0

    def expired(self, now: float) -> bool:
        """Whether it has expired at ``now`` (Unix seconds)."""
        return 0 < self.expires_at <= now


@dataclass(frozen=True, slots=True)
class BatchError:
    """A problem with a batch's input (OpenAI's batch ``errors.data`` item).

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
class Batch:
    """A batch's record (OpenAI's Batch object, plus what runners need).

    Times are Unix seconds, 0 when the batch has not been there; ``request_counts`` are
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
    errors: tuple[BatchError, ...] = ()
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
    def from_json(cls, data: bytes) -> Batch:
        """The stored form read back."""
        value = json.loads(data)
        value["errors"] = tuple(BatchError(**error) for error in value.get("errors", ()))
        return cls(**value)


@dataclass(frozen=True, slots=True)
class Outputs:
    """What finalizing wrote.

    Attributes:
        output_file_id: the file of 2xx answers, or "" when no line got one.
        error_file_id: the file of the other lines, or "" when there were none.
        completed: lines answered 2xx.
        failed: lines that ran and were answered otherwise or failed to run.

    """

    output_file_id: str
    error_file_id: str
    completed: int
    failed: int


def owner_dir(owner: str) -> str:
    """The folder of a key's files and batches (a hash: key names may be ``.`` or ``..``)."""
    return f"owners/{owner_segment(owner)}"


def new_id(prefix: str, now: float) -> str:
    """``prefix`` + 12 hex digits of ``now`` in ms + 12 random letters and digits (sorts by age)."""
    return f"{prefix}{int(now * 1000):012x}{''.join(secrets.choice(_ALNUM) for _ in range(12))}"


def _check_id(value: str, pattern: re.Pattern[str], reason: str, what: str, field_name: str) -> str:
    if not pattern.fullmatch(value):
        raise InvalidArgumentError(
            f"{field_name}: {clip_text(value, 64)!r} is not a {what} id", reason=reason, field=field_name
        )
    return value


def check_file_id(value: str, field_name: str = "id") -> str:
    """``value`` if it has a file id's form, else INVALID_ARGUMENT INVALID_FILE_ID (no path tricks)."""
    return _check_id(value, FILE_ID, "INVALID_FILE_ID", "file", field_name)


def check_batch_id(value: str, field_name: str = "id") -> str:
    """``value`` if it has a batch id's form, else INVALID_ARGUMENT INVALID_BATCH_ID."""
    return _check_id(value, BATCH_ID, "INVALID_BATCH_ID", "batch", field_name)


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
        raise InvalidArgumentError(f"metadata: {problem}", reason="INVALID_BATCH_METADATA", field="metadata")


def expiry_seconds(seconds: int, field_name: str, anchor: str = EXPIRY_ANCHOR) -> int:
    """The seconds a file is kept: ``seconds``, or :data:`DEFAULT_FILE_EXPIRY_S` for 0.

    Args:
        seconds: OpenAI's ``expires_after.seconds`` (0: not given).
        field_name: the field named in the error (``expires_after``, ``output_expires_after``).
        anchor: OpenAI's ``expires_after.anchor``; only ``created_at``.

    Raises:
        InvalidArgumentError: an anchor other than ``created_at``, or seconds out of 3600 to
            2,592,000 (INVALID_EXPIRES_AFTER, naming ``field_name``).

    """
    if anchor != EXPIRY_ANCHOR:
        raise InvalidArgumentError(
            f"{field_name}.anchor must be {EXPIRY_ANCHOR!r}, not {clip_text(anchor, 32)!r}",
            reason="INVALID_EXPIRES_AFTER",
            field=f"{field_name}.anchor",
        )
    if seconds == 0:
        return DEFAULT_FILE_EXPIRY_S
    if not MIN_FILE_EXPIRY_S <= seconds <= MAX_FILE_EXPIRY_S:
        raise InvalidArgumentError(
            f"{field_name}.seconds must be {MIN_FILE_EXPIRY_S} to {MAX_FILE_EXPIRY_S} (1 hour to 30 days), "
            f"not {seconds}",
            reason="INVALID_EXPIRES_AFTER",
            field=f"{field_name}.seconds",
        )
    return seconds


def expiry_marker(expires_at: int, file_id: str) -> str:
    """The key of a file's expiry marker: sorts by ``expires_at`` (12 digits: Unix seconds to year 33658)."""
    return f"expiry/{expires_at:012d}-{file_id}"


def page_limit(limit: int, most: int, default: int) -> int:
    """A page size: ``default`` for 0, else 1 to ``most`` (INVALID_ARGUMENT INVALID_PAGINATION)."""
    if limit == 0:
        return default
    if not 1 <= limit <= most:
        raise InvalidArgumentError(
            f"limit must be 1 to {most}, not {limit}", reason="INVALID_PAGINATION", field="limit"
        )
    return limit


def _page(ids: list[str], after: str, newest_first: bool) -> list[str]:
    """``ids`` sorted by age in the order asked, from the one after ``after`` (ids sort by age)."""
    ids = sorted(ids, reverse=newest_first)
    if after:
        ids = [i for i in ids if (i < after if newest_first else i > after)]
    return ids


class BatchStore:
    """Batch API state in a :class:`~engines.state_store.StateStore` folder (see the module's layout).

    Args:
        store: the folder (``state.child("batches")``).
        limits: the bounds.
        clock: seconds since the epoch (tests move time forward).

    """

    def __init__(
        self, store: StateStore, limits: StoreLimits, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.limits = limits
        self.clock = clock
        #: No expiry marker is due before this time (Unix seconds; see :meth:`sweep_expired`).
        self._quiet_until = float("-inf")

    def _read(self, key: str, missing: RuntimeServiceError) -> bytes:
        """The bytes at ``key``; ``missing`` is raised when there are none."""
        data = self.store.read(key)
        if data is None:
            raise missing
        return data

    # Files.

    def _file_key(self, owner: str, file_id: str) -> str:
        return f"{owner_dir(owner)}/files/{file_id}"

    def _file_ids(self, owner: str) -> list[str]:
        prefix = f"{owner_dir(owner)}/files"
        return [key.rpartition("/")[2] for key in self.store.sizes(prefix)]

    def create_file(
        self, owner: str, filename: str, data: bytes, expires_after_s: int = DEFAULT_FILE_EXPIRY_S
    ) -> FileInfo:
        """Store an uploaded input file (purpose ``batch``), every line checked first.

        Args:
            owner: the key's name.
            filename: as uploaded.
            data: the JSONL bytes.
            expires_after_s: seconds it is kept (0: :data:`DEFAULT_FILE_EXPIRY_S`, 30 days).

        Raises:
            InvalidArgumentError: a bad line or a file over a limit (see
                :func:`~engines.batches.lines.parse_input`); a file name over 256 characters
                (INVALID_FILE_NAME); ``expires_after_s`` out of 3600 to 2,592,000
                (INVALID_EXPIRES_AFTER).
            ResourceExhaustedError: the key keeps ``max_files`` files already (TOO_MANY_FILES;
                its expired files do not count).

        """
        expires_after_s = expiry_seconds(expires_after_s, "expires_after")
        if len(filename) > FILENAME_MAX_CHARS:
            raise InvalidArgumentError(
                f"filename is over {FILENAME_MAX_CHARS} characters",
                reason="INVALID_FILE_NAME",
                field="filename",
            )
        lines = parse_input(data, self.limits.input)
        if len(self._file_ids(owner)) >= self.limits.max_files:
            self._drop_expired(owner)  # expired files not yet swept do not count
        if len(self._file_ids(owner)) >= self.limits.max_files:
            raise ResourceExhaustedError(
                f"this key keeps {self.limits.max_files} files already, the most it may "
                "(UR_BATCH_MAX_FILES); delete some first",
                reason="TOO_MANY_FILES",
                limit=self.limits.max_files,
            )
        now = int(self.clock())
        info = FileInfo(
            new_id("file-", now), len(data), now, filename, PURPOSE_INPUT, len(lines), now + expires_after_s
        )
        self._write_file(owner, info, data)
        return info

    def _write_file(self, owner: str, info: FileInfo, data: bytes) -> bool:
        """Write a file: its expiry marker, its bytes, then its description (False: it was there).

        Each only if absent, so a write resumed after a crash keeps what the first one wrote.
        """
        if info.expires_at:
            self.store.create(expiry_marker(info.expires_at, info.id), json.dumps({"owner": owner}).encode())
        self.store.create(f"file_data/{info.id}", data)
        return self.store.create(self._file_key(owner, info.id), json.dumps(asdict(info)).encode())

    def _remove_file(self, owner: str, info: FileInfo) -> None:
        """Delete a file: its description, its bytes, then its expiry marker.

        The order of :meth:`_write_file` reversed: a crash leaves a marker a sweep finishes, never
        a description without bytes.
        """
        self.store.delete(self._file_key(owner, info.id))
        self.store.delete(f"file_data/{info.id}")
        if info.expires_at:
            self.store.delete(expiry_marker(info.expires_at, info.id))

    def _load_file(self, owner: str, file_id: str) -> FileInfo | None:
        """The caller's file's description, or None: absent, or expired (then deleted here)."""
        data = self.store.read(self._file_key(owner, file_id))
        if data is None:
            return None
        info = FileInfo(**json.loads(data))
        if info.expired(self.clock()):
            self._remove_file(owner, info)
            return None
        return info

    def _drop_expired(self, owner: str) -> None:
        """Delete the key's expired files (those no sweep reached yet)."""
        for file_id in self._file_ids(owner):  # bounded: the key's files (max_files plus outputs)
            self._load_file(owner, file_id)

    def get_file(self, owner: str, file_id: str) -> FileInfo:
        """The description of the caller's file ``file_id``.

        An expired file is deleted here (if no sweep did yet) and answered as absent.

        Raises:
            InvalidArgumentError: not a file id (INVALID_FILE_ID).
            FileNotFoundInStoreError: no such file of this key, or it expired (NOT_FOUND FILE_NOT_FOUND).

        """
        check_file_id(file_id)
        info = self._load_file(owner, file_id)
        if info is None:
            raise FileNotFoundInStoreError(f"no file {file_id!r}", id=file_id)
        return info

    def file_content(self, owner: str, file_id: str) -> tuple[FileInfo, bytes]:
        """The caller's file and its bytes (errors as :meth:`get_file`)."""
        info = self.get_file(owner, file_id)
        # Missing only when deleted between the two reads.
        return info, self._read(
            f"file_data/{file_id}", FileNotFoundInStoreError(f"no file {file_id!r}", id=file_id)
        )

    def delete_file(self, owner: str, file_id: str) -> None:
        """Delete the caller's file (errors as :meth:`get_file`)."""
        self._remove_file(owner, self.get_file(owner, file_id))

    def list_files(
        self, owner: str, *, purpose: str = "", after: str = "", limit: int = 0, newest_first: bool = True
    ) -> tuple[list[FileInfo], bool]:
        """A page of the caller's files, and whether more follow (expired ones are deleted, not listed).

        Raises:
            InvalidArgumentError: a purpose other than "", batch or batch_output
                (INVALID_FILE_PURPOSE); a limit out of 0 to 10,000 (INVALID_PAGINATION); an
                ``after`` that is not a file id (INVALID_FILE_ID).

        """
        if purpose not in ("", PURPOSE_INPUT, PURPOSE_OUTPUT):
            raise InvalidArgumentError(
                f"purpose must be {PURPOSE_INPUT!r} or {PURPOSE_OUTPUT!r}, not {clip_text(purpose, 32)!r}",
                reason="INVALID_FILE_PURPOSE",
                field="purpose",
            )
        limit = page_limit(limit, FILES_PAGE_MAX, FILES_PAGE_MAX)
        if after:
            check_file_id(after, "after")
        found: list[FileInfo] = []
        # Bounded: a key keeps at most max_files files (plus its batches' outputs).
        for file_id in _page(self._file_ids(owner), after, newest_first):
            info = self._load_file(owner, file_id)
            if info is None:
                continue  # deleted since the listing, or expired
            if purpose and info.purpose != purpose:
                continue
            if len(found) == limit:
                return found, True
            found.append(info)
        return found, False

    def input_lines(self, owner: str, file_id: str) -> list[InputLine]:
        """The request lines of the caller's input file (checked again: the file may predate a limit)."""
        _, data = self.file_content(owner, file_id)
        return parse_input(
            data, replace(self.limits.input, max_bytes=max(len(data), self.limits.input.max_bytes))
        )

    # Batches.

    def _batch_key(self, owner: str, batch_id: str) -> str:
        return f"{owner_dir(owner)}/batches/{batch_id}"

    def create_batch(
        self,
        owner: str,
        input_file_id: str,
        endpoint: str,
        completion_window: str,
        metadata: dict[str, str],
        output_expires_after_s: int = DEFAULT_FILE_EXPIRY_S,
    ) -> Batch:
        """Create a batch (status validating) over the caller's input file.

        ``output_expires_after_s`` is how long its output and error files are kept after they are
        written (0: :data:`DEFAULT_FILE_EXPIRY_S`, 30 days). A batch whose input file expires
        while it runs keeps running: the runner holds its lines (a batch not yet started, or
        resumed by another runner after the file expired, fails ``input_file_deleted``).

        Raises:
            InvalidArgumentError: an unsupported endpoint (INVALID_BATCH_ENDPOINT), a window other
                than 24h (INVALID_COMPLETION_WINDOW), metadata over its bounds
                (INVALID_BATCH_METADATA), not a file id (INVALID_FILE_ID),
                ``output_expires_after_s`` out of 3600 to 2,592,000 (INVALID_EXPIRES_AFTER).
            FileNotFoundInStoreError: no such file of this key, or it expired.
            FailedPreconditionError: the file is not of purpose batch (INPUT_FILE_NOT_BATCH).
            ResourceExhaustedError: the key keeps ``max_batches`` batches and none has ended
                (TOO_MANY_BATCHES).

        """
        if endpoint not in SUPPORTED_URLS:
            raise InvalidArgumentError(
                f"endpoint {clip_text(endpoint, 64)!r} is not supported; one of {', '.join(SUPPORTED_URLS)}",
                reason="INVALID_BATCH_ENDPOINT",
                field="endpoint",
            )
        if completion_window not in ("", COMPLETION_WINDOW):
            raise InvalidArgumentError(
                f"completion_window must be {COMPLETION_WINDOW!r}, not {clip_text(completion_window, 32)!r}",
                reason="INVALID_COMPLETION_WINDOW",
                field="completion_window",
            )
        check_metadata(metadata)
        output_expires_after_s = expiry_seconds(output_expires_after_s, "output_expires_after")
        check_file_id(input_file_id, "input_file_id")
        info = self.get_file(owner, input_file_id)
        if info.purpose != PURPOSE_INPUT:
            raise FailedPreconditionError(
                f"file {input_file_id!r} has purpose {info.purpose!r}; a batch's input must have purpose "
                f"{PURPOSE_INPUT!r}",
                reason="INPUT_FILE_NOT_BATCH",
                id=input_file_id,
            )
        self._make_room(owner)
        now = self.clock()
        batch = Batch(
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
        self.store.create(f"active/{batch.id}", json.dumps({"owner": owner}).encode())
        self.store.create(self._batch_key(owner, batch.id), batch.to_json())
        return batch

    def _batch_ids(self, owner: str) -> list[str]:
        return [key.rpartition("/")[2] for key in self.store.sizes(f"{owner_dir(owner)}/batches")]

    def _make_room(self, owner: str) -> None:
        """Forget the key's oldest ended batches until it keeps fewer than ``max_batches``."""
        ids = sorted(self._batch_ids(owner))
        excess = len(ids) - self.limits.max_batches + 1
        for batch_id in ids:  # bounded: the key's batches, at most max_batches (plus racing creates)
            if excess <= 0:
                return
            data = self.store.read(self._batch_key(owner, batch_id))
            if data is not None and Batch.from_json(data).status in ACTIVE:
                continue
            self.store.delete(self._batch_key(owner, batch_id))
            excess -= 1
        if excess > 0:
            raise ResourceExhaustedError(
                f"this key has {self.limits.max_batches} batches running, the most it may "
                "(UR_BATCH_MAX_BATCHES); wait for some to end",
                reason="TOO_MANY_BATCHES",
                limit=self.limits.max_batches,
            )

    def get_batch(self, owner: str, batch_id: str) -> Batch:
        """The caller's batch ``batch_id``.

        Raises:
            InvalidArgumentError: not a batch id (INVALID_BATCH_ID).
            BatchNotFoundError: no such batch of this key (NOT_FOUND BATCH_NOT_FOUND).

        """
        check_batch_id(batch_id)
        data = self._read(
            self._batch_key(owner, batch_id), BatchNotFoundError(f"no batch {batch_id!r}", id=batch_id)
        )
        return Batch.from_json(data)

    def list_batches(self, owner: str, *, after: str = "", limit: int = 0) -> tuple[list[Batch], bool]:
        """A page of the caller's batches, newest first, and whether more follow.

        Raises:
            InvalidArgumentError: a limit out of 0 to 100 (INVALID_PAGINATION); an ``after`` that
                is not a batch id (INVALID_BATCH_ID).

        """
        limit = page_limit(limit, BATCHES_PAGE_MAX, BATCHES_PAGE_DEFAULT)
        if after:
            check_batch_id(after, "after")
        ids = _page(self._batch_ids(owner), after, newest_first=True)
        found: list[Batch] = []
        for batch_id in ids[: limit + 1]:  # bounded: one page (and one more to know there is more)
            data = self.store.read(self._batch_key(owner, batch_id))
            if data is not None:
                found.append(Batch.from_json(data))
        return found[:limit], len(ids) > limit

    def update_batch(self, owner: str, batch_id: str, change: Callable[[Batch], Batch | None]) -> Batch:
        """Change a batch's record by compare-and-swap: ``change`` gets the current record.

        ``change`` returns the new record, or None to leave it; it runs again on the newer record
        when another writer changed it in between (at most 16 times).

        Returns:
            The record as it now is.

        Raises:
            BatchNotFoundError: the record is gone.
            UnavailableError: it changed under every attempt (STATE_STORE_CONFLICT), or the store failed.
            Whatever ``change`` raises.

        """
        key = self._batch_key(owner, batch_id)
        for _ in range(UPDATE_ATTEMPTS):
            blob = self.store.read_tagged(key)
            if blob is None:
                raise BatchNotFoundError(f"no batch {batch_id!r}", id=batch_id)
            current = Batch.from_json(blob.data)
            new = change(current)
            if new is None or new == current:
                return current
            if self.store.swap(key, new.to_json(), blob):
                return new
        raise UnavailableError(
            f"batch {batch_id!r} changed under {UPDATE_ATTEMPTS} updates in a row; retry later",
            reason="STATE_STORE_CONFLICT",
            id=batch_id,
        )

    def cancel_batch(self, owner: str, batch_id: str) -> Batch:
        """Ask the caller's batch to cancel: validating or in_progress turn cancelling.

        A batch already cancelling or cancelled is answered as it is.

        Raises:
            FailedPreconditionError: the batch ended otherwise, or is finalizing
                (BATCH_NOT_CANCELLABLE).
            Errors of :meth:`get_batch`.

        """
        check_batch_id(batch_id)
        now = int(self.clock())

        def cancel(batch: Batch) -> Batch | None:
            if batch.status in (CANCELLING, CANCELLED):
                return None
            if batch.status in (VALIDATING, IN_PROGRESS):
                return replace(batch, status=CANCELLING, cancelling_at=now)
            raise FailedPreconditionError(
                f"batch {batch_id!r} is {batch.status}; only a validating or in_progress batch "
                "can be cancelled",
                reason="BATCH_NOT_CANCELLABLE",
                id=batch_id,
                status=batch.status,
            )

        return self.update_batch(owner, batch_id, cancel)

    def active_batches(self) -> list[tuple[str, str]]:
        """``(batch_id, owner)`` of every batch some runner has work on (from ``active/``)."""
        found = []
        for key in self.store.sizes("active"):  # bounded by the batches not ended
            batch_id = key.rpartition("/")[2]
            data = self.store.read(f"active/{batch_id}")
            if BATCH_ID.fullmatch(batch_id) and data is not None:
                found.append((batch_id, str(json.loads(data)["owner"])))
        return sorted(found)

    def read_record(self, owner: str, batch_id: str) -> Batch | None:
        """A batch's record, or None (a marker whose record was never written, or was forgotten)."""
        data = self.store.read(self._batch_key(owner, batch_id))
        return None if data is None else Batch.from_json(data)

    def retire(self, batch_id: str) -> None:
        """Drop an ended batch's marker, results and lease (its record and files stay)."""
        self.store.delete(f"active/{batch_id}")
        for key in self.store.sizes(f"results/{batch_id}"):  # bounded by its lines
            self.store.delete(key)
        self.store.delete(f"leases/{batch_id}")

    # Results.

    def put_results(self, batch_id: str, results: dict[int, LineResult]) -> None:
        """Save the results of lines that completed together, by line index (one new key).

        A group commit: one durable write (two flushes on a local disk) covers every line
        that completed while the previous write ran, instead of one write per line.
        """
        lines = [
            json.dumps({"index": index, **json.loads(results[index].to_json())}) for index in sorted(results)
        ]
        name = f"{min(results):09d}-{len(results)}-{secrets.token_hex(6)}"  # unique: never overwrites
        self.store.create(f"results/{batch_id}/{name}", "\n".join(lines).encode())

    def results(self, batch_id: str) -> dict[int, LineResult]:
        """Every saved result of a batch, by line index.

        A line saved twice (by two runners that both believed they held the lease) counts once:
        the save whose key sorts first.
        """
        found: dict[int, LineResult] = {}
        for key in sorted(self.store.sizes(f"results/{batch_id}")):  # bounded by its lines
            data = self.store.read(key) if key.rpartition("/")[2][:1].isdigit() else None
            for text in (data or b"").splitlines():  # bounded: the lines of one group
                index = json.loads(text)["index"]
                found.setdefault(int(index), LineResult.from_json(text))
        return found

    def write_outputs(self, batch: Batch, lines: list[InputLine], missing: tuple[str, str]) -> Outputs:
        """Write a batch's output file (2xx answers) and error file (the rest), in input order.

        Each of ``lines`` appears exactly once in one of them; a line without a result gets an
        error line with ``missing`` (code, message). The files get the batch's planned ids and
        are written only if absent, so a finalize resumed after a crash writes the same files.
        They expire ``batch.output_expires_after_s`` after they are written (OpenAI anchors
        ``output_expires_after`` on the file's creation, not the batch's).
        """
        results = self.results(batch.id)
        good: list[bytes] = []
        bad: list[bytes] = []
        failed = 0
        for line in lines:  # bounded by the input's lines
            result = results.get(line.index)
            (good if result is not None and result.ok else bad).append(
                output_line(batch.id, line, result, missing)
            )
            failed += result is not None and not result.ok
        now = int(self.clock())
        ids = []
        for file_id, kind, chunk in (
            (batch.planned_output_file_id, "output", good),
            (batch.planned_error_file_id, "error", bad),
        ):
            if not chunk:
                ids.append("")
                continue
            data = b"".join(chunk)
            info = FileInfo(
                file_id,
                len(data),
                now,
                f"{batch.id}_{kind}.jsonl",
                PURPOSE_OUTPUT,
                len(chunk),
                now + batch.output_expires_after_s,
            )
            self._write_file(batch.owner, info, data)
            ids.append(file_id)
        return Outputs(ids[0], ids[1], len(good), failed)

    # Expiry.

    def sweep_expired(self, now: float, limit: int) -> int:
        """Delete up to ``limit`` files due at ``now`` (Unix seconds), oldest first, of any key.

        Reads the ``expiry/`` markers (they sort by time, so only the due ones are read). The
        listing itself costs time in the number of stored files (see
        docs/architecture/design-notes.md#batch-results-by-group-commit), so a sweep that found
        nothing more due lists again only once the earliest marker it saw is due, or an hour after
        it listed, whichever is first: a marker it did not see was written after the listing (here
        or by another replica) and expires at least 3600 s after it was written, so none is missed
        (to within the replicas' clock skew).

        A due marker whose file is gone (deleted by its key, by a read that found it expired, or
        a crash between the deletes) is a stray: its bytes, if any, and it are deleted. A marker
        whose file's description names another time (a finalize resumed after a crash wrote a
        second one) is replaced by the right one.

        Returns:
            Markers handled (files deleted plus strays), at most ``limit``.

        Raises:
            UnavailableError: the store failed (what was deleted stays deleted; the next sweep
                goes on).

        """
        if now < self._quiet_until:
            return 0
        handled = 0
        next_due = now + MIN_FILE_EXPIRY_S  # the latest a marker written after this listing is due
        for key in sorted(self.store.sizes("expiry")):  # bounded: stops at the first not due, or at limit
            if handled >= limit:
                next_due = float("-inf")  # more may be due: the next sweep lists again
                break
            marker = EXPIRY_MARKER.fullmatch(key.rpartition("/")[2])
            if marker is None:  # not a marker's name (none is written so): a stray
                self.store.delete(key)
                handled += 1
                continue
            if int(marker[1]) > now:
                next_due = min(next_due, int(marker[1]))
                break  # the rest are later still
            handled += 1
            file_id = marker[2]
            data = self.store.read(key)
            owner = str(json.loads(data)["owner"]) if data else None
            description = None if owner is None else self.store.read(self._file_key(owner, file_id))
            if owner is not None and description is not None:
                info = FileInfo(**json.loads(description))
                if not info.expired(now):  # not this file's time: a stray left by a resumed write
                    if info.expires_at:  # its own marker, in case the stray was the only one
                        self.store.create(expiry_marker(info.expires_at, info.id), data or b"")
                        next_due = min(next_due, info.expires_at)
                    self.store.delete(key)
                    continue
                self._remove_file(owner, info)
            else:
                self.store.delete(f"file_data/{file_id}")
            self.store.delete(key)
        self._quiet_until = next_due
        return handled

    # Leases.

    def take_lease(self, batch_id: str, holder: str, lease_s: float) -> bool:
        """Hold ``batch_id``'s lease until ``lease_s`` from now: renew it, or take it if free or expired.

        Returns:
            False when another holder's lease has not expired (or it won a race for it).

        """
        key = f"leases/{batch_id}"
        current = self.store.read_tagged(key)
        now = self.clock()
        if current is not None:
            lease = json.loads(current.data)
            if lease["holder"] != holder and lease["expires_at"] > now:
                return False
        data = json.dumps({"holder": holder, "expires_at": now + lease_s}).encode()
        return self.store.swap(key, data, current)

    def release_lease(self, batch_id: str, holder: str) -> None:
        """Give the lease up at once (an expired lease in its place), if ``holder`` still holds it."""
        key = f"leases/{batch_id}"
        current = self.store.read_tagged(key)
        if current is not None and json.loads(current.data)["holder"] == holder:
            self.store.swap(key, json.dumps({"holder": "", "expires_at": 0}).encode(), current)


def errors_of(lines: list[InputLine], endpoint: str) -> tuple[BatchError, ...]:
    """The batch errors of lines whose url is not the batch's ``endpoint`` (OpenAI's rule), at most 1,000."""
    errors: list[BatchError] = []
    wrong = [line for line in lines if line.url != endpoint]
    for line in wrong[:MAX_LISTED_ERRORS]:
        errors.append(
            BatchError(
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
