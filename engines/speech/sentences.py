"""Cutting text to speak into sentences: the unit of one synthesis job, bounded in length.

A text-to-speech engine speaks a sentence per lane job, so the first audio leaves after the first
sentence and other callers' jobs interleave between sentences. A sentence ends at ``.``, ``!``,
``?`` or ``…`` (with any closing quotes or brackets) followed by a space and a word that does not
start in lower case (``e.g. this`` stays whole), at a CJK full stop, or at a line break. A
sentence longer than the bound is cut at its last clause mark (``,`` ``;`` ``:`` and dashes), else
its last space, before the bound, else hard at the bound: every job is bounded.
"""

from __future__ import annotations

import re

#: Longest sentence spoken in one job, characters (a few seconds of speech).
MAX_SENTENCE_CHARS = 400

# End punctuation (. ! ? and the ellipsis), then closing quotes or brackets (group 1, kept in the
# sentence), then whitespace and a next character that is not a lower-case letter; or a CJK
# sentence end (no space follows it in those scripts); or a line break.
_BOUNDARY = re.compile(
    "(?<=[.!?\u2026])([\"'\u201d\u2019\u00bb)\\]]*)\\s+(?=[^a-z\\s])|(?<=[\u3002\uff01\uff1f])|\\s*\n\\s*"
)
# Where a long sentence may be cut: after a clause mark (, ; : in Latin and CJK forms, dashes) and
# its spaces, or at a space. Group 1 ends the part kept in the first piece.
_CLAUSE_BREAK = re.compile("([,;:\uff0c\u3001\uff1b\uff1a\u2014\u2013])\\s+")
_SPACE = re.compile(r"()\s+")


def split_sentences(text: str, max_chars: int = MAX_SENTENCE_CHARS) -> list[str]:
    """The sentences of ``text`` in order, each stripped, non-empty and at most ``max_chars`` long.

    Pure; each cut of a long sentence looks at ``max_chars`` characters. Whitespace-only text
    gives ``[]``.

    Args:
        text: what to speak.
        max_chars: the most characters of one sentence; a longer one is cut at a clause mark or a
            space before the bound (hard at the bound when it has neither).

    Raises:
        ValueError: ``max_chars`` below 1.

    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.end(1) if match.group(1) is not None else match.start()
        _bounded(text[start:end], max_chars, sentences)
        start = match.end()
    _bounded(text[start:], max_chars, sentences)
    return sentences


def _bounded(sentence: str, max_chars: int, out: list[str]) -> None:
    """Append ``sentence`` to ``out`` stripped, cut into pieces of at most ``max_chars``."""
    sentence = sentence.strip()
    while len(sentence) > max_chars:
        cut = _last_break(_CLAUSE_BREAK, sentence, max_chars) or _last_break(_SPACE, sentence, max_chars)
        head, sentence = (
            (sentence[:cut], sentence[cut:]) if cut else (sentence[:max_chars], sentence[max_chars:])
        )
        out.append(head.strip())
        sentence = sentence.strip()
    if sentence:
        out.append(sentence)


def _last_break(pattern: re.Pattern[str], sentence: str, max_chars: int) -> int:
    """The end of the last ``pattern`` match whose kept part (group 1's end) fits ``max_chars``; 0 if none.

    Only the first ``max_chars + 1`` characters are searched.
    """
    best = 0
    for match in pattern.finditer(sentence, 0, max_chars + 1):
        if 0 < match.end(1) <= max_chars:
            best = match.end()
    return best
