"""Fixtures of the operator CLI tests: servers of their own, and the CLI run in a worker thread.

The servers run on the test event loop; the CLI uses a blocking gRPC channel, so each call runs in
a thread (:func:`cli`) while the loop keeps serving.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from service.admin.main import run
from service.server import RunningServer, start_server
from service.settings import Settings
from tests.conftest import MINILM_SOURCE

CLI_MODEL = "cli-minilm"
CLI_CATALOG = {
    "models": {
        CLI_MODEL: {"tasks": ["embed"], "backend": "sentence_transformers", "source": MINILM_SOURCE},
        "cli-missing": {"tasks": ["embed"], "backend": "sentence_transformers", "source": "/nonexistent/m"},
    }
}


@dataclass(frozen=True)
class Result:
    """What one CLI run printed, and its exit status."""

    code: int
    out: str
    err: str


async def cli(*argv: str) -> Result:
    """Run ``universal-runtime <argv>`` in a thread; stdout and stderr are captured."""
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(run, list(argv), out, err)
    return Result(code, out.getvalue(), err.getvalue())


def write_catalog(folder: Path, catalog: dict) -> Path:
    """Write ``catalog`` as ``folder/catalog.yaml``; returns its path."""
    path = folder / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    return path


async def started(tmp: Path, **settings) -> RunningServer:
    """A server on a free port over :data:`CLI_CATALOG` (unless ``catalog_path`` is given)."""
    if "catalog_path" not in settings:
        settings["catalog_path"] = write_catalog(tmp, CLI_CATALOG)
    return await start_server(
        Settings(grpc_port=0, data_dir=tmp / "data", metrics_port=0, reap_interval_s=0.1, **settings)
    )


@pytest.fixture(scope="module")
async def admin_server(tmp_path_factory) -> RunningServer:
    running = await started(tmp_path_factory.mktemp("admin"))
    yield running
    await running.stop(grace=1.0)


@pytest.fixture(scope="module")
def address(admin_server) -> str:
    return f"127.0.0.1:{admin_server.port}"
