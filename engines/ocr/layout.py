"""Reading order of detected lines by recursive XY-cut.

After Nagy & Seth, "Hierarchical representation of optically scanned documents" (ICPR 1984):
a set of line boxes is split at empty vertical gutters into columns (read left to right);
a set with no gutter is split in two at its widest empty horizontal band (read top to bottom);
each part is ordered the same way. So a two-column page reads column by column, and a title
that spans both columns comes first. Side effect: label/value pairs that the detector returns
as separate boxes with a wide gutter between them read as two columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engines.ocr.types import Box

Span = Callable[[int], tuple[float, float]]


def _groups(items: list[int], span: Span) -> tuple[list[list[int]], list[float]]:
    """Split ``items`` where their projections on one axis leave gaps; also return the gap sizes."""
    ordered = sorted(items, key=lambda i: span(i)[0])
    groups: list[list[int]] = []
    gaps: list[float] = []
    end = float("-inf")
    for i in ordered:
        start, stop = span(i)
        if groups and start < end:
            groups[-1].append(i)
            end = max(end, stop)
            continue
        if groups:
            gaps.append(start - end)
        groups.append([i])
        end = stop
    return groups, gaps


def reading_order(boxes: Sequence[Box]) -> list[int]:
    """Indices of ``boxes`` in reading order (columns left to right, bands top to bottom)."""

    def across(i: int) -> tuple[float, float]:
        return boxes[i].x, boxes[i].x + boxes[i].width

    def down(i: int) -> tuple[float, float]:
        # The middle 60% of each box, so that lines whose boxes touch or overlap slightly still split.
        b = boxes[i]
        return b.y + 0.2 * b.height, b.y + 0.8 * b.height

    def order(items: list[int]) -> list[int]:
        if len(items) <= 1:
            return items
        columns, _ = _groups(items, across)
        if len(columns) > 1:
            return [i for column in columns for i in order(column)]
        bands, gaps = _groups(items, down)
        if len(bands) > 1:
            cut = max(range(len(gaps)), key=gaps.__getitem__) + 1
            top = [i for band in bands[:cut] for i in band]
            bottom = [i for band in bands[cut:] for i in band]
            return order(top) + order(bottom)
        return sorted(items, key=lambda i: (boxes[i].y, boxes[i].x))

    return order(list(range(len(boxes))))


def same_line(a: Box, b: Box, max_gap: float = 1.0) -> bool:
    """Whether ``b`` continues the text line of ``a`` (``b`` to the right of ``a``).

    True when each box's vertical centre lies within the other's vertical extent and the
    horizontal gap is at most ``max_gap`` times the taller box's height (a word space is well
    under one line height; a column gutter usually over).
    """
    a_mid, b_mid = a.y + a.height / 2, b.y + b.height / 2
    overlaps = a.y <= b_mid <= a.y + a.height and b.y <= a_mid <= b.y + b.height
    gap = b.x - (a.x + a.width)
    return overlaps and -0.5 * min(a.height, b.height) <= gap <= max_gap * max(a.height, b.height)
