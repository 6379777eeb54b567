"""Prose from docstrings and proto comments as Markdown text that stays text.

Shared by the generated reference pages (``_proto_markdown.py``, ``_openapi_markdown.py``): outside
code spans, ``&``, ``<``, ``>`` and ``[`` are escaped (no HTML, no links), a line starting with ``#``
is not a heading, and in a table cell ``|`` does not split the cell.
"""

from __future__ import annotations

import re

#: A Markdown code span: a run of backticks, text, the same run (CommonMark's rule).
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)


def escape(text: str, *, in_table: bool) -> str:
    """``text`` with Markdown's markup characters escaped outside its code spans."""
    out, last = [], 0
    for match in CODE_SPAN.finditer(text):
        out.append(_escape_plain(text[last : match.start()], in_table))
        out.append(match.group(0))
        last = match.end()
    out.append(_escape_plain(text[last:], in_table))
    return "".join(out)


def _escape_plain(text: str, in_table: bool) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("[", "\\[")
    text = re.sub(r"(?m)^(\s*)#", r"\1\\#", text)  # a comment line starting with # is not a heading
    return text.replace("|", "\\|") if in_table else text
