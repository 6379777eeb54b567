"""The Batch API's files (OpenAI's File objects) and their expiry, in the state store.

Keys, under the state store's ``batches/`` folder:

* ``owners/<owner>/files/<file_id>``: a file's description (JSON; :class:`FileInfo`), where
  ``<owner>`` is the first 32 hex digits of the SHA-256 of the owning key's name
  (:func:`~service.batches.ids.owner_dir`), so that a key finds only its own files, by
  construction;
* ``file_data/<file_id>``: the file's bytes (written before its description, deleted after it:
  a crash leaves at worst bytes that nothing names, never a description without bytes);
* ``expiry/<expires_at, 12 digits>-<file_id>``: a marker per file that expires (naming its owner),
  written before the bytes and deleted after them, so a sweep (:meth:`FileStore.sweep_expired`)
  finds every file due, oldest first, even of keys that never come back; it sorts by time, so a
  sweep reads only the markers due. A file expires ``expires_after`` seconds after it was written
  (OpenAI's ``expires_after``: 30 days by default, 1 hour to 30 days); from then on it is gone for
  every reader (NOT_FOUND, as deleted), and the read that finds it so deletes it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from engines.errors import InvalidArgumentError, ResourceExhaustedError, RuntimeServiceError, clip_text
from engines.reasons import Reason
from engines.state_store import StateStore
from service.batches.ids import check_file_id, new_id, owner_dir, page_limit, page_order
from service.batches.lines import InputLimits, InputLine, parse_input

PURPOSE_INPUT = "batch"
PURPOSE_OUTPUT = "batch_output"
FILENAME_MAX_CHARS = 256
#: Page size (OpenAI's: files up to 10,000 a page, and that by default).
FILES_PAGE_MAX = 10_000
#: Seconds a file is kept when the client names no expiry: 30 days, OpenAI's default for batch files
#: (https://platform.openai.com/docs/api-reference/files/create, ``expires_after``).
DEFAULT_FILE_EXPIRY_S = 30 * 24 * 3600
#: OpenAI's bounds of ``expires_after.seconds`` (and of a batch job's ``output_expires_after.seconds``):
#: 1 hour to 30 days.
MIN_FILE_EXPIRY_S, MAX_FILE_EXPIRY_S = 3600, 30 * 24 * 3600
#: The only anchor OpenAI accepts: the file's creation time.
EXPIRY_ANCHOR = "created_at"
#: An expiry marker's name: when (12 digits of Unix seconds), then the file's id.
EXPIRY_MARKER = re.compile(r"([0-9]{12})-(file-[0-9a-f]{12}[A-Za-z0-9]{12})")


class FileNotFoundInStoreError(RuntimeServiceError, status="NOT_FOUND", reason=Reason.FILE_NOT_FOUND):
    """No file of this id belongs to the caller (absent, deleted, expired, or another key's)."""


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
            reason=Reason.INVALID_EXPIRES_AFTER,
            field=f"{field_name}.anchor",
        )
    if seconds == 0:
        return DEFAULT_FILE_EXPIRY_S
    if not MIN_FILE_EXPIRY_S <= seconds <= MAX_FILE_EXPIRY_S:
        raise InvalidArgumentError(
            f"{field_name}.seconds must be {MIN_FILE_EXPIRY_S} to {MAX_FILE_EXPIRY_S} (1 hour to 30 days), "
            f"not {seconds}",
            reason=Reason.INVALID_EXPIRES_AFTER,
            field=f"{field_name}.seconds",
        )
    return seconds


def expiry_marker(expires_at: int, file_id: str) -> str:
    """The key of a file's expiry marker: sorts by ``expires_at`` (12 digits: Unix seconds to year 33658)."""
    return f"expiry/{expires_at:012d}-{file_id}"


class FileStore:
    """The Batch API's files in a state store folder (see the module's keys).

    Args:
        state: the folder (the Batch API's, ``state.child("batches")``).
        input_limits: bounds of an uploaded file.
        max_files: most files a key keeps (batch job outputs count, but are never refused).
        clock: seconds since the epoch (tests move time forward).

    """

    def __init__(
        self,
        state: StateStore,
        input_limits: InputLimits,
        max_files: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.input_limits = input_limits
        self.max_files = max_files
        self.clock = clock
        #: No expiry marker is due before this time (Unix seconds; see :meth:`sweep_expired`).
        self._quiet_until = float("-inf")

    def _key(self, owner: str, file_id: str) -> str:
        return f"{owner_dir(owner)}/files/{file_id}"

    def _ids(self, owner: str) -> list[str]:
        prefix = f"{owner_dir(owner)}/files"
        return [key.rpartition("/")[2] for key in self.state.sizes(prefix)]

    def create(
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
                :func:`~service.batches.lines.parse_input`); a file name over 256 characters
                (INVALID_FILE_NAME); ``expires_after_s`` out of 3600 to 2,592,000
                (INVALID_EXPIRES_AFTER).
            ResourceExhaustedError: the key keeps ``max_files`` files already (TOO_MANY_FILES;
                its expired files do not count).

        """
        expires_after_s = expiry_seconds(expires_after_s, "expires_after")
        if len(filename) > FILENAME_MAX_CHARS:
            raise InvalidArgumentError(
                f"filename is over {FILENAME_MAX_CHARS} characters",
                reason=Reason.INVALID_FILE_NAME,
                field="filename",
            )
        lines = parse_input(data, self.input_limits)
        if len(self._ids(owner)) >= self.max_files:
            self._drop_expired(owner)  # expired files not yet swept do not count
        if len(self._ids(owner)) >= self.max_files:
            raise ResourceExhaustedError(
                f"this key keeps {self.max_files} files already, the most it may "
                "(UR_BATCH_MAX_FILES); delete some first",
                reason=Reason.TOO_MANY_FILES,
                limit=self.max_files,
            )
        now = int(self.clock())
        info = FileInfo(
            new_id("file-", now), len(data), now, filename, PURPOSE_INPUT, len(lines), now + expires_after_s
        )
        self.write(owner, info, data)
        return info

    def write(self, owner: str, info: FileInfo, data: bytes) -> bool:
        """Write a file: its expiry marker, its bytes, then its description (False: it was there).

        Each only if absent, so a write resumed after a crash keeps what the first one wrote.
        """
        if info.expires_at:
            self.state.create(expiry_marker(info.expires_at, info.id), json.dumps({"owner": owner}).encode())
        self.state.create(f"file_data/{info.id}", data)
        return self.state.create(self._key(owner, info.id), json.dumps(asdict(info)).encode())

    def _remove(self, owner: str, info: FileInfo) -> None:
        """Delete a file: its description, its bytes, then its expiry marker.

        The order of :meth:`write` reversed: a crash leaves a marker a sweep finishes, never
        a description without bytes.
        """
        self.state.delete(self._key(owner, info.id))
        self.state.delete(f"file_data/{info.id}")
        if info.expires_at:
            self.state.delete(expiry_marker(info.expires_at, info.id))

    def _load(self, owner: str, file_id: str) -> FileInfo | None:
        """The caller's file's description, or None: absent, or expired (then deleted here)."""
        data = self.state.read(self._key(owner, file_id))
        if data is None:
            return None
        info = FileInfo(**json.loads(data))
        if info.expired(self.clock()):
            self._remove(owner, info)
            return None
        return info

    def _drop_expired(self, owner: str) -> None:
        """Delete the key's expired files (those no sweep reached yet)."""
        for file_id in self._ids(owner):  # bounded: the key's files (max_files plus outputs)
            self._load(owner, file_id)

    def get(self, owner: str, file_id: str) -> FileInfo:
        """The description of the caller's file ``file_id``.

        An expired file is deleted here (if no sweep did yet) and answered as absent.

        Raises:
            InvalidArgumentError: not a file id (INVALID_FILE_ID).
            FileNotFoundInStoreError: no such file of this key, or it expired (NOT_FOUND FILE_NOT_FOUND).

        """
        check_file_id(file_id)
        info = self._load(owner, file_id)
        if info is None:
            raise FileNotFoundInStoreError(f"no file {file_id!r}", id=file_id)
        return info

    def content(self, owner: str, file_id: str) -> tuple[FileInfo, bytes]:
        """The caller's file and its bytes (errors as :meth:`get`)."""
        info = self.get(owner, file_id)
        data = self.state.read(f"file_data/{file_id}")
        if data is None:  # only when deleted between the two reads
            raise FileNotFoundInStoreError(f"no file {file_id!r}", id=file_id)
        return info, data

    def delete(self, owner: str, file_id: str) -> None:
        """Delete the caller's file (errors as :meth:`get`)."""
        self._remove(owner, self.get(owner, file_id))

    def page(
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
                reason=Reason.INVALID_FILE_PURPOSE,
                field="purpose",
            )
        limit = page_limit(limit, FILES_PAGE_MAX, FILES_PAGE_MAX)
        if after:
            check_file_id(after, "after")
        found: list[FileInfo] = []
        # Bounded: a key keeps at most max_files files (plus its batch jobs' outputs).
        for file_id in page_order(self._ids(owner), after, newest_first):
            info = self._load(owner, file_id)
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
        _, data = self.content(owner, file_id)
        return parse_input(
            data, replace(self.input_limits, max_bytes=max(len(data), self.input_limits.max_bytes))
        )

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
        for key in sorted(self.state.sizes("expiry")):  # bounded: stops at the first not due, or at limit
            if handled >= limit:
                next_due = float("-inf")  # more may be due: the next sweep lists again
                break
            marker = EXPIRY_MARKER.fullmatch(key.rpartition("/")[2])
            if marker is None:  # not a marker's name (none is written so): a stray
                self.state.delete(key)
                handled += 1
                continue
            if int(marker[1]) > now:
                next_due = min(next_due, int(marker[1]))
                break  # the rest are later still
            handled += 1
            file_id = marker[2]
            data = self.state.read(key)
            owner = str(json.loads(data)["owner"]) if data else None
            description = None if owner is None else self.state.read(self._key(owner, file_id))
            if owner is not None and description is not None:
                info = FileInfo(**json.loads(description))
                if not info.expired(now):  # not this file's time: a stray left by a resumed write
                    if info.expires_at:  # its own marker, in case the stray was the only one
                        self.state.create(expiry_marker(info.expires_at, info.id), data or b"")
                        next_due = min(next_due, info.expires_at)
                    self.state.delete(key)
                    continue
                self._remove(owner, info)
            else:
                self.state.delete(f"file_data/{file_id}")
            self.state.delete(key)
        self._quiet_until = next_due
        return handled
