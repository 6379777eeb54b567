"""Comments and docstrings say what the code keeps, not which issue it came from.

An issue number in a comment points at a thread a reader of the code may not have; the rule the
code keeps belongs in the comment, the story and its measurements in
docs/architecture/design-notes.md. Comments are read with :mod:`tokenize` and docstrings (any
string statement, so attribute docstrings too) with :mod:`ast`, so a string the code uses, such as
a planted example below, is not flagged.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from tests.python_source import parse_source

ROOT = Path(__file__).resolve().parents[2]

#: An issue number: ``issue`` and its digits (any case, ``#`` optional after ``issues``), or ``(#`` digits ``)``.
ISSUE_REFERENCE = re.compile(r"\bissue \d+|\bissues? #\d+|\(#\d+\)", re.IGNORECASE)


def checked_files() -> list[Path]:
    """The Python files the rule covers: service/, engines/, gateway/, bench/*.py and tests/."""
    files = [
        path for top in ("service", "engines", "gateway", "tests") for path in (ROOT / top).rglob("*.py")
    ]
    files += (ROOT / "bench").glob("*.py")
    return sorted(files)


def issue_references(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """``(line, text)`` of each comment or docstring in ``source`` that names an issue number."""
    found: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and ISSUE_REFERENCE.search(token.string):
            found.append((token.start[0], token.string))
    for node in ast.walk(parse_source(source, filename)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            text = node.value.value
            for match in ISSUE_REFERENCE.finditer(text):
                start = text.rfind("\n", 0, match.start()) + 1
                end = text.find("\n", match.end())
                # The docstring's own line of the match (exact for one literal, as docstrings are).
                found.append(
                    (
                        node.lineno + text.count("\n", 0, match.start()),
                        text[start : end if end >= 0 else None],
                    )
                )
    return sorted(found)


PLANTED = '''"""A module (issue 12): fixed here."""

ISSUE_TEXT = "issue 12 is a string the code uses, not a comment"


def f():
    """Returns 1 (see issues #7)."""
    x = 1  # the off-by-one of (#31)
    #: Attribute notes are comments too: Issue 4's fix.
    y = 2
    """An attribute docstring, issue #9."""
    return x + y
'''


def test_the_checker_finds_planted_references_and_skips_code_strings():
    lines = [line for line, _ in issue_references(PLANTED)]
    assert lines == [1, 7, 8, 9, 11]


@pytest.mark.parametrize(
    "text", ["issue 40", "Issue 29's stall", "issue #40", "issues #3 and 4", "fixed (#12)"]
)
def test_the_pattern_matches_each_form(text):
    assert ISSUE_REFERENCE.search(text)


@pytest.mark.parametrize("text", ["an issue with 3 parts", "CPython gh-106905", "the #1 cause", "item #2"])
def test_the_pattern_leaves_other_numbers(text):
    assert not ISSUE_REFERENCE.search(text)


def test_no_comment_or_docstring_names_an_issue():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text.strip()[:120]}"
        for path in checked_files()
        for line, text in issue_references(path.read_text(encoding="utf-8"), str(path))
    ]
    assert not offenders, "issue numbers in comments or docstrings:\n" + "\n".join(offenders)
