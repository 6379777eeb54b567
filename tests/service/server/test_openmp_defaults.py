"""The server's entry point sets libgomp's wait defaults before anything loads libgomp."""

from __future__ import annotations

import os
import subprocess
import sys

from service.openmp import OPENMP_DEFAULTS, apply_openmp_defaults
from tests.conftest import REPO_ROOT

PROBE = (
    "import os, service.cli;"
    "print(os.environ['OMP_WAIT_POLICY'], os.environ['GOMP_SPINCOUNT'],"
    " open('/proc/self/maps').read().count('libgomp'))"
)


def run_probe(**overrides: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_DEFAULTS}
    env.update(overrides, PYTHONPATH=f"generated{os.pathsep}.")
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_entry_point_sets_the_defaults_before_libgomp_is_loaded():
    # Set, and libgomp not mapped yet by the entry point's imports: it reads them when loaded.
    assert run_probe() == ["ACTIVE", "300000", "0"]


def test_values_from_the_environment_are_kept():
    assert run_probe(OMP_WAIT_POLICY="PASSIVE", GOMP_SPINCOUNT="0")[:2] == ["PASSIVE", "0"]
    environ = {"OMP_WAIT_POLICY": "PASSIVE"}
    apply_openmp_defaults(environ)
    assert environ == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "300000"}
