"""``pull HUB_ID``: download a Hugging Face model, verify it, and add it to a catalog file.

Steps: list the repo (sizes and checksums, pinned to one commit) → fetch its small config files
→ choose backend and tasks (:mod:`service.admin.detect`, or ``--backend``/``--task``) → download
the files it needs with a progress bar → verify them (:mod:`service.admin.verify`) → append the
entry (:mod:`service.admin.user_catalog`). The model's status is reported on stderr in
docker/model-runner's ``backend.go`` form (``Installing: downloading``); nothing is added to the
catalog unless every file checks out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from service.admin.connection import CommandError
from service.admin.detect import CONFIG_FILES, Plan, explicit_plan, plan_for
from service.admin.hub import Hub, HuggingFaceHub, RepoListing
from service.admin.output import format_bytes, write_json
from service.admin.user_catalog import add_entry, check_entry
from service.admin.verify import verify_files
from service.catalog import user_catalog_path
from service.settings import Settings

#: Builds the hub ``pull`` talks to; tests replace it with a local stand-in.
make_hub: Callable[[], Hub] = HuggingFaceHub

# backend.go's status prefix and the details used while a model is being installed.
STATUS_INSTALLING = "Installing"
DETAIL_DOWNLOADING = "downloading"
DETAIL_VERIFYING = "verifying"


def format_status(status: str, details: str = "") -> str:
    """``"Installing: downloading"``, or the status alone without details (``backend.go``'s FormatStatus)."""
    return f"{status}: {details}" if details else status


def default_name(repo_id: str, gguf_file: str | None) -> str:
    """A catalog name from the hub id (``BAAI/bge-small-en-v1.5`` → ``bge-small-en-v1.5``).

    For a GGUF file the file's stem is used, so two quantizations of one repo get two names.
    """
    base = Path(gguf_file).stem if gguf_file else repo_id.rsplit("/", 1)[-1]
    name = re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-._")
    return name or "model"


def catalog_target(args: argparse.Namespace, settings: Settings) -> Path:
    """Where the entry goes: ``--catalog``, else ``UR_CATALOG_PATH``, else the user catalog."""
    if args.catalog is not None:
        return Path(args.catalog).expanduser()
    if settings.catalog_path is not None:
        return Path(settings.catalog_path).expanduser()
    return user_catalog_path(Path(settings.data_dir).expanduser())


def _read_configs(dest: Path, listing: RepoListing) -> dict[str, Any]:
    configs: dict[str, Any] = {}
    for name in CONFIG_FILES:
        path = dest / name
        if name in listing.by_path() and path.is_file():
            try:
                configs[name] = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                raise CommandError(f"the repo's {name} is not valid JSON") from None
    return configs


def _plan(args: argparse.Namespace, hub: Hub, listing: RepoListing, dest: Path) -> Plan:
    paths = [f.path for f in listing.files]
    if args.backend is not None:
        if not args.task:
            raise CommandError("--backend needs at least one --task")
        return explicit_plan(paths, args.backend, args.task, args.file)
    wanted = [name for name in CONFIG_FILES if name in listing.by_path()]
    if wanted and args.file is None:
        hub.download(args.hub_id, listing.revision, wanted, dest)
    return plan_for(paths, _read_configs(dest, listing), args.file)


def run_pull(args: argparse.Namespace, out: TextIO, err: TextIO, settings: Settings) -> None:
    """Pull ``args.hub_id`` into ``args.dest`` (default ``<data_dir>/models/<name>``) and catalog it.

    Raises:
        CommandError: the hub cannot be reached (offline, no network), the repo is unknown or
            cannot be served, a file fails verification, or the catalog cannot be written.

    """
    hub = make_hub()
    listing = hub.listing(args.hub_id, args.revision)
    name = args.name or default_name(args.hub_id, args.file)
    catalog = catalog_target(args, settings)
    dest = (
        Path(args.dest).expanduser() if args.dest else Path(settings.data_dir).expanduser() / "models" / name
    )
    dest = dest.resolve()

    def report(details: str) -> None:
        err.write(f"{name}: {format_status(STATUS_INSTALLING, details)}\n")
        err.flush()

    report(DETAIL_DOWNLOADING)
    plan = _plan(args, hub, listing, dest)
    source = str(dest / plan.entry_file) if plan.entry_file else str(dest)
    entry: dict[str, Any] = {"tasks": list(plan.tasks), "backend": plan.backend, "source": source}
    if plan.options:
        entry["options"] = plan.options
    if args.keep_alive:
        entry["keep_alive"] = args.keep_alive
    check_entry(name, entry)  # before the download: a bad --name or --keep-alive costs nothing
    hub.download(args.hub_id, listing.revision, plan.files, dest)
    report(DETAIL_VERIFYING)
    remote = listing.by_path()
    total = verify_files(dest, [remote[path] for path in plan.files])
    pulled_on = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    add_entry(
        catalog,
        name,
        entry,
        replace=args.force,
        comment=f"pulled from {args.hub_id} at {listing.revision[:12]} on {pulled_on}",
    )
    if args.json:
        write_json(
            out,
            {
                "name": name,
                "hub_id": args.hub_id,
                "revision": listing.revision,
                "catalog": str(catalog),
                "files": len(plan.files),
                "bytes": total,
                **entry,
            },
        )
        return
    out.write(
        f"pulled {name}: {plan.backend} ({', '.join(plan.tasks)}), {len(plan.files)} files, "
        f"{format_bytes(total)}, verified; added to {catalog}\n"
    )
