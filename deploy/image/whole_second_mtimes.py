"""Rounds the modification times of every file under a folder down to whole seconds.

Image layers are tar archives, and the usual writers (Go's archive/tar without an explicit PAX
format: buildah, podman, BuildKit's export) keep whole seconds only. The converted-model cache keys
(engines/converted_cache.py) hold each weight file's mtime in nanoseconds, so copies `universal-runtime
prepare` made in a build's RUN, from files pip had just written, were keyed on times the image no
longer has: the server exported MiniLM again on its first load. deploy/Dockerfile runs this on the
virtualenv, then `prepare` again, so the keys are computed on the times the image keeps.

Rounding down keeps compiled bytecode valid: a .pyc records its source's mtime in whole seconds.
Symbolic links are left as they are (their targets are files under the folder or outside it).

Usage: ``python whole_second_mtimes.py FOLDER``; prints how many files it changed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

NS_PER_S = 1_000_000_000


def round_down_mtimes(folder: Path) -> int:
    """Sets each regular file's mtime under ``folder`` to its whole second; returns how many changed.

    The access time is kept. Raises OSError when a file cannot be changed (not its owner).
    """
    changed = 0
    for directory, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(directory, name)
            stat = os.lstat(path)
            if os.path.islink(path) or stat.st_mtime_ns % NS_PER_S == 0:
                continue
            whole = stat.st_mtime_ns - stat.st_mtime_ns % NS_PER_S
            os.utime(path, ns=(stat.st_atime_ns, whole), follow_symlinks=False)
            changed += 1
    return changed


if __name__ == "__main__":
    print(f"{round_down_mtimes(Path(sys.argv[1]))} file times rounded down to whole seconds")
