"""Adding an entry to a catalog file, keeping what the operator wrote in it (comments included)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from service.admin.connection import CommandError
from service.catalog import CatalogEntry
from service.model_names import validate_model_name

_HEADER = (
    "# Models added by `universal-runtime pull`; same format as the server's catalog\n"
    "# (docs/models/catalog.md). Edit freely: pull only appends entries.\n"
)
_MODELS_LINE = re.compile(r"^models:[ \t]*(#.*)?$", re.MULTILINE)
_INDENTED_KEY = re.compile(r"^([ \t]+)[^\s#]", re.MULTILINE)


def check_entry(name: str, entry: dict[str, Any]) -> None:
    """Check ``entry`` the way the server will read it.

    Raises:
        CommandError: the name is not a valid model name, or the entry does not validate.

    """
    try:
        validate_model_name(name)
        CatalogEntry.model_validate(entry)
    except ValidationError as err:
        raise CommandError(f"catalog entry {name!r} would be invalid: {err.errors()[0]['msg']}") from None
    except ValueError as err:
        raise CommandError(f"invalid model name {name!r}: {err}") from None


def _read_models(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
        parsed = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as err:
        raise CommandError(f"cannot read catalog {path}: {' '.join(str(err).split())}") from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("models") or {}, dict):
        raise CommandError(f"{path} is not a catalog (a mapping with a 'models' mapping)")
    return text, dict(parsed.get("models") or {})


def _appended(text: str, name: str, entry: dict[str, Any], comment: str) -> str | None:
    """``text`` with the entry appended under its block-style ``models:``; None when that cannot be done."""
    start = _MODELS_LINE.search(text)
    if start is None:
        return None
    indent = _INDENTED_KEY.search(text, start.end())
    if indent is None and text[start.end() :].strip():
        return None  # something other than entries follows (flow style, stray text): rewrite instead
    prefix = indent.group(1) if indent else "  "
    block = yaml.safe_dump({name: entry}, sort_keys=False, default_flow_style=False)
    lines = [f"# {comment}"] if comment else []
    lines += block.splitlines()
    return text + ("" if text.endswith("\n") else "\n") + "".join(f"{prefix}{line}\n" for line in lines)


def add_entry(
    path: Path, name: str, entry: dict[str, Any], *, replace: bool = False, comment: str = ""
) -> None:
    """Write ``entry`` as model ``name`` into the catalog at ``path`` (created when missing).

    A new name is appended to the file's text after a ``# comment`` line, so the operator's
    comments and order stay; replacing an existing entry (``replace``) rewrites the file from its
    parsed content, which keeps only the leading comments. The file is replaced atomically.

    Raises:
        CommandError: the entry is invalid; the file is unreadable or not a catalog; ``name`` is
            already there and ``replace`` is false; the file cannot be written.

    """
    check_entry(name, entry)
    text, models = _read_models(path) if path.exists() else (_HEADER + "models:\n", {})
    if name in models and not replace:
        raise CommandError(f"{name} is already in {path}: pass --name to choose another, or --force")
    wanted = {**models, name: entry}
    new_text = None if name in models else _appended(text, name, entry, comment)
    # The appended text must read back as exactly the old entries plus the new one.
    if new_text is None or (yaml.safe_load(new_text) or {}).get("models") != wanted:
        new_text = (_leading_comments(text) or _HEADER) + yaml.safe_dump({"models": wanted}, sort_keys=False)
    _write_atomically(path, new_text)


def _leading_comments(text: str) -> str:
    lines = []
    for line in text.splitlines(keepends=True):
        if not line.startswith("#"):
            break
        lines.append(line)
    return "".join(lines)


def _write_atomically(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # mkstemp makes the file 0600; the server may run as another user, so keep the old mode
        # (or the umask's default for a new file).
        if path.exists():
            mode = path.stat().st_mode & 0o777
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(temp, mode)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
    except OSError as err:
        raise CommandError(f"cannot write catalog {path}: {err.strerror or err}") from None
