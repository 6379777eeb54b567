"""Checking downloaded files against the hub's metadata: size, SHA-256 (LFS) or git blob id."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from service.admin.connection import CommandError
from service.admin.hub import RemoteFile

_CHUNK_BYTES = 1 << 20


def _digest(path: Path, digest: hashlib._Hash, prefix: bytes = b"") -> str:
    digest.update(prefix)
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def git_blob_sha1(path: Path) -> str:
    """Git's object id of the file's content: SHA-1 of ``blob <size>``, a zero byte, then the bytes."""
    return _digest(path, hashlib.sha1(usedforsecurity=False), f"blob {path.stat().st_size}\0".encode())


def sha256_of(path: Path) -> str:
    """SHA-256 of the file's content, hex."""
    return _digest(path, hashlib.sha256())


def verify_files(root: Path, expected: Sequence[RemoteFile]) -> int:
    """Check each expected file under ``root``; a bad file is deleted so the next pull fetches it again.

    Returns:
        The number of bytes verified.

    Raises:
        CommandError: a file is missing, or its size or checksum differs from the hub's.

    """
    total = 0
    for remote in expected:
        path = root / remote.path
        if not path.is_file():
            raise CommandError(f"verification failed: {remote.path} was not downloaded")
        size = path.stat().st_size
        problem = None
        if remote.size is not None and size != remote.size:
            problem = f"is {size} bytes, the hub says {remote.size}"
        elif remote.sha256 is not None and sha256_of(path) != remote.sha256.lower():
            problem = "does not match the hub's SHA-256"
        elif remote.git_sha1 is not None and git_blob_sha1(path) != remote.git_sha1.lower():
            problem = "does not match the hub's git blob id"
        if problem is not None:
            path.unlink()
            raise CommandError(f"verification failed: {remote.path} {problem} (deleted; pull again)")
        total += size
    return total
