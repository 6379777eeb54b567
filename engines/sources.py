"""Resolve a catalog ``source`` to something a loader takes: a local path or a hub id.

Forms (catalog files are operator configuration, never client input):

* ``pkg://<python_package>/<relative/path>``: a file or folder inside an installed package,
  found with ``importlib.util.find_spec`` without importing the package (some model
  packages import heavy plugins at import time);
* an absolute path, ``~/path`` or ``file://`` URL: a local file or folder;
* ``<org>/<name>`` (optionally ``<org>/<name>/<file.gguf>``): a Hugging Face hub id, passed
  through unchanged for the loader (and its offline cache).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from engines.errors import ModelLoadError
from engines.reasons import Reason

PACKAGE_SCHEME = "pkg://"
FILE_SCHEME = "file://"


@dataclass(frozen=True, slots=True)
class ResolvedSource:
    """Where weights are: ``path`` for local files, ``hub_id`` otherwise (exactly one is set)."""

    path: Path | None = None
    hub_id: str | None = None

    @property
    def location(self) -> str:
        """The path or hub id as a string, for loaders that accept either."""
        return str(self.path) if self.path is not None else str(self.hub_id)


def resolve_source(source: str) -> ResolvedSource:
    """Resolve a catalog source string.

    Raises:
        ModelLoadError: a package that is not installed, or a path that does not exist.

    """
    if source.startswith(PACKAGE_SCHEME):
        package, _, relative = source.removeprefix(PACKAGE_SCHEME).partition("/")
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):  # "a.b" with no package "a", or an empty name
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise ModelLoadError(
                f"model package {package!r} is not installed",
                reason=Reason.MODEL_SOURCE_MISSING,
                package=package,
            )
        path = Path(next(iter(spec.submodule_search_locations))) / relative
        return ResolvedSource(path=_existing(path, source))
    if source.startswith(FILE_SCHEME):
        return ResolvedSource(path=_existing(Path(source.removeprefix(FILE_SCHEME)), source))
    if source.startswith(("/", "~", ".")):
        return ResolvedSource(path=_existing(Path(source).expanduser(), source))
    return ResolvedSource(hub_id=source)


def _existing(path: Path, source: str) -> Path:
    if not path.exists():
        raise ModelLoadError(f"model source {source!r} does not exist", reason=Reason.MODEL_SOURCE_MISSING)
    return path.resolve()


def file_in_folder(folder: Path, name: str, *, option: str, model: str) -> Path:
    """The file an option names inside its model's source ``folder``, resolved (symlinks followed).

    A catalog's file options (a head, a label map, an ONNX or GGUF file) name files of the model's
    own folder; ``name`` may hold sub-folders, but the path it resolves to (through ``..`` or any
    symlink on the way) must stay inside the resolved ``folder``, so that no option reaches the
    server's other files. Whether the file exists is the caller's check.

    Args:
        folder: the model's source folder.
        name: the option's value, a path relative to ``folder``.
        option: the option's name, for the error.
        model: the model's catalog name, for the error.

    Raises:
        ModelLoadError: reason MODEL_SOURCE_INVALID when ``name`` is absolute or resolves outside
            ``folder`` (metadata ``option``).

    """
    root = folder.resolve()
    path = (root / name).resolve()
    if Path(name).is_absolute() or not path.is_relative_to(root):
        raise ModelLoadError(
            f"model {model!r}: option {option} ({name!r}) must name a file inside the model's source "
            f"folder {root}",
            reason=Reason.MODEL_SOURCE_INVALID,
            model=model,
            option=option,
        )
    return path


def path_size_bytes(path: Path) -> int:
    """Size of a file, or the total size of the files under a folder, in bytes."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
