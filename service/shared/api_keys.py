"""API keys: the keys file format, each key's policy, and the constant-time check of a bearer token.

Both faces read the same format: the gRPC server (``UR_API_KEY``, ``UR_API_KEYS_FILE``) and the
standalone gateway (``UR_GATEWAY_API_KEY``, ``UR_GATEWAY_API_KEYS_FILE``). It lives in the leaf
package :mod:`service.shared`, which both faces may import and which imports neither; it needs only
the standard library and PyYAML.

A keys file is a YAML (or JSON, a subset of YAML) mapping of key NAME to either the key itself or
a mapping of the key and its policy; both forms may be mixed in one file::

    # keys.yaml
    team-search: "3f9c0d6a1b7e4c2d9a8b5e6f7a0c1d2e"
    batch-jobs:
      key: "b1e2c3d4e5f60718293a4b5c6d7e8f90"
      priority: batch            # interactive (default) or batch: every queue serves interactive first
      weight: 2                  # fair-share weight within its class (> 0, default 1)
      requests_per_second: 5     # token bucket: 5 calls a second on average ...
      burst: 10                  # ... and up to 10 at once (default: requests_per_second rounded up)
      tokens_per_minute: 20000   # prompt + generated tokens, charged after each call
      inputs_per_minute: 600     # encoder inputs (texts to embed, classify, tag; documents to rerank)
      max_concurrent_streams: 4  # streaming RPCs in flight at once
    operator:
      key: "9d8c7b6a5f4e3d2c1b0a99887766554f"
      role: admin                # user (default) or admin: see below

Every policy field is optional; a limit left out is no limit (:class:`KeyPolicy`). A field the
format does not know is refused, as is a bad value, with an error naming the key's NAME and the
field. A name is 1-64 characters of ``[A-Za-z0-9._-]`` (it is logged with every RPC and can label
metrics); a key is 1-4096 printable ASCII characters without spaces (it travels in an HTTP header
and gRPC metadata). Names and keys must be unique. Only names appear in logs and errors, never a key.

A key's ``role`` is ``user`` (the default) or ``admin``. Only an admin key may manage models
(``LoadModel``, ``UnloadModel``, ``WatchModel`` with ``load``, and so a load's option overrides)
and fit, overwrite or delete the *shared* custom classifiers and anomaly detectors that every key
may use; a user key gets PERMISSION_DENIED (reason ``ADMIN_ROLE_REQUIRED``) for those, and keeps
its own classifiers, detectors, stored responses, batch files and batches, which no other key sees.
The single key (``UR_API_KEY``) is named ``default`` and is the operator's: role ``admin``,
otherwise the default policy. A server without keys has no roles: every call may do everything.
"""

from __future__ import annotations

import hmac
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_KEY_NAME = "default"
"""Name of the single key set with ``UR_API_KEY`` / ``UR_GATEWAY_API_KEY``."""

MAX_KEY_CHARS = 4096
"""Longest key accepted: longer would not fit a client's default 8 KiB metadata limit with the rest."""

_VALID_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_VALID_KEY = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space: an HTTP header / metadata value


class ApiKeyError(ValueError):
    """A keys file or key that cannot be used; the message names the file and key name, never a key."""


PRIORITIES = ("interactive", "batch")
"""A key's classes, most urgent first: every queue admits all ``interactive`` work before ``batch``."""

ROLE_USER = "user"
"""The default role: inference, and the key's own stored objects."""
ROLE_ADMIN = "admin"
"""The operator's role: also model management and the shared classifiers and detectors."""
ROLES = (ROLE_USER, ROLE_ADMIN)


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    """What a key may do: its priority class, fair-share weight and quotas (``None``: no limit).

    Quotas are counted per server process (each replica keeps its own buckets), by
    :mod:`service.quotas`.

    Attributes:
        priority: ``"interactive"`` or ``"batch"`` (:data:`PRIORITIES`).
        weight: Fair-share weight among the keys of its class (> 0).
        requests_per_second: Token-bucket refill rate, calls a second (> 0).
        burst: Token-bucket size, calls (>= 1); ``ceil(requests_per_second)`` when not set.
        tokens_per_minute: Prompt + generated tokens a minute (> 0).
        inputs_per_minute: Encoder inputs a minute (> 0).
        max_concurrent_streams: Streaming RPCs in flight at once (> 0).
        role: ``"user"`` or ``"admin"`` (:data:`ROLES`; see the module docstring).

    """

    priority: str = "interactive"
    weight: float = 1.0
    requests_per_second: float | None = None
    burst: int | None = None
    tokens_per_minute: int | None = None
    inputs_per_minute: int | None = None
    max_concurrent_streams: int | None = None
    role: str = ROLE_USER

    @property
    def bucket_size(self) -> int | None:
        """The request bucket's size: ``burst``, else ``requests_per_second`` rounded up.

        ``None`` when the key has no request rate limit.
        """
        if self.requests_per_second is None:
            return None
        return self.burst if self.burst is not None else math.ceil(self.requests_per_second)

    @property
    def has_quota(self) -> bool:
        """Whether any quota is set (a key without one needs no quota state)."""
        return any(
            limit is not None
            for limit in (
                self.requests_per_second,
                self.tokens_per_minute,
                self.inputs_per_minute,
                self.max_concurrent_streams,
            )
        )


DEFAULT_POLICY = KeyPolicy()
"""The policy of a key given as a plain string: interactive, weight 1, no quotas, role user."""

SINGLE_KEY_POLICY = KeyPolicy(role=ROLE_ADMIN)
"""The policy of the single key (``UR_API_KEY``): the operator's, so role admin; otherwise the default."""


@dataclass(frozen=True, slots=True)
class ApiKeys:
    """The configured keys, as ``(name, key)`` pairs, and their policies; empty means authentication is off.

    Build one with :func:`load_api_keys`, which validates names, keys and policies.

    Attributes:
        entries: ``(name, key)`` pairs, in file order.
        policies: ``(name, policy)`` pairs of the keys whose policy is not :data:`DEFAULT_POLICY`.

    """

    entries: tuple[tuple[str, bytes], ...] = ()
    policies: tuple[tuple[str, KeyPolicy], ...] = ()
    _policy_by_name: dict[str, KeyPolicy] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_policy_by_name", dict(self.policies))

    def policy(self, name: str) -> KeyPolicy:
        """The policy of the key named ``name`` (:data:`DEFAULT_POLICY` for a key without one, or no key)."""
        return self._policy_by_name.get(name, DEFAULT_POLICY)

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
        ApiKeyError: The file cannot be read, is not a mapping of name to key (or to key and
            policy), has no keys, a name or key is malformed, empty or used twice (also across the
            single key and the file), or a policy has an unknown field or a bad value.

    """
    pairs: list[tuple[str, str, str]] = []  # (name, key, where it came from)
    policies: list[tuple[str, KeyPolicy]] = []
    if api_key:
        pairs.append((DEFAULT_KEY_NAME, api_key, "the API key setting"))
        policies.append((DEFAULT_KEY_NAME, SINGLE_KEY_POLICY))
    if keys_file is not None:
        source = f"keys file {keys_file}"
        for name, key, policy in _read_keys_file(Path(keys_file)):
            pairs.append((name, key, source))
            if policy != DEFAULT_POLICY:
                policies.append((name, policy))
    entries = tuple((name, key.encode()) for name, key in _checked(pairs))
    return ApiKeys(entries, tuple(policies))


def _read_keys_file(path: Path) -> Iterable[tuple[str, str, KeyPolicy]]:
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
    for name, value in data.items():  # bounded by the file's size
        if not isinstance(name, str):
            raise ApiKeyError(f"keys file {path}: key names must be strings (quote them), got {name!r}")
        if isinstance(value, dict):
            key, policy = _entry(f"keys file {path}: key {name!r}", value)
        elif isinstance(value, str):
            key, policy = value, DEFAULT_POLICY
        else:
            raise ApiKeyError(
                f"keys file {path}: the key of {name!r} must be a string (quote it), or a mapping of "
                "'key' and policy fields"
            )
        yield name, key, policy


# The policy fields: whole numbers >= 1, numbers > 0, priority and role.
_INT_FIELDS = ("burst", "tokens_per_minute", "inputs_per_minute", "max_concurrent_streams")
_POSITIVE_NUMBER_FIELDS = ("weight", "requests_per_second")
_POLICY_FIELDS = ("priority", *_POSITIVE_NUMBER_FIELDS, *_INT_FIELDS, "role")
# A field name echoed in an error: a short identifier. Anything else (a key pasted one line too
# deep, say) is not echoed.
_ECHOABLE_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
_MAX_LIMIT = 10**12  # far above any real quota; keeps the buckets' floats exact


def _entry(where: str, value: dict[Any, Any]) -> tuple[str, KeyPolicy]:
    """The key and policy of one ``name: {key: ..., ...}`` entry; ``where`` names it (never the key).

    Raises:
        ApiKeyError: ``key`` is missing or not a string, a field is unknown, or a value is bad.

    """
    key = value.get("key")
    if not isinstance(key, str):
        raise ApiKeyError(f"{where}: 'key' must be set to the key, a string (quote it)")
    fields: dict[str, Any] = {}
    for name, raw in value.items():  # bounded by the file's size
        if name == "key":
            continue
        if name not in _POLICY_FIELDS:
            shown = (
                repr(name)
                if isinstance(name, str) and _ECHOABLE_FIELD.fullmatch(name)
                else "(its name not shown)"
            )
            raise ApiKeyError(
                f"{where}: unknown field {shown}; a key's fields are key, {', '.join(_POLICY_FIELDS)}"
            )
        fields[name] = _field_value(where, name, raw)
    if "burst" in fields and "requests_per_second" not in fields:
        raise ApiKeyError(f"{where}: field 'burst' needs 'requests_per_second' (the bucket's refill rate)")
    return key, KeyPolicy(**fields)


def _field_value(where: str, name: str, raw: Any) -> Any:
    """``raw`` checked as the value of policy field ``name``; the error echoes numbers only."""
    shown = f", got {raw!r}" if isinstance(raw, int | float) and not isinstance(raw, bool) else ""
    for choice, allowed in (("priority", PRIORITIES), ("role", ROLES)):
        if name == choice:
            if raw not in allowed:
                raise ApiKeyError(f"{where}: field {choice!r} must be one of {', '.join(allowed)}")
            return raw
    # YAML reads `true` as a bool, which Python counts as an int: refused as a number.
    is_number = isinstance(raw, int | float) and not isinstance(raw, bool)
    if name in _POSITIVE_NUMBER_FIELDS:
        if not is_number or not math.isfinite(raw) or not 0 < raw <= _MAX_LIMIT:
            raise ApiKeyError(
                f"{where}: field {name!r} must be a number above 0 (at most {_MAX_LIMIT}){shown}"
            )
        return float(raw)
    if not is_number or not isinstance(raw, int) or not 1 <= raw <= _MAX_LIMIT:
        raise ApiKeyError(f"{where}: field {name!r} must be a whole number from 1 to {_MAX_LIMIT}{shown}")
    return raw


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
