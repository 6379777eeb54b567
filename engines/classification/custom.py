"""Custom classifiers fitted from labelled examples through the API, saved under ``classifiers/``.

``classifiers/`` is a folder of the state store (:mod:`engines.state_store`): ``<data_dir>`` on
the local disk, or the URL of ``UR_STATE_URL`` that several replicas share. A :class:`ClassifierStore`
is one namespace: the shared ``classifiers/``, or one API key's ``owners/<hash>/classifiers/``
(:class:`engines.owners.OwnedStores`). Each classifier is:

* ``<name>.json``: what it is (embedding model, labels, example count, time, training accuracy)
  and which head is current: its ``version`` and the head's ``sha256``;
* ``<name>.v<N>.skops``: the scikit-learn head of version N (see :mod:`engines.classification.heads`).
  Files of servers before versions (``<name>.skops``, a description without ``version``) still load.

A save writes the new head under its own key, then swaps in the description by compare-and-swap
(:func:`engines.state_store.publish_version`), then deletes the previous head: a description never
names a missing or foreign head, even with replicas saving the same name at once. Names are
validated before any key is built, so a client can never make the server read or write outside
that folder. The store is bounded by a :class:`StorageLimits`.

The store's methods are blocking (store I/O and skops); callers run them off the event loop.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from engines.classification.heads import dump_head, load_head_bytes
from engines.encoder_types import CLASSIFIER_NAME, ClassifierInfo, validate_classifier_name
from engines.errors import FailedPreconditionError, ModelLoadError, ModelNotFoundError
from engines.reasons import Reason
from engines.state_store import Blob, LocalStateStore, StateStore, StorageCheck, publish_version
from engines.storage import StorageLimits

HEAD_SUFFIX = ".skops"
log = logging.getLogger(__name__)

INFO_SUFFIX = ".json"
# What a description file holds: not ``shared``, which is where it was found, not what it says.
_INFO_FIELDS = frozenset(f.name for f in fields(ClassifierInfo)) - {"shared"}


@dataclass(slots=True)
class CustomClassifier:
    """A loaded custom classifier: its description and its fitted head."""

    info: ClassifierInfo
    head: Any

    @property
    def labels(self) -> list[str]:
        """Label names in the head's column order."""
        return [str(c) for c in self.head.classes_]


def _head_key(name: str, version: int) -> str:
    # Version 0: a head saved before versions existed.
    return f"{name}{HEAD_SUFFIX}" if version == 0 else f"{name}.v{version}{HEAD_SUFFIX}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _exists_error(name: str) -> FailedPreconditionError:
    return FailedPreconditionError(
        f"a classifier named {name!r} exists; set overwrite to replace it",
        reason=Reason.CLASSIFIER_EXISTS,
        field="name",
        name=name,
    )


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def _in_range(value: Any, high: int) -> int:
    """``value`` if it is an int in ``[0, high]`` (its field's range on the wire).

    Raises:
        TypeError: not an int. ValueError: out of range.

    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{type(value).__name__} is not an integer")
    if not 0 <= value <= high:
        raise ValueError(f"{value} is out of [0, {high}]")
    return value


def _check_info(info: ClassifierInfo) -> None:
    """Raise TypeError or ValueError unless every field of ``info`` has its declared type and range."""
    if not (isinstance(info.name, str) and isinstance(info.embedding_model, str)):
        raise TypeError("name and embedding_model are strings")
    if not isinstance(info.labels, list) or not all(isinstance(label, str) for label in info.labels):
        raise TypeError("labels is a list of strings")
    _in_range(info.example_count, INT32_MAX)
    _in_range(info.created_at_unix_ms, INT64_MAX)
    if not isinstance(info.training_accuracy, (int, float)) or isinstance(info.training_accuracy, bool):
        raise TypeError("training_accuracy is a number")


def _described(info: ClassifierInfo) -> dict[str, Any]:
    """The fields of ``info`` a description file holds (:data:`_INFO_FIELDS`)."""
    return {key: value for key, value in asdict(info).items() if key in _INFO_FIELDS}


def _is_description_key(key: str) -> bool:
    """Whether ``key`` is a classifier's description (one per classifier)."""
    return key.endswith(INFO_SUFFIX) and CLASSIFIER_NAME.fullmatch(key.removesuffix(INFO_SUFFIX)) is not None


class ClassifierStore:
    """Saved custom classifiers in one folder of a state store, with a cache of loaded heads.

    :meth:`get` reads the description on every call (or once per ``cache_ttl_s``) and reloads the
    head when its version or checksum changed, so a classifier fitted, replaced or deleted through
    another replica is seen at once.

    Args:
        root: the folder (created on first save), or a :class:`StateStore`.
        limits: most classifiers and bytes the folder may hold (default 256 and 1 GiB).
        cache_ttl_s: seconds a loaded classifier is served without reading its description again.

    """

    def __init__(
        self, root: Path | StateStore, limits: StorageLimits | None = None, cache_ttl_s: float = 0.0
    ) -> None:
        self.store = root if isinstance(root, StateStore) else LocalStateStore(Path(root))
        self.limits = limits or StorageLimits()
        self._storage_check = StorageCheck(self.store, self.limits, "custom classifiers", _is_description_key)
        self.cache_ttl_s = cache_ttl_s
        # name -> (version, head sha256, classifier, monotonic time the description was last read)
        self._cache: dict[str, tuple[int, str, CustomClassifier, float]] = {}
        self._lock = threading.Lock()
        self._reported: set[str] = (
            set()
        )  # keys of foreign files already logged (bounded by the store's quota)

    @staticmethod
    def _info_key(name: str) -> str:
        return f"{validate_classifier_name(name)}{INFO_SUFFIX}"

    @staticmethod
    def _parse(blob: Blob) -> tuple[ClassifierInfo, int, str | None]:
        """The description, head version and head checksum (None for a file without versions).

        Raises:
            ValueError, TypeError: not a description this server writes (not a JSON object, a
                field missing, of the wrong type or out of its range on the wire).

        """
        raw = json.loads(blob.data.decode("utf-8"))
        if not isinstance(raw, dict):
            raise TypeError("a classifier description is a JSON object")
        info = ClassifierInfo(**{k: v for k, v in raw.items() if k in _INFO_FIELDS})
        _check_info(info)
        sha = raw.get("sha256")
        if sha is not None and not isinstance(sha, str):
            raise TypeError("sha256 is a string")
        return info, _in_range(raw.get("version", 0), INT32_MAX), sha

    def exists(self, name: str) -> bool:
        """Whether a classifier called ``name`` is saved.

        Raises:
            InvalidArgumentError: invalid name.
            UnavailableError: the state store failed (reason STATE_STORE_UNAVAILABLE).

        """
        return self.store.read(self._info_key(name)) is not None

    def get(self, name: str) -> CustomClassifier | None:
        """The classifier called ``name`` (loaded again only when it changed), or None when there is none.

        Raises:
            InvalidArgumentError: invalid name.
            ModelLoadError: its head is unreadable, missing, does not match the checksum of its
                description, or holds untrusted types.
            UnavailableError: the state store failed (reason STATE_STORE_UNAVAILABLE).

        """
        key = self._info_key(name)
        with self._lock:
            cached = self._cache.get(name)
            if cached is not None and time.monotonic() - cached[3] < self.cache_ttl_s:
                return cached[2]
            for attempt in range(2):
                raw = self.store.read(key)  # one GET on S3: only saves need the tag
                if raw is None:
                    self._cache.pop(name, None)  # deleted, maybe through another replica
                    return None
                try:
                    info, version, sha = self._parse(Blob(raw, ""))
                except (ValueError, TypeError) as exc:
                    raise ModelLoadError(
                        f"classifier {name!r} has an unreadable description", reason=Reason.MODEL_FILE_INVALID
                    ) from exc
                if cached is not None and cached[:2] == (version, str(sha)):
                    self._cache[name] = (version, str(sha), cached[2], time.monotonic())
                    return cached[2]
                data = self.store.read(_head_key(name, version))
                if data is not None:
                    break
                if attempt:  # missing twice: not a save through another replica replacing it
                    raise ModelLoadError(
                        f"classifier {name!r} is missing its head file; delete and refit it",
                        reason=Reason.MODEL_FILE_INVALID,
                    )
            if sha is not None and _sha256(data) != sha:
                raise ModelLoadError(
                    f"classifier {name!r} head does not match the checksum the server wrote",
                    reason=Reason.UNTRUSTED_MODEL_FILE,
                )
            loaded = CustomClassifier(info=info, head=load_head_bytes(data, _head_key(name, version)))
            self._cache[name] = (version, str(sha), loaded, time.monotonic())
            return loaded

    def check_quota(self, name: str, new_bytes: int = 0) -> None:
        """Refuse saving ``new_bytes`` as the classifier ``name`` if that would exceed the quota.

        Replacing a classifier frees its current files first, so it never counts as a new one.

        Raises:
            InvalidArgumentError: invalid name.
            ResourceExhaustedError: over the quota (reason STORAGE_QUOTA_EXCEEDED).
            UnavailableError: the state store failed (reason STATE_STORE_UNAVAILABLE).

        """
        self._check_quota(name, self.store.read_tagged(self._info_key(name)), new_bytes)

    def _check_quota(self, name: str, current: Blob | None, new_bytes: int) -> None:
        replaced = [] if current is None else [self._info_key(name), _head_key(name, self._version(current))]
        self._storage_check.check(replaced=replaced, new_item=current is None, new_bytes=new_bytes)

    def _version(self, blob: Blob) -> int:
        try:
            return self._parse(blob)[1]
        except (ValueError, TypeError):
            return 0

    def save(self, info: ClassifierInfo, head: Any, *, overwrite: bool = True) -> CustomClassifier:
        """Write (or replace) the classifier ``info.name`` and cache it.

        The head goes under a new key first, the description (naming the head's version and
        checksum) is swapped in last, and the previous head is deleted after: neither a crash nor
        a save through another replica at the same moment leaves a description without its head.

        Args:
            info: the classifier's description.
            head: the fitted scikit-learn head.
            overwrite: replace a classifier of that name (false: refuse, even one another replica
                saved an instant ago).

        Raises:
            InvalidArgumentError: invalid name.
            FailedPreconditionError: the name is taken and ``overwrite`` is false (CLASSIFIER_EXISTS).
            ResourceExhaustedError: the store's quota would be exceeded (reason STORAGE_QUOTA_EXCEEDED);
                nothing is written.
            UnavailableError: the state store failed (STATE_STORE_UNAVAILABLE), or kept changing
                under the save (STATE_STORE_CONFLICT).

        """
        name = info.name
        key = self._info_key(name)
        head_bytes = dump_head(head)
        sha = _sha256(head_bytes)
        # The description's size does not depend on the version's digits enough to matter here.
        info_size = len(json.dumps({**_described(info), "version": 1, "sha256": sha}, indent=2).encode())

        def first_version(current: Blob | None) -> int:
            if current is not None and not overwrite:
                raise _exists_error(name)
            self._check_quota(name, current, len(head_bytes) + info_size)
            return 1 if current is None else self._version(current) + 1

        def description(_current: Blob | None, version: int) -> bytes:
            return json.dumps({**_described(info), "version": version, "sha256": sha}, indent=2).encode()

        with self._lock:
            version, previous = publish_version(
                self.store,
                key,
                lambda n: _head_key(name, n),
                head_bytes,
                first_version=first_version,
                manifest=description,
            )
            if previous is not None:
                self.store.delete(_head_key(name, self._version(previous)))
            saved = CustomClassifier(info=info, head=head)
            self._cache[name] = (version, sha, saved, time.monotonic())
            return saved

    def list(self) -> list[ClassifierInfo]:
        """Every saved classifier's description, sorted by name (unreadable entries are skipped).

        Raises:
            UnavailableError: the state store failed (reason STATE_STORE_UNAVAILABLE).

        """
        infos = []
        for key in sorted(self.store.sizes()):
            name = key.removesuffix(INFO_SUFFIX)
            if "/" in key or not key.endswith(INFO_SUFFIX) or not CLASSIFIER_NAME.fullmatch(name):
                continue
            blob = self.store.read_tagged(key)
            try:
                if blob is None:  # deleted since it was listed
                    continue
                info = self._parse(blob)[0]
                if info.name != name:
                    raise ValueError("the description names another classifier")
            except (ValueError, TypeError) as exc:
                # A foreign or hand-edited file: the rest are still listed, this one named in the log.
                if key not in self._reported:  # once per file, not at every listing
                    self._reported.add(key)
                    log.warning(
                        "skipping a file that is not a classifier", extra={"key": key, "error": str(exc)}
                    )
                continue
            infos.append(info)
        return infos

    def delete(self, name: str) -> ClassifierInfo:
        """Delete the classifier called ``name`` and return its description.

        The description goes first (every replica answers NOT_FOUND from then on), then the head.

        Raises:
            InvalidArgumentError: invalid name.
            ModelNotFoundError: no such classifier (reason CLASSIFIER_NOT_FOUND).
            UnavailableError: the state store failed (reason STATE_STORE_UNAVAILABLE).

        """
        key = self._info_key(name)
        with self._lock:
            self._cache.pop(name, None)
            blob = self.store.read_tagged(key)
            if blob is None:
                raise ModelNotFoundError(
                    f"no custom classifier named {name!r}",
                    reason=Reason.CLASSIFIER_NOT_FOUND,
                    field="name",
                    name=name,
                )
            info, version, _ = self._parse(blob)
            self.store.delete(key)
            self.store.delete(_head_key(name, version))
            return info


def now_unix_ms() -> int:
    """Current wall-clock time in milliseconds since the Unix epoch."""
    return int(time.time() * 1000)
