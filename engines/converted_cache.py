"""The on-disk cache of models converted from the installed weights (exports, quantized copies).

A converted copy is made once and reused by every later load: :func:`build_once` builds it in a
temporary folder beside its final place and renames it there, under a file lock, so two loads
(threads or processes, replicas sharing the folder) never build it twice and a crash never
leaves half a copy where a load would read it.

Where the cache is: the catalog option ``cache_dir`` of the model, else
``$XDG_CACHE_HOME/universal-runtime/converted`` (``~/.cache/...`` without the variable; the
container image sets ``XDG_CACHE_HOME=/cache``).

What bounds it: a copy is keyed by its source's fingerprint (its files' sizes and content), so new
weights at the same path (an upgraded model) make a new copy. Each copy records the *identity* of
what it converts (the source's path and the conversion: :data:`IDENTITY_FILE`), and building a copy
removes the copies it supersedes: those of the same identity not used for :data:`IN_USE_GRACE_S` (a
use touches the copy's folder). So the cache holds at most one copy per source and conversion, plus
any in use, instead of one per version ever installed (see
docs/architecture/design-notes.md#converted-copies-keyed-by-content). Replicas sharing one folder
while serving different weights at one path rebuild their copy after the other's build removed it,
at most once per grace period.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from engines.storage import fsync_dir

log = logging.getLogger(__name__)

#: The progress detail of a load that builds a converted copy (backend.go's ``Installing: ...``).
CONVERTING = "converting"
#: The file in each copy naming what it converts (:func:`source_identity` and the conversion).
IDENTITY_FILE = ".identity"
#: A copy used (found or built) within this many seconds is never removed as superseded: a load
#: reading it takes seconds to minutes, and a loaded model holds what it read.
IN_USE_GRACE_S = 600.0


def converted_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder converted copies go in: ``cache_dir`` when given, else the user's cache folder."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()
    return cache_home / "universal-runtime" / "converted"


#: Bytes read from each of three places (start, middle, end) of a file larger than three times this,
#: for its fingerprint; a smaller file is read whole.
FINGERPRINT_SAMPLE_BYTES = 1 << 20


def _content_digest(path: Path, size: int) -> str:
    """SHA-256 of the file's content, or of three samples of it when larger than 3 MiB."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        if size <= 3 * FINGERPRINT_SAMPLE_BYTES:
            digest.update(file.read())
        else:
            for offset in (0, (size - FINGERPRINT_SAMPLE_BYTES) // 2, size - FINGERPRINT_SAMPLE_BYTES):
                file.seek(offset)
                digest.update(file.read(FINGERPRINT_SAMPLE_BYTES))
    return digest.hexdigest()


def source_fingerprint(location: Path | str) -> str:
    """A short hex digest that changes when the weights at ``location`` change.

    For a local file or folder: its resolved path with the relative path, size and content of
    each file (the whole content of a file up to 3 MiB; of a larger one, 1 MiB from its start,
    middle and end, as weights that differ differ throughout). A hub id is its own identity.

    Content, not modification times: times do not survive the copies a model's files go through
    intact. Podman's ``COPY --from`` rounds them to the nearest second (see
    docs/architecture/design-notes.md#converted-copies-keyed-by-content), tar and other layer
    writers truncate them, and a reinstall of the same package
    changes them without changing the weights. Work: at most 3 MiB read per file.
    """
    path = Path(location)
    parts = [str(location)]
    if path.exists():
        path = path.resolve()
        parts = [str(path)]
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:  # bounded: the model's files (tens in a folder)
            size = file.stat().st_size
            name = file.relative_to(path) if file != path else file.name
            parts.append(f"{name}|{size}|{_content_digest(file, size)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def source_identity(location: Path | str) -> str:
    """What a source is, whatever its content: its resolved path, or a hub id as given."""
    path = Path(location)
    return str(path.resolve()) if path.exists() else str(location)


def mark_used(folder: Path) -> None:
    """Record that the copy in ``folder`` is used now (its folder's mtime), so it is not removed."""
    with contextlib.suppress(OSError):  # a read-only cache (a mounted image layer) stays as it is
        os.utime(folder)


def remove_superseded(target: Path, identity: str, now: float | None = None) -> list[Path]:
    """Write ``identity`` into the copy ``target``, then remove its siblings of the same identity.

    A sibling is removed when its :data:`IDENTITY_FILE` holds ``identity`` and it was not used in
    the last :data:`IN_USE_GRACE_S` seconds. The scan is one listing of ``target``'s folder.

    Returns:
        The folders removed. Errors (a read-only cache, a sibling removed meanwhile) are logged,
        never raised: this is housekeeping after a successful build.

    """
    removed: list[Path] = []
    now = time.time() if now is None else now
    try:
        (target / IDENTITY_FILE).write_text(identity)
        siblings = [p for p in target.parent.iterdir() if p != target and not p.name.startswith(".")]
    except OSError as exc:
        log.warning("could not record the identity of %s: %s", target, exc)
        return removed
    for sibling in siblings:
        try:
            if (sibling / IDENTITY_FILE).read_text() != identity:
                continue
            if now - sibling.stat().st_mtime < IN_USE_GRACE_S:
                continue
            shutil.rmtree(sibling)
            (sibling.parent / f".{sibling.name}.lock").unlink(missing_ok=True)
            removed.append(sibling)
        except OSError:  # not a copy (no identity file), or removed meanwhile
            continue
    if removed:
        log.info("removed superseded converted copies", extra={"path": str(target), "removed": len(removed)})
    return removed


def build_once(
    target: Path,
    build: Callable[[Path], None],
    progress: Callable[[str], None] | None = None,
    identity: str | None = None,
) -> bool:
    """Make the folder ``target`` with ``build`` unless it exists; safe across threads and processes.

    ``build(folder)`` writes the copy into an empty temporary folder next to ``target``; the
    folder is renamed to ``target`` when ``build`` returns. A lock file beside ``target``
    (``.<name>.lock``) is held meanwhile, so a second caller waits and then finds the copy.
    ``progress`` (an engine's :meth:`~engines.base.Engine.report_progress`) hears ``"converting"``
    when this call builds the copy, so the model's status reads ``Installing: converting``.
    With ``identity`` (:func:`source_identity` of the source and the conversion's own terms), a
    copy found is marked used and a copy built replaces the copies it supersedes
    (:func:`remove_superseded`).

    Returns:
        True when this call built the copy, False when it was already there.

    Raises:
        OSError: the cache folder cannot be created or written.
        Exception: whatever ``build`` raises (the temporary folder is removed, nothing is cached).

    """
    if target.is_dir():
        if identity is not None:
            mark_used(target)
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if target.is_dir():  # another caller built it while this one waited
            return False
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        if progress is not None:
            progress(CONVERTING)
        try:
            build(tmp)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        fsync_dir(target.parent)
    log.info("cached converted model", extra={"path": str(target)})
    if identity is not None:
        remove_superseded(target, identity)
    return True
