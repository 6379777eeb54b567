"""The on-disk cache of models converted from the installed weights (exports, quantized copies).

A converted copy is made once and reused by every later load: :func:`build_once` builds it in a
temporary folder beside its final place and renames it there, under a file lock, so two loads
(threads or processes, replicas sharing the folder) never build it twice and a crash never
leaves half a copy where a load would read it.

Where the cache is: the catalog option ``cache_dir`` of the model, else
``$XDG_CACHE_HOME/universal-runtime/converted`` (``~/.cache/...`` without the variable; the
container image sets ``XDG_CACHE_HOME=/cache``).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from engines.storage import fsync_dir

log = logging.getLogger(__name__)

#: The progress detail of a load that builds a converted copy (backend.go's ``Installing: ...``).
CONVERTING = "converting"


def converted_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder converted copies go in: ``cache_dir`` when given, else the user's cache folder."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()
    return cache_home / "universal-runtime" / "converted"


def source_fingerprint(location: Path | str) -> str:
    """A short hex digest that changes when the weights at ``location`` change.

    For a local file or folder: its resolved path with the relative path, size and mtime of each
    file (a model folder holds tens of files, so this stays cheap). A hub id is its own identity.
    The mtime counts in whole seconds: container image layers (and tar) keep no finer times, so
    a copy made at an image's build is found by the server the image runs.
    """
    path = Path(location)
    parts = [str(location)]
    if path.exists():
        path = path.resolve()
        parts = [str(path)]
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            stat = file.stat()
            parts.append(
                f"{file.relative_to(path) if file != path else file.name}|{stat.st_size}|{int(stat.st_mtime)}"
            )
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def build_once(
    target: Path, build: Callable[[Path], None], progress: Callable[[str], None] | None = None
) -> bool:
    """Make the folder ``target`` with ``build`` unless it exists; safe across threads and processes.

    ``build(folder)`` writes the copy into an empty temporary folder next to ``target``; the
    folder is renamed to ``target`` when ``build`` returns. A lock file beside ``target``
    (``.<name>.lock``) is held meanwhile, so a second caller waits and then finds the copy.
    ``progress`` (an engine's :meth:`~engines.base.Engine.report_progress`) hears ``"converting"``
    when this call builds the copy, so the model's status reads ``Installing: converting``.

    Returns:
        True when this call built the copy, False when it was already there.

    Raises:
        OSError: the cache folder cannot be created or written.
        Exception: whatever ``build`` raises (the temporary folder is removed, nothing is cached).

    """
    if target.is_dir():
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
    return True
