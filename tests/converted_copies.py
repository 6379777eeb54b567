"""What a test compares to tell that no converted copy was built again (engines/converted_cache.py).

Not the folder's mtime: a load marks the copy it uses by touching its folder.
"""

from __future__ import annotations

from pathlib import Path


def converted_copies(cache: Path) -> dict[str, tuple[int, dict[str, tuple[int, int]]]]:
    """Each copy's folder inode, with each file's (inode, mtime in ns): what a new build would change."""
    return {
        p.name: (p.stat().st_ino, {f.name: (f.stat().st_ino, f.stat().st_mtime_ns) for f in p.iterdir()})
        for p in cache.iterdir()
        if p.is_dir()
    }
