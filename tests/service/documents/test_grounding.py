"""Grounding of generated answers and extracted values, and the hybrid block ranking (pure functions)."""

from __future__ import annotations

from engines.documents.grounding import answer_values, flatten_fields, ground_answer, ground_value
from engines.documents.retrieval import fuse_rankings, lexical_ranking
from engines.documents.types import Block, RegionType
from engines.ocr.types import Box, OcrLine


def _line(text: str, y: float) -> OcrLine:
    return OcrLine(text=text, box=Box(100, y, 20 * len(text), 30), confidence=0.9)


TOTALS = Block(
    RegionType.TEXT,
    "Subtotal: $1,134.56\nTotal due: $1,234.56",
    Box(100, 500, 600, 80),
    0.9,
    lines=[_line("Subtotal: $1,134.56", 500), _line("Total due: $1,234.56", 550)],
)
VENDOR = Block(
    RegionType.TITLE,
    "Brightwater Supply Co.",
    Box(100, 50, 500, 40),
    0.9,
    [_line("Brightwater Supply Co.", 50)],
)


def test_answer_values_are_the_checkable_parts():
    assert answer_values("The invoice total is $1,234.56.", "What is the invoice total?") == ["$1,234.56"]
    # A value the question already holds is not evidence.
    assert answer_values("In 2024 it was 38.5", "What was it in 2024?") == ["38.5"]
    assert answer_values("The number is INV-2024-0173.", "What is the number?") == ["INV-2024-0173"]


def test_an_answer_is_cited_by_the_line_holding_its_value():
    [citation] = ground_answer(
        "The invoice total is $1,234.56.", "What is the total?", [(2, VENDOR), (2, TOTALS)]
    )
    assert citation.page_number == 2 and citation.box.y == 550
    assert "1,234.56" in citation.text


def test_an_answer_without_values_is_cited_by_shared_words():
    [citation] = ground_answer(
        "It was sent by Brightwater Supply.", "Who sent it?", [(1, TOTALS), (1, VENDOR)]
    )
    assert citation.text == "Brightwater Supply Co."


def test_an_answer_found_nowhere_has_no_citation():
    assert ground_answer("The total is $99.", "What is the total?", [(1, TOTALS), (1, VENDOR)]) == []


def test_fields_flatten_to_paths_and_ground_numbers_printed_with_cents():
    value = {"total": 1234.56, "items": [{"price": 45}], "paid": False, "note": None}
    assert flatten_fields(value) == [
        ("total", 1234.56),
        ("items[0].price", 45),
        ("paid", False),
        ("note", None),
    ]
    assert flatten_fields("x") == [("", "x")]
    lines = [(1, line) for line in TOTALS.lines] + [(1, _line("Brackets 45.00", 600))]
    assert ground_value(1234.56, lines)[0].box.y == 550
    assert ground_value(45, lines)[0].box.y == 600  # printed as 45.00
    assert (
        ground_value(False, lines) == [] and ground_value(None, lines) == [] and ground_value("", lines) == []
    )


def test_lexical_ranking_counts_whole_words_and_fusion_combines_ranks():
    texts = ["Invoice number: INV-1", "Subtotal: $1,134.56", "Total due: $1,234.56"]
    assert lexical_ranking("What is the invoice total?", texts)[0] in (0, 2)
    assert lexical_ranking("What is the total due?", texts)[0] == 2  # "subtotal" is not "total"
    # Dense puts 0 first, lexical puts 2 first; 2 is second in dense, so it wins the fusion.
    assert fuse_rankings([0, 2, 1], [2, 0, 1])[:2] in ([0, 2], [2, 0])
    assert fuse_rankings([0, 1, 2], [2, 1, 0], [2, 0, 1])[0] == 2
    assert fuse_rankings([], []) == []
