r"""Markdown of a structured page's blocks (CommonMark plus GitHub-flavoured pipe tables).

Per block type:

* ``TITLE``: a heading; the page's first title is ``# ``, later ones ``## `` (a page rarely has
  more than one title and the CDLA model does not tell levels apart; text height would be a
  guess on mixed fonts).
* ``TEXT``, ``REFERENCE``, ``FIGURE`` with text: a paragraph, lines joined by spaces; a word
  hyphenated at a line end (``inter-`` + ``national``, next line starting lower-case) is
  rejoined without the hyphen (so a real compound split at its hyphen loses it, the usual
  trade-off of de-hyphenation).
* ``TABLE``: a pipe table, first row as the header; ``|`` escaped as ``\|``, newlines in a cell
  as ``<br>``. A table without cells falls back to its text as a paragraph.
* ``FIGURE_CAPTION``, ``TABLE_CAPTION``: an italic line.
* ``EQUATION``: ``$$ ... $$`` around its text (OCR text of the formula, not LaTeX).
* ``PAGE_HEADER``, ``PAGE_FOOTER``, and blocks without text: left out.

Text that would start a Markdown block construct (``#``, ``>``, ``-``, ``+``, ``*``, ``1.``)
is escaped with a backslash, so OCR text never turns into a heading or a list by accident.
Blocks are separated by one blank line; the result has no trailing newline ("" for no blocks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from engines.documents.types import Block, RegionType, Table

_BLOCK_START = re.compile(r"^(\s*)([#>+*=-]|\d+[.)])")
_HYPHENATED = re.compile(r"[A-Za-z]-$")


def join_lines(lines: Iterable[str]) -> str:
    """Lines of a paragraph as one line: spaces between, line-end hyphenation rejoined."""
    out = ""
    for raw in lines:
        line = " ".join(raw.split())
        if not line:
            continue
        if not out:
            out = line
        elif _HYPHENATED.search(out) and line[0].islower():
            out = out[:-1] + line
        else:
            out = f"{out} {line}"
    return out


def escape_text(text: str) -> str:
    r"""``text`` with a leading block marker backslash-escaped (``# x`` -> ``\# x``)."""
    match = _BLOCK_START.match(text)
    if match is None:
        return text
    marker = match.group(2)
    # "1." -> "1\." (CommonMark escapes an ordered list's delimiter, not its digits).
    escaped = marker[:-1] + "\\" + marker[-1] if marker[0].isdigit() else "\\" + marker
    return match.group(1) + escaped + text[match.end() :]


def escape_cell(text: str) -> str:
    r"""A table cell's text for a pipe table: ``|`` -> ``\|``, line breaks -> ``<br>``."""
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    return "<br>".join(part.strip() for part in text.splitlines()) if "\n" in text or "\r" in text else text


def render_table(table: Table) -> str:
    """A GitHub pipe table of ``table`` (first row as the header); "" for a table without cells."""
    rows = table.rows()
    if not rows or table.column_count == 0:
        return ""
    lines = ["| " + " | ".join(escape_cell(cell) for cell in rows[0]) + " |"]
    lines.append("|" + "|".join(" --- " for _ in rows[0]) + "|")
    lines.extend("| " + " | ".join(escape_cell(cell) for cell in row) + " |" for row in rows[1:])
    return "\n".join(lines)


def _block_text(block: Block) -> str:
    return (
        join_lines(line.text for line in block.lines) if block.lines else join_lines(block.text.splitlines())
    )


def render_markdown(blocks: Iterable[Block]) -> str:
    """Markdown of ``blocks`` (in the order given; see the module notes for each type)."""
    parts: list[str] = []
    titles = 0
    for block in blocks:
        kind = block.type
        if kind in (RegionType.PAGE_HEADER, RegionType.PAGE_FOOTER):
            continue
        if kind is RegionType.TABLE:
            table = render_table(block.table) if block.table is not None else ""
            if table:
                parts.append(table)
                continue
        text = _block_text(block)
        if not text:
            continue
        if kind is RegionType.TITLE:
            titles += 1
            parts.append(("# " if titles == 1 else "## ") + text)
        elif kind in (RegionType.FIGURE_CAPTION, RegionType.TABLE_CAPTION):
            parts.append("*" + text.replace("*", "\\*") + "*")
        elif kind is RegionType.EQUATION:
            parts.append(f"$$ {text} $$")
        else:
            parts.append(escape_text(text))
    return "\n\n".join(parts)
