"""Rendering command results: aligned text tables for people, JSON for scripts."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, TextIO

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(count: int) -> str:
    """``count`` bytes in binary units with one decimal (``"87.3 MiB"``); ``"-"`` for 0."""
    if count <= 0:
        return "-"
    value = float(count)
    for unit in _BINARY_UNITS:
        if value < 1024 or unit == _BINARY_UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """A short duration such as ``"4m12s"``, ``"1h05m"`` or ``"12s"``; negative values read ``"0s"``."""
    total = max(0, math.ceil(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def write_table(out: TextIO, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Write ``rows`` under ``headers`` as left-aligned columns, three spaces apart.

    Every row must have ``len(headers)`` cells; trailing spaces are stripped from each line.
    """
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
    for line in (headers, *rows):
        out.write("   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
        out.write("\n")


def write_json(out: TextIO, value: Any) -> None:
    """Write ``value`` as indented JSON followed by a newline."""
    json.dump(value, out, indent=2, sort_keys=False)
    out.write("\n")
