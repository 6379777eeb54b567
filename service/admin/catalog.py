"""``catalog schema`` and ``catalog check``: the catalog's JSON Schema, and a catalog checked offline.

``catalog schema`` prints the JSON Schema of a catalog file (:func:`service.catalog_schema.catalog_schema`)
for editors (``# yaml-language-server: $schema=<file>`` as a catalog's first line).

``catalog check [FILE...]`` runs on each file the checks the server runs on its catalog at
start-up, without starting one: the file is read (:func:`service.catalog.load_catalog`: YAML, the
entry fields, the model names), then each entry's backend checks it (:meth:`engines.base.Engine.check_spec`:
the typed options, the source, the backend's packages). Every problem is one line
``FILE: MODEL: why`` on stdout; the command then fails with a count. With no FILE it checks the
catalog the server would read (``UR_CATALOG_PATH``, else the embedded default with the user
catalog over it). ``--options-only`` skips the checks that depend on this machine (sources,
installed packages), for a catalog meant for another one.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from engines.errors import RuntimeServiceError
from engines.options import parse_options
from engines.registry import engine_class
from service.admin.connection import CommandError
from service.catalog import CatalogError, load_catalog, user_catalog_path
from service.catalog_schema import catalog_schema
from service.settings import Settings


def add_catalog_parser(commands: Any) -> None:
    """Add ``catalog schema`` and ``catalog check`` to the subcommands (an argparse subparsers action)."""
    catalog = commands.add_parser("catalog", help="print the catalog's JSON Schema, or check catalog files")
    actions = catalog.add_subparsers(dest="catalog_command", required=True, metavar="ACTION")
    actions.add_parser("schema", help="print the JSON Schema of a catalog file")
    check = actions.add_parser(
        "check", help="check catalog files as the server does at start-up; every problem on one line"
    )
    check.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="catalogs to check (default: the server's, UR_CATALOG_PATH or the default and user catalogs)",
    )
    check.add_argument(
        "--options-only",
        action="store_true",
        help="check entries and options, not sources or installed packages (a catalog for another machine)",
    )


def run_catalog(args: argparse.Namespace, out: TextIO, settings: Settings) -> None:
    """Run ``catalog schema`` or ``catalog check``.

    Raises:
        CommandError: ``check`` found problems (they are on ``out``, one per line); its message
            counts them.

    """
    if args.catalog_command == "schema":
        out.write(json.dumps(catalog_schema(), indent=2) + "\n")
        return
    targets: list[tuple[str, Path | None]] = [(str(path), path) for path in args.files]
    if not targets:
        targets = [(str(settings.catalog_path or "the embedded default catalog"), settings.catalog_path)]
    results = [
        (label, check_catalog_file(path, settings, options_only=args.options_only)) for label, path in targets
    ]
    for label, result in results:
        for line in result.problems:
            out.write(f"{label}: {line}\n")
    models = sum(result.models for _, result in results)
    bad_models = sum(len(result.problems) for _, result in results if result.readable)
    unreadable = sum(not result.readable for _, result in results)
    if bad_models or unreadable:
        summary = f"{bad_models} of {models} model(s) with problems"
        if unreadable:
            summary += f", {unreadable} of {len(results)} catalog(s) unreadable or not a catalog"
        raise CommandError(summary)
    out.write(f"{len(results)} catalog(s), {models} model(s): no problems\n")


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What :func:`check_catalog_file` found in one catalog.

    Attributes:
        problems: one line per bad entry, ``MODEL: why`` (every problem of the entry), sorted by
            model name; for a file that is unreadable or not a catalog, the one line saying so.
        models: entries in the file (good and bad).
        readable: False when the file could not be read as a catalog at all.

    """

    problems: list[str]
    models: int
    readable: bool = True


def check_catalog_file(path: Path | None, settings: Settings, *, options_only: bool = False) -> CheckResult:
    """Check one catalog as the server would at start-up.

    Args:
        path: the catalog file; None checks the embedded default with the user catalog
            (``<UR_DATA_DIR>/catalog.yaml``) over it, as the server reads them.
        settings: where the user catalog is.
        options_only: check the entries' fields and options only, not their sources or packages.

    """
    try:
        catalog = load_catalog(
            path.expanduser() if path is not None else None,
            user_path=user_catalog_path(Path(settings.data_dir).expanduser()),
        )
    except CatalogError as error:
        return CheckResult([" ".join(str(error).split())], 0, readable=False)
    problems = dict(catalog.invalid)
    for name, spec in catalog.specs.items():
        try:
            cls = engine_class(spec.backend)
            if options_only:
                parse_options(cls.options_model, spec.options, backend=cls.backend)
            else:
                cls.check_spec(spec)
        except RuntimeServiceError as error:
            problems[name] = error.message
        except Exception as error:  # a backend check that failed unexpectedly is still this entry's problem
            problems[name] = f"{type(error).__name__}: {error}"
    lines = [f"{name}: {' '.join(problems[name].split())}" for name in sorted(problems)]
    return CheckResult(lines, len(catalog.specs) + len(catalog.invalid))
