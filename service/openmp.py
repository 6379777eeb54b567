"""OpenMP wait settings for a process that runs llama.cpp beside torch models.

Imported first by the ``universal-runtime`` entry point, before any module loads libgomp (which
reads its environment once, when it is loaded).

Why: llama.cpp (built with OpenMP) waits at every operator's barrier through libgomp, and libgomp
spins there for a while before it sleeps. Once torch has run a model on another lane, its own
OpenMP threads count too, and with more libgomp threads than CPUs libgomp cuts that spin to 100
iterations (its "throttled" spin), so llama.cpp's threads sleep and wake at every barrier: on 2
cores a GGUF model decoded at ~60 tok/s after a torch model had run once, against ~110 before
(``bench/README.md``, generation). ``OMP_WAIT_POLICY=ACTIVE`` raises the throttled spin to 1000
iterations, which keeps the barriers fast; ``GOMP_SPINCOUNT=300000`` keeps the unthrottled spin at
libgomp's default for an unset policy, so idle threads still go to sleep within a millisecond
instead of spinning for ever (what ACTIVE alone would do). Both are defaults: values set in the
environment are kept. (libgomp's ``env.c`` and the GOMP_SPINCOUNT section of its manual.)
"""

from __future__ import annotations

import os

OPENMP_DEFAULTS = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}


def apply_openmp_defaults(environ: dict[str, str] | os._Environ = os.environ) -> None:
    """Set :data:`OPENMP_DEFAULTS` in ``environ`` where the variable is not set already."""
    for name, value in OPENMP_DEFAULTS.items():
        environ.setdefault(name, value)


apply_openmp_defaults()
