"""LayoutLMv3 engine: pure post-processing on hand-made logits, and tiny random checkpoints end to end."""

from __future__ import annotations

import numpy as np
import pytest

from engines.base import ModelSpec
from engines.documents.layoutlmv3_engine import (
    LayoutLMv3Engine,
    best_span,
    group_bio,
    head_of,
    normalized_box,
    page_words,
    split_label,
)
from engines.errors import InputTooLongError, InvalidArgumentError, ModelLoadError, TaskNotSupportedError
from engines.executor import DeviceExecutor
from engines.ocr.types import Box, OcrLine, OcrPage
from engines.registry import engine_class
from engines.types import Task
from tests.service.documents.tiny_models import DOC_CLASSES, LAYOUT_LABELS, invoice_page

# -- pure functions ------------------------------------------------------------------------


def test_best_span_takes_the_most_probable_valid_span():
    start = np.array([5.0, -9.0, 3.0, 0.0, 0.0, 0.0])
    end = np.array([9.0, 9.0, 0.0, 0.0, 4.0, 0.0])
    allowed = np.array([False, True, True, True, True, True])  # position 0 is the question
    first, last, score = best_span(start, end, allowed, max_length=10)
    assert (first, last) == (
        2,
        4,
    )  # the best end (1) comes before the best start (2); position 0 is not allowed
    p_start = np.exp(start[1:]) / np.exp(start[1:]).sum()
    p_end = np.exp(end[1:]) / np.exp(end[1:]).sum()
    assert score == pytest.approx(p_start[1] * p_end[3])


def test_best_span_respects_the_maximum_length_and_a_single_token():
    start = np.array([0.0, 10.0, 0.0, 0.0, 0.0])
    end = np.array([0.0, 0.0, 0.0, 0.0, 10.0])
    allowed = np.ones(5, dtype=bool)
    assert best_span(start, end, allowed, max_length=4)[:2] == (1, 4)
    first, last, _ = best_span(start, end, allowed, max_length=2)
    assert last - first + 1 <= 2 and first <= last
    assert best_span(start, end, allowed, max_length=1)[0] == best_span(start, end, allowed, 1)[1]


def test_best_span_with_nothing_allowed():
    assert best_span(np.zeros(3), np.zeros(3), np.zeros(3, dtype=bool), 5) is None


def test_split_label_schemes():
    assert split_label("B-TOTAL") == ("B", "TOTAL")
    assert split_label("i_menu.price") == ("I", "menu.price")
    assert split_label("O") == ("O", "")
    assert split_label("HEADER") == ("", "HEADER")
    assert split_label("E-X") == ("E", "X")


def test_group_bio_groups_runs_and_averages_probabilities():
    labels = [
        ("B-Q", 0.9),
        ("I-Q", 0.7),
        ("O", 0.99),
        ("B-A", 0.8),
        ("I-A", 0.6),
        ("I-Q", 0.5),  # a different entity's I- starts a new entity
        ("B-A", 0.4),
        ("B-A", 0.2),  # B- always starts a new one
    ]
    assert group_bio(labels) == [
        ("Q", 0, 1, pytest.approx(0.8)),
        ("A", 3, 4, pytest.approx(0.7)),
        ("Q", 5, 5, 0.5),
        ("A", 6, 6, 0.4),
        ("A", 7, 7, 0.2),
    ]


def test_group_bio_stray_i_unread_words_bioes_and_bare_labels():
    assert group_bio([("O", 1.0), ("I-X", 0.5), ("I-X", 0.5)]) == [("X", 1, 2, 0.5)]
    assert group_bio([("B-X", 1.0), None, ("I-X", 1.0)]) == [("X", 0, 0, 1.0), ("X", 2, 2, 1.0)]
    assert group_bio([("S-X", 1.0), ("I-X", 1.0), ("E-X", 1.0), ("I-X", 1.0)]) == [
        ("X", 0, 0, 1.0),
        ("X", 1, 2, 1.0),
        ("X", 3, 3, 1.0),
    ]
    assert group_bio([("KEY", 1.0), ("KEY", 1.0), ("VALUE", 1.0)]) == [
        ("KEY", 0, 1, 1.0),
        ("VALUE", 2, 2, 1.0),
    ]
    assert group_bio([]) == []


def test_normalized_box_is_on_the_0_1000_grid_and_clamped():
    assert normalized_box(Box(100, 50, 200, 50), 1000, 500) == [100, 100, 300, 200]
    assert normalized_box(Box(-10, -10, 5000, 5000), 400, 200) == [0, 0, 1000, 1000]
    with pytest.raises(ValueError):
        normalized_box(Box(0, 0, 1, 1), 0, 10)


def test_lines_without_words_are_split_in_proportion_to_characters():
    line = OcrLine("ab cdef", Box(0, 10, 70, 20), 0.9)
    page = OcrPage(1, 1, line.text, [line], 100, 100, "test", 0.9)
    words = page_words(page)
    assert [w.text for w in words] == ["ab", "cdef"]
    assert words[0].box == Box(0, 10, 20, 20)
    assert words[1].box == Box(30, 10, 40, 20)
    assert len(page_words(page, limit=1)) == 1


def test_head_of_reads_architectures():
    assert (
        head_of({"architectures": ["LayoutLMv3ForTokenClassification"]}) == "LayoutLMv3ForTokenClassification"
    )
    with pytest.raises(ModelLoadError) as caught:
        head_of({"architectures": ["BertForMaskedLM"]})
    assert caught.value.reason == "MODEL_SOURCE_INVALID"


# -- the engine on tiny checkpoints --------------------------------------------------------

HEAD_TASK = {"qa": Task.DOCUMENT_QA, "token": Task.EXTRACT_FIELDS, "sequence": Task.CLASSIFY_DOCUMENT}


@pytest.fixture(scope="module")
async def engines(layoutlmv3_dirs):
    executor = DeviceExecutor("cpu", "layoutlmv3-test")
    loaded = {}
    for head, task in HEAD_TASK.items():
        spec = ModelSpec(
            name=f"tiny-layoutlmv3-{head}",
            backend="layoutlmv3",
            tasks=(task,),
            source=str(layoutlmv3_dirs[head]),
            device="cpu",
            options={"stride": 16},
        )
        cls = engine_class(spec.backend)
        cls.check_spec(spec)
        engine = cls(spec, "cpu", executor)
        await executor.run(engine.load)
        loaded[head] = engine
    yield loaded
    for engine in loaded.values():
        await executor.run(engine.unload)
    executor.shutdown()


def _word_runs(page: OcrPage):
    """Every contiguous run of the page's words (reading order) -> the union of their boxes."""
    words = [w for line in page.lines for w in line.words]
    return {
        " ".join(w.text for w in words[i : j + 1]): Box.union([w.box for w in words[i : j + 1]])
        for i in range(len(words))
        for j in range(i, len(words))
    }


async def test_answer_is_a_run_of_page_words_cited_by_their_union_box(engines):
    image, page = invoice_page()
    answer = await engines["qa"].answer_question(image, page, "What is the total due?")
    runs = _word_runs(page)
    assert answer.answer in runs
    assert 0.0 < answer.score <= 1.0
    [citation] = answer.citations
    assert citation.text == answer.answer
    assert citation.page_number == page.page_number
    assert citation.box == runs[answer.answer]
    assert engines["qa"].memory_usage().ram_bytes > 0


async def test_a_page_longer_than_the_window_is_read_in_windows(engines):
    # About 600 tokens for a 128-token window: several overlapping windows, all bounded.
    lines = [f"Item {i} costs {i}.00 each" for i in range(30)]
    image, page = invoice_page(lines)
    engine = engines["qa"]
    _, inputs = engine._encode(
        image, page_words(page), page, "What does item 29 cost?", engine.options.max_windows
    )
    windows, tokens = inputs["input_ids"].shape
    assert 1 < windows <= engine.options.max_windows
    assert tokens <= engine.max_length
    answer = await engine.answer_question(image, page, "What does item 29 cost?")
    assert answer.answer in _word_runs(page)
    fields = await engines["token"].extract_fields(image, page)
    assert fields


async def test_lines_without_word_boxes_still_give_an_answer(engines):
    image, page = invoice_page(with_words=False)
    answer = await engines["qa"].answer_question(image, page, "What is the date?")
    words = [w.text for w in page_words(page)]
    assert " ".join(words).find(answer.answer) >= 0
    box = answer.citations[0].box
    assert box.x >= 0 and box.x + box.width <= page.width + 1e-6


async def test_empty_page_and_question_errors(engines):
    image, page = invoice_page()
    empty = OcrPage(1, 1, "", [], page.width, page.height, "test", 0.0)
    assert (await engines["qa"].answer_question(image, empty, "Total?")).answer == ""
    with pytest.raises(InvalidArgumentError):
        await engines["qa"].answer_question(image, page, "   ")
    with pytest.raises(InputTooLongError) as caught:
        await engines["qa"].answer_question(image, page, "why " * 300)  # 1,200 characters
    assert caught.value.metadata["field"] == "question"
    assert caught.value.metadata["max_chars"] == "1000"
    with pytest.raises(InputTooLongError) as caught:  # 800 characters, > 64 tokens (half the window)
        await engines["qa"].answer_question(image, page, "a b " * 200)
    assert caught.value.metadata["max_tokens"] == "64"


async def test_fields_are_labelled_word_runs_inside_the_page(engines):
    image, page = invoice_page()
    fields = await engines["token"].extract_fields(image, page)
    names = {split_label(label)[1] for label in LAYOUT_LABELS} - {""}
    runs = _word_runs(page)
    assert fields  # random weights still label some words
    for field in fields:
        assert field.name in names
        assert field.value in runs
        assert 0.0 < field.confidence <= 1.0
        [citation] = field.citations
        assert citation.box == runs[field.value]
        assert citation.box.x >= 0 and citation.box.x + citation.box.width <= page.width
        assert citation.box.y >= 0 and citation.box.y + citation.box.height <= page.height


async def test_classification_scores_every_label_and_sums_to_one(engines):
    image, page = invoice_page()
    labels = await engines["sequence"].classify_document(image, page)
    assert sorted(x.label for x in labels) == sorted(DOC_CLASSES)
    assert sum(x.score for x in labels) == pytest.approx(1.0)
    assert [x.score for x in labels] == sorted((x.score for x in labels), reverse=True)
    empty = OcrPage(1, 1, "", [], page.width, page.height, "test", 0.0)
    assert len(await engines["sequence"].classify_document(image, empty)) == len(DOC_CLASSES)


async def test_a_task_the_head_cannot_do_is_refused(engines, layoutlmv3_dirs):
    spec = ModelSpec(
        name="wrong-head",
        backend="layoutlmv3",
        tasks=(Task.DOCUMENT_QA,),
        source=str(layoutlmv3_dirs["token"]),
    )
    with pytest.raises(ModelLoadError) as caught:
        LayoutLMv3Engine.check_spec(spec)
    assert caught.value.reason == "MODEL_SOURCE_INVALID"
    assert "LayoutLMv3ForTokenClassification" in caught.value.message
    assert "document_qa" in caught.value.message
    with pytest.raises(ModelLoadError):
        LayoutLMv3Engine(spec, "cpu", DeviceExecutor("cpu", "x")).load()
    image, page = invoice_page()
    with pytest.raises(TaskNotSupportedError):
        await engines["token"].answer_question(image, page, "Total?")


def test_bad_options_are_refused_up_front(layoutlmv3_dirs):
    for options in ({"max_windows": 0}, {"stride": -1}, {"max_words": "many"}):
        spec = ModelSpec(
            name="bad",
            backend="layoutlmv3",
            tasks=(Task.DOCUMENT_QA,),
            source=str(layoutlmv3_dirs["qa"]),
            options=options,
        )
        with pytest.raises(InvalidArgumentError) as caught:
            LayoutLMv3Engine.check_spec(spec)
        assert caught.value.reason == "INVALID_MODEL_OPTION"
