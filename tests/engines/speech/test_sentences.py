"""Sentence splitting for text to speech (engines.speech.sentences): boundaries and the length bound."""

from __future__ import annotations

import pytest

from engines.speech.sentences import MAX_SENTENCE_CHARS, split_sentences


def test_sentences_end_at_punctuation_before_a_new_sentence() -> None:
    text = 'Hello there. How are you?  I am fine! "Quoted." (Aside.) Then… More'
    assert split_sentences(text) == [
        "Hello there.",
        "How are you?",
        "I am fine!",
        '"Quoted."',
        "(Aside.)",
        "Then…",
        "More",
    ]


def test_no_cut_inside_numbers_or_before_lower_case() -> None:
    assert split_sentences("Pi is 3.14 roughly, e.g. this one. Next") == [
        "Pi is 3.14 roughly, e.g. this one.",
        "Next",
    ]


def test_line_breaks_and_cjk_full_stops_end_sentences() -> None:
    assert split_sentences("first line\n\n  second line\nthird") == ["first line", "second line", "third"]
    assert split_sentences("你好。今天好吗\uff1f好") == ["你好。", "今天好吗\uff1f", "好"]


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
def test_blank_text_has_no_sentence(text: str) -> None:
    assert split_sentences(text) == []


def test_long_sentences_are_cut_at_clauses_then_spaces_then_hard() -> None:
    assert split_sentences("one, two three, four five six", 12) == ["one,", "two three,", "four five", "six"]
    assert split_sentences("aaaaaaaaaa bbbbbbbbbb", 12) == ["aaaaaaaaaa", "bbbbbbbbbb"]
    assert split_sentences("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_every_piece_is_bounded_and_no_word_is_lost() -> None:
    text = " ".join(f"word{i}," if i % 7 == 0 else f"word{i}" for i in range(2000)) + "."
    pieces = split_sentences(text)
    assert all(0 < len(piece) <= MAX_SENTENCE_CHARS for piece in pieces)
    assert " ".join(pieces).split() == text.split()
    assert len(pieces) > 1


def test_max_chars_must_be_positive() -> None:
    with pytest.raises(ValueError):
        split_sentences("hi", 0)
