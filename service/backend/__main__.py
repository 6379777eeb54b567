"""``python -m service.backend --socket PATH --parent-pid PID [--settings-json JSON]``: run one backend.

In order: the parent-death signal and the parent check (before any heavy import; see
:mod:`service.backend.process`), OpenMP's defaults (before any runtime loads libgomp), logging to
stderr, then the server on ``unix:PATH`` (:func:`service.backend.app.serve`) on the event loop the
settings name. The process ends with ``os._exit`` once the server stopped: model runtimes'
threads (a lane still in a job after a drain timed out, torch's pools) never hold it up.

Exit status: 0 after Unload or SIGTERM; :data:`~service.backend.process.ORPHANED_EXIT_CODE` when
the server was gone already; 2 for bad arguments; 1 for a failure to start (logged).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from service.backend import process


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: ``--socket`` (path), ``--parent-pid`` (int), ``--settings-json`` (JSON object).

    Raises:
        SystemExit: status 2 for a missing or malformed argument (argparse's message on stderr).

    """
    parser = argparse.ArgumentParser(prog="python -m service.backend", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="Unix socket path to serve on (unix:PATH).")
    parser.add_argument(
        "--parent-pid", type=int, required=True, help="Process id of the server that started this backend."
    )
    parser.add_argument(
        "--settings-json",
        default=None,
        help="The server settings the backend needs, a JSON object (service.backend.settings).",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run a backend to its end (see the module).

    Returns:
        The exit status (0 after a graceful stop, 1 when it could not start).

    Raises:
        SystemExit: bad arguments (2), or the parent is gone already (ORPHANED_EXIT_CODE).

    """
    args = parse_args(argv)
    process.die_with_parent(args.parent_pid)
    import service.openmp  # noqa: F401  (sets OpenMP's defaults before libgomp is loaded)

    # stderr is read line by line: no progress bars (a load reports progress through its log).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from service.backend.settings import settings_from_json

    try:
        settings = settings_from_json(args.settings_json)
    except ValueError as exc:
        print(f"--settings-json: {exc}", file=sys.stderr)
        return 2
    process.configure_backend_logging(settings.log_level)

    import asyncio
    import logging

    from service.backend.app import serve
    from service.event_loop import loop_factory

    log = logging.getLogger("service.backend")
    try:
        with asyncio.Runner(loop_factory=loop_factory(settings.event_loop, explicit=False)) as runner:
            return runner.run(serve(args.socket, settings))
    except Exception:
        log.exception("backend failed")
        return 1


def _exit(status: int) -> None:
    """Flush logs and standard streams, then end the process with ``status`` at once."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    _exit(main())
