"""``keys hash`` and ``keys generate``: a key's hashed form for a keys file, and a new random key.

``keys hash`` reads one key from stdin (a terminal is asked without echo) or ``--key``, and prints
its hashed form, ``sha256:<salt hex>:<digest hex>`` (:class:`service.shared.api_keys.KeyHash`,
a fresh random salt each time), one line on stdout: the value of a keys file's ``key_hash``. A key
on stdin stays out of the shell's history and the process list; ``--key`` does not. Surrounding
whitespace (the newline of ``echo``) is dropped; what is left must be a key a keys file accepts.

``keys generate`` prints a new random key (:data:`GENERATED_KEY_BYTES` random bytes, URL-safe
base64: 43 characters) and its hashed form, as two YAML lines ``key: ...`` and ``key_hash: ...``:
the key goes to its client, the hash into the keys file. The key is not kept anywhere.

Neither command reads settings or calls a server.
"""

from __future__ import annotations

import argparse
import getpass
import secrets
from typing import Any, TextIO

from service.admin.connection import CommandError
from service.shared.api_keys import MAX_KEY_CHARS, MIN_RECOMMENDED_KEY_CHARS, ApiKeyError, hash_key

GENERATED_KEY_BYTES = 32
"""Random bytes of a key made by ``keys generate`` (256 bits; 43 characters of URL-safe base64)."""


def add_keys_parser(commands: Any) -> None:
    """Add ``keys hash`` and ``keys generate`` to the subcommands (an argparse subparsers action)."""
    keys = commands.add_parser("keys", help="hash an API key for a keys file's key_hash, or make a new key")
    actions = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    hashing = actions.add_parser(
        "hash",
        help="print the hashed form of a key read from stdin (sha256:<salt>:<digest>), for key_hash",
        description="Print the hashed form of one API key, for a keys file's key_hash. The key is "
        "read from stdin (a terminal is asked without echo), which keeps it out of the shell's "
        "history and the process list.",
    )
    hashing.add_argument(
        "--key",
        help="the key itself instead of stdin (visible in shell history and to other users: prefer stdin)",
    )
    actions.add_parser("generate", help="print a new random key and its hashed form (key: / key_hash: lines)")


def run_keys(args: argparse.Namespace, inp: TextIO, out: TextIO, err: TextIO) -> None:
    """Run ``keys hash`` or ``keys generate``; output on ``out``, a short-key warning on ``err``.

    Raises:
        CommandError: ``hash`` got no key, or a key a keys file would refuse (the message never
            shows it).

    """
    if args.keys_command == "generate":
        key = secrets.token_urlsafe(GENERATED_KEY_BYTES)
        out.write(f'key: "{key}"\nkey_hash: "{hash_key(key)}"\n')
        return
    key = _read_key(args, inp)
    try:
        hashed = hash_key(key)
    except ApiKeyError as error:
        raise CommandError(str(error)) from None
    if len(key) < MIN_RECOMMENDED_KEY_CHARS:
        err.write(
            f"warning: the key is shorter than {MIN_RECOMMENDED_KEY_CHARS} characters; use a long "
            "random key ('universal-runtime keys generate')\n"
        )
    out.write(hashed + "\n")


def _read_key(args: argparse.Namespace, inp: TextIO) -> str:
    """The key of ``--key``, else of a terminal (no echo), else of ``inp``, whitespace stripped."""
    if args.key is not None:
        return args.key.strip()
    if inp.isatty():
        return getpass.getpass("key to hash: ").strip()
    # Bounded: a key is at most MAX_KEY_CHARS; a little more shows that there is too much.
    key = inp.read(MAX_KEY_CHARS + 64).strip()
    if not key:
        raise CommandError('no key on stdin: pipe one in (printf %s "$KEY" | ...), or pass --key')
    return key
