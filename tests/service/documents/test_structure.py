"""The structure step and the Markdown renderer on hand-made OCR lines and layout regions."""

from __future__ import annotations

import time

from engines.documents.markdown import join_lines, render_markdown
from engines.documents.structure import build_table, clean_regions, structure_page
from engines.documents.types import Block, LayoutRegion, RegionType, Table, TableCell
from engines.ocr.types import Box, OcrLine, OcrPage, OcrWord

WIDTH, HEIGHT = 1240, 1754
CHAR = 14  # pixels per character of the made-up font
HEIGHT_PX = 30


def words_of(text: str, x: float, y: float, h: float = HEIGHT_PX) -> list[OcrWord]:
    """Word boxes of ``text`` drawn from ``x`` at CHAR pixels a character (spaces included)."""
    out, cursor = [], x
    for word in text.split(" "):
        out.append(OcrWord(word, Box(cursor, y, len(word) * CHAR, h), 0.9))
        cursor += (len(word) + 1) * CHAR
    return out


def line(text: str, x: float, y: float, h: float = HEIGHT_PX, width: float | None = None) -> OcrLine:
    """A line at (x, y); its box is as wide as its words unless ``width`` says otherwise."""
    words = words_of(text, x, y, h)
    right = words[-1].box.x + words[-1].box.width
    return OcrLine(text, Box(x, y, width if width is not None else right - x, h), 0.9, words)


def row_line(cells: list[tuple[str, float]], y: float) -> OcrLine:
    """One OCR line holding a whole table row: each cell's words start at its x."""
    words = [w for text, x in cells for w in words_of(text, x, y)]
    box = Box.union([w.box for w in words])
    return OcrLine(" ".join(text for text, _ in cells), box, 0.9, words)


def page_of(lines: list[OcrLine]) -> OcrPage:
    return OcrPage(1, 1, "\n".join(x.text for x in lines), lines, WIDTH, HEIGHT, "rapidocr", 0.9)


def region(kind: RegionType, left: float, top: float, right: float, bottom: float, confidence=0.9):
    return LayoutRegion(kind, Box(left, top, right - left, bottom - top), confidence)


def test_an_empty_page_gives_no_blocks_and_empty_markdown():
    result = structure_page(page_of([]), [], "rapid_layout")
    assert result.blocks == [] and result.markdown == ""
    assert (result.width, result.height, result.layout_engine, result.ocr_engine) == (
        WIDTH,
        HEIGHT,
        "rapid_layout",
        "rapidocr",
    )
    assert render_markdown([]) == ""
    # Regions without lines (text-like ones) give nothing either; a figure stays, without text.
    only_regions = structure_page(
        page_of([]),
        [region(RegionType.TEXT, 100, 100, 500, 300), region(RegionType.FIGURE, 100, 400, 500, 700)],
        "rapid_layout",
    )
    assert [b.type for b in only_regions.blocks] == [RegionType.FIGURE]
    assert only_regions.markdown == ""


def two_column_lines() -> tuple[list[OcrLine], list[OcrLine], OcrLine]:
    title = line("Alpine Lakes and Coastal Harbours", 300, 140, h=44)
    left = [line(t, 110, 280 + i * 38) for i, t in enumerate(["glacier one", "glacier two", "glacier three"])]
    right = [
        line(t, 660, 280 + i * 38) for i, t in enumerate(["harbour one", "harbour two", "harbour three"])
    ]
    return left, right, title


def test_a_two_column_page_reads_title_then_left_column_then_right_column():
    left, right, title = two_column_lines()
    # Lines listed right column first and regions in a scrambled order: the output must not care.
    lines = [*right, title, *left]
    regions = [
        region(RegionType.TEXT, 650, 275, 1130, 400),
        region(RegionType.TITLE, 290, 135, 950, 190, 0.7),
        region(RegionType.TEXT, 100, 275, 580, 400),
    ]
    result = structure_page(page_of(lines), regions, "rapid_layout")
    assert [b.type for b in result.blocks] == [RegionType.TITLE, RegionType.TEXT, RegionType.TEXT]
    assert [b.text for b in result.blocks] == [
        title.text,
        "glacier one\nglacier two\nglacier three",
        "harbour one\nharbour two\nharbour three",
    ]
    assert result.blocks[0].confidence == 0.7
    assert result.markdown == (
        "# Alpine Lakes and Coastal Harbours\n\nglacier one glacier two glacier three\n\n"
        "harbour one harbour two harbour three"
    )


def test_lines_in_no_region_become_paragraphs_in_column_order():
    left, right, title = two_column_lines()
    # A paragraph break in the left column: a gap of two line heights.
    left.append(line("meadow after the break", 110, 280 + 3 * 38 + 60))
    result = structure_page(page_of([*right, *left, title]), [], "rapid_layout")
    assert [b.type for b in result.blocks] == [RegionType.TEXT] * 4
    assert [b.text for b in result.blocks] == [
        title.text,
        "glacier one\nglacier two\nglacier three",
        "meadow after the break",
        "harbour one\nharbour two\nharbour three",
    ]
    assert all(b.confidence == 1.0 for b in result.blocks)
    # The block box holds its lines.
    first = result.blocks[1]
    assert first.box == Box.union([x.box for x in left[:3]])


def test_page_headers_come_first_and_footers_last_and_stay_out_of_the_markdown():
    body = line("The body paragraph of the page", 110, 400)
    header = line("Northwind Components Ltd.", 110, 40, h=22)
    footer_by_model = line("Confidential", 110, 1690, h=22)
    page_number = line("Page 3", 590, 1700, h=22)  # no region: the band rule makes it a footer
    regions = [
        region(RegionType.PAGE_FOOTER, 100, 1685, 300, 1715),
        region(RegionType.TEXT, 100, 395, 700, 435),
        region(RegionType.PAGE_HEADER, 100, 35, 500, 65),
    ]
    result = structure_page(page_of([page_number, footer_by_model, body, header]), regions, "rapid_layout")
    assert [(b.type, b.text) for b in result.blocks] == [
        (RegionType.PAGE_HEADER, header.text),
        (RegionType.TEXT, body.text),
        (RegionType.PAGE_FOOTER, footer_by_model.text),
        (RegionType.PAGE_FOOTER, page_number.text),
    ]
    assert result.markdown == body.text


def test_the_band_rule_is_conservative():
    # A long line in the top band is body text, and so is a short line in the bottom band that
    # ends the paragraph right above it (less than a line height apart).
    long_line = line("A long opening sentence that runs across most of the page width here", 110, 30)
    above = line("the paragraph runs to the bottom of the", 110, 1620)
    last = line("page.", 110, 1655)
    result = structure_page(page_of([long_line, above, last]), [], "rapid_layout")
    assert {b.type for b in result.blocks} == {RegionType.TEXT}


def test_duplicate_and_nested_regions_are_dropped():
    text = region(RegionType.TEXT, 100, 100, 600, 300, 0.9)
    same_type_twin = region(RegionType.TEXT, 105, 105, 610, 310, 0.6)
    other_type_twin = region(RegionType.REFERENCE, 101, 101, 601, 301, 0.5)
    table = region(RegionType.TABLE, 100, 400, 900, 700, 0.95)
    text_in_table = region(RegionType.TEXT, 120, 420, 400, 460, 0.99)
    title_in_text = region(RegionType.TITLE, 110, 110, 400, 150, 0.8)
    kept = clean_regions(
        [same_type_twin, text_in_table, other_type_twin, table, text, title_in_text], WIDTH, HEIGHT
    )
    assert sorted(kept, key=lambda r: r.type) == sorted([text, table, title_in_text], key=lambda r: r.type)
    # Clipped to the page; boxes wholly outside it go.
    outside = region(RegionType.TEXT, WIDTH + 10, 0, WIDTH + 100, 50)
    hanging = region(RegionType.TEXT, -20, HEIGHT - 50, 200, HEIGHT + 40)
    assert clean_regions([outside, hanging], WIDTH, HEIGHT) == [
        region(RegionType.TEXT, 0, HEIGHT - 50, 200, HEIGHT)
    ]


def test_a_title_inside_a_loose_text_region_keeps_its_line():
    title = line("Results", 110, 110, h=40)
    body = line("the body of the section", 110, 170)
    regions = [
        region(RegionType.TEXT, 100, 100, 700, 210, 0.6),
        region(RegionType.TITLE, 105, 105, 300, 152, 0.8),
    ]
    result = structure_page(page_of([body, title]), regions, "rapid_layout")
    assert [(b.type, b.text) for b in result.blocks] == [
        (RegionType.TITLE, "Results"),
        (RegionType.TEXT, "the body of the section"),
    ]


COLUMNS = (150, 600, 950)  # x where each column's text starts
TABLE_ROWS = [["Region", "Units", "Growth %"], ["North", "1,250", "38.5"], ["South", "2,140", "12.75"]]


def test_a_table_grid_from_one_line_per_cell():
    lines = [
        line(text, COLUMNS[c], 500 + r * 60) for r, row in enumerate(TABLE_ROWS) for c, text in enumerate(row)
    ]
    result = structure_page(page_of(lines), [region(RegionType.TABLE, 120, 480, 1150, 700)], "rapid_layout")
    [block] = result.blocks
    assert block.type is RegionType.TABLE
    assert (block.table.row_count, block.table.column_count) == (3, 3)
    assert block.table.rows() == TABLE_ROWS
    assert block.text == "Region\tUnits\tGrowth %\nNorth\t1,250\t38.5\nSouth\t2,140\t12.75"
    north = next(c for c in block.table.cells if c.text == "1,250")
    assert (north.row, north.column) == (1, 1)
    assert result.markdown == (
        "| Region | Units | Growth % |\n| --- | --- | --- |\n| North | 1,250 | 38.5 |\n| South | 2,140 | 12.75 |"
    )


def test_a_table_row_that_ocr_merged_into_one_line_splits_at_its_word_gaps():
    header = [line(text, COLUMNS[c], 500) for c, text in enumerate(TABLE_ROWS[0])]
    merged = [
        row_line(list(zip(row, COLUMNS, strict=True)), 560 + i * 60) for i, row in enumerate(TABLE_ROWS[1:])
    ]
    assert merged[0].text == "North 1,250 38.5" and merged[0].box.width > 800
    table = build_table([*merged, *header])
    assert table.rows() == TABLE_ROWS
    # Every grid position has a cell, in row-major order.
    assert [(c.row, c.column) for c in table.cells] == [(r, c) for r in range(3) for c in range(3)]


def test_a_spanning_row_and_empty_cells():
    lines = [
        line(
            "Units shipped by region in the year 2023 and growth on the year before", 150, 440
        ),  # all columns
        *[
            line(text, COLUMNS[c], 500 + r * 60)
            for r, row in enumerate(TABLE_ROWS)
            for c, text in enumerate(row)
        ],
    ]
    lines = [x for x in lines if x.text != "2,140"]  # an empty cell
    table = build_table(lines)
    assert (table.row_count, table.column_count) == (4, 3)
    spanning = table.cells[0]
    assert (spanning.row, spanning.column, spanning.column_span) == (0, 0, 3)
    assert not any(c.row == 0 and c.column > 0 for c in table.cells)
    empty = next(c for c in table.cells if (c.row, c.column) == (3, 1))
    assert empty.text == "" and empty.box.width > 0 and empty.box.height > 0
    assert table.rows()[3] == ["South", "", "12.75"]
    assert build_table([]) == Table(0, 0, [])


def block(kind: RegionType, *texts: str, table: Table | None = None) -> Block:
    lines = [line(t, 110, 100 + 40 * i) for i, t in enumerate(texts)]
    return Block(kind, "\n".join(texts), Box(0, 0, 10, 10), 0.9, lines, table)


def test_markdown_of_each_block_type_with_escaping():
    table = Table(
        2,
        2,
        [
            TableCell(0, 0, "Name", Box(0, 0, 1, 1)),
            TableCell(0, 1, "a|b", Box(0, 0, 1, 1)),
            TableCell(1, 0, "two\nlines", Box(0, 0, 1, 1)),
            TableCell(1, 1, "3", Box(0, 0, 1, 1)),
        ],
    )
    blocks = [
        block(RegionType.PAGE_HEADER, "Running head"),
        block(RegionType.TITLE, "Main title"),
        block(RegionType.TEXT, "An inter-", "national study of", "line breaks."),
        block(RegionType.TEXT, "# not a heading"),
        block(RegionType.TEXT, "1. not a list"),
        block(RegionType.TABLE_CAPTION, "Table 1: *sizes*"),
        block(RegionType.TABLE, "Name a|b", table=table),
        block(RegionType.FIGURE),
        block(RegionType.FIGURE_CAPTION, "Figure 2: a chart"),
        block(RegionType.EQUATION, "E = mc2"),
        block(RegionType.TITLE, "Second title"),
        block(RegionType.REFERENCE, "[1] A. Author, 2020."),
        block(RegionType.PAGE_FOOTER, "Page 9"),
    ]
    assert render_markdown(blocks) == "\n\n".join(
        [
            "# Main title",
            "An international study of line breaks.",
            "\\# not a heading",
            "1\\. not a list",
            "*Table 1: \\*sizes\\**",
            "| Name | a\\|b |\n| --- | --- |\n| two<br>lines | 3 |",
            "*Figure 2: a chart*",
            "$$ E = mc2 $$",
            "## Second title",
            "[1] A. Author, 2020.",
        ]
    )


def test_line_joining_keeps_real_hyphens_and_spaces():
    assert join_lines(["well-", "Known", "  spaced   out "]) == "well- Known spaced out"
    assert join_lines(["co-", "operation"]) == "cooperation"
    assert join_lines(["", "x"]) == "x"


def test_a_large_page_structures_in_bounded_time():
    # 3,000 lines in three columns of paragraphs and 300 regions: well under a second on one core.
    lines = [
        line(f"col{c} line{i} words here", 100 + c * 380, 50 + i * 1.6 * 10, h=10)
        for c in range(3)
        for i in range(1000)
    ]
    page = OcrPage(1, 1, "", lines, WIDTH, 50 + 1000 * 16 + 50, "rapidocr", 0.9)
    regions = [
        region(RegionType.TEXT, 95 + c * 380, 45 + k * 160, 95 + c * 380 + 360, 45 + k * 160 + 158)
        for c in range(3)
        for k in range(100)
    ]
    started = time.perf_counter()
    result = structure_page(page, regions, "rapid_layout")
    elapsed = time.perf_counter() - started
    assert sum(len(b.lines) for b in result.blocks) == 3000
    assert result.blocks[0].lines[0].text.startswith("col0 line0")
    assert result.blocks[-1].lines[-1].text.startswith("col2 line999")
    assert elapsed < 5.0, f"{elapsed:.2f} s"
