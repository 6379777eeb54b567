"""API keys: the keys file format, each key's policy, and the constant-time check of a bearer token.

Both faces read the same format: the gRPC server (``UR_API_KEY``, ``UR_API_KEYS_FILE``) and the
standalone gateway (``UR_GATEWAY_API_KEY``, ``UR_GATEWAY_API_KEYS_FILE``). It lives in the leaf
package :mod:`service.shared`, which both faces may import and which imports neither; it needs only
the standard library and PyYAML.

A keys file is a YAML (or JSON, a subset of YAML) mapping of key NAME to either the key itself or
a mapping of the key (``key``, or its hashed form ``key_hash``) and its policy; the forms may be
mixed in one file::

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
    billing:
      key_hash: "sha256:<salt hex>:<digest hex>"  # the key's salted hash: `universal-runtime keys hash`

Every policy field is optional; a limit left out is no limit (:class:`KeyPolicy`). A field the
format does not know is refused, as is a bad value, with an error naming the key's NAME and the
field. A name is 1-64 characters of ``[A-Za-z0-9._-]`` (it is logged with every RPC and can label
metrics); a key is 1-4096 printable ASCII characters without spaces (it travels in an HTTP header
and gRPC metadata). Names and keys must be unique. Only names appear in logs and errors, never a key.
A key shorter than :data:`MIN_RECOMMENDED_KEY_CHARS` is accepted with a warning in the log.

**Keys are kept hashed.** A mapping entry gives either ``key`` (the key, hashed at load) or
``key_hash`` (the hashed form, :class:`KeyHash`: ``sha256:<salt hex>:<digest hex>``); both, or
neither, is refused naming the entry. After loading, :class:`ApiKeys` holds each key only as a
salted SHA-256 hash (a key given in plaintext is hashed with a fresh random salt and dropped), so
nothing reachable from it can give a key back. Two ``key_hash`` entries of one key (different
salts) cannot be told apart at load; the first in file order is the one a call is counted under.
``universal-runtime keys hash`` prints the hashed form of a key (:mod:`service.admin.keys`).

A key's ``role`` is ``user`` (the default) or ``admin``. Only an admin key may manage models
(``LoadModel``, ``UnloadModel``, ``WatchModel`` with ``load``, and so a load's option overrides)
and fit, overwrite or delete the *shared* custom classifiers and anomaly detectors that every key
may use; a user key gets PERMISSION_DENIED (reason ``ADMIN_ROLE_REQUIRED``) for those, and keeps
its own classifiers, detectors, stored responses, batch files and batches, which no other key sees.
The single key (``UR_API_KEY``) is named ``default`` and is the operator's: role ``admin``,
otherwise the default policy. A server without keys has no roles: every call may do everything.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_KEY_NAME = "default"
"""Name of the single key set with ``UR_API_KEY`` / ``UR_GATEWAY_API_KEY``."""

MAX_KEY_CHARS = 4096
"""Longest key accepted: longer would not fit a client's default 8 KiB metadata limit with the rest."""

MIN_RECOMMENDED_KEY_CHARS = 32
"""Shortest plaintext key loaded without a warning: 32 characters (128 bits as hex digits).

Keys are checked with one fast hash (:class:`KeyHash`), not a slow password KDF, so a key's
strength is its own randomness; ``universal-runtime keys generate`` makes 43 characters (256 bits,
URL-safe base64). Only the length can be judged at load, so a shorter key is warned about, not
refused (a key given as ``key_hash`` cannot be judged at all).
"""

HASH_SCHEME = "sha256"
"""The tag of the hashed form ``sha256:<salt hex>:<digest hex>`` (:class:`KeyHash`).

It versions the format: another construction would get another tag, and a tag the loader does not
know is refused.
"""

SALT_BYTES = 16
"""Length of the random salt of a key hashed here (:meth:`KeyHash.of`); a ``key_hash`` may have 16-64."""

_VALID_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_VALID_KEY = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space: an HTTP header / metadata value
# What follows the tag of the hashed form: <salt hex, 16-64 bytes>:<digest hex, 32 bytes>.
_HASHED_PARTS = re.compile(r"(?P<salt>(?:[0-9a-fA-F]{2}){16,64}):(?P<digest>[0-9a-fA-F]{64})")
_SCHEME_TAG = re.compile(r"[a-z][a-z0-9-]{0,19}")  # a tag echoed in an error: short, never a key

log = logging.getLogger(__name__)


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
class KeyHash:
    """A key as its salted hash: ``digest = SHA-256(salt || key)``, the key as ASCII bytes.

    Written ``sha256:<salt>:<digest>`` (:data:`HASH_SCHEME`; both in hex, written lowercase and
    read in either case: a salt of 16-64 bytes, :data:`SALT_BYTES` when made here, and a 32-byte
    digest), the form a keys file's ``key_hash`` takes and ``universal-runtime keys hash`` prints.

    Why one SHA-256 and not a slow password KDF (PBKDF2, scrypt, Argon2): a bearer key is checked
    on every request, against every configured key (:meth:`ApiKeys.match`), so a check must cost
    microseconds (about 1 us here), where a KDF tuned against password guessing costs tens of
    milliseconds each. A KDF's slowness protects low-entropy secrets that people choose; API keys
    are long random tokens (:data:`MIN_RECOMMENDED_KEY_CHARS`, ``keys generate``) that no amount of
    guessing finds, hashed or not. The salt makes each hash differ from every other hash of the
    same key, so equal keys do not show and no precomputed table applies.

    Attributes:
        salt: The salt, 16-64 bytes.
        digest: ``SHA-256(salt || key)``, 32 bytes.

    """

    salt: bytes
    digest: bytes

    @classmethod
    def of(cls, key: str, salt: bytes | None = None) -> KeyHash:
        """The hash of ``key`` (printable ASCII) with ``salt``, or :data:`SALT_BYTES` random bytes."""
        salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
        return cls(salt, hashlib.sha256(salt + key.encode("ascii")).digest())

    @classmethod
    def parse(cls, text: str) -> KeyHash:
        """The hash written ``sha256:<salt hex>:<digest hex>``.

        Raises:
            ApiKeyError: ``text`` is not of that form; the message shows at most the scheme tag.

        """
        scheme, _, rest = text.partition(":")
        if scheme != HASH_SCHEME:
            shown = f" {scheme!r}" if rest and _SCHEME_TAG.fullmatch(scheme) else ""
            raise ApiKeyError(
                f"unknown hash scheme{shown}: expected {HASH_SCHEME}:<salt>:<digest> "
                "(from 'universal-runtime keys hash')"
            )
        parts = _HASHED_PARTS.fullmatch(rest)
        if parts is None:
            raise ApiKeyError(
                f"expected {HASH_SCHEME}:<salt: 32-128 hex digits>:<digest: 64 hex digits> "
                "(from 'universal-runtime keys hash')"
            )
        return cls(bytes.fromhex(parts["salt"]), bytes.fromhex(parts["digest"]))

    def matches(self, presented: bytes) -> bool:
        """Whether ``presented`` (a token's bytes) is the key; its time depends on its length only."""
        return hmac.compare_digest(hashlib.sha256(self.salt + presented).digest(), self.digest)

    def __str__(self) -> str:
        return f"{HASH_SCHEME}:{self.salt.hex()}:{self.digest.hex()}"


def hash_key(key: str) -> str:
    """The hashed form of ``key``, ``sha256:<salt hex>:<digest hex>``, with a fresh random salt.

    What ``universal-runtime keys hash`` prints, for a keys file's ``key_hash``.

    Raises:
        ApiKeyError: ``key`` is not a key a keys file accepts (empty, longer than
            :data:`MAX_KEY_CHARS`, not printable ASCII, holds a space, or is itself a hashed form).

    """
    problem = _key_problem(key)
    if problem is not None:
        raise ApiKeyError(f"the key {problem}")
    return str(KeyHash.of(key))


@dataclass(frozen=True, slots=True)
class ApiKeys:
    """The configured keys, as ``(name, hash)`` pairs, and their policies; empty means authentication is off.

    Build one with :func:`load_api_keys`, which validates names, keys and policies. It holds no
    key, only each key's :class:`KeyHash`.

    Attributes:
        entries: ``(name, hash)`` pairs, in file order.
        policies: ``(name, policy)`` pairs of the keys whose policy is not :data:`DEFAULT_POLICY`.

    """

    entries: tuple[tuple[str, KeyHash], ...] = ()
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

        The token is hashed with every key's salt and each digest compared with
        :func:`hmac.compare_digest` (:meth:`KeyHash.matches`), so the time taken depends on the
        number of keys and the token's length, never on its content or on which key matched. A
        token longer than :data:`MAX_KEY_CHARS` is no key and is not hashed. Cost: one SHA-256 of
        the token per configured key, about 1 us each (100 keys: under 0.1 ms a call).

        Returns:
            ``(name, token)``: the name of the matching key (the first in file order, should two
            hashes be of one key) and the token as sent (stripped), or ``None`` when the scheme is
            not Bearer or no key matches.

        """
        scheme, _, supplied = authorization.strip().partition(" ")
        token = supplied.strip()
        if scheme.lower() != "bearer" or len(token) > MAX_KEY_CHARS:
            return None
        presented = token.encode("utf-8", "replace")
        found: str | None = None
        for name, key_hash in self.entries:
            # No early exit: the loop hashes the token for every key whichever one matches.
            if key_hash.matches(presented) and found is None:
                found = name
        return None if found is None else (found, token)


def load_api_keys(api_key: str | None = None, keys_file: Path | str | None = None) -> ApiKeys:
    """The keys of a face: its single key (named ``default``) and those of its keys file.

    Args:
        api_key: The single key (``UR_API_KEY``); ``None`` or ``""`` means none.
        keys_file: Path of a keys file (see the module docstring); ``None`` means none.

    Returns:
        The keys, each held as its :class:`KeyHash` only; empty when neither is set (no
        authentication). A plaintext key shorter than :data:`MIN_RECOMMENDED_KEY_CHARS` is
        logged as a warning (its name, never the key).

    Raises:
        ApiKeyError: The file cannot be read, is not a mapping of name to key (or to ``key`` or
            ``key_hash``, and policy), has no keys, an entry has both ``key`` and ``key_hash`` or
            neither, a name, key or hashed form is malformed, empty or used twice (also across the
            single key and the file; two hashes of one key with different salts cannot be told
            apart), a plaintext key is itself a hashed form, or a policy has an unknown field or a
            bad value.

    """
    pairs: list[tuple[str, str | KeyHash, str]] = []  # (name, key or its hash, where it came from)
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
    return ApiKeys(tuple(_checked(pairs)), tuple(policies))


def _read_keys_file(path: Path) -> Iterable[tuple[str, str | KeyHash, KeyPolicy]]:
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
                "'key' (or 'key_hash') and policy fields"
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


def _entry(where: str, value: dict[Any, Any]) -> tuple[str | KeyHash, KeyPolicy]:
    """The key (or its hash) and policy of one ``name: {key: ..., ...}`` entry; ``where`` names it.

    Returns:
        ``(key, policy)``: ``key`` a string for ``key``, a :class:`KeyHash` for ``key_hash``.

    Raises:
        ApiKeyError: Both ``key`` and ``key_hash`` are set or neither is, either is not a string,
            ``key_hash`` is malformed, a field is unknown, or a value is bad. The message never
            shows a key or a hash.

    """
    if "key" in value and "key_hash" in value:
        raise ApiKeyError(f"{where}: set either 'key' (the key) or 'key_hash' (its hashed form), not both")
    key: str | KeyHash
    if "key_hash" in value:
        written = value["key_hash"]
        if not isinstance(written, str):
            raise ApiKeyError(f"{where}: 'key_hash' must be a string (quote it)")
        try:
            key = KeyHash.parse(written)
        except ApiKeyError as err:
            raise ApiKeyError(f"{where}: 'key_hash': {err}") from None
    else:
        plain = value.get("key")
        if not isinstance(plain, str):
            raise ApiKeyError(
                f"{where}: 'key' must be set to the key, a string (quote it), or 'key_hash' to its "
                "hashed form ('universal-runtime keys hash')"
            )
        key = plain
    fields: dict[str, Any] = {}
    for name, raw in value.items():  # bounded by the file's size
        if name in ("key", "key_hash"):
            continue
        if name not in _POLICY_FIELDS:
            shown = (
                repr(name)
                if isinstance(name, str) and _ECHOABLE_FIELD.fullmatch(name)
                else "(its name not shown)"
            )
            raise ApiKeyError(
                f"{where}: unknown field {shown}; a key's fields are key or key_hash, "
                f"{', '.join(_POLICY_FIELDS)}"
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


def _key_problem(key: str) -> str | None:
    """What is wrong with plaintext ``key`` ("is empty", ...), or ``None``; never shows the key."""
    if not key:
        return "is empty"
    if len(key) > MAX_KEY_CHARS or not _VALID_KEY.fullmatch(key):
        return f"must be 1-{MAX_KEY_CHARS} printable ASCII characters without spaces"
    if key.startswith(f"{HASH_SCHEME}:") and _HASHED_PARTS.fullmatch(key.partition(":")[2]):
        # A hash pasted where the key goes would make the hash itself the key, and the real key fail.
        return f"is a hashed form ({HASH_SCHEME}:...); give it as 'key_hash', or give the key itself"
    return None


# Names already warned about for a short key, so a key loaded again (the start-up check, the
# server, the gateway) is warned about once; bounded by the configured names.
_warned_short: set[tuple[str, str]] = set()


def _checked(pairs: list[tuple[str, str | KeyHash, str]]) -> Iterable[tuple[str, KeyHash]]:
    """``(name, hash)`` of each ``(name, key or hash, source)``, once names and keys are checked.

    A plaintext key is hashed with a fresh salt; only the hash leaves. Duplicates are found among
    the plaintext keys directly, between a plaintext key and a hash by hashing the key with that
    hash's salt, and between hashes only when both salt and digest are equal.

    Raises:
        ApiKeyError: A name or key is malformed or used twice.

    """
    names: set[str] = set()
    # Keyed by the secret during loading only, to find duplicates; requests never look keys up.
    first_name_of_key: dict[str, str] = {}
    first_name_of_hash: dict[KeyHash, str] = {}
    for name, key, source in pairs:
        if not _VALID_NAME.fullmatch(name):
            raise ApiKeyError(
                f"{source}: key name {name[:80]!r} must be 1-64 characters of A-Z a-z 0-9 . _ -"
            )
        if name in names:
            raise ApiKeyError(f"{source}: key name {name!r} is used twice")
        if isinstance(key, KeyHash):
            same = first_name_of_hash.get(key)
            if same is None:
                same = next(
                    (other for plain, other in first_name_of_key.items() if key.matches(plain.encode())), None
                )
            if same is not None:
                raise ApiKeyError(f"{source}: {name!r} has the same key as {same!r}")
            first_name_of_hash[key] = name
        else:
            problem = _key_problem(key)
            if problem is not None:
                raise ApiKeyError(f"{source}: the key of {name!r} {problem}")
            same = first_name_of_key.get(key) or next(
                (other for known, other in first_name_of_hash.items() if known.matches(key.encode())), None
            )
            if same is not None:
                raise ApiKeyError(f"{source}: {name!r} has the same key as {same!r}")
            first_name_of_key[key] = name
            if len(key) < MIN_RECOMMENDED_KEY_CHARS and (source, name) not in _warned_short:
                _warned_short.add((source, name))
                log.warning(
                    "%s: the key of %r is shorter than %d characters; use a long random key "
                    "('universal-runtime keys generate')",
                    source,
                    name,
                    MIN_RECOMMENDED_KEY_CHARS,
                )
        names.add(name)
    # Hashed only once every key is checked: a refused file costs no hashing.
    for name, key, _ in pairs:
        yield name, key if isinstance(key, KeyHash) else KeyHash.of(key)
