"""Where a text value appears on an OCR'd page: the boxes of the words that hold it.

Models that read a page without giving boxes (Donut, a generation model answering from the page's
text) return strings; :func:`find_citations` finds those strings back among the page's OCR
words so that an answer or field can point at its source. Pure functions, no model.

Matching, in order of preference (the first step that finds anything wins):

1. the value as a run of whole words of a line (the smallest span: those words' boxes);
2. the value inside a line, cutting words (e.g. ``1234.56`` in ``Total:1234.56``): the words
   it overlaps;
3. the same two steps on two consecutive lines joined (a value wrapped over a line break);
4. the same with spaces ignored (OCR that split ``$1,234.56`` into ``$ 1,234.56``);
5. the most similar run of words (``difflib`` ratio at least ``min_ratio``) for OCR errors.

Both sides are normalised first (:func:`normalize`): Unicode NFKC, case folded, whitespace
collapsed, currency symbols dropped and thousands separators inside numbers removed, so that
``1234.56`` matches ``$1,234.56`` and full-width letters match ASCII ones.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from engines.documents.types import Citation
from engines.ocr.types import Box, OcrLine

MAX_VALUE_CHARS = 1_000
"""Values are cut to this many characters before matching (bounds every step below)."""
MAX_FUZZY_CHARS = 200
"""Values longer than this skip the fuzzy step (its cost grows with the square of the length)."""
DEFAULT_MIN_RATIO = 0.8
"""Least ``difflib.SequenceMatcher.ratio`` of a fuzzy match (0.8: one wrong character in five)."""
DEFAULT_LIMIT = 5
"""Most citations returned for a value found several times on a page (reading order)."""

# A thousands separator: a comma, apostrophe or thin/narrow space before a group of three digits.
_THOUSANDS = re.compile(r"(?<=\d)[,'\u2009\u202f](?=\d{3}(?!\d))")
_SPACES = re.compile(r"\s+")


def normalize(text: str) -> str:
    """``text`` as matching compares it: NFKC, case folded, no currency symbols, single spaces.

    Thousands separators between digit groups (``1,234``, ``1'234``, ``1 234`` with a thin
    space) are removed; a decimal comma (``12,5``) is kept, since only a group of exactly three
    digits after the separator counts. Periods are never removed, so the European ``1.234,56``
    does not match ``1234.56``.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(" " if unicodedata.category(ch) == "Sc" else ch for ch in text)
    text = _THOUSANDS.sub("", text)
    return _SPACES.sub(" ", text).strip()


@dataclass(frozen=True, slots=True)
class _Word:
    """A word of a searched line: original text, box, and its normalised text's offsets in the line key."""

    text: str
    box: Box
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Line:
    """A line (or two joined) as a normalised key with its words' character ranges."""

    key: str
    words: tuple[_Word, ...]


def _line_words(line: OcrLine) -> list[tuple[str, Box]]:
    """The words of ``line`` with boxes; the whole line as one word when OCR gave no word boxes."""
    if line.words:
        return [(w.text, w.box) for w in line.words]
    return [(line.text, line.box)]


def _build(lines: Sequence[OcrLine]) -> _Line:
    """The normalised key of ``lines`` joined by spaces, and where each word sits in it."""
    parts: list[str] = []
    words: list[_Word] = []
    offset = 0
    for line in lines:
        for text, box in _line_words(line):
            key = normalize(text)
            if not key:  # a lone "$" or punctuation-free nothing: no characters to match
                continue
            if parts:
                offset += 1  # the joining space
            words.append(_Word(text, box, offset, offset + len(key)))
            parts.append(key)
            offset += len(key)
    return _Line(" ".join(parts), tuple(words))


def _without_spaces(line: _Line) -> _Line:
    """``line`` with the spaces of its key removed (word offsets moved accordingly)."""
    words = []
    offset = 0
    for word in line.words:
        length = len(line.key[word.start : word.end].replace(" ", ""))
        words.append(_Word(word.text, word.box, offset, offset + length))
        offset += length
    return _Line(line.key.replace(" ", ""), tuple(words))


def _citation(words: Sequence[_Word], page_number: int) -> Citation:
    return Citation(
        page_number=page_number,
        box=Box.union([w.box for w in words]),
        text=" ".join(w.text for w in words),
    )


def _occurrences(line: _Line, target: str) -> list[tuple[bool, list[_Word]]]:
    """Non-overlapping occurrences of ``target`` in ``line.key``: (on word boundaries?, words overlapped)."""
    found = []
    start = line.key.find(target)
    while start >= 0:
        end = start + len(target)
        words = [w for w in line.words if w.start < end and w.end > start]
        whole = bool(words) and words[0].start == start and words[-1].end == end
        if words:
            found.append((whole, words))
        start = line.key.find(target, end)
    return found


def _exact(searched: Sequence[_Line], target: str) -> list[list[_Word]]:
    """Word runs holding ``target``: whole-word matches if any, else matches cutting words."""
    whole: list[list[_Word]] = []
    partial: list[list[_Word]] = []
    for line in searched:
        for is_whole, words in _occurrences(line, target):
            (whole if is_whole else partial).append(words)
    return whole or partial


def _fuzzy(searched: Sequence[_Line], target: str, min_ratio: float) -> list[_Word] | None:
    """The run of words most similar to ``target`` (ratio >= ``min_ratio``), or None.

    For each start word only the runs just shorter and just longer than ``target`` are scored,
    so the step costs O(words) ratio computations of O(len(target)**2) each.
    """
    best: tuple[float, list[_Word]] | None = None
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(target)
    for line in searched:
        words = line.words
        for i in range(len(words)):
            for j in range(i, len(words)):
                span_len = words[j].end - words[i].start
                if span_len >= len(target) or j == len(words) - 1:
                    candidates = [j - 1, j] if j > i else [j]
                    for k in candidates:
                        matcher.set_seq1(line.key[words[i].start : words[k].end])
                        if matcher.real_quick_ratio() < min_ratio or matcher.quick_ratio() < min_ratio:
                            continue
                        ratio = matcher.ratio()
                        if ratio >= min_ratio and (best is None or ratio > best[0]):
                            best = (ratio, list(words[i : k + 1]))
                    break
    return best[1] if best else None


def find_citations(
    value: str,
    lines: Sequence[OcrLine],
    page_number: int,
    *,
    min_ratio: float = DEFAULT_MIN_RATIO,
    limit: int = DEFAULT_LIMIT,
) -> list[Citation]:
    """Where ``value`` appears among ``lines``, smallest spans first (see the module docstring).

    Args:
        value: the text to find (an answer, a field value); cut to :data:`MAX_VALUE_CHARS`.
        lines: the page's OCR lines in reading order; word boxes are used when present, else
            the line box.
        page_number: 1-based page number written into each citation.
        min_ratio: least similarity (0-1) of a fuzzy match; above 1 turns fuzzy matching off.
        limit: most citations returned (a value printed several times yields each, in reading
            order, up to ``limit``).

    Returns:
        Citations with the union box of the matched words (pixels of the page image) and their
        original text joined by spaces; ``[]`` for an empty value or no match.

    Cost: O(W * L) for W words on the page and L characters of the value (substring search per
    line and per pair of neighbouring lines), plus for the fuzzy step O(W) ratio computations of
    O(L**2) with L <= :data:`MAX_FUZZY_CHARS`. No state, no I/O.

    """
    target = normalize(value[:MAX_VALUE_CHARS])
    if not target or limit <= 0:
        return []
    single = [_build([line]) for line in lines]
    pairs = [_build(lines[i : i + 2]) for i in range(len(lines) - 1)]
    compact_target = target.replace(" ", "")
    for searched, goal in (
        (single, target),
        (pairs, target),
        ([_without_spaces(x) for x in single], compact_target),
        ([_without_spaces(x) for x in pairs], compact_target),
    ):
        runs = _exact(searched, goal)
        if runs:
            return [_citation(words, page_number) for words in _dedupe(runs)[:limit]]
    if len(target) <= MAX_FUZZY_CHARS and min_ratio <= 1:
        words = _fuzzy(single, target, min_ratio)
        if words:
            return [_citation(words, page_number)]
    return []


def _dedupe(runs: list[list[_Word]]) -> list[list[_Word]]:
    """Runs in order without repeats (one word run can be found in a line and in its pair)."""
    seen: set[tuple[int, ...]] = set()
    kept = []
    for words in runs:
        key = tuple(id(w.box) for w in words)
        if key not in seen:
            seen.add(key)
            kept.append(words)
    return kept
