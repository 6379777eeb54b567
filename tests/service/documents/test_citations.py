"""find_citations: where a value appears among a page's OCR lines (pure, no model)."""

from __future__ import annotations

from engines.documents.citations import find_citations, normalize
from engines.ocr.types import Box, OcrLine, OcrWord


def line(*words: str, y: float = 0.0, with_words: bool = True) -> OcrLine:
    """A line whose words are 10 px per character plus a 10 px gap, at height ``y``."""
    placed, x = [], 0.0
    for text in words:
        placed.append(OcrWord(text, Box(x, y, 10.0 * len(text), 20.0), 0.9))
        x += 10.0 * len(text) + 10.0
    box = Box.union([w.box for w in placed])
    return OcrLine(" ".join(words), box, 0.9, placed if with_words else [])


PAGE = [
    line("INVOICE", "No.", "A-17", y=0),
    line("Date:", "2024-03-01", y=30),
    line("Total", "due:", "$1,234.56", y=60),
    line("Paid", "by", "card", y=90),
]


def test_normalize_folds_case_width_currency_and_thousands_separators():
    assert normalize("  \uff34\uff2f\uff34\uff21\uff2c\t Due ") == "total due"  # full-width TOTAL
    assert normalize("$1,234.56") == "1234.56"
    assert normalize("€ 1'234'567") == "1234567"
    assert normalize("12,5") == "12,5"  # a decimal comma stays
    assert normalize("1.234,56") == "1.234,56"  # periods are never dropped


def test_a_value_inside_a_line_cites_only_its_words():
    [c] = find_citations("due: $1,234.56", PAGE, 2)
    assert c.page_number == 2
    assert c.text == "due: $1,234.56"
    due, amount = PAGE[2].words[1], PAGE[2].words[2]
    assert c.box == Box.union([due.box, amount.box])


def test_numbers_match_without_currency_and_separators():
    [c] = find_citations("1234.56", PAGE, 1)
    assert c.text == "$1,234.56"
    assert c.box == PAGE[2].words[2].box


def test_case_and_whitespace_are_ignored():
    [c] = find_citations("  invoice   NO. ", PAGE, 1)
    assert c.text == "INVOICE No."


def test_part_of_a_word_cites_the_word():
    [c] = find_citations("2024", PAGE, 1)
    assert c.text == "2024-03-01"


def test_whole_word_matches_win_over_partial_ones():
    page = [line("cardboard", y=0), line("card", y=30)]
    [c] = find_citations("card", page, 1)
    assert c.box == page[1].words[0].box


def test_every_occurrence_up_to_the_limit_in_reading_order():
    page = [line("total", "5", y=y) for y in (0, 30, 60)]
    found = find_citations("total 5", page, 1)
    assert [c.box.y for c in found] == [0, 30, 60]
    assert len(find_citations("total 5", page, 1, limit=2)) == 2


def test_lines_without_words_cite_the_line_box():
    page = [line("Total", "due:", "$1,234.56", with_words=False)]
    [c] = find_citations("1234.56", page, 1)
    assert c.box == page[0].box
    assert c.text == "Total due: $1,234.56"


def test_a_value_wrapped_over_two_lines():
    page = [line("Ship", "to:", "42", "Long", y=0), line("Street", "Springfield", y=30)]
    [c] = find_citations("42 Long Street", page, 1)
    assert c.text == "42 Long Street"
    assert c.box == Box.union([page[0].words[2].box, page[0].words[3].box, page[1].words[0].box])


def test_spaces_split_by_ocr_are_ignored_as_a_last_exact_step():
    page = [line("Ref", "AB", "12", "34")]
    [c] = find_citations("AB1234", page, 1)
    assert c.text == "AB 12 34"


def test_fuzzy_match_for_ocr_errors_and_nothing_below_the_threshold():
    page = [line("Invoice", "number", "INV-2024-0042", y=0), line("Paid", y=30)]
    [c] = find_citations("INV-2024-0O42", page, 1)  # an O read for a 0
    assert c.text == "INV-2024-0042"
    assert find_citations("completely different", page, 1) == []
    assert find_citations("INV-2024-0O42", page, 1, min_ratio=1.01) == []


def test_empty_values_and_pages():
    assert find_citations("", PAGE, 1) == []
    assert find_citations("   ", PAGE, 1) == []
    assert find_citations("$", PAGE, 1) == []
    assert find_citations("x", [], 1) == []


def test_a_long_value_is_bounded():
    page = [line(*(["word"] * 300))]
    found = find_citations("word " * 5000, page, 1)  # cut to MAX_VALUE_CHARS: 200 words
    assert len(found) == 1
    assert found[0].text.count("word") <= 200
