"""Parsing the project's Python sources in tests, safe from CPython 3.11's shared AST state.

CPython 3.11's AST constructor keeps its recursion depth in interpreter-wide state, so a parse
started while another is being built corrupts it, and the outer one fails with ``SystemError:
AST constructor recursion depth mismatch`` (reported as CPython gh-106905, seen on 3.11.7). One way in is
the garbage collector: a collection during the parse can finalize an asyncio task of an earlier
test whose error nobody retrieved, and logging it formats a traceback, which parses source lines
with :func:`ast.parse` (3.11's caret anchors). The collector is paused for the parse.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse_file(path: Path) -> ast.Module:
    """The module ``path`` holds, parsed with the garbage collector paused (see the module doc).

    Raises:
        SyntaxError: the file is not valid Python.
        OSError: it cannot be read.

    """
    return parse_source(path.read_text(encoding="utf-8"), str(path))


def parse_source(source: str, filename: str = "<string>") -> ast.Module:
    """The module ``source`` holds, parsed with the garbage collector paused (see the module doc).

    Raises:
        SyntaxError: the source is not valid Python.

    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename=filename)
    finally:
        if was_enabled:
            gc.enable()
