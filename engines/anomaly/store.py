"""Saved anomaly detectors: skops files (never pickle) under ``<data_dir>/anomaly/``.

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
* writes go to a temporary file that is flushed to disk and renamed into place, and the folder
  is flushed too (:func:`engines.storage.write_durable`), so a crash never leaves half a file;
* the store is bounded by a :class:`~engines.storage.StoreQuota` (detectors and bytes).

Methods are blocking; call them on the anomaly task's CPU lane (one thread), which also serializes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import shutil
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
    FeatureField,
    FeatureKind,
    FitConfig,
    Normalization,
)
from engines.errors import FailedPreconditionError, InvalidArgumentError, RuntimeServiceError
from engines.storage import StoreQuota, fsync_dir, tree_bytes, write_durable

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
_FORMAT = 1


class DetectorNotFoundError(RuntimeServiceError):
    """No saved detector has this name (NOT_FOUND, DETECTOR_NOT_FOUND)."""

    status = "NOT_FOUND"
    reason = "DETECTOR_NOT_FOUND"


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
            reason="INVALID_DETECTOR_NAME",
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

    Blocking, and long for large models (about 2 s of Python for a 100-tree isolation forest
    fitted on 200,000 rows): :func:`fit_for_store` does it in the fit's own process.
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


class DetectorStore:
    """Saves, loads (with a cache), lists and deletes detectors under ``root``.

    Args:
        root: the store folder (created on first save).
        keep_versions: saved versions kept per detector; older files are deleted.
        quota: most detectors and bytes the store may hold (default 256 and 1 GiB).

    """

    def __init__(self, root: Path, keep_versions: int = 3, quota: StoreQuota | None = None) -> None:
        self.root = Path(root)
        self.keep_versions = keep_versions
        self.quota = quota or StoreQuota()
        self._cache: dict[str, tuple[int, Detector]] = {}
        self._lock = threading.Lock()

    def _folder(self, name: str) -> Path:
        return self.root / validate_detector_name(name)

    def _manifest(self, name: str) -> dict[str, Any] | None:
        path = self._folder(name) / _MANIFEST
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise FailedPreconditionError(
                f"detector {name!r} has an unreadable manifest; delete and refit it",
                reason="DETECTOR_CORRUPT",
                detector=name,
            ) from exc
        valid = isinstance(manifest, dict) and manifest.get("format") == _FORMAT
        if not valid or not manifest.get("versions"):
            raise FailedPreconditionError(
                f"detector {name!r} has an invalid manifest; delete and refit it",
                reason="DETECTOR_CORRUPT",
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

        """
        with self._lock:
            self._check_quota(name, self._existing_manifest(name), new_bytes)

    def _existing_manifest(self, name: str) -> dict[str, Any] | None:
        return self._manifest(name) if (self._folder(name) / _MANIFEST).exists() else None

    def _check_quota(self, name: str, manifest: dict[str, Any] | None, new_bytes: int) -> None:
        folder = self._folder(name)
        versions = manifest["versions"] if manifest else []
        dropped = versions[: max(0, len(versions) + 1 - self.keep_versions)]
        freed = 0
        for old in dropped:
            with contextlib.suppress(OSError):
                freed += (folder / f"v{int(old['version'])}.skops").stat().st_size
        items = sum(1 for f in self.root.iterdir() if (f / _MANIFEST).is_file()) if self.root.is_dir() else 0
        self.quota.check(
            "anomaly detectors",
            items=items,
            used_bytes=tree_bytes(self.root) - freed,
            new_item=manifest is None,
            new_bytes=new_bytes,
        )

    def save(self, name: str, detector: Detector, data: bytes | None = None) -> int:
        """Save ``detector`` as the next version of ``name`` and return that version number.

        ``data`` is its :func:`serialize_detector` bytes when they were made elsewhere (None:
        serialize here).

        Raises:
            InvalidArgumentError: invalid name.
            ResourceExhaustedError: the store's quota would be exceeded (reason STORAGE_QUOTA_EXCEEDED);
                nothing is written.

        """
        folder = self._folder(name)
        if data is None:
            data = serialize_detector(detector)
        with self._lock:
            manifest = self._existing_manifest(name)
            self._check_quota(name, manifest, len(data))
            if not folder.is_dir():
                folder.mkdir(parents=True)
                fsync_dir(self.root)  # the new folder's entry must outlive a crash like its files
            versions: list[dict[str, Any]] = list(manifest["versions"]) if manifest else []
            version = (int(versions[-1]["version"]) + 1) if versions else 1
            write_durable(folder / f"v{version}.skops", data)
            versions.append(
                {"version": version, "sha256": _sha256(data), "created_at_ms": int(time.time() * 1000)}
            )
            dropped, versions = versions[: -self.keep_versions], versions[-self.keep_versions :]
            summary = {
                "backend": str(detector.backend),
                "schema": [[f.name, str(f.kind), str(f.encoding)] for f in detector.schema],
                "row_count": detector.row_count,
                "threshold": detector.threshold,
                "contamination": detector.contamination,
                "normalization": str(detector.normalization),
            }
            body = {"format": _FORMAT, "detector": name, "versions": versions, "latest": summary}
            write_durable(folder / _MANIFEST, json.dumps(body, indent=1).encode())
            for old in dropped:
                with contextlib.suppress(OSError):
                    (folder / f"v{int(old['version'])}.skops").unlink()
            self._cache[name] = (version, detector)
        log.info("anomaly detector saved", extra={"detector": name, "version": version})
        return version

    def load(self, name: str) -> tuple[int, Detector]:
        """Latest version of ``name`` and its detector (cached after the first load).

        Raises:
            InvalidArgumentError: invalid name.
            DetectorNotFoundError: no such detector.
            FailedPreconditionError: the file is missing, its checksum differs from the manifest,
                or it holds types outside :data:`TRUSTED_TYPES` (reason DETECTOR_UNTRUSTED /
                DETECTOR_CORRUPT); nothing from such a file is built.

        """
        with self._lock:
            manifest = self._manifest(name)
            if manifest is None:
                raise _not_found(name)
            entry = manifest["versions"][-1]
            version = int(entry["version"])
            cached = self._cache.get(name)
            if cached is not None and cached[0] == version:
                return cached
            path = self._folder(name) / f"v{version}.skops"
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise FailedPreconditionError(
                    f"detector {name!r} version {version} is missing its file; delete and refit it",
                    reason="DETECTOR_CORRUPT",
                    detector=name,
                ) from exc
            if _sha256(data) != entry.get("sha256"):
                raise FailedPreconditionError(
                    f"detector {name!r} version {version} does not match the checksum the server "
                    "wrote; refusing to load it",
                    reason="DETECTOR_UNTRUSTED",
                    detector=name,
                )
            state = self._safe_load(name, data)
            detector = Detector(state)
            self._cache[name] = (version, detector)
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
                    reason="DETECTOR_UNTRUSTED",
                    detector=name,
                )
            state = sio.loads(data, trusted=list(TRUSTED_TYPES))
        except RuntimeServiceError:
            raise
        except Exception as exc:  # skops raises several types for malformed or untrusted files
            log.warning("refused detector file", extra={"detector": name, "error": repr(exc)})
            raise FailedPreconditionError(
                f"detector {name!r} could not be loaded safely; delete and refit it",
                reason="DETECTOR_UNTRUSTED",
                detector=name,
            ) from None
        if not isinstance(state, dict) or not isinstance(state.get("encoder"), TabularEncoder):
            raise FailedPreconditionError(
                f"detector {name!r} has an unexpected layout; delete and refit it",
                reason="DETECTOR_CORRUPT",
                detector=name,
            )
        return state

    def list(self) -> list[DetectorInfo]:
        """Every saved detector with a readable manifest, sorted by name (bad folders are skipped)."""
        infos: list[DetectorInfo] = []
        if not self.root.is_dir():
            return infos
        for folder in sorted(self.root.iterdir()):
            try:
                manifest = self._manifest(folder.name) if folder.is_dir() else None
                if manifest is None:
                    continue
                latest, entry = manifest["latest"], manifest["versions"][-1]
                infos.append(
                    DetectorInfo(
                        name=folder.name,
                        version=int(entry["version"]),
                        backend=AnomalyBackend(latest["backend"]),
                        schema=tuple(
                            FeatureField(n, FeatureKind(k), CategoricalEncoding(e))
                            for n, k, e in latest["schema"]
                        ),
                        row_count=int(latest["row_count"]),
                        threshold=float(latest["threshold"]),
                        contamination=float(latest["contamination"]),
                        normalization=Normalization(latest["normalization"]),
                        created_at_ms=int(entry["created_at_ms"]),
                    )
                )
            except (RuntimeServiceError, KeyError, TypeError, ValueError):
                log.warning("skipping unreadable detector folder", extra={"folder": folder.name})
        return infos

    def delete(self, name: str) -> int:
        """Delete every version of ``name``; returns how many versions there were.

        Raises:
            InvalidArgumentError: invalid name.
            DetectorNotFoundError: no such detector.

        """
        folder = self._folder(name)
        with self._lock:
            if not folder.is_dir():
                raise _not_found(name)
            count = len(list(folder.glob("v*.skops")))
            shutil.rmtree(folder)
            fsync_dir(self.root)
            self._cache.pop(name, None)
        return count
