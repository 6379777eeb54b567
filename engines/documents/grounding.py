"""Grounding: where on the pages a generated answer or an extracted value came from.

A generation model answers in its own words ("The invoice total is $1,234.56."); its citations
are the lines that hold the answer's values (numbers, dates, codes: the parts a reader checks),
found with :func:`engines.documents.citations.find_citations`, or failing that the line that
shares the most content words with the answer. Work is bounded by the lines given (the cited
blocks, or the analysed pages) times the values in the answer (at most :data:`MAX_VALUES`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from engines.documents.citations import find_citations
from engines.documents.retrieval import content_words
from engines.documents.types import Block, Citation
from engines.ocr.types import OcrLine

MAX_VALUES = 16
"""Most values of one answer looked up (an answer longer than that is prose, not a value)."""

# Numbers with separators and a currency or percent sign, ISO and slashed dates, and codes that
# mix letters and digits (INV-2041, A4): the parts of an answer that must match the page.
_VALUE = re.compile(
    r"[$€£¥]?\d[\d,.\-/:]*\d%?|[$€£¥]?\d%?|\b(?=[A-Za-z0-9-]*\d)(?=[A-Za-z0-9-]*[A-Za-z])[A-Za-z0-9-]{2,}\b"
)


def answer_values(answer: str, question: str) -> list[str]:
    """The values of ``answer`` a reader would check against the page, longest first.

    Values that also appear in ``question`` are left out ("What is the total for 2024?" →
    not 2024). At most :data:`MAX_VALUES`.
    """
    asked = set(_VALUE.findall(question))
    values = [v.strip(".,:") for v in _VALUE.findall(answer) if v not in asked]
    unique = list(dict.fromkeys(v for v in values if v))
    return sorted(unique, key=len, reverse=True)[:MAX_VALUES]


def ground_answer(answer: str, question: str, blocks: Sequence[tuple[int, Block]]) -> list[Citation]:
    """Citations of ``answer`` in ``blocks`` (``(page_number, block)`` pairs), best first.

    First the lines that hold the answer's values (:func:`answer_values`); when none does, the
    one line sharing the most content words with the answer that the question does not already
    hold. An empty list when nothing on the pages matches (the answer is likely made up).
    """
    citations: list[Citation] = []
    seen: set[tuple[int, float, float, float, float]] = set()

    def add(found: Iterable[Citation]) -> None:
        for citation in found:
            key = (
                citation.page_number,
                citation.box.x,
                citation.box.y,
                citation.box.width,
                citation.box.height,
            )
            if key not in seen:
                seen.add(key)
                citations.append(citation)

    for value in answer_values(answer, question):
        for page_number, block in blocks:
            add(find_citations(value, block.lines, page_number))
    if citations:
        return citations
    words = content_words(answer) - content_words(question)
    best: tuple[int, int, OcrLine] | None = None
    for page_number, block in blocks:
        for line in block.lines:
            shared = len(words & content_words(line.text))
            if shared and (best is None or shared > best[0]):
                best = (shared, page_number, line)
    if best is not None:
        add([Citation(page_number=best[1], box=best[2].box, text=best[2].text)])
    return citations


def flatten_fields(value: object, path: str = "") -> list[tuple[str, object]]:
    """The leaves of a JSON value as ``(path, leaf)`` pairs: ``total``, ``items[0].price``.

    A root that is not an object or array is one leaf with the path ``""``. Bounded by the
    value's size (which ``max_tokens`` bounds).
    """
    if isinstance(value, dict):
        return [
            leaf
            for key, item in value.items()
            for leaf in flatten_fields(item, f"{path}.{key}" if path else key)
        ]
    if isinstance(value, list):
        return [leaf for i, item in enumerate(value) for leaf in flatten_fields(item, f"{path}[{i}]")]
    return [(path, value)]


def ground_value(value: object, lines: Sequence[tuple[int, OcrLine]]) -> list[Citation]:
    """Where a JSON leaf ``value`` is written on the pages (``(page_number, line)`` pairs).

    Strings are looked up as they are; numbers also with two decimals (45 → ``45.00``), so a
    price printed with cents is found. Booleans, null and empty strings are never cited.
    """
    if value is None or isinstance(value, bool) or value == "":
        return []
    if isinstance(value, float) and value.is_integer():
        spellings = [str(int(value)), f"{value:.2f}"]
    elif isinstance(value, int | float):
        spellings = [str(value), f"{value:.2f}"]
    else:
        spellings = [str(value)]
    by_page: dict[int, list[OcrLine]] = {}
    for page_number, line in lines:
        by_page.setdefault(page_number, []).append(line)
    for spelling in dict.fromkeys(spellings):
        found = [
            c
            for page_number, page_lines in by_page.items()
            for c in find_citations(spelling, page_lines, page_number)
        ]
        if found:
            return found
    return []
