"""A stand-in for the Hugging Face hub: a local folder posing as a repo (no network here).

It describes its files the way the hub does, large ones as LFS (SHA-256) and small ones as git
blobs (git's SHA-1 object id), so ``pull`` verifies them exactly as it would the hub's.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from service.admin.hub import RemoteFile, RepoListing
from service.admin.verify import git_blob_sha1, sha256_of

#: Files at least this large are listed as LFS files (the hub's own threshold is about 10 MB).
LFS_BYTES = 100_000
REVISION = "0123456789abcdef0123456789abcdef01234567"


class LocalHub:
    """One repo served from ``folder``; ``tamper`` may alter each file after it is copied."""

    def __init__(self, folder: Path, tamper: Callable[[Path], None] | None = None) -> None:
        self.folder = folder
        self.tamper = tamper
        self.downloads: list[list[str]] = []

    def listing(self, repo_id: str, revision: str | None) -> RepoListing:
        files = []
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file()):
            size = path.stat().st_size
            large = size >= LFS_BYTES
            files.append(
                RemoteFile(
                    path=path.relative_to(self.folder).as_posix(),
                    size=size,
                    sha256=sha256_of(path) if large else None,
                    git_sha1=None if large else git_blob_sha1(path),
                )
            )
        return RepoListing(revision=REVISION, files=tuple(files))

    def download(self, repo_id: str, revision: str, paths: Sequence[str], dest: Path) -> None:
        assert revision == REVISION  # pull pins the commit it listed
        self.downloads.append(list(paths))
        for relative in paths:
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.folder / relative, target)
            if self.tamper is not None:
                self.tamper(target)
