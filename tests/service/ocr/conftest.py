"""OCR tests' setup: lane children start warm under pytest too."""

from __future__ import annotations

from engines.process_lane import preload_modules

# Every lane child re-runs the parent's main script (multiprocessing's main fixup): under pytest,
# its launcher, which imports pytest (in each PDF child restarted after a page over its time limit,
# outside the page's timer; see
# docs/architecture/design-notes.md#pdf-worker-imports-in-the-forkserver). Python 3.11's forkserver
# ignores "__main__" in its preload list, so the launcher's import is preloaded by name.
preload_modules("pytest")
