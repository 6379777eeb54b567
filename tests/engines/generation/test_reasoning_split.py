"""The think-block parser, the thinking budget and the catalog resolution, without a model.

Markers split across tokens at every position, whitespace trimming, a block the prompt opened or
the model opens, the budget's forced closing tokens and its token count, thinking off, and what
is detected from a chat template (see engines/generation/reasoning.py).
"""

from __future__ import annotations

import pytest

from engines.errors import InvalidArgumentError
from engines.generation.options import LlamaCppOptions, ReasoningOptions
from engines.generation.reasoning import (
    ModelReasoning,
    Phase,
    SequenceReasoning,
    ThinkSplitter,
    in_open_block,
    markers_in,
    resolve_reasoning,
)
from engines.generation.sequence import GenerationSequence
from engines.options import parse_options
from engines.types import (
    ChatMessage,
    FinishReason,
    GenerationRequest,
    ReasoningEffort,
    ResponseFormat,
    ResponseFormatKind,
    SamplingParams,
)
from tests.engines.generation.test_engine_template import FakeEngine

START, END = "<think>", "</think>"


def split_all(pieces: list[str], phase: Phase = Phase.THINKING) -> tuple[str, str, Phase]:
    splitter = ThinkSplitter(START, END, phase)
    thinking, answer = [], []
    for piece in pieces:
        t, a = splitter.push(piece)
        thinking.append(t)
        answer.append(a)
    t, a = splitter.flush()
    return "".join(thinking) + t, "".join(answer) + a, splitter.phase


def cuts(text: str) -> list[list[str]]:
    """``text`` split into two pieces at every position, and into single characters."""
    return [[text[:i], text[i:]] for i in range(len(text) + 1)] + [list(text)]


@pytest.mark.parametrize("pieces", cuts("\nI add two and two.\n</think>\n\nIt is 4."))
def test_a_block_the_prompt_opened_splits_wherever_the_pieces_break(pieces):
    assert split_all(pieces) == ("I add two and two.", "It is 4.", Phase.ANSWER)


@pytest.mark.parametrize("pieces", cuts("  <think>\nhmm</think>yes"))
def test_a_block_the_model_opens_is_found_after_leading_space(pieces):
    assert split_all(pieces, Phase.START) == ("hmm", "yes", Phase.ANSWER)


@pytest.mark.parametrize("pieces", cuts("<thin air>"))
def test_text_that_only_starts_like_a_marker_is_answer(pieces):
    assert split_all(pieces, Phase.START) == ("", "<thin air>", Phase.ANSWER)


def test_a_partial_end_marker_is_held_until_it_is_known():
    splitter = ThinkSplitter(START, END, Phase.THINKING)
    assert splitter.push("a </th") == ("a", "")
    assert splitter.push("ing") == (" </thing", "")  # not the marker after all: thinking text
    assert splitter.push("</thi") == ("", "")
    assert splitter.push("nk> b") == ("", "b")


def test_space_inside_the_thinking_is_kept_and_its_ends_are_trimmed():
    assert split_all(["\n\n a\n", "\n b ", " \n", "</think>", "\n\n", " c d "]) == (
        "a\n\n b",
        "c d ",
        Phase.ANSWER,
    )


def test_a_block_left_open_keeps_its_thinking_and_gives_no_answer():
    assert split_all(["one ", "two </thi"]) == ("one two </thi", "", Phase.THINKING)


def test_only_one_block_is_parsed():
    assert split_all(["x</think>a <think>b</think>"]) == ("x", "a <think>b</think>", Phase.ANSWER)


def test_thinking_off_passes_everything_as_answer():
    assert split_all(["<think>x</think>y"], Phase.ANSWER) == ("", "<think>x</think>y", Phase.ANSWER)


# -- the budget ------------------------------------------------------------------------------

CLOSING = [900, 901, 902]  # stand-in ids of "\n</think>\n\n"
PIECES = {900: b"\n", 901: b"</think>", 902: b"\n\n"}


class Vocabulary:
    """Token id n < 256 is the byte n; 900-902 the closing text; 0 ends generation."""

    def is_end_of_generation(self, token_id: int) -> bool:
        return token_id == 0

    def token_bytes(self, token_id: int) -> bytes:
        return PIECES[token_id] if token_id in PIECES else bytes([token_id])


def run_budget(
    sampled: str, budget: int | None, phase: Phase = Phase.THINKING, max_tokens: int = 100, stop=()
) -> tuple[list[int], str, str, GenerationSequence]:
    """Drive a sequence as an engine does: forced token or the next of ``sampled``; returns what was fed."""
    vocabulary = Vocabulary()
    request = GenerationRequest(request_id="r", prompt="p", params=SamplingParams(stop=list(stop)))
    sequence = GenerationSequence(request, [1], max_tokens, vocabulary)
    sequence.reasoning = SequenceReasoning(START, END, phase, budget, CLOSING)
    lane = sequence.reasoning.budget
    fed, thinking, answer = [], [], []
    source = iter(sampled.encode())
    while sequence.finish_reason is None:
        token = lane.forced_token()
        if token is None:
            token = next(source, 0)
        lane.observe(vocabulary.token_bytes(token))
        fed.append(token)
        delta = sequence.accept(token)
        thinking.append(delta.reasoning)
        answer.append(delta.text)
    return fed, "".join(thinking), "".join(answer), sequence


def test_a_spent_budget_feeds_the_closing_tokens_and_the_answer_follows():
    fed, thinking, answer, sequence = run_budget("abcdefgh", budget=3)
    assert fed[:6] == [ord("a"), ord("b"), ord("c"), *CLOSING]
    assert (thinking, answer) == ("abc", "defgh")
    usage = sequence.usage
    assert usage.reasoning_tokens == 3  # the forced closing tokens are not thinking
    assert usage.completion_tokens == 3 + len(CLOSING) + 5


def test_a_model_that_closes_the_block_itself_is_not_forced():
    fed, thinking, answer, sequence = run_budget("ab</think>cd", budget=11)
    assert not set(CLOSING) & set(fed)
    assert (thinking, answer) == ("ab", "cd")
    assert sequence.usage.reasoning_tokens == len("ab</think>")  # its own end marker counts


def test_the_end_marker_of_the_model_counts_against_the_budget():
    fed, _, _, sequence = run_budget("ab</think>cd", budget=5)
    assert fed[5:8] == CLOSING  # "ab</t" spent it: the engine closes the block
    assert sequence.usage.reasoning_tokens == 5


def test_no_budget_thinks_until_max_tokens():
    _, thinking, answer, sequence = run_budget("abcdefgh", budget=None, max_tokens=5)
    assert (thinking, answer, sequence.finish_reason) == ("abcde", "", FinishReason.LENGTH)
    assert sequence.usage.reasoning_tokens == 5


def test_a_block_the_model_opens_counts_from_its_marker():
    # The token that completes the start marker counts (here its last character), then x and y.
    fed, thinking, answer, sequence = run_budget("<think>xyzw", budget=3, phase=Phase.START)
    assert fed[9:12] == CLOSING
    assert (thinking, answer) == ("xy", "zw")
    assert sequence.usage.reasoning_tokens == 3


def test_stop_sequences_apply_to_the_answer_not_the_thinking():
    _, thinking, answer, sequence = run_budget("abSTOP</think>xSTOPy", budget=50, stop=["STOP"])
    assert (thinking, answer, sequence.finish_reason) == ("abSTOP", "x", FinishReason.STOP)


# -- the catalog block and the template --------------------------------------------------------

QWEN3_LIKE = (
    "{% if message.reasoning_content %}<think>{{ message.reasoning_content }}</think>{% endif %}"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
)


def test_markers_are_detected_from_the_template():
    assert markers_in(QWEN3_LIKE) == (START, END)
    assert markers_in("[THINK]{{ x }}[/THINK]") == ("[THINK]", "[/THINK]")
    assert markers_in("<|im_start|>{{ content }}") is None
    assert markers_in(None) is None


def test_a_template_that_names_markers_makes_a_reasoning_model():
    resolved = resolve_reasoning(None, QWEN3_LIKE, "<|im_start|>assistant\n")
    assert resolved is not None
    assert (resolved.start, resolved.end, resolved.template_opens) == (START, END, False)
    assert resolved.enable_thinking and resolved.takes_reasoning_content
    opened = resolve_reasoning(None, "<think>...</think>", "<|im_start|>assistant\n<think>\n")
    assert opened is not None and opened.template_opens
    assert not opened.enable_thinking and not opened.takes_reasoning_content


def test_the_catalog_block_decides_over_the_template():
    assert resolve_reasoning(ReasoningOptions(enabled=False), QWEN3_LIKE, None) is None
    assert resolve_reasoning(None, "plain {{ x }}", None) is None
    forced = resolve_reasoning(ReasoningOptions(start="<r>", end="</r>", template_opens=True), None, None)
    assert forced is not None and (forced.start, forced.end, forced.template_opens) == ("<r>", "</r>", True)
    enabled = resolve_reasoning(ReasoningOptions(enabled=True, budget=64), "plain", "x")
    assert enabled is not None and (enabled.start, enabled.budget) == (START, 64)


def test_the_block_is_checked_as_catalog_options():
    def refused(block: dict) -> str:
        with pytest.raises(InvalidArgumentError) as caught:
            parse_options(LlamaCppOptions, {"reasoning": block}, backend="llama_cpp")
        return str(caught.value)

    assert "option reasoning.low_budget" in refused({"low_budget": -1})
    assert "reasoning.budgets" in refused({"budgets": 3})
    assert "true/false" in refused({"budget": True})
    assert "reasoning.start" in refused({"start": ""})


def model(budget: int | None = None) -> ModelReasoning:
    resolved = resolve_reasoning(
        ReasoningOptions(budget=budget, low_budget=1, medium_budget=2, high_budget=3), QWEN3_LIKE, None
    )
    assert resolved is not None
    return resolved


@pytest.mark.parametrize(
    ("budget", "effort", "default", "expected"),
    [
        (7, ReasoningEffort.HIGH, 9, 7),  # an explicit budget wins
        (None, ReasoningEffort.LOW, 9, 1),
        (None, ReasoningEffort.MEDIUM, None, 2),
        (None, ReasoningEffort.HIGH, None, 3),
        (None, ReasoningEffort.NONE, 9, 0),
        (None, None, 9, 9),  # the catalog's default
        (None, None, None, None),  # unbounded
    ],
)
def test_the_budget_comes_from_the_request_then_the_effort_then_the_catalog(
    budget, effort, default, expected
):
    request = GenerationRequest(request_id="r", prompt="p", reasoning_budget=budget, reasoning_effort=effort)
    plan = model(default).plan(request)
    assert (plan.budget, plan.off) == (expected, expected == 0)


def test_a_negative_budget_is_refused():
    with pytest.raises(InvalidArgumentError, match="reasoning_budget"):
        model().plan(GenerationRequest(request_id="r", prompt="p", reasoning_budget=-1))


def test_thinking_off_closes_an_open_block_or_prefills_an_empty_one():
    reasoning = model()
    assert reasoning.thinking_off_prompt("A\n<think>\n") == "A\n<think>\n\n</think>\n\n"
    assert reasoning.thinking_off_prompt("A\n") == "A\n<think>\n\n</think>\n\n"
    already = "A\n<think>\n\n</think>\n\n"
    assert reasoning.thinking_off_prompt(already) == already
    assert reasoning.first_phase("A\n<think>\n", off=False) is Phase.THINKING
    assert reasoning.first_phase("A\n", off=False) is Phase.START
    assert reasoning.first_phase("A\n<think>\n", off=True) is Phase.ANSWER
    assert in_open_block("<think>a</think><think>", START, END)
    assert not in_open_block("<think>a</think>", START, END)


def test_constrained_output_opens_the_block_a_template_leaves_to_the_model():
    reasoning = model()
    assert reasoning.opened_prompt("A\n") == "A\n<think>\n"
    assert reasoning.opened_prompt("A\n<think>") == "A\n<think>"


# -- the prompt a reasoning engine builds (a fake engine: characters are tokens) -----------------


class ThinkEngine(FakeEngine):
    """Renders "role:content" turns; the generation prompt is "A:" (the template never opens a block)."""

    def __init__(self, template: str) -> None:
        super().__init__(template=template)
        self.context_length = 512
        self.rendered: list[list[dict]] = []
        self._setup_reasoning()

    def _render_chat(self, messages, tools, add_generation_prompt=True, **template_kwargs) -> str:
        self.rendered.append(messages)
        flag = "[no-think]" if template_kwargs.get("enable_thinking") is False else ""
        turns = "".join(f"{m['role']}:{m['content']}|" for m in messages)
        return turns + ("A:" + flag if add_generation_prompt else "")


def chat(**kwargs) -> GenerationRequest:
    return GenerationRequest(request_id="r", messages=[ChatMessage(role="user", content="q")], **kwargs)


def test_the_engine_opens_closes_or_leaves_the_prompt_as_the_request_asks():
    engine = ThinkEngine("<think>{{ x }}</think>")
    assert engine.reasoning is not None and not engine.reasoning.template_opens
    assert engine.prompt_text(chat()) == "user:q|A:"
    json_answer = chat(response_format=ResponseFormat(ResponseFormatKind.JSON_OBJECT))
    assert engine.prompt_text(json_answer) == "user:q|A:<think>\n"
    assert engine.prompt_text(chat(reasoning_budget=0)) == "user:q|A:<think>\n\n</think>\n\n"
    # A raw prompt is the client's own: only a block it left open is closed.
    raw_off = GenerationRequest(request_id="r", prompt="Q <think>", reasoning_budget=0)
    assert engine.prompt_text(raw_off) == "Q <think>\n</think>\n\n"
    raw_plain = GenerationRequest(request_id="r", prompt="Q", reasoning_budget=0)
    assert engine.prompt_text(raw_plain) == "Q"


def test_a_template_that_reads_enable_thinking_gets_it_and_earlier_thinking_only_where_it_renders_it():
    turns = [
        ChatMessage(role="user", content="q"),
        ChatMessage(role="assistant", content="a", reasoning_content="because"),
        ChatMessage(role="user", content="q2"),
    ]
    qwen3 = ThinkEngine(QWEN3_LIKE)
    qwen3.prompt_text(GenerationRequest(request_id="r", messages=turns))
    assert qwen3.rendered[-1][1]["reasoning_content"] == "because"
    off = GenerationRequest(request_id="r", messages=turns, reasoning_effort=ReasoningEffort.NONE)
    assert qwen3.prompt_text(off).endswith("A:[no-think]<think>\n\n</think>\n\n")
    r1 = ThinkEngine("<think>{{ content.split('</think>')[-1] }}")
    r1.prompt_text(GenerationRequest(request_id="r", messages=turns))
    assert "reasoning_content" not in r1.rendered[-1][1]
