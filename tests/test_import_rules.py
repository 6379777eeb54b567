"""The layers' import rules (pyproject.toml [tool.importlinter]; docs/architecture/index.md) hold.

``make lint`` runs the same check; running it here too means ``make test`` alone catches a call
that climbs back up a layer (an engine importing the service, a converter importing engine
internals, the scheduler importing the engine that builds it, an import cycle).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_are_kept():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    lint_imports = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # generated/ must stay as protoc wrote it
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    # Every contract was checked (none skipped by a configuration mistake).
    assert f"Contracts: {len(contracts)} kept, 0 broken." in result.stdout, result.stdout[-2000:]
