"""Flags and dispatch of the operator subcommands; every failure ends as one line on stderr."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from service.admin.catalog import add_catalog_parser, run_catalog
from service.admin.connection import CommandError, Connection, default_address
from service.admin.health import run_health
from service.admin.keys import add_keys_parser, run_keys
from service.admin.models import run_load, run_ls, run_ps, run_unload
from service.admin.prepare import run_prepare
from service.admin.pull import run_pull
from service.settings import Settings
from service.shared.flags import add_switch

PROG = "universal-runtime"

Command = Callable[[Connection, argparse.Namespace, TextIO], None]

#: The subcommands that call a running server, by name (and ``load``, which also draws on stderr).
RPC_COMMANDS: dict[str, Command] = {
    "ps": run_ps,
    "ls": run_ls,
    "unload": run_unload,
    "health": run_health,
}
#: Every subcommand handled here (``serve`` is :mod:`service.cli`'s).
COMMANDS = ("ps", "ls", "load", "unload", "health", "pull", "prepare", "catalog", "keys")


def _client_flags() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument(
        "--address",
        help="server to call, host:port (default: UR_GRPC_HOST:UR_GRPC_PORT, 127.0.0.1:50051)",
    )
    flags.add_argument("--tls-ca", type=Path, help="PEM CA bundle that verifies the server (turns TLS on)")
    flags.add_argument("--tls-cert", type=Path, help="PEM client certificate, for mutual TLS")
    flags.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    flags.add_argument(
        "--api-key", help="API key (default: UR_API_KEY; prefer the variable, command lines are visible)"
    )
    flags.add_argument(
        "--timeout", type=float, help="seconds to wait for the server (default 10; load/unload 600)"
    )
    flags.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return flags


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand but ``serve``."""
    parser = argparse.ArgumentParser(prog=PROG, description="Manage a running Universal Runtime server.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    client = [_client_flags()]
    commands.add_parser("ps", parents=client, help="models in memory: device, memory, keep-alive, expiry")
    commands.add_parser("ls", parents=client, help="the server's catalog and what is loaded")
    load = commands.add_parser("load", parents=client, help="load a model now and wait until it is ready")
    load.add_argument("name", help="catalog name")
    load.add_argument("--keep-alive", help='idle time before unloading: "10m", "0" (at once), "-1" (never)')
    add_switch(load, "--pin", "never unload on idle (--no-pin undoes)")
    load.add_argument(
        "--option",
        "-o",
        action="append",
        metavar="KEY=VALUE",
        help="catalog option for this load, over the entry's, until it unloads (repeat for several; "
        "VALUE is read as YAML: 4096, true, torch)",
    )
    unload = commands.add_parser("unload", parents=client, help="unload a model once its requests finish")
    unload.add_argument("name", help="catalog name")
    unload.add_argument("--force", action="store_true", help="unload even when pinned")
    commands.add_parser("health", parents=client, help="gRPC health, overall and per service")
    pull = commands.add_parser("pull", help="download a Hugging Face model and add it to a catalog file")
    pull.add_argument("hub_id", help="hub id, org/name")
    pull.add_argument("--file", help="the GGUF file to serve, when the repo has several")
    pull.add_argument("--name", help="catalog name (default: from the hub id or the GGUF file)")
    pull.add_argument(
        "--catalog",
        type=Path,
        help="catalog to add to (default: UR_CATALOG_PATH, else <UR_DATA_DIR>/catalog.yaml)",
    )
    pull.add_argument("--dest", type=Path, help="folder for the files (default: <UR_DATA_DIR>/models/<name>)")
    pull.add_argument("--revision", help="branch, tag or commit (default: the default branch)")
    pull.add_argument("--backend", help="engine backend, when the repo's files do not tell")
    pull.add_argument(
        "--task", action="append", help="task the model serves (repeat for several); with --backend"
    )
    pull.add_argument("--keep-alive", help="keep_alive of the catalog entry")
    pull.add_argument("--force", action="store_true", help="replace an entry of the same name")
    pull.add_argument("--json", action="store_true", help="print the result as JSON")
    prepare = commands.add_parser(
        "prepare", help="build the converted copies (encoder exports, requantized GGUFs) the catalog needs"
    )
    prepare.add_argument(
        "--catalog",
        type=Path,
        help="catalog to prepare (default: the server's, UR_CATALOG_PATH or the default and user catalogs)",
    )
    add_catalog_parser(commands)
    add_keys_parser(commands)
    return parser


def connection(args: argparse.Namespace, settings: Settings) -> Connection:
    """The :class:`Connection` the flags describe, with defaults from the settings and environment."""
    return Connection(
        address=args.address or default_address(settings.grpc_host, settings.grpc_port),
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        api_key=args.api_key or settings.api_key_value(),
        timeout_s=args.timeout or 10.0,
    )


def run(
    argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None, inp: TextIO | None = None
) -> int:
    """Run one subcommand; returns the exit status (0 ok, 1 failed, 2 bad flags, 130 interrupted).

    Output goes to ``out`` (default stdout); errors and progress to ``err`` (default stderr), an
    error as one line ``universal-runtime <command>: <what went wrong>``; ``keys hash`` reads its
    key from ``inp`` (default stdin).
    """
    out = out or sys.stdout
    err = err or sys.stderr
    inp = inp or sys.stdin
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse already printed usage and the error
        return int(exit_.code or 0)
    try:
        if args.command == "keys":  # offline and settings-free: a bad UR_* variable must not stop it
            run_keys(args, inp, out, err)
            return 0
        try:
            settings = Settings()
        except ValueError as error:  # a malformed UR_* variable
            raise CommandError(" ".join(str(error).split())) from None
        if args.command == "pull":
            run_pull(args, out, err, settings)
        elif args.command == "prepare":
            run_prepare(args, out, err, settings)
        elif args.command == "catalog":
            run_catalog(args, out, settings)
        elif args.command == "load":  # its progress bar goes to err
            run_load(connection(args, settings), args, out, err)
        else:
            RPC_COMMANDS[args.command](connection(args, settings), args, out)
    except CommandError as error:
        out.flush()
        err.write(f"{PROG} {args.command}: {error}\n")
        return error.exit_code
    except BrokenPipeError:
        # The reader went away (``ps --json | head``): nothing more can be shown, and the
        # interpreter must not try to flush the dead pipe again on exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        err.write(f"{PROG} {args.command}: interrupted\n")
        return 130
    return 0
