"""Custom classifiers fitted from labelled examples through the API, saved under ``data_dir/classifiers/``.

Each classifier is two files named after it: ``<name>.skops`` (the scikit-learn head, see
:mod:`engines.classification.heads`) and ``<name>.json`` (what it is: embedding model, labels,
example count, time, training accuracy). Names are validated before any path is built, so a
client can never make the server read or write outside that folder. The files are the source
of truth: a restarted server finds every classifier again. Files are written durably (see
:func:`engines.storage.write_durable`) and the folder is bounded by a :class:`StoreQuota`.

The store's methods are blocking (disk and skops); callers run them off the event loop.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engines.classification.heads import dump_head, load_head
from engines.encoder_types import CLASSIFIER_NAME, ClassifierInfo, validate_classifier_name
from engines.errors import ModelNotFoundError
from engines.storage import StoreQuota, fsync_dir, tree_bytes, write_durable

HEAD_SUFFIX = ".skops"
INFO_SUFFIX = ".json"


@dataclass(slots=True)
class CustomClassifier:
    """A loaded custom classifier: its description and its fitted head."""

    info: ClassifierInfo
    head: Any

    @property
    def labels(self) -> list[str]:
        """Label names in the head's column order."""
        return [str(c) for c in self.head.classes_]


class ClassifierStore:
    """Saved custom classifiers in one folder, with an in-memory cache of loaded heads.

    Args:
        root: the folder (created on first save).
        quota: most classifiers and bytes the folder may hold (default 256 and 1 GiB).

    """

    def __init__(self, root: Path, quota: StoreQuota | None = None) -> None:
        self.root = Path(root)
        self.quota = quota or StoreQuota()
        self._cache: dict[str, CustomClassifier] = {}
        self._lock = threading.Lock()

    def _paths(self, name: str) -> tuple[Path, Path]:
        validate_classifier_name(name)
        return self.root / f"{name}{HEAD_SUFFIX}", self.root / f"{name}{INFO_SUFFIX}"

    def exists(self, name: str) -> bool:
        """Whether a classifier called ``name`` is saved."""
        head, info = self._paths(name)
        return head.is_file() and info.is_file()

    def get(self, name: str) -> CustomClassifier | None:
        """The classifier called ``name`` (loaded once, then cached), or None when there is none.

        Raises:
            InvalidArgumentError: invalid name.
            ModelLoadError: its head file is unreadable or holds untrusted types.

        """
        with self._lock:
            cached = self._cache.get(name)
            if cached is not None:
                return cached
            head_path, info_path = self._paths(name)
            if not (head_path.is_file() and info_path.is_file()):
                return None
            info = ClassifierInfo(**json.loads(info_path.read_text(encoding="utf-8")))
            loaded = self._cache[name] = CustomClassifier(info=info, head=load_head(head_path))
            return loaded

    def check_quota(self, name: str, new_bytes: int = 0) -> None:
        """Refuse saving ``new_bytes`` as the classifier ``name`` if that would exceed the quota.

        Replacing a classifier frees its current files first, so it never counts as a new one.

        Raises:
            InvalidArgumentError: invalid name.
            ResourceExhaustedError: over the quota (reason STORAGE_QUOTA_EXCEEDED).

        """
        head_path, info_path = self._paths(name)
        saved = self.root.glob(f"*{INFO_SUFFIX}") if self.root.is_dir() else ()
        items = sum(1 for p in saved if CLASSIFIER_NAME.fullmatch(p.name.removesuffix(INFO_SUFFIX)))
        replaced = sum(p.stat().st_size for p in (head_path, info_path) if p.is_file())
        self.quota.check(
            "custom classifiers",
            items=items,
            used_bytes=tree_bytes(self.root) - replaced,
            new_item=not info_path.is_file(),
            new_bytes=new_bytes,
        )

    def save(self, info: ClassifierInfo, head: Any) -> CustomClassifier:
        """Write (or replace) the classifier ``info.name`` and cache it.

        The head is written first and the description last, each atomically and flushed to
        disk, so a crash never leaves a description without its head, nor a torn file.

        Raises:
            InvalidArgumentError: invalid name.
            ResourceExhaustedError: the store's quota would be exceeded (reason STORAGE_QUOTA_EXCEEDED);
                nothing is written.

        """
        head_path, info_path = self._paths(info.name)
        head_bytes = dump_head(head)
        info_bytes = json.dumps(asdict(info), indent=2).encode()
        with self._lock:
            self.check_quota(info.name, len(head_bytes) + len(info_bytes))
            self.root.mkdir(parents=True, exist_ok=True)
            write_durable(head_path, head_bytes)
            write_durable(info_path, info_bytes)
            saved = self._cache[info.name] = CustomClassifier(info=info, head=head)
            return saved

    def list(self) -> list[ClassifierInfo]:
        """Every saved classifier's description, sorted by name (unreadable entries are skipped)."""
        if not self.root.is_dir():
            return []
        infos = []
        for path in sorted(self.root.glob(f"*{INFO_SUFFIX}")):
            name = path.name.removesuffix(INFO_SUFFIX)
            if not CLASSIFIER_NAME.fullmatch(name) or not (self.root / f"{name}{HEAD_SUFFIX}").is_file():
                continue
            try:
                infos.append(ClassifierInfo(**json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, TypeError):
                continue
        return infos

    def delete(self, name: str) -> ClassifierInfo:
        """Delete the classifier called ``name`` and return its description.

        Raises:
            InvalidArgumentError: invalid name.
            ModelNotFoundError: no such classifier (reason CLASSIFIER_NOT_FOUND).

        """
        head_path, info_path = self._paths(name)
        with self._lock:
            if not info_path.is_file():
                raise ModelNotFoundError(
                    f"no custom classifier named {name!r}",
                    reason="CLASSIFIER_NOT_FOUND",
                    field="name",
                    name=name,
                )
            info = ClassifierInfo(**json.loads(info_path.read_text(encoding="utf-8")))
            info_path.unlink(missing_ok=True)
            head_path.unlink(missing_ok=True)
            fsync_dir(self.root)  # so a deleted classifier does not come back after a crash
            self._cache.pop(name, None)
            return info


def now_unix_ms() -> int:
    """Current wall-clock time in milliseconds since the Unix epoch."""
    return int(time.time() * 1000)
