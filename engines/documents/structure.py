"""The structure step: OCR lines + layout regions -> blocks in reading order, tables, Markdown.

Pure functions over :mod:`engines.ocr.types` and :mod:`engines.documents.types` (no I/O, no
model). :func:`structure_page` does, in order:

1. **Clean the regions** (:func:`clean_regions`): clip to the page, same-type non-maximum
   suppression (IoU > 0.5 keeps the more confident), cross-type near-duplicates (IoU > 0.8, the
   model often gives one box two labels) keep the more confident, and a region lying mostly
   (>= 80% of its area) inside a table or figure, or inside a region of its own type, is dropped
   (the text inside a table is the table's).
2. **Assign lines** (:func:`assign_lines`): each OCR line goes to the region holding most of
   its area (at least half); among regions holding nearly as much (within 10 points), the
   smallest wins, so a title box inside a loose text box keeps its title line.
3. **Lines in no region**: a short line alone in the top or bottom 6% band of the page becomes
   a page header or footer (:func:`band_role`; conservative, see there); the others are grouped
   into paragraphs by vertical gap (:func:`group_paragraphs`) and become ``TEXT`` blocks with
   confidence 1.0.
4. **Reading order**: page headers first, page footers last, the rest by recursive XY-cut
   (:func:`engines.ocr.layout.reading_order`) over the block boxes (see :func:`order_blocks`),
   so a two-column page reads column by column under a full-width title. Lines inside a block
   are in XY-cut order too.
5. **Tables** (:func:`build_table`): rows by vertical overlap, columns by the x-gaps that no
   cell text crosses (see there).
6. **Markdown** (:func:`engines.documents.markdown.render_markdown`).

Cost: with ``n`` lines (words count with their line) and ``r`` regions, cleaning is O(r^2),
assignment O(n * r) (vectorised), grouping and tables O(n log n), reading order O(n^2) in the
worst case of the XY-cut recursion. ``n`` and ``r`` are bounded by the page's pixels (the OCR
engines' page-size limit) and by the detector (at most 100 regions per class), so a page of a
few thousand lines structures in milliseconds.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engines.documents.markdown import render_markdown
from engines.documents.types import Block, LayoutRegion, RegionType, StructuredPage, Table, TableCell
from engines.ocr.layout import reading_order
from engines.ocr.types import Box, OcrLine, OcrPage

#: Fraction of the page height at the top and bottom where unclassified short lines may be
#: page headers or footers.
BAND = 0.06
#: Same-type NMS overlap, cross-type duplicate overlap, and the share of a region's area inside
#: another that makes it "inside".
SAME_TYPE_IOU = 0.5
DUPLICATE_IOU = 0.8
INSIDE = 0.8
#: A line belongs to a region holding at least this share of its area.
MIN_LINE_SHARE = 0.5
#: Region types whose blocks are kept without text (the others are dropped when empty).
KEEP_EMPTY = frozenset({RegionType.FIGURE, RegionType.TABLE, RegionType.EQUATION})
CONTAINERS = frozenset({RegionType.TABLE, RegionType.FIGURE})


def _corners(boxes: Sequence[Box]) -> np.ndarray:
    """(n, 4) float64 array of left, top, right, bottom."""
    if not boxes:
        return np.zeros((0, 4))
    return np.array([(b.x, b.y, b.x + b.width, b.y + b.height) for b in boxes], dtype=np.float64)


def _intersections(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) intersection areas of corner arrays."""
    left = np.maximum(a[:, None, 0], b[None, :, 0])
    top = np.maximum(a[:, None, 1], b[None, :, 1])
    right = np.minimum(a[:, None, 2], b[None, :, 2])
    bottom = np.minimum(a[:, None, 3], b[None, :, 3])
    return np.clip(right - left, 0, None) * np.clip(bottom - top, 0, None)


def _areas(c: np.ndarray) -> np.ndarray:
    return np.clip(c[:, 2] - c[:, 0], 0, None) * np.clip(c[:, 3] - c[:, 1], 0, None)


def clean_regions(regions: Sequence[LayoutRegion], width: float, height: float) -> list[LayoutRegion]:
    """Regions clipped to the page, without duplicates and without regions inside containers.

    Rules (most confident first): a region overlapping a kept region of its type at IoU > 0.5,
    or one of any type at IoU > 0.8, is dropped; then a region with >= 80% of its area inside a
    larger ``TABLE`` or ``FIGURE``, or inside a larger region of its own type, is dropped. Other
    nestings (a title inside a text box) are kept; :func:`assign_lines` sorts out their lines.
    O(r^2) for ``r`` regions. Returns the kept regions, most confident first.
    """
    clipped = []
    for region in regions:
        left, top = max(0.0, region.box.x), max(0.0, region.box.y)
        right = min(float(width), region.box.x + region.box.width)
        bottom = min(float(height), region.box.y + region.box.height)
        if right > left and bottom > top:
            clipped.append(
                LayoutRegion(region.type, Box(left, top, right - left, bottom - top), region.confidence)
            )
    clipped.sort(key=lambda r: -r.confidence)
    if not clipped:
        return []
    corners = _corners([r.box for r in clipped])
    areas = _areas(corners)
    inter = _intersections(corners, corners)
    iou = inter / np.maximum(areas[:, None] + areas[None, :] - inter, 1e-9)
    kept: list[int] = []
    for i, region in enumerate(clipped):
        duplicate = any(
            iou[i, k] > (SAME_TYPE_IOU if clipped[k].type == region.type else DUPLICATE_IOU) for k in kept
        )
        if not duplicate:
            kept.append(i)
    result = []
    for i in kept:
        inside = any(
            k != i
            and areas[k] > areas[i]
            and inter[i, k] >= INSIDE * areas[i]
            and (clipped[k].type in CONTAINERS or clipped[k].type == clipped[i].type)
            for k in kept
        )
        if not inside:
            result.append(clipped[i])
    return result


def assign_lines(lines: Sequence[OcrLine], regions: Sequence[LayoutRegion]) -> list[int | None]:
    """For each line, the index of its region in ``regions``, or None (no region holds half of it).

    The region holding the largest share of the line's area wins; among regions within 0.1 of
    that share the smallest region wins (the most specific). A line of zero area counts its
    centre point. O(n * r), vectorised.
    """
    if not lines or not regions:
        return [None] * len(lines)
    line_corners = _corners([line.box for line in lines])
    # Zero-height or zero-width lines: give them one pixel so that shares are defined.
    line_corners[:, 2] = np.maximum(line_corners[:, 2], line_corners[:, 0] + 1)
    line_corners[:, 3] = np.maximum(line_corners[:, 3], line_corners[:, 1] + 1)
    region_corners = _corners([r.box for r in regions])
    share = _intersections(line_corners, region_corners) / _areas(line_corners)[:, None]
    region_areas = _areas(region_corners)
    result: list[int | None] = []
    for row in share:
        best = float(row.max())
        if best < MIN_LINE_SHARE:
            result.append(None)
            continue
        candidates = np.flatnonzero(row >= best - 0.1)
        result.append(int(candidates[np.argmin(region_areas[candidates])]))
    return result


def band_role(line: OcrLine, others: Sequence[OcrLine], width: float, height: float) -> RegionType | None:
    """``PAGE_HEADER``/``PAGE_FOOTER`` for a line the layout model left unclassified, else None.

    Conservative: the line lies wholly in the top (bottom) 6% of the page, has at most 60
    characters, is at most half the page wide, and every other line outside the band is at
    least one line height away from it (a running head or a page number stands apart; the
    first line of a paragraph starting near the top does not). O(len(others)).
    """
    if height <= 0 or len(line.text) > 60 or line.box.width > 0.5 * width:
        return None
    top, bottom = line.box.y, line.box.y + line.box.height
    if bottom <= BAND * height:
        role, below = RegionType.PAGE_HEADER, True
    elif top >= (1 - BAND) * height:
        role, below = RegionType.PAGE_FOOTER, False
    else:
        return None
    for other in others:
        if other is line:
            continue
        o_top, o_bottom = other.box.y, other.box.y + other.box.height
        if (below and o_bottom <= BAND * height) or (not below and o_top >= (1 - BAND) * height):
            continue  # another line of the same band
        gap = o_top - bottom if below else top - o_bottom
        if gap < line.box.height:
            return None
    return role


def group_paragraphs(lines: Sequence[OcrLine]) -> list[list[OcrLine]]:
    """Lines (no region) grouped into paragraphs, each in reading order; O(n log n) + XY-cut.

    Lines are put in XY-cut order; a line continues the previous one's paragraph when it starts
    below it within 0.8 of the taller line's height (a larger gap is a paragraph break), their
    x-extents overlap, and their heights differ by less than 1.5x (a heading over body text).
    """
    if not lines:
        return []
    ordered = [lines[i] for i in reading_order([line.box for line in lines])]
    paragraphs: list[list[OcrLine]] = [[ordered[0]]]
    for previous, line in itertools.pairwise(ordered):
        a, b = previous.box, line.box
        tall = max(a.height, b.height, 1.0)
        gap = b.y - (a.y + a.height)
        overlaps = min(a.x + a.width, b.x + b.width) > max(a.x, b.x)
        similar = max(a.height, b.height) < 1.5 * max(1.0, min(a.height, b.height))
        if -0.5 * tall <= gap <= 0.8 * tall and overlaps and similar:
            paragraphs[-1].append(line)
        else:
            paragraphs.append([line])
    return paragraphs


@dataclass(slots=True)
class _Piece:
    """A run of words of one line, or a whole line: one table cell's text or part of it."""

    text: str
    box: Box


def _pieces(line: OcrLine, gap: float) -> list[_Piece]:
    """Split ``line`` at gaps between its words wider than ``gap`` pixels.

    The whole line is one piece when it has no words. RapidOCR may join a table row's cells
    into one line (``merge_fragments``); its word boxes still show the column gaps.
    """
    if not line.words:
        return [_Piece(line.text, line.box)]
    words = sorted(line.words, key=lambda w: w.box.x)
    pieces: list[list] = [[words[0]]]
    for previous, word in itertools.pairwise(words):
        if word.box.x - (previous.box.x + previous.box.width) > gap:
            pieces.append([word])
        else:
            pieces[-1].append(word)
    return [_Piece(" ".join(w.text for w in run), Box.union([w.box for w in run])) for run in pieces]


def build_table(lines: Sequence[OcrLine]) -> Table:
    """A grid of cells from the OCR lines inside a table region.

    1. Each line is cut into pieces at word gaps wider than 0.9 x the median line height (word
       spaces are about 0.3 em, column gaps usually over 1 em), so a row that OCR read as one
       line still splits into its cells.
    2. Rows: pieces sorted by vertical centre; a piece joins the current row when it overlaps
       the row's vertical extent by at least half of the smaller height.
    3. Columns: the x-projection of the pieces of rows with two or more pieces (a title row
       spanning the table would hide every gap) is merged into intervals; each gap between
       intervals that no such piece crosses is a column boundary.
    4. Each piece goes to the columns it overlaps (several: a spanning cell, ``column_span``);
       pieces sharing a cell are joined with spaces, left to right. Grid positions left empty
       get an empty cell whose box is the row extent x the column extent.

    A cell whose text wraps onto two lines gives two rows (no rule lines are read). Cost
    O(n log n + n * c) for ``n`` pieces and ``c`` columns. An empty ``lines`` gives a 0 x 0 table.
    """
    if not lines:
        return Table(0, 0, [])
    median_height = statistics.median(line.box.height for line in lines) or 1.0
    pieces = [piece for line in lines for piece in _pieces(line, 0.9 * median_height)]
    pieces.sort(key=lambda p: p.box.y + p.box.height / 2)
    rows: list[list[_Piece]] = []
    row_top = row_bottom = 0.0
    for piece in pieces:
        top, bottom = piece.box.y, piece.box.y + piece.box.height
        if rows:
            overlap = min(bottom, row_bottom) - max(top, row_top)
            if overlap >= 0.5 * min(piece.box.height, row_bottom - row_top):
                rows[-1].append(piece)
                row_top, row_bottom = min(row_top, top), max(row_bottom, bottom)
                continue
        rows.append([piece])
        row_top, row_bottom = top, bottom
    for row in rows:
        row.sort(key=lambda p: p.box.x)
    basis = [p for row in rows if len(row) > 1 for p in row] or pieces
    columns: list[list[float]] = []
    for left, right in sorted((p.box.x, p.box.x + p.box.width) for p in basis):
        if columns and left < columns[-1][1]:
            columns[-1][1] = max(columns[-1][1], right)
        else:
            columns.append([left, right])
    # Boundaries halfway across each gap, so that pieces of rows left out of the basis (or
    # slightly wider than their column's text) fall into the nearest column.
    bounds = [float("-inf")] + [(a[1] + b[0]) / 2 for a, b in itertools.pairwise(columns)]
    bounds.append(float("inf"))

    def column_range(box: Box) -> tuple[int, int]:
        """First column and span of a piece.

        The columns it overlaps by at least a quarter of the narrower of the piece and the
        column's text; the column holding its centre when there is none.
        """
        left, right = box.x, box.x + box.width
        hit = [
            c
            for c in range(len(columns))
            if min(right, bounds[c + 1]) - max(left, bounds[c])
            >= 0.25 * min(box.width, columns[c][1] - columns[c][0])
        ]
        if not hit:
            centre = left + box.width / 2
            hit = [next(c for c in range(len(columns)) if centre < bounds[c + 1])]
        return hit[0], hit[-1] - hit[0] + 1

    cells: dict[tuple[int, int], TableCell] = {}
    covered: dict[tuple[int, int], tuple[int, int]] = {}  # grid position -> spanning cell's key
    for r, row in enumerate(rows):
        for piece in row:
            column, span = column_range(piece.box)
            cell = cells.get((r, column))
            if cell is None:
                cells[(r, column)] = TableCell(r, column, piece.text, piece.box, column_span=span)
            else:
                cell.text = f"{cell.text} {piece.text}"
                cell.box = Box.union([cell.box, piece.box])
                cell.column_span = max(cell.column_span, column + span - cell.column)
            covered.update(((r, c), (r, column)) for c in range(column + 1, column + span))
    row_extents = [(min(p.box.y for p in row), max(p.box.y + p.box.height for p in row)) for row in rows]
    for r, (top, bottom) in enumerate(row_extents):
        for c, (left, right) in enumerate(columns):
            if (r, c) not in cells and (r, c) not in covered:
                cells[(r, c)] = TableCell(r, c, "", Box(left, top, right - left, bottom - top))
    # A piece that starts under a spanning cell joins it (its own cell would hide behind the span).
    for key in sorted(cells):
        owner = covered.get(key)
        if owner is not None and owner in cells and owner != key:
            hidden = cells[key]
            cells[owner].text = f"{cells[owner].text} {hidden.text}".strip()
            cells[owner].box = Box.union([cells[owner].box, hidden.box])
    ordered = [cells[key] for key in sorted(cells) if key not in covered]
    return Table(len(rows), len(columns), ordered)


def _block(kind: RegionType, box: Box | None, confidence: float, lines: Sequence[OcrLine]) -> Block:
    """A block of ``lines`` in XY-cut order; a table block also gets its grid."""
    ordered = [lines[i] for i in reading_order([line.box for line in lines])]
    boxes = ([box] if box is not None else []) + [line.box for line in ordered]
    table = None
    text = "\n".join(line.text for line in ordered)
    if kind is RegionType.TABLE:
        table = build_table(ordered)
        text = "\n".join("\t".join(row) for row in table.rows())
    return Block(kind, text, Box.union(boxes), confidence, list(ordered), table)


def order_blocks(blocks: Sequence[Block]) -> list[Block]:
    """Headers first, footers last, everything else by XY-cut over the blocks' boxes.

    Each block is cut on its full box across (the layout box spans its column even where the
    lines are short, so a centred title overlaps both columns and no false gutter opens) and
    on its lines' extent down (layout boxes may nest: a title box inside a loose text box is
    still read before the text under it).
    """

    def key(block: Block) -> Box:
        if not block.lines:
            return block.box
        lines = Box.union([line.box for line in block.lines])
        return Box(block.box.x, lines.y, block.box.width, lines.height)

    def xy(items: list[Block]) -> list[Block]:
        return [items[i] for i in reading_order([key(b) for b in items])]

    headers = [b for b in blocks if b.type is RegionType.PAGE_HEADER]
    footers = [b for b in blocks if b.type is RegionType.PAGE_FOOTER]
    body = [b for b in blocks if b.type not in (RegionType.PAGE_HEADER, RegionType.PAGE_FOOTER)]
    return xy(headers) + xy(body) + xy(footers)


def structure_page(page: OcrPage, regions: list[LayoutRegion], layout_engine: str) -> StructuredPage:
    """Structure ``page``'s OCR lines into ``regions`` (same pixel coordinates as the page).

    Args:
        page: the OCR of the page (lines with boxes; words improve tables, see
            :func:`build_table`).
        regions: the layout model's regions, any order, duplicates allowed.
        layout_engine: the layout backend's name, copied into the result.

    Returns:
        The page's blocks in reading order and its Markdown; a page with no lines and no
        regions gives no blocks and empty Markdown. Never raises on well-formed inputs.

    """
    kept = clean_regions(regions, page.width, page.height)
    owners = assign_lines(page.lines, kept)
    members: list[list[OcrLine]] = [[] for _ in kept]
    loose: list[OcrLine] = []
    for line, owner in zip(page.lines, owners, strict=True):
        if not line.text.strip():
            continue
        if owner is None:
            loose.append(line)
        else:
            members[owner].append(line)
    blocks = [
        _block(region.type, region.box, region.confidence, lines)
        for region, lines in zip(kept, members, strict=True)
        if lines or region.type in KEEP_EMPTY
    ]
    body_lines = []
    for line in loose:
        role = band_role(line, page.lines, page.width, page.height)
        if role is None:
            body_lines.append(line)
        else:
            blocks.append(_block(role, None, 1.0, [line]))
    blocks.extend(_block(RegionType.TEXT, None, 1.0, lines) for lines in group_paragraphs(body_lines))
    ordered = order_blocks(blocks)
    return StructuredPage(
        page_number=page.page_number,
        page_count=page.page_count,
        width=page.width,
        height=page.height,
        blocks=ordered,
        markdown=render_markdown(ordered),
        ocr_engine=page.engine,
        layout_engine=layout_engine,
    )
