"""Saved anomaly detectors: skops files (never pickle) under ``anomaly/`` of the state store.

The state store (:mod:`engines.state_store`) is ``<data_dir>`` on the local disk, or the URL of
``UR_STATE_URL`` (``s3://bucket/prefix``) that several replicas share.

A :class:`DetectorStore` is one namespace: the shared ``anomaly/``, or one API key's
``owners/<hash>/anomaly/`` (:class:`engines.owners.OwnedStores`).

Layout, one folder per detector::

    <root>/<name>/manifest.json    # versions, SHA-256 of each file, summary of the latest
    <root>/<name>/v<N>.skops       # the detector's state (see Detector.state)

Safety:

* names are validated (``[A-Za-z0-9][A-Za-z0-9_.-]*``, no ``..``), and file names are built from
  the version number, never read from disk, so nothing outside the root can be named;
* a file is loaded only if its SHA-256 matches the manifest the server wrote with it;
* loading goes through ``skops.io.load`` with :data:`TRUSTED_TYPES`, an explicit list of the
  types this server writes: a file that names any other type (a tampered or foreign file) is
  refused before anything in it is built;
* a version's file is written whole under a key of its own before the manifest names it, and
  the manifest is replaced by compare-and-swap (:func:`engines.state_store.publish_version`), so
  neither a crash nor two replicas saving one name at once leave a manifest naming a missing,
  torn or foreign file (on the local disk, files are flushed and renamed or linked into place);
* the store is bounded by a :class:`~engines.storage.StorageLimits` (detectors and bytes).

Methods are blocking; call them on the anomaly task's CPU lane (one thread), which also serializes them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

from engines.anomaly.detector import Detector, fit_detector
from engines.anomaly.encoding import TabularEncoder
from engines.anomaly.types import (
    AnomalyBackend,
    CategoricalEncoding,
    DetectorInfo,
    DetectorListing,
    FeatureField,
    FeatureKind,
    FitConfig,
    Normalization,
)
from engines.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    RuntimeServiceError,
    UnavailableError,
)
from engines.reasons import Reason
from engines.state_store import Blob, LocalStateStore, StateStore, StorageCheck, publish_version
from engines.storage import StorageLimits

log = logging.getLogger(__name__)

TRUSTED_TYPES: tuple[str, ...] = (
    "engines.anomaly.encoding.TabularEncoder",
    "sklearn.tree._tree.Tree",
    "sklearn.neighbors._kd_tree.KDTree",
    "sklearn.neighbors._ball_tree.BallTree",
    "sklearn.metrics._dist_metrics.EuclideanDistance64",
    "pyod.models.ecod.ECOD",
    "pyod.models.hbos.HBOS",
    "pyod.models.copod.COPOD",
    "pyod.models.knn.KNN",
)
"""Types outside skops' defaults that detector files may contain (checked with
``skops.io.get_untrusted_types`` for every backend in the tests); scikit-learn estimators, numpy
arrays and builtins are trusted by skops itself."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_MANIFEST = "manifest.json"
_VERSION_FILE = re.compile(r"v[0-9]+\.skops")
_FORMAT = 1


class DetectorNotFoundError(RuntimeServiceError):
    """No saved detector has this name (NOT_FOUND, DETECTOR_NOT_FOUND)."""

    status = "NOT_FOUND"
    reason = Reason.DETECTOR_NOT_FOUND


def validate_detector_name(name: str, field: str = "detector") -> str:
    r"""Return ``name`` if it is a safe detector name.

    Raises:
        InvalidArgumentError: empty, over 128 characters, or containing anything outside
            ``[A-Za-z0-9_.-]`` (so no ``/``, ``\``) or ``..`` (reason INVALID_DETECTOR_NAME).

    """
    if not _NAME.fullmatch(name or "") or ".." in name:
        raise InvalidArgumentError(
            f"{field}: invalid detector name {name!r}: use 1-128 characters of [A-Za-z0-9_.-], "
            "starting with a letter or digit, without '..'",
            reason=Reason.INVALID_DETECTOR_NAME,
            field=field,
            detector=name,
        )
    return name


def _not_found(name: str) -> DetectorNotFoundError:
    return DetectorNotFoundError(f"no anomaly detector named {name!r}", field="detector", detector=name)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def serialize_detector(detector: Detector) -> bytes:
    """The skops bytes of ``detector``'s state, as :meth:`DetectorStore.save` writes them.

    Blocking, and long for large models (seconds of Python for a large isolation forest):
    :func:`fit_for_store` does it in the fit's own process.
    """
    import skops.io as sio

    return sio.dumps(detector.state())


def fit_for_store(rows: Any, config: FitConfig) -> tuple[Detector, bytes]:
    """Fit a detector (:func:`~engines.anomaly.detector.fit_detector`) and serialize it, in one job.

    Returns:
        The detector and its skops bytes, for :meth:`DetectorStore.save`.

    Raises:
        InvalidArgumentError: as :func:`~engines.anomaly.detector.fit_detector`.

    """
    detector = fit_detector(rows, config)
    return detector, serialize_detector(detector)


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def _bounded_int(value: Any, high: int) -> int:
    """``value`` as an int in ``[0, high]`` (the range of its field on the wire).

    Raises:
        ValueError, TypeError, OverflowError: not an integer-valued number in range.

    """
    number = int(value)
    if number != value or not 0 <= number <= high:
        raise ValueError(f"{value!r} is not an integer in [0, {high}]")
    return number


def _detector_info(name: str, manifest: dict[str, Any]) -> DetectorInfo:
    """The summary of a detector from its manifest, every value checked against its type and range.

    Raises:
        LookupError, TypeError, ValueError, ArithmeticError, AttributeError: the manifest does
            not hold a valid summary.

    """
    latest, entry = manifest["latest"], manifest["versions"][-1]
    return DetectorInfo(
        name=name,
        version=_bounded_int(entry["version"], INT32_MAX),
        backend=AnomalyBackend(latest["backend"]),
        schema=tuple(
            FeatureField(str(n), FeatureKind(k), CategoricalEncoding(e)) for n, k, e in latest["schema"]
        ),
        row_count=_bounded_int(latest["row_count"], INT32_MAX),
        threshold=float(latest["threshold"]),
        contamination=float(latest["contamination"]),
        normalization=Normalization(latest["normalization"]),
        created_at_ms=_bounded_int(entry["created_at_ms"], INT64_MAX),
    )


class DetectorStore:
    """Saves, loads (with a cache), lists and deletes detectors in a :class:`StateStore`.

    Several replicas may share one store (``UR_STATE_URL``): a save publishes through
    :func:`~engines.state_store.publish_version` (the version's file under a new key, then the
    manifest by compare-and-swap), and :meth:`load` reads the manifest on every call (or once per
    ``cache_ttl_s``) and reloads when its latest version or checksum differs from the cached one,
    so a detector fitted, refitted or deleted through another replica is seen at once.

    Args:
        root: the store (a folder, created on first save, or a :class:`StateStore`).
        keep_versions: saved versions kept per detector; older files are deleted.
        limits: most detectors and bytes the store may hold (default 256 and 1 GiB).
        cache_ttl_s: seconds a loaded detector is served without looking at the manifest again
            (0: look on every call, one small read).

    """

    def __init__(
        self,
        root: Path | StateStore,
        keep_versions: int = 3,
        limits: StorageLimits | None = None,
        cache_ttl_s: float = 0.0,
    ) -> None:
        self.store = root if isinstance(root, StateStore) else LocalStateStore(Path(root))
        self.keep_versions = keep_versions
        self.limits = limits or StorageLimits()
        # A detector's manifest sits at <name>/manifest.json, one per detector whatever its versions.
        self._storage_check = StorageCheck(
            self.store,
            self.limits,
            "anomaly detectors",
            lambda key: key.count("/") == 1 and key.endswith(f"/{_MANIFEST}"),
        )
        self.cache_ttl_s = cache_ttl_s
        # name -> (version, sha256, detector, monotonic time the manifest was last read)
        self._cache: dict[str, tuple[int, str, Detector, float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _manifest_key(name: str) -> str:
        return f"{validate_detector_name(name)}/{_MANIFEST}"

    @staticmethod
    def _version_key(name: str, version: int) -> str:
        return f"{name}/v{int(version)}.skops"

    def _manifest(self, name: str, blob: Blob | None = None, *, read: bool = True) -> dict[str, Any] | None:
        if read:  # a plain read (one GET on S3): only saves need the tag, and they pass the blob
            data = self.store.read(self._manifest_key(name))
            blob = None if data is None else Blob(data, "")
        if blob is None:
            return None
        try:
            manifest = json.loads(blob.data.decode("utf-8"))
        except ValueError as exc:
            raise FailedPreconditionError(
                f"detector {name!r} has an unreadable manifest; delete and refit it",
                reason=Reason.DETECTOR_CORRUPT,
                detector=name,
            ) from exc
        valid = isinstance(manifest, dict) and manifest.get("format") == _FORMAT
        if not valid or not manifest.get("versions"):
            raise FailedPreconditionError(
                f"detector {name!r} has an invalid manifest; delete and refit it",
                reason=Reason.DETECTOR_CORRUPT,
                detector=name,
            )
        return manifest

    def check_quota(self, name: str, new_bytes: int = 0) -> None:
        """Refuse saving ``new_bytes`` as the next version of ``name`` if that would exceed the quota.

        A new version of an existing detector is not a new item, and the versions it pushes out
        of ``keep_versions`` are deleted after the save, so their bytes do not count.

        Raises:
            InvalidArgumentError: invalid name.
            FailedPreconditionError: the detector's manifest is unreadable (reason DETECTOR_CORRUPT).
            ResourceExhaustedError: over the quota (reason STORAGE_QUOTA_EXCEEDED).
            UnavailableError: the state store failed (reason STATE_STORE_UNAVAILABLE).

        """
        with self._lock:
            self._check_quota(name, self._manifest(name), new_bytes)

    def _check_quota(self, name: str, manifest: dict[str, Any] | None, new_bytes: int) -> None:
        versions = manifest["versions"] if manifest else []
        dropped = versions[: max(0, len(versions) + 1 - self.keep_versions)]
        self._storage_check.check(
            replaced=[self._version_key(name, old["version"]) for old in dropped],
            new_item=manifest is None,
            new_bytes=new_bytes,
        )

    def save(self, name: str, detector: Detector, data: bytes | None = None) -> int:
        """Save ``detector`` as the next version of ``name`` and return that version number.

        ``data`` is its :func:`serialize_detector` bytes when they were made elsewhere (None:
        serialize here). Replicas saving one name at once each publish a version of their own
        (see :func:`~engines.state_store.publish_version`); the highest is the latest.

        Raises:
            InvalidArgumentError: invalid name.
            FailedPreconditionError: the detector's manifest is unreadable (reason DETECTOR_CORRUPT).
            ResourceExhaustedError: the store's quota would be exceeded (reason STORAGE_QUOTA_EXCEEDED);
                nothing is written.
            UnavailableError: the state store failed (STATE_STORE_UNAVAILABLE), or kept changing
                under the save (STATE_STORE_CONFLICT).

        """
        manifest_key = self._manifest_key(name)
        if data is None:
            data = serialize_detector(detector)
        summary = {
            "backend": str(detector.backend),
            "schema": [[f.name, str(f.kind), str(f.encoding)] for f in detector.schema],
            "row_count": detector.row_count,
            "threshold": detector.threshold,
            "contamination": detector.contamination,
            "normalization": str(detector.normalization),
        }
        entry = {"sha256": _sha256(data)}
        dropped: list[dict[str, Any]] = []

        def first_version(current: Blob | None) -> int:
            manifest = self._manifest(name, current, read=False)
            self._check_quota(name, manifest, len(data))
            return int(manifest["versions"][-1]["version"]) + 1 if manifest else 1

        def new_manifest(current: Blob | None, version: int) -> bytes:
            manifest = self._manifest(name, current, read=False)
            versions: list[dict[str, Any]] = list(manifest["versions"]) if manifest else []
            versions.append({"version": version, **entry, "created_at_ms": int(time.time() * 1000)})
            dropped[:] = versions[: -self.keep_versions]
            body = {"format": _FORMAT, "detector": name, "versions": versions[-self.keep_versions :]}
            return json.dumps({**body, "latest": summary}, indent=1).encode()

        with self._lock:
            version, _ = publish_version(
                self.store,
                manifest_key,
                lambda n: self._version_key(name, n),
                data,
                first_version=first_version,
                manifest=new_manifest,
            )
            for old in dropped:  # no longer named by the manifest
                self.store.delete(self._version_key(name, old["version"]))
            self._cache[name] = (version, entry["sha256"], detector, time.monotonic())
        log.info("anomaly detector saved", extra={"detector": name, "version": version})
        return version

    def load(self, name: str) -> tuple[int, Detector]:
        """Latest version of ``name`` and its detector (cached while the manifest's latest is unchanged).

        Raises:
            InvalidArgumentError: invalid name.
            DetectorNotFoundError: no such detector (also when another replica deleted it).
            FailedPreconditionError: the file is missing, its checksum differs from the manifest,
                or it holds types outside :data:`TRUSTED_TYPES` (reason DETECTOR_UNTRUSTED /
                DETECTOR_CORRUPT); nothing from such a file is built.
            UnavailableError: the state store failed (reason STATE_STORE_UNAVAILABLE).

        """
        with self._lock:
            cached = self._cache.get(name)
            if cached is not None and time.monotonic() - cached[3] < self.cache_ttl_s:
                return cached[0], cached[2]
            for attempt in range(2):
                manifest = self._manifest(name)
                if manifest is None:
                    self._cache.pop(name, None)  # deleted, maybe through another replica
                    raise _not_found(name)
                entry = manifest["versions"][-1]
                version, sha = int(entry["version"]), str(entry.get("sha256"))
                if cached is not None and cached[:2] == (version, sha):
                    self._cache[name] = (version, sha, cached[2], time.monotonic())
                    return version, cached[2]
                data = self.store.read(self._version_key(name, version))
                if data is not None:
                    break
                # A newer save (through any replica) may have deleted it just after we read the
                # manifest: look once more before calling the detector broken.
                if attempt:
                    raise FailedPreconditionError(
                        f"detector {name!r} version {version} is missing its file; delete and refit it",
                        reason=Reason.DETECTOR_CORRUPT,
                        detector=name,
                    )
            if _sha256(data) != sha:
                raise FailedPreconditionError(
                    f"detector {name!r} version {version} does not match the checksum the server "
                    "wrote; refusing to load it",
                    reason=Reason.DETECTOR_UNTRUSTED,
                    detector=name,
                )
            state = self._safe_load(name, data)
            detector = Detector(state)
            self._cache[name] = (version, sha, detector, time.monotonic())
            return version, detector

    @staticmethod
    def _safe_load(name: str, data: bytes) -> dict[str, Any]:
        import skops.io as sio

        try:
            untrusted = set(sio.get_untrusted_types(data=data)) - set(TRUSTED_TYPES)
            if untrusted:
                raise FailedPreconditionError(
                    f"detector {name!r} holds types this server never writes "
                    f"({', '.join(sorted(untrusted))}); refusing to load it",
                    reason=Reason.DETECTOR_UNTRUSTED,
                    detector=name,
                )
            state = sio.loads(data, trusted=list(TRUSTED_TYPES))
        except RuntimeServiceError:
            raise
        except Exception as exc:  # skops raises several types for malformed or untrusted files
            log.warning("refused detector file", extra={"detector": name, "error": repr(exc)})
            raise FailedPreconditionError(
                f"detector {name!r} could not be loaded safely; delete and refit it",
                reason=Reason.DETECTOR_UNTRUSTED,
                detector=name,
            ) from None
        if not isinstance(state, dict) or not isinstance(state.get("encoder"), TabularEncoder):
            raise FailedPreconditionError(
                f"detector {name!r} has an unexpected layout; delete and refit it",
                reason=Reason.DETECTOR_CORRUPT,
                detector=name,
            )
        return state

    def list(self) -> list[DetectorInfo]:
        """Every saved detector with a readable manifest, sorted by name (bad ones are skipped).

        Raises:
            UnavailableError: the state store failed (reason STATE_STORE_UNAVAILABLE).

        """
        return self.listing().detectors

    def listing(self) -> DetectorListing:
        """Every saved detector, sorted by name: readable ones, and the names of unreadable ones.

        Raises:
            UnavailableError: the state store failed (reason STATE_STORE_UNAVAILABLE).

        """
        infos: list[DetectorInfo] = []
        unreadable: list[str] = []
        names = sorted(
            key.split("/")[0]
            for key in self.store.sizes()
            if key.count("/") == 1 and key.endswith(f"/{_MANIFEST}")
        )
        for name in names:
            try:
                manifest = self._manifest(name)
                if manifest is None:  # deleted since it was listed
                    continue
                infos.append(_detector_info(name, manifest))
            except UnavailableError:
                raise
            # Whatever a hand-edited or foreign manifest holds (wrong types, Infinity, a list):
            # the rest are still listed, and the broken one is named in the answer and the log.
            except (
                RuntimeServiceError,
                LookupError,
                TypeError,
                ValueError,
                ArithmeticError,
                AttributeError,
            ) as exc:
                log.warning(
                    "skipping unreadable detector folder",
                    extra={"folder": name, "error": type(exc).__name__},
                )
                unreadable.append(name)
        return DetectorListing(infos, unreadable)

    def delete(self, name: str) -> int:
        """Delete every version of ``name``; returns how many version files there were.

        The manifest goes first, so every replica answers NOT_FOUND from then on and no manifest
        ever names a deleted file; then the version files.

        Raises:
            InvalidArgumentError: invalid name.
            DetectorNotFoundError: no such detector.
            UnavailableError: the state store failed (reason STATE_STORE_UNAVAILABLE).

        """
        manifest_key = self._manifest_key(name)
        with self._lock:
            self._cache.pop(name, None)
            files = self.store.sizes(name)
            if manifest_key not in files:
                raise _not_found(name)
            self.store.delete(manifest_key)
            versions = [key for key in files if _VERSION_FILE.fullmatch(key.split("/", 1)[1])]
            for key in files:
                if key != manifest_key:
                    self.store.delete(key)
        return len(versions)
