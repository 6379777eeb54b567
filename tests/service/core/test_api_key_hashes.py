"""API keys are held as salted hashes: nothing reachable from ``ApiKeys`` holds a key.

The keys file's ``key_hash`` form (alone, or mixed with plaintext ``key`` entries), the entries it
refuses, the ``keys hash`` / ``keys generate`` commands round-tripping through a keys file, and the
check hashing the token for every key whichever one matches.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import types
from collections.abc import Iterator

import pytest
import yaml

from service.admin.main import run
from service.shared.api_keys import (
    MAX_KEY_CHARS,
    ApiKeyError,
    KeyHash,
    KeyPolicy,
    hash_key,
    load_api_keys,
)

SINGLE = "single-Secret-hashes-0001-abcdefgh"
PLAIN_A = "plainA-Secret-7f3e9a1c5b2d8e4f6a0b"
PLAIN_B = "plainB-Secret-1a2b3c4d5e6f7a8b9c0d"
HASHED = "hashed-Secret-9e8d7c6b5a4f3e2d1c0b"
SECRETS = (SINGLE, PLAIN_A, PLAIN_B, HASHED)


def write(tmp_path, text: str, name: str = "keys.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def cli(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    """``universal-runtime <argv>`` with ``stdin`` as its input: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err, io.StringIO(stdin))
    return code, out.getvalue(), err.getvalue()


# --- nothing reachable holds a key -------------------------------------------------------------

# Not entered: values without parts, and classes and modules (code, not state).
_LEAVES = (str, bytes, bytearray, memoryview, int, float, complex, bool, type(None), type, types.ModuleType)


def reachable(root: object, limit: int = 5000) -> Iterator[object]:
    """Every object reachable from ``root`` through its state, each once (at most ``limit``).

    Followed: ``vars()``, ``__slots__`` of every class in the MRO, dict keys and values, the items
    of lists, tuples and sets, a function's closure cells and defaults, a bound method's object
    and function, a partial's arguments.
    """
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        assert len(seen) <= limit, "more state than an ApiKeys should hold"
        yield obj
        if isinstance(obj, _LEAVES):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        if isinstance(obj, types.FunctionType):
            stack.extend(cell.cell_contents for cell in obj.__closure__ or () if _filled(cell))
            stack.extend(obj.__defaults__ or ())
            stack.extend((obj.__kwdefaults__ or {}).values())
        if isinstance(obj, types.MethodType):
            stack.extend((obj.__self__, obj.__func__))
        if isinstance(obj, functools.partial):
            stack.extend((obj.func, obj.args, obj.keywords))
        if hasattr(obj, "__dict__"):
            stack.append(vars(obj))
        for cls in type(obj).__mro__:
            slots = cls.__dict__.get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                    stack.append(getattr(obj, slot))


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def holds_a_secret(obj: object, secrets: tuple[str, ...]) -> bool:
    """Whether ``obj`` is a string or bytes holding one of ``secrets`` (as text, bytes or hex)."""
    if isinstance(obj, str):
        return any(s in obj or s.encode().hex() in obj for s in secrets)
    if isinstance(obj, bytes | bytearray | memoryview):
        data = bytes(obj)
        return any(s.encode() in data for s in secrets)
    return False


def test_loaded_keys_hold_no_plaintext_key_anywhere(tmp_path):
    hashed = hash_key(HASHED)
    path = write(
        tmp_path,
        f'team-a: "{PLAIN_A}"\n'
        f'team-b:\n  key: "{PLAIN_B}"\n  priority: batch\n  requests_per_second: 5\n  role: admin\n'
        f'team-h:\n  key_hash: "{hashed}"\n  weight: 2\n',
    )
    keys = load_api_keys(SINGLE, path)
    for secret in SECRETS:  # every key still authenticates, and any state a match leaves is walked
        assert keys.match(f"Bearer {secret}") is not None
    objects = list(reachable(keys))
    leaks = [type(obj).__name__ for obj in objects if holds_a_secret(obj, SECRETS)]
    assert not leaks
    # The walk reached the state: the names, the hashes and a policy.
    assert {"default", "team-a", "team-b", "team-h"} <= {obj for obj in objects if isinstance(obj, str)}
    assert sum(isinstance(obj, KeyHash) for obj in objects) == 4
    assert any(isinstance(obj, KeyPolicy) and obj.priority == "batch" for obj in objects)
    assert not hasattr(keys, "secret")
    assert not any(secret in repr(keys) for secret in SECRETS)


def test_the_walk_finds_a_planted_key():
    """The walker is not blind: a key in a closure's cell, a dict, a slot or bytes is found."""

    def capture(value: str):
        return lambda: value

    class Slotted:
        __slots__ = ("held",)

        def __init__(self, held: object) -> None:
            self.held = held

    for planted, secret in (
        (types.SimpleNamespace(inner={"x": [capture(PLAIN_A)]}), PLAIN_A),
        (Slotted({"k": (PLAIN_B.encode(),)}), PLAIN_B.encode()),
        (Slotted(Slotted(frozenset({f"prefix {HASHED} suffix"}))), f"prefix {HASHED} suffix"),
    ):
        assert [obj for obj in reachable(planted) if holds_a_secret(obj, SECRETS)] == [secret]


# --- the hashed form ---------------------------------------------------------------------------


def test_hashed_form_is_sha256_of_salt_and_key():
    written = hash_key(HASHED)
    scheme, salt_hex, digest_hex = written.split(":")
    assert scheme == "sha256" and len(salt_hex) == 32 and len(digest_hex) == 64
    assert digest_hex == hashlib.sha256(bytes.fromhex(salt_hex) + HASHED.encode()).hexdigest()
    assert hash_key(HASHED) != written  # a fresh salt each time
    parsed = KeyHash.parse(written)
    assert str(parsed) == written and KeyHash.parse(written.upper().replace("SHA256", "sha256")) == parsed
    assert parsed.matches(HASHED.encode()) and not parsed.matches(HASHED.encode() + b"x")


def test_keys_file_with_hashed_keys_only(tmp_path):
    path = write(
        tmp_path,
        f'team-h:\n  key_hash: "{hash_key(HASHED)}"\n  priority: batch\n'
        f'team-a:\n  key_hash: "{hash_key(PLAIN_A)}"\n',
    )
    keys = load_api_keys(None, path)
    assert keys.names == ("team-h", "team-a")
    assert keys.match(f"Bearer {HASHED}") == ("team-h", HASHED)
    assert keys.match(f"bearer {PLAIN_A}") == ("team-a", PLAIN_A)
    assert keys.policy("team-h").priority == "batch"
    for wrong in (PLAIN_B, HASHED[:-1], f"{HASHED}x", hash_key(HASHED), ""):
        assert keys.match(f"Bearer {wrong}") is None, wrong


def test_mixed_file_and_the_single_key(tmp_path):
    path = write(
        tmp_path,
        f'team-a: "{PLAIN_A}"\nteam-b:\n  key: "{PLAIN_B}"\n  weight: 3\n'
        f'team-h:\n  key_hash: "{hash_key(HASHED)}"\n  role: admin\n',
    )
    as_json = write(
        tmp_path, f'{{"team-a": "{PLAIN_A}", "team-h": {{"key_hash": "{hash_key(HASHED)}"}}}}', "keys.json"
    )
    keys = load_api_keys(SINGLE, path)
    assert keys.names == ("default", "team-a", "team-b", "team-h")
    for name, secret in (("default", SINGLE), ("team-a", PLAIN_A), ("team-b", PLAIN_B), ("team-h", HASHED)):
        assert keys.match(f"Bearer {secret}") == (name, secret)
    assert keys.policy("team-b").weight == 3 and keys.policy("team-h").role == "admin"
    assert keys.policy("default").role == "admin"
    assert load_api_keys(None, as_json).match(f"Bearer {HASHED}") == ("team-h", HASHED)


def test_every_key_is_hashed_whichever_matches(tmp_path, monkeypatch):
    """No early exit: the token is hashed for every key, for the first, the last and no match."""
    path = write(
        tmp_path, f'team-a: "{PLAIN_A}"\nteam-b: "{PLAIN_B}"\nteam-h:\n  key_hash: "{hash_key(HASHED)}"\n'
    )
    keys = load_api_keys(SINGLE, path)
    calls: list[bytes] = []
    original = KeyHash.matches

    def counted(self: KeyHash, presented: bytes) -> bool:
        calls.append(presented)
        return original(self, presented)

    monkeypatch.setattr(KeyHash, "matches", counted)
    for token in (SINGLE, PLAIN_B, HASHED, "wrong", "x" * MAX_KEY_CHARS):
        calls.clear()
        keys.match(f"Bearer {token}")
        assert len(calls) == 4, token
    calls.clear()
    assert keys.match("Bearer " + "x" * (MAX_KEY_CHARS + 1)) is None
    assert not calls  # longer than any key: not hashed at all


# --- refused entries ---------------------------------------------------------------------------

_WELL_FORMED = hash_key(HASHED)
BAD_ENTRIES = {
    "both key and key_hash": (
        f'team-x:\n  key: "{PLAIN_A}"\n  key_hash: "{_WELL_FORMED}"\n',
        "key 'team-x': set either 'key' (the key) or 'key_hash' (its hashed form), not both",
    ),
    "neither": ("team-x:\n  role: admin\n", "key 'team-x': 'key' must be set to the key"),
    "key_hash not a string": ("team-x:\n  key_hash: 12345\n", "key 'team-x': 'key_hash' must be a string"),
    "unknown scheme": (
        f'team-x:\n  key_hash: "md5:{_WELL_FORMED.split(":", 1)[1]}"\n',
        "key 'team-x': 'key_hash': unknown hash scheme 'md5'",
    ),
    "no scheme": (f'team-x:\n  key_hash: "{HASHED}"\n', "key 'team-x': 'key_hash': unknown hash scheme:"),
    "short digest": (
        f'team-x:\n  key_hash: "{_WELL_FORMED[:-2]}"\n',
        "key 'team-x': 'key_hash': expected sha256:<salt: 32-128 hex digits>:<digest: 64 hex digits>",
    ),
    "short salt": (
        f'team-x:\n  key_hash: "sha256:abcd:{"0" * 64}"\n',
        "key 'team-x': 'key_hash': expected sha256:",
    ),
    "not hex": (f'team-x:\n  key_hash: "sha256:{"z" * 32}:{"0" * 64}"\n', "'key_hash': expected sha256:"),
    "a hashed form as the key": (
        f'team-x: "{_WELL_FORMED}"\n',
        "the key of 'team-x' is a hashed form (sha256:...); give it as 'key_hash'",
    ),
    "a hashed form under key": (
        f'team-x:\n  key: "{_WELL_FORMED}"\n',
        "the key of 'team-x' is a hashed form",
    ),
    "hash of an earlier plaintext key": (
        f'team-a: "{HASHED}"\nteam-x:\n  key_hash: "{_WELL_FORMED}"\n',
        "'team-x' has the same key as 'team-a'",
    ),
    "plaintext of an earlier hash": (
        f'team-x:\n  key_hash: "{_WELL_FORMED}"\nteam-b: "{HASHED}"\n',
        "'team-b' has the same key as 'team-x'",
    ),
    "the same hash twice": (
        f'team-x:\n  key_hash: "{_WELL_FORMED}"\nteam-y:\n  key_hash: "{_WELL_FORMED}"\n',
        "'team-y' has the same key as 'team-x'",
    ),
}


@pytest.mark.parametrize("case", BAD_ENTRIES)
def test_bad_entry_is_refused_naming_it_never_a_key(tmp_path, case):
    text, expected = BAD_ENTRIES[case]
    path = write(tmp_path, text)
    with pytest.raises(ApiKeyError) as caught:
        load_api_keys(None, path)
    message = str(caught.value)
    assert str(path) in message and expected in message, message
    assert not any(secret in message for secret in SECRETS)
    assert _WELL_FORMED.split(":")[2] not in message  # nor a digest


def test_single_key_setting_takes_the_key_not_a_hash(tmp_path):
    assert load_api_keys(SINGLE).match(f"Bearer {SINGLE}") == ("default", SINGLE)
    with pytest.raises(ApiKeyError, match="the API key setting: the key of 'default' is a hashed form"):
        load_api_keys(hash_key(SINGLE))
    hashed_twin = write(tmp_path, f'team-x:\n  key_hash: "{hash_key(SINGLE)}"\n')
    with pytest.raises(ApiKeyError, match="'team-x' has the same key as 'default'"):
        load_api_keys(SINGLE, hashed_twin)


def test_a_short_plaintext_key_is_warned_about_by_name(tmp_path, caplog):
    path = write(tmp_path, f'team-short: "short-Key-1"\nteam-long: "{PLAIN_A}"\n')
    with caplog.at_level(logging.WARNING, logger="service.shared.api_keys"):
        load_api_keys(None, path)
        load_api_keys(None, path)  # loaded again (start-up check, server, gateway): warned once
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1, warnings
    assert "'team-short' is shorter than 32 characters" in warnings[0]
    assert "short-Key-1" not in warnings[0] and "team-long" not in warnings[0]


# --- the commands ------------------------------------------------------------------------------


def test_keys_hash_from_stdin_round_trips_through_a_keys_file(tmp_path):
    code, out, err = cli("keys", "hash", stdin=f"{HASHED}\n")
    assert code == 0 and err == ""
    hashed = out.strip()
    assert out.count("\n") == 1 and hashed.startswith("sha256:") and HASHED not in out
    code, flag_out, _ = cli("keys", "hash", "--key", PLAIN_A)
    assert code == 0
    path = write(
        tmp_path, f'team-h:\n  key_hash: "{hashed}"\nteam-a:\n  key_hash: {flag_out.strip()}\n'
    )  # quoted or not: the form is plain YAML either way
    keys = load_api_keys(None, path)
    assert keys.match(f"Bearer {HASHED}") == ("team-h", HASHED)
    assert keys.match(f"Bearer {PLAIN_A}") == ("team-a", PLAIN_A)


def test_keys_generate_prints_a_long_key_and_its_hash(tmp_path):
    code, out, err = cli("keys", "generate")
    assert code == 0 and err == ""
    printed = yaml.safe_load(out)
    assert set(printed) == {"key", "key_hash"}
    key = printed["key"]
    assert isinstance(key, str) and len(key) >= 43
    path = write(tmp_path, yaml.safe_dump({"new-team": {"key_hash": printed["key_hash"]}}))
    assert load_api_keys(None, path).match(f"Bearer {key}") == ("new-team", key)
    assert yaml.safe_load(cli("keys", "generate")[1])["key"] != key


def test_keys_hash_refusals_and_warning():
    code, out, err = cli("keys", "hash", stdin="")
    assert code == 1 and out == "" and "universal-runtime keys: no key on stdin" in err
    code, out, err = cli("keys", "hash", stdin="two words\n")
    assert code == 1 and out == "" and "printable ASCII characters without spaces" in err
    assert "two words" not in err
    code, out, err = cli("keys", "hash", stdin=_WELL_FORMED)
    assert code == 1 and "is a hashed form" in err
    code, out, err = cli("keys", "hash", stdin="short-Key-1")
    assert code == 0 and out.startswith("sha256:")
    assert "warning: the key is shorter than 32 characters" in err and "short-Key-1" not in err
    assert cli("keys")[0] == 2  # an action is required


def test_keys_command_needs_no_settings(monkeypatch):
    monkeypatch.setenv("UR_GRPC_PORT", "not-a-port")  # would stop every command that reads settings
    code, out, _ = cli("keys", "hash", stdin=PLAIN_A)
    assert code == 0 and out.startswith("sha256:")
