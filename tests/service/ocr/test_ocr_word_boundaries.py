"""Word boundaries of the default OCR engine: words are not glued together.

PP-OCRv4's recognizer alone reads ``Quarterly Report 2026`` as ``QuarterlyReport2026`` and body
lines as ``Revenuegrewbytenpercent``, and its direction classifier turns upright long lines upside
down, losing them. The pages are the bench's
(:func:`bench.ocr.word_pages`: six English lines in DejaVu Sans, Serif, Mono and bold, 12 to
32 px), read through ``Ocr``; the goal is a word error rate of at most 2%.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from bench.ocr import WORD_SENTENCES, word_errors, word_pages
from engines.ocr.rapidocr_engine import PageOrientation, SpaceRestorer
from tests.service.ocr.helpers import cer, ocr, render_lines

# A blank first, then Latin letters, two CJK characters, the space last: rapidocr's layout.
CHARACTERS = ["blank", "a", "b", "c", "中", "文", " "]
SPACE = len(CHARACTERS) - 1


class FakeDecode:
    """Stands for rapidocr's CTCLabelDecode: greedy decoding of the (frames, classes) scores."""

    character = CHARACTERS

    def __call__(self, preds: np.ndarray, *args, **kwargs) -> list[str]:
        texts = []
        for row in preds:
            best = row.argmax(axis=1)
            texts.append(
                "".join(CHARACTERS[c] for t, c in enumerate(best) if c != 0 and (t == 0 or c != best[t - 1]))
            )
        return texts


def scores(frames: list[tuple[int, float]]) -> np.ndarray:
    """One line's scores: per frame, the best class and the space's probability (the blank takes the rest)."""
    probs = np.zeros((1, len(frames), len(CHARACTERS)), dtype=np.float32)
    for t, (best, space) in enumerate(frames):
        probs[0, t, SPACE] = space
        if best == 0:
            probs[0, t, 0] = 1.0 - space
        else:
            probs[0, t, best] = 1.0 - space
    return probs


def test_a_space_the_recognizer_read_but_did_not_emit_comes_back():
    # "ab" then a gap whose blank frames give the space 5%, then "c".
    line = scores([(1, 0.0), (0, 0.0), (2, 0.0), (0, 0.02), (0, 0.05), (0, 0.01), (3, 0.0)])
    assert FakeDecode()(line) == ["abc"]
    assert SpaceRestorer(FakeDecode())(line) == ["ab c"]
    # The caller's array is left as it was.
    assert line[0, 4, SPACE] == np.float32(0.05)


def test_no_space_inside_a_word_nor_between_cjk_characters():
    quiet = scores([(1, 0.0), (0, 0.0005), (2, 0.0), (0, 0.0002), (3, 0.0)])
    assert SpaceRestorer(FakeDecode())(quiet) == ["abc"]
    cjk = scores([(4, 0.0), (0, 0.3), (0, 0.3), (5, 0.0)])
    assert SpaceRestorer(FakeDecode())(cjk) == ["中文"]


def test_a_wide_gap_needs_less_and_off_means_off():
    # Character pitch 2 frames; the gap between b and c spans 4 (wide) with the space at 0.3%.
    line = scores(
        [(1, 0.0), (0, 0.0), (2, 0.0), (0, 0.0), (0, 0.003), (0, 0.0), (3, 0.0), (0, 0.0), (1, 0.0)]
    )
    assert SpaceRestorer(FakeDecode())(line) == ["ab ca"]
    assert SpaceRestorer(FakeDecode(), wide_gap=3.0)(line) == ["abca"]
    assert SpaceRestorer(FakeDecode(), space_probability=1.0)(line) == ["abca"]


def test_an_emitted_space_is_kept_and_not_doubled():
    line = scores([(1, 0.0), (SPACE, 0.9), (0, 0.2), (2, 0.0)])
    assert SpaceRestorer(FakeDecode())(line) == ["a b"]


class FakeClassifier:
    """Stands for rapidocr's TextClassifier: fixed answers, never turns a crop itself."""

    def __init__(self, answers):
        self.answers = answers

    def __call__(self, crops):
        return crops, self.answers, 0.0


def test_crops_are_turned_only_when_most_of_the_page_reads_upside_down():
    crops = [np.arange(6).reshape(2, 3, 1) for _ in range(3)]
    one = FakeClassifier([["180", 0.99], ["0", 0.99], ["0", 0.8]])
    kept, _, _ = PageOrientation(one)(crops)
    assert all((k == c).all() for k, c in zip(kept, crops, strict=True))
    most = FakeClassifier([["180", 0.99], ["180", 0.95], ["0", 0.8]])
    turned, _, _ = PageOrientation(most)(crops)
    assert (turned[0] == crops[0][::-1, ::-1]).all() and (turned[1] == crops[1][::-1, ::-1]).all()
    assert (turned[2] == crops[2]).all()


async def test_default_engine_keeps_word_boundaries(inference):
    """WER <= 2% over all pages, and no page loses a sentence (9 to 11 of its 54 words: WER over 15%)."""
    total_errors = total_words = 0
    failures = []
    for face, size, page in word_pages():
        [response] = await ocr(inference, page.png())
        assert response.engine == "rapidocr"
        errors, words = word_errors(page.text, response.text)
        total_errors, total_words = total_errors + errors, total_words + words
        if errors / words > 0.15:
            failures.append(f"{face} {size} px: {errors} word errors in {response.text!r}")
    wer = total_errors / total_words
    assert wer <= 0.02 and not failures, f"WER {wer:.3f} ({total_errors} of {total_words}); " + "; ".join(
        failures
    )


@pytest.mark.parametrize("face", ["DejaVuSans-Bold", "DejaVuSerif"])
async def test_title_words_are_separate_with_word_boxes(inference, face):
    """A report title whose words were glued together, with word boxes asked for (the document pipeline's path)."""
    lines = ["Quarterly Report 2026", "Revenue grew by ten percent"]
    page = render_lines(lines, face, 44)
    [response] = await ocr(inference, page.png(), return_boxes=True)
    # Boundaries, not spelling (the recognizer may read an o as 0): as many words, nearly the same letters.
    assert len(response.text.split()) == len(" ".join(lines).split()), response.text
    assert cer(" ".join(lines), response.text) <= 0.05, response.text
    words = [w.text for line in response.lines for w in line.words]
    assert words == response.text.split()


async def test_an_upside_down_page_is_still_read(inference):
    """Its lines are turned back and read (in the turned page's order: bottom line first)."""
    page = render_lines(list(WORD_SENTENCES[:3]), "DejaVuSans", 24, width=900)
    page.image = page.image.rotate(180)
    [response] = await ocr(inference, page.png())
    read = Counter(response.text.split())
    expected = page.text.split()
    found = sum(min(read[w], n) for w, n in Counter(expected).items())
    assert found >= 0.9 * len(expected), response.text
