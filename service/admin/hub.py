"""The Hugging Face hub as ``pull`` sees it: a file listing with checksums, and a download.

:class:`Hub` is the seam tests replace (a local folder posing as a repo); :class:`HuggingFaceHub`
is the real one, on ``huggingface_hub``. Every failure to reach the hub (offline mode, no
network, an HTTP error) becomes a :class:`~service.admin.connection.CommandError` with one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from service.admin.connection import CommandError


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """One file of a repo as the hub describes it.

    Attributes:
        path: Path inside the repo, ``/``-separated.
        size: Size in bytes, when known.
        sha256: SHA-256 of the content (hex), known for files stored with Git LFS.
        git_sha1: Git blob id (SHA-1 of a ``blob <size>`` header, a zero byte and the content),
            known for plain git files.

    """

    path: str
    size: int | None = None
    sha256: str | None = None
    git_sha1: str | None = None


@dataclass(frozen=True, slots=True)
class RepoListing:
    """A repo at one commit: ``revision`` (the commit hash) and its ``files``."""

    revision: str
    files: tuple[RemoteFile, ...]

    def by_path(self) -> dict[str, RemoteFile]:
        """The files keyed by path."""
        return {f.path: f for f in self.files}


class Hub(Protocol):
    """Where ``pull`` gets models from."""

    def listing(self, repo_id: str, revision: str | None) -> RepoListing:
        """The repo's files at ``revision`` (None: the default branch), with sizes and checksums.

        Raises:
            CommandError: the hub cannot be reached, or the repo or revision does not exist.

        """
        ...

    def download(self, repo_id: str, revision: str, paths: Sequence[str], dest: Path) -> None:
        """Download ``paths`` of the repo at commit ``revision`` into ``dest`` (showing progress).

        Raises:
            CommandError: the hub cannot be reached or the download fails.

        """
        ...


def _is_transport_error(err: BaseException) -> bool:
    # huggingface_hub raises its HTTP client's own errors for a refused or unresolvable host
    # (httpx, httpx2 or requests depending on its version); their base classes share these names.
    return any(cls.__name__ in ("TransportError", "RequestError") for cls in type(err).__mro__)


def describe_hub_error(err: BaseException, repo_id: str, endpoint: str) -> str | None:
    """One line for a failure to list or download ``repo_id``; None for errors that are not the hub's."""
    from huggingface_hub import errors

    if isinstance(err, errors.OfflineModeIsEnabled):
        return (
            f"cannot download {repo_id}: the Hugging Face hub is off (HF_HUB_OFFLINE is set); "
            "unset it, or add a local copy to the catalog by hand"
        )
    if isinstance(err, errors.GatedRepoError):
        return f"{repo_id} is gated: accept its terms on the hub and set HF_TOKEN"
    if isinstance(err, errors.RepositoryNotFoundError):
        return f"{repo_id} is not on the hub (or is private: set HF_TOKEN)"
    if isinstance(err, errors.RevisionNotFoundError):
        return f"{repo_id} has no such revision"
    if isinstance(err, errors.HFValidationError):
        return f"{repo_id!r} is not a hub id: {err}"
    if isinstance(err, errors.HfHubHTTPError):
        status = getattr(err.response, "status_code", "an error")
        return f"the hub answered {status} for {repo_id}"
    if _is_transport_error(err) or isinstance(err, OSError):
        reason = " ".join(str(err).split()) or type(err).__name__
        return f"cannot reach the Hugging Face hub at {endpoint}: {reason}"
    return None


class HuggingFaceHub:
    """The real hub (``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` apply as usual)."""

    def __init__(self, token: str | None = None) -> None:
        self._token = token

    @staticmethod
    def _endpoint() -> str:
        from huggingface_hub import constants

        return constants.ENDPOINT

    def _fail(self, err: Exception, repo_id: str) -> CommandError:
        message = describe_hub_error(err, repo_id, self._endpoint())
        if message is None:
            raise err
        return CommandError(message)

    def listing(self, repo_id: str, revision: str | None) -> RepoListing:
        """See :meth:`Hub.listing`; reads the repo's metadata with ``files_metadata=True``."""
        from huggingface_hub import HfApi

        try:
            info = HfApi(token=self._token).model_info(repo_id, revision=revision, files_metadata=True)
        except Exception as err:  # narrowed by describe_hub_error; anything else is re-raised
            raise self._fail(err, repo_id) from None
        files = tuple(
            RemoteFile(
                path=s.rfilename,
                size=s.size,
                sha256=s.lfs.sha256 if s.lfs is not None else None,
                git_sha1=s.blob_id if s.lfs is None else None,
            )
            for s in info.siblings or ()
        )
        return RepoListing(revision=info.sha or revision or "main", files=files)

    def download(self, repo_id: str, revision: str, paths: Sequence[str], dest: Path) -> None:
        """See :meth:`Hub.download`; ``snapshot_download`` into ``dest`` with its progress bars."""
        from huggingface_hub import snapshot_download

        try:
            snapshot_download(
                repo_id, revision=revision, local_dir=dest, allow_patterns=list(paths), token=self._token
            )
        except Exception as err:  # narrowed by describe_hub_error; anything else is re-raised
            raise self._fail(err, repo_id) from None
