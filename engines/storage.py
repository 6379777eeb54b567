"""Durable writes and size limits for the stores of fitted state (custom classifiers, anomaly detectors).

A saved file must survive a crash or power loss whole: :func:`write_durable` writes a temporary
file in the same folder, flushes it to disk, renames it into place and flushes the folder (the
rename lives in the folder's entry, which a crash could otherwise lose). A :class:`StorageLimits`
bounds what clients can make the server keep on disk.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engines.errors import ResourceExhaustedError
from engines.reasons import Reason

GIB = 1 << 30


def fsync_dir(folder: Path) -> None:
    """Flush ``folder``'s entries (renames, new and deleted files) to disk.

    A no-op where folders cannot be opened for reading (Windows).
    """
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    After a crash the file holds either its old bytes or ``data``, never part of it, and a
    file that existed before is never missing.

    Raises:
        OSError: the write, flush or rename failed (the temporary file is removed).

    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


@dataclass(frozen=True, slots=True)
class StorageLimits:
    """Limits of one store.

    Attributes:
        max_items: most saved items (classifiers, or detectors whatever their versions).
        max_bytes: most bytes of all the store's files together.

    """

    max_items: int = 256
    max_bytes: int = GIB

    def check(self, what: str, *, items: int, used_bytes: int, new_item: bool, new_bytes: int) -> None:
        """Refuse a save that would take the store over a limit.

        Args:
            what: the store's items in words, for the message (``"custom classifiers"``).
            items: items saved now.
            used_bytes: bytes the store's files take now, less those the save will replace.
            new_item: whether the save adds an item (not a replacement or a new version).
            new_bytes: bytes the save will write.

        Raises:
            ResourceExhaustedError: over either limit (reason STORAGE_QUOTA_EXCEEDED; metadata
                ``max_items``, ``max_bytes``, ``items``, ``used_bytes``, ``needed_bytes``).

        """
        too_many = new_item and items + 1 > self.max_items
        too_big = used_bytes + new_bytes > self.max_bytes
        if not (too_many or too_big):
            return
        limit = (
            f"at most {self.max_items} {what} may be saved ({items} are)"
            if too_many
            else f"{what} may take at most {self.max_bytes} bytes "
            f"({used_bytes} used, {new_bytes} more needed)"
        )
        raise ResourceExhaustedError(
            f"storage quota exceeded: {limit}; delete some first",
            reason=Reason.STORAGE_QUOTA_EXCEEDED,
            max_items=self.max_items,
            max_bytes=self.max_bytes,
            items=items,
            used_bytes=used_bytes,
            needed_bytes=new_bytes,
        )
