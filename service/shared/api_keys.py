"""API keys: the keys file format and the constant-time check of a bearer token against every key.

Both faces read the same format: the gRPC server (``UR_API_KEY``, ``UR_API_KEYS_FILE``) and the
standalone gateway (``UR_GATEWAY_API_KEY``, ``UR_GATEWAY_API_KEYS_FILE``). It lives in the leaf
package :mod:`service.shared`, which both faces may import and which imports neither; it needs only
the standard library and PyYAML.

A keys file is a YAML (or JSON, a subset of YAML) mapping of key NAME to key::

    # keys.yaml
    team-search: "3f9c0d6a1b7e4c2d9a8b5e6f7a0c1d2e"
    batch-jobs: "b1e2c3d4e5f60718293a4b5c6d7e8f90"

A name is 1-64 characters of ``[A-Za-z0-9._-]`` (it is logged with every RPC and can label
metrics); a key is 1-4096 printable ASCII characters without spaces (it travels in an HTTP header
and gRPC metadata). Names and keys must be unique. The single key (``UR_API_KEY``) is named
``default``. Only names appear in logs and errors, never a key.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

DEFAULT_KEY_NAME = "default"
"""Name of the single key set with ``UR_API_KEY`` / ``UR_GATEWAY_API_KEY``."""

MAX_KEY_CHARS = 4096
"""Longest key accepted: longer would not fit a client's default 8 KiB metadata limit with the rest."""

_VALID_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_VALID_KEY = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space: an HTTP header / metadata value


class ApiKeyError(ValueError):
    """A keys file or key that cannot be used; the message names the file and key name, never a key."""


@dataclass(frozen=True, slots=True)
class ApiKeys:
    """The configured keys, as ``(name, key)`` pairs; empty means authentication is off.

    Build one with :func:`load_api_keys`, which validates names and keys.
    """

    entries: tuple[tuple[str, bytes], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    @property
    def names(self) -> tuple[str, ...]:
        """The key names, in file order (the single key, ``default``, first)."""
        return tuple(name for name, _ in self.entries)

    def match(self, authorization: str) -> tuple[str, str] | None:
        """Check an ``Authorization`` header value, ``Bearer <key>`` (scheme in any case, RFC 7235).

        Every key is compared, each with :func:`hmac.compare_digest`, so the time taken tells
        neither how much of a key matched nor which key it was.

        Returns:
            ``(name, token)``: the name of the matching key and the token as sent (stripped), or
            ``None`` when the scheme is not Bearer or no key matches.

        """
        scheme, _, supplied = authorization.strip().partition(" ")
        token = supplied.strip()
        if scheme.lower() != "bearer":
            return None
        presented = token.encode("utf-8", "replace")
        found: str | None = None
        for name, key in self.entries:
            # No early exit: the loop runs over every key whichever one matches.
            if hmac.compare_digest(presented, key) and found is None:
                found = name
        return None if found is None else (found, token)

    def secret(self, name: str) -> str | None:
        """The key named ``name``, or ``None`` when no key has that name.

        For work the server does later on a key's behalf (a batch's lines run under the key that
        submitted it, which the batch records by name only). Never log or return what it gives.
        """
        for entry_name, key in self.entries:
            if entry_name == name:
                return key.decode()
        return None


def load_api_keys(api_key: str | None = None, keys_file: Path | str | None = None) -> ApiKeys:
    """The keys of a face: its single key (named ``default``) and those of its keys file.

    Args:
        api_key: The single key (``UR_API_KEY``); ``None`` or ``""`` means none.
        keys_file: Path of a keys file (see the module docstring); ``None`` means none.

    Returns:
        The keys; empty when neither is set (no authentication).

    Raises:
        ApiKeyError: The file cannot be read, is not a mapping of name to key, has no keys, or a
            name or key is malformed, empty or used twice (also across the single key and the file).

    """
    pairs: list[tuple[str, str, str]] = []  # (name, key, where it came from)
    if api_key:
        pairs.append((DEFAULT_KEY_NAME, api_key, "the API key setting"))
    if keys_file is not None:
        source = f"keys file {keys_file}"
        pairs.extend((name, key, source) for name, key in _read_keys_file(Path(keys_file)))
    return ApiKeys(tuple((name, key.encode()) for name, key in _checked(pairs)))


def _read_keys_file(path: Path) -> Iterable[tuple[str, str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ApiKeyError(f"keys file {path}: cannot read it ({type(err).__name__})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except _DuplicateName as err:
        raise ApiKeyError(f"keys file {path}: key name {err.args[0]!r} is used twice") from None
    except yaml.YAMLError as err:
        # Only the position: YAML's own message quotes the line, which may hold a key.
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ApiKeyError(f"keys file {path}: not valid YAML or JSON{where}") from None
    if not isinstance(data, dict) or not data:
        raise ApiKeyError(
            f"keys file {path}: expected a non-empty mapping of key name to key, e.g. 'team-a: \"<key>\"'"
        )
    for name, key in data.items():
        if not isinstance(name, str):
            raise ApiKeyError(f"keys file {path}: key names must be strings (quote them), got {name!r}")
        if not isinstance(key, str):
            raise ApiKeyError(f"keys file {path}: the key of {name!r} must be a string (quote it)")
        yield name, key


class _DuplicateName(Exception):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a repeated mapping key (plain YAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[str] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str):
                if key in seen:
                    raise _DuplicateName(key)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _checked(pairs: list[tuple[str, str, str]]) -> Iterable[tuple[str, str]]:
    names: set[str] = set()
    # Keyed by the secret at start-up only, to find duplicates; requests never look keys up.
    first_name_of_key: dict[str, str] = {}
    for name, key, source in pairs:
        if not _VALID_NAME.fullmatch(name):
            raise ApiKeyError(
                f"{source}: key name {name[:80]!r} must be 1-64 characters of A-Z a-z 0-9 . _ -"
            )
        if name in names:
            raise ApiKeyError(f"{source}: key name {name!r} is used twice")
        if not key:
            raise ApiKeyError(f"{source}: the key of {name!r} is empty")
        if len(key) > MAX_KEY_CHARS or not _VALID_KEY.fullmatch(key):
            raise ApiKeyError(
                f"{source}: the key of {name!r} must be 1-{MAX_KEY_CHARS} printable ASCII characters "
                "without spaces"
            )
        if key in first_name_of_key:
            raise ApiKeyError(f"{source}: {name!r} has the same key as {first_name_of_key[key]!r}")
        names.add(name)
        first_name_of_key[key] = name
        yield name, key
