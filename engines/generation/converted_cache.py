"""Where converted copies of model files are cached, and the key that names a source file's copy.

Shared by the transformers engine (dequantized safetensors of a GGUF) and the llama.cpp engine
(requantized GGUF files, :mod:`engines.generation.requantize`). The default root,
``$XDG_CACHE_HOME/universal-runtime/converted`` (``~/.cache/...`` without it), lies under the
server's default ``data_dir``; a catalog entry's ``cache_dir`` option moves it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def converted_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder converted copies go to: ``cache_dir`` (``~`` expanded) when set, else the default."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()
    return cache_home / "universal-runtime" / "converted"


def source_key(path: Path, *extra: str) -> str:
    """16 hex digits naming ``path``'s current content: its resolved path, size and mtime, plus ``extra``.

    A file replaced in place (new size or mtime) gets a new key, so a stale copy is never reused.

    Raises:
        OSError: ``path`` cannot be read (``stat``).

    """
    stat = path.stat()
    identity = "|".join((str(path.resolve()), str(stat.st_size), str(stat.st_mtime_ns), *extra))
    return hashlib.sha256(identity.encode()).hexdigest()[:16]
