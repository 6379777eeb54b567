"""Where fitted state (custom classifiers, anomaly detectors) is kept: a local folder or any fsspec URL.

Replicas behind a balancer share what one of them fitted by pointing ``UR_STATE_URL`` at one
store (``s3://bucket/prefix``); without it, state stays under the local ``data_dir`` as before.
:func:`open_state_store` returns a :class:`StateStore`, the only interface the stores of
:mod:`engines.anomaly.store` and :mod:`engines.classification.custom` use. It has three writes,
which is all their publication protocol needs:

* :meth:`StateStore.create`: write a new key only if it is absent (a version's file);
* :meth:`StateStore.swap`: replace a key only if it still holds what was read (a manifest), or
  create it only if it is still absent: a compare-and-swap;
* :meth:`StateStore.delete`.

Guarantees by backend:

* **local folder** (the default): every file is written under a temporary name, flushed and
  renamed or hard-linked into place (:func:`~engines.storage.write_durable`); ``create`` is a
  ``link``, which fails when the name exists; ``swap`` holds an exclusive ``flock`` on the key's
  folder while it compares and replaces, so processes of one host (or sharing a file system with
  working locks) never interleave.
* **S3 and S3-compatible stores** (s3fs): ``create`` is a PUT with ``If-None-Match: *`` and ``swap``
  a PUT with ``If-Match: <ETag read>`` (or ``If-None-Match: *`` for an absent key), which S3 checks
  atomically (AWS S3 since 2024; MinIO, Ceph RGW and others too). A store that ignores these
  headers degrades to last writer wins.
* **other fsspec URLs** (``gcs://``, ``memory://``...): ``create`` and ``swap`` check, then write,
  which is not atomic: fine for one writer, not for replicas fitting the same name at once.

Every call is blocking (callers run the stores on a CPU lane or a worker thread, never on the
event loop) and bounded in time (``timeout_s``). Any failure of the store itself (down,
unreachable, access denied, timed out) raises :class:`~engines.errors.UnavailableError` with
reason ``STATE_STORE_UNAVAILABLE``, naming the URL without credentials; a store out of space
raises :class:`~engines.errors.ResourceExhaustedError` with reason ``STORAGE_FULL`` (see
:meth:`StateStore.failure`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from engines.errors import ResourceExhaustedError, RuntimeServiceError, UnavailableError, clip_text
from engines.reasons import Reason
from engines.storage import StorageLimits, fsync_dir, write_durable

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
STORE_UNAVAILABLE = Reason.STATE_STORE_UNAVAILABLE
#: ErrorInfo reason of a save refused because the store is out of space (see :meth:`StateStore.failure`).
STORAGE_FULL = Reason.STORAGE_FULL


@dataclass(frozen=True, slots=True)
class Blob:
    """A key's bytes and the tag :meth:`StateStore.swap` compares (an ETag, or the bytes' SHA-256)."""

    data: bytes
    tag: str


def display_url(url: str) -> str:
    """``url`` without user name, password or query (what errors and logs may show)."""
    parts = urlsplit(url)
    if not parts.scheme or len(parts.scheme) == 1:  # a plain path (or a Windows drive letter)
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class StateStore:
    """Keys (``/``-separated relative paths) holding bytes, under one root.

    Subclasses implement the ``_`` methods; the public ones turn failures of the store itself into
    :class:`~engines.errors.UnavailableError` (reason STATE_STORE_UNAVAILABLE), or
    :class:`~engines.errors.ResourceExhaustedError` (reason STORAGE_FULL) when it is out of space
    (:meth:`failure`).

    Attributes:
        url: where the store is, without credentials (for messages).

    """

    url: str

    def child(self, prefix: str) -> StateStore:
        """The same store under ``prefix`` (one folder of this store)."""
        raise NotImplementedError

    def _guard(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except RuntimeServiceError:
            raise
        except Exception as exc:
            raise self.failure(what, exc) from exc

    def failure(self, what: str, exc: BaseException) -> RuntimeServiceError:
        """The error a failed store call becomes.

        Out of space (``ENOSPC``, or ``EDQUOT``: the disk's quota) is a fault the operator must
        fix, not one a retry clears: RESOURCE_EXHAUSTED, reason STORAGE_FULL. Anything else
        (down, unreachable, access denied, timed out) is UNAVAILABLE, reason
        STATE_STORE_UNAVAILABLE. The message names the URL (without credentials), the operation
        and the errno's name or the exception's type, never the exception's text (the log has it).
        """
        log.warning("state store call failed", extra={"state_url": self.url, "op": what, "error": repr(exc)})
        code = getattr(exc, "errno", None)
        if code in (errno.ENOSPC, errno.EDQUOT):
            return ResourceExhaustedError(
                f"the state store {self.url} is out of space ({what}); nothing was saved. "
                "The server's operator must free space or grow the volume",
                reason=STORAGE_FULL,
                state_url=self.url,
            )
        if isinstance(exc, PermissionError):
            cause = "access denied"
        elif isinstance(exc, TimeoutError) or type(exc).__name__ in ("FSTimeoutError", "ReadTimeoutError"):
            cause = "timed out"
        elif isinstance(code, int) and code in errno.errorcode:
            cause = errno.errorcode[code]
        else:
            cause = clip_text(type(exc).__name__, 64)
        return UnavailableError(
            f"the state store {self.url} is unavailable ({what}: {cause}); retry later",
            reason=STORE_UNAVAILABLE,
            state_url=self.url,
        )

    def read(self, key: str) -> bytes | None:
        """The bytes at ``key``, or None when it is absent.

        Raises:
            UnavailableError: the store failed (reason STATE_STORE_UNAVAILABLE).

        """
        return self._guard(f"read {key}", lambda: self._read(key))

    def read_tagged(self, key: str) -> Blob | None:
        """The bytes at ``key`` with the tag :meth:`swap` expects, or None when it is absent.

        Raises:
            UnavailableError: the store failed (reason STATE_STORE_UNAVAILABLE).

        """
        return self._guard(f"read {key}", lambda: self._read_tagged(key))

    def create(self, key: str, data: bytes) -> bool:
        """Write ``data`` at ``key`` only if no key of that name exists; False if one does.

        Raises:
            UnavailableError: the store failed (reason STATE_STORE_UNAVAILABLE).

        """
        return self._guard(f"create {key}", lambda: self._create(key, data))

    def swap(self, key: str, data: bytes, expected: Blob | None) -> bool:
        """Write ``data`` at ``key`` only if it still holds ``expected`` (None: only if still absent).

        Returns:
            False when another writer changed (or created, or deleted) ``key`` first; nothing is written.

        Raises:
            UnavailableError: the store failed (reason STATE_STORE_UNAVAILABLE).

        """
        return self._guard(f"write {key}", lambda: self._swap(key, data, expected))

    def delete(self, key: str) -> None:
        """Delete ``key`` (nothing when it is absent).

        Raises:
            UnavailableError: the store failed (reason STATE_STORE_UNAVAILABLE).

        """
        self._guard(f"delete {key}", lambda: self._delete(key))

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """Every key under ``prefix`` (a folder, ``""`` for all) with its size in bytes.

        Raises:
            UnavailableError: the store failed (reason STATE_STORE_UNAVAILABLE).

        """
        return self._guard(f"list {prefix or '/'}", lambda: self._sizes(prefix))

    def _read(self, key: str) -> bytes | None:
        blob = self._read_tagged(key)
        return None if blob is None else blob.data

    def _read_tagged(self, key: str) -> Blob | None:
        raise NotImplementedError

    def _create(self, key: str, data: bytes) -> bool:
        raise NotImplementedError

    def _swap(self, key: str, data: bytes, expected: Blob | None) -> bool:
        raise NotImplementedError

    def _delete(self, key: str) -> None:
        raise NotImplementedError

    def _sizes(self, prefix: str) -> dict[str, int]:
        raise NotImplementedError


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class LocalStateStore(StateStore):
    """A folder on the local disk: durable (flushed) writes, exclusive creation by ``link``.

    Args:
        root: the folder (created on the first write).

    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.url = str(self.root)

    def child(self, prefix: str) -> LocalStateStore:
        """The sub-folder ``prefix``."""
        return LocalStateStore(self.root / prefix)

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def _folder(self, path: Path) -> Path:
        """Create ``path``'s folder (and flush its parent's entry, so a crash keeps the new folder)."""
        folder = path.parent
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            fsync_dir(folder.parent)
        return folder

    def _read_tagged(self, key: str) -> Blob | None:
        try:
            data = self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return Blob(data, _sha256(data))

    def _create(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        folder = self._folder(path)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=path.suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # atomic, and fails if the name exists (unlike rename)
            except FileExistsError:
                return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        fsync_dir(folder)
        return True

    @contextlib.contextmanager
    def _locked(self, folder: Path) -> Iterator[None]:
        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _swap(self, key: str, data: bytes, expected: Blob | None) -> bool:
        path = self._path(key)
        with self._locked(self._folder(path)):
            current = self._read_tagged(key)
            if (current is None) != (expected is None) or (current and current.tag != expected.tag):  # type: ignore[union-attr]
                return False
            write_durable(path, data)
        return True

    def _delete(self, key: str) -> None:
        path = self._path(key)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            fsync_dir(path.parent)  # so a deleted key does not come back after a crash
        # The last key of a folder (a detector's) takes the folder with it, as rmtree did.
        if path.parent != self.root:
            with contextlib.suppress(OSError):
                path.parent.rmdir()
                fsync_dir(path.parent.parent)

    def _sizes(self, prefix: str) -> dict[str, int]:
        folder = self._path(prefix) if prefix else self.root
        sizes: dict[str, int] = {}
        if not folder.is_dir():
            return sizes
        for path in folder.rglob("*"):
            with contextlib.suppress(OSError):  # files that vanish while listed are skipped
                if path.is_file():
                    sizes[path.relative_to(self.root).as_posix()] = path.stat().st_size
        return sizes


#: Options s3fs gets unless UR_STATE_STORAGE_OPTIONS sets them: no listing cache (other replicas
#: write), an instance of its own per store, and short network timeouts with few retries, so a
#: store that is down fails a call in seconds.
def _s3_defaults(timeout_s: float) -> dict[str, Any]:
    return {
        "skip_instance_cache": True,
        "use_listings_cache": False,
        "config_kwargs": {
            "connect_timeout": min(5.0, timeout_s),
            "read_timeout": timeout_s,
            "retries": {"max_attempts": 2, "mode": "standard"},
        },
    }


def _precondition_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is S3's answer to a failed conditional write (412, or 409 when writes race)."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    response = getattr(cause, "response", None)
    code = (response or {}).get("Error", {}).get("Code") if isinstance(response, dict) else None
    return code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")


class FsspecStateStore(StateStore):
    """A store at an fsspec URL (``s3://bucket/prefix``, ``memory://x``...).

    Args:
        url: the fsspec URL of the store's root.
        storage_options: fsspec options of the file system (for S3: ``endpoint_url``, ``key``,
            ``secret``, ``config_kwargs``...; the standard AWS variables work too). They are merged
            over the defaults (see :func:`_s3_defaults`).
        timeout_s: the most seconds one call may take (all retries included), then it fails.

    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, *, timeout_s: float) -> None:
        import fsspec

        self.url = display_url(url).rstrip("/")
        self.timeout_s = timeout_s
        protocol = urlsplit(url).scheme
        options = dict(storage_options or {})
        if protocol in ("s3", "s3a"):
            defaults = _s3_defaults(timeout_s)
            config = {**defaults["config_kwargs"], **options.get("config_kwargs", {})}
            options = {**defaults, **options, "config_kwargs": config}
        else:
            options.setdefault("skip_instance_cache", True)
        self.fs, self.root = fsspec.core.url_to_fs(url, **options)
        self.root = self.root.rstrip("/")
        self._s3 = protocol in ("s3", "s3a")
        # Async file systems (s3fs) run their calls on fsspec's own IO thread; `timeout` bounds the wait.
        self._bounded = {"timeout": timeout_s} if getattr(self.fs, "async_impl", False) else {}

    def child(self, prefix: str) -> FsspecStateStore:
        """The same file system under ``prefix``."""
        sub = object.__new__(FsspecStateStore)
        sub.__dict__.update(self.__dict__)
        sub.root, sub.url = f"{self.root}/{prefix}", f"{self.url}/{prefix}"
        return sub

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def _read(self, key: str) -> bytes | None:
        try:  # one GET: what every detect and classify does to check for a newer version
            return self.fs.cat_file(self._path(key), **self._bounded)
        except FileNotFoundError:
            return None

    def _read_tagged(self, key: str) -> Blob | None:
        path = self._path(key)
        try:
            if not self._s3:
                data = self.fs.cat_file(path, **self._bounded)
                return Blob(data, _sha256(data))
            # The ETag first, then the bytes: if the key changes in between, the tag is the older
            # one and a swap against it fails (safe), never the other way round.
            etag = self.fs.info(path, **self._bounded)["ETag"]
            data = self.fs.cat_file(path, **self._bounded)
        except FileNotFoundError:
            return None
        return Blob(data, etag)

    def _put(self, path: str, data: bytes, *, conflicts: tuple[type[OSError], ...], **condition: Any) -> bool:
        """A conditional write: False when the store refused it for its condition."""
        try:
            self.fs.pipe_file(path, data, **condition, **self._bounded)
        except conflicts:
            return False
        except OSError as exc:
            if _precondition_failed(exc):
                return False
            raise
        return True

    def _create(self, key: str, data: bytes) -> bool:
        return self._put(self._path(key), data, conflicts=(FileExistsError,), mode="create")

    def _swap(self, key: str, data: bytes, expected: Blob | None) -> bool:
        if expected is None:
            return self._create(key, data)
        if not self._s3:  # check, then write: not atomic (see the module's docstring)
            current = self._read_tagged(key)
            if current is None or current.tag != expected.tag:
                return False
            self.fs.pipe_file(self._path(key), data, **self._bounded)
            return True
        # FileNotFoundError: the key was deleted since it was read.
        return self._put(self._path(key), data, conflicts=(FileNotFoundError,), IfMatch=expected.tag)

    def _delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(key), **self._bounded)

    def _sizes(self, prefix: str) -> dict[str, int]:
        base = f"{self.root}/{prefix}".rstrip("/")
        try:
            found = self.fs.find(base, detail=True, **self._bounded)
        except FileNotFoundError:
            return {}
        start = len(self.root) + 1
        return {
            path[start:]: int(info.get("size") or 0)
            for path, info in found.items()
            if info.get("type") != "directory" and path.startswith(f"{base}/")
        }


def open_state_store(
    url: str | Path,
    storage_options: dict[str, Any] | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> StateStore:
    """The store at ``url``: a local folder (a path or ``file://``) or any fsspec URL.

    Nothing is contacted yet; a store that is down fails its first call (UNAVAILABLE).

    Args:
        url: a folder, or an fsspec URL such as ``s3://bucket/prefix``.
        storage_options: fsspec options (ignored for a local folder).
        timeout_s: the most seconds one call to a remote store may take.

    Raises:
        ValueError: an fsspec protocol that is unknown or not installed (``s3://`` without s3fs).

    """
    text = str(url)
    scheme = urlsplit(text).scheme
    if isinstance(url, Path) or len(scheme) <= 1:  # a path (a one-letter scheme is a drive)
        return LocalStateStore(Path(url))
    if scheme in ("file", "local"):
        return LocalStateStore(Path(urlsplit(text).path))
    try:
        return FsspecStateStore(text, storage_options, timeout_s=timeout_s)
    except (ImportError, ValueError) as exc:  # fsspec: a protocol it does not know, or its package missing
        raise ValueError(
            f"UR_STATE_URL {display_url(text)}: the {scheme!r} protocol is unknown or its package is "
            f"not installed ({exc}); for S3 install universal-runtime[s3]"
        ) from exc


@dataclass(frozen=True, slots=True)
class StorageCheck:
    """A store's :class:`~engines.storage.StorageLimits` as its saves check it, counted from its files now.

    Attributes:
        store: the store whose files are counted.
        limits: its limits.
        what: its items in words, for the message (``"custom classifiers"``).
        is_item: whether a key is the one file each item has (its manifest, its description).

    """

    store: StateStore
    limits: StorageLimits
    what: str
    is_item: Callable[[str], bool]

    def check(self, *, replaced: Iterable[str], new_item: bool, new_bytes: int) -> None:
        """Refuse a save of ``new_bytes`` that would take the store over its quota.

        Args:
            replaced: keys the save replaces or drops (their bytes are not counted as used).
            new_item: whether the save adds an item (not a replacement or a new version).
            new_bytes: bytes the save will write.

        Raises:
            ResourceExhaustedError: over a limit (see :meth:`StorageLimits.check`).
            UnavailableError: the store failed (see :meth:`StateStore.sizes`).

        """
        sizes = self.store.sizes()
        self.limits.check(
            self.what,
            items=sum(1 for key in sizes if self.is_item(key)),
            used_bytes=sum(sizes.values()) - sum(sizes.get(key, 0) for key in replaced),
            new_item=new_item,
            new_bytes=new_bytes,
        )


PUBLISH_ATTEMPTS = 8


def publish_version(
    store: StateStore,
    manifest_key: str,
    version_key: Callable[[int], str],
    data: bytes,
    *,
    first_version: Callable[[Blob | None], int],
    manifest: Callable[[Blob | None, int], bytes],
    attempts: int = PUBLISH_ATTEMPTS,
) -> tuple[int, Blob | None]:
    """Publish ``data`` as a new version: its own new key first, then the manifest naming it.

    One attempt: read the manifest (with its tag), ask ``first_version`` for the number to try (it
    may refuse by raising: quota, name taken, corrupt manifest), create ``version_key(n)`` only if
    absent (taking the next number while one exists: a file of a writer that lost a race or died
    before its manifest), then swap in ``manifest(current, n)`` only if the manifest is unchanged.
    If another writer published in between, the file is deleted (nothing names it) and the attempt
    starts again on the new manifest, after a random pause that doubles with each attempt (at most
    1 s). Version numbers increase but may skip one a losing writer held for a moment. A
    successful save deletes the files it stepped over (a crashed writer's), so they do not
    pile up against the store's quotas.

    So a manifest only ever names files that were whole before it was written, versions never
    overwrite each other, and of writers racing on one name each either publishes a version above
    the previous ones or retries: readers see one consistent latest version at every moment.
    (A compare-and-swap rather than re-read-and-merge: the merge would still need an atomic write
    to be safe, and the swap alone is enough.)

    Returns:
        The version published and the manifest it replaced (None when there was none).

    Raises:
        UnavailableError: the store failed (STATE_STORE_UNAVAILABLE), or the manifest changed under
            every one of ``attempts`` tries (STATE_STORE_CONFLICT: retry later).
        Whatever ``first_version`` raises.

    """
    for attempt in range(attempts):
        current = store.read_tagged(manifest_key)
        version = first_version(current)
        skipped: list[int] = []
        for _ in range(64):  # bounded: each step is a file some writer left, which is rare
            if store.create(version_key(version), data):
                break
            skipped.append(version)
            version += 1
        else:
            break
        if store.swap(manifest_key, manifest(current, version), current):
            # The files skipped are above the manifest this swap replaced, so no manifest names
            # them: a writer that died before its manifest left them, or one racing this save
            # holds them, whose swap (on an older manifest) now fails. Either way, garbage.
            for orphan in skipped:
                store.delete(version_key(orphan))
            return version, current
        store.delete(version_key(version))
        time.sleep(random.uniform(0.0, min(1.0, 0.025 * 2**attempt)))  # jittered: racers spread out
    raise UnavailableError(
        f"{manifest_key} in the state store {store.url} changed under {attempts} saves in a row "
        "(other replicas are saving it); retry later",
        reason=Reason.STATE_STORE_CONFLICT,
        state_url=store.url,
        key=manifest_key,
    )
