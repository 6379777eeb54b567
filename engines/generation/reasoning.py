"""Reasoning models: the think block split from the answer, its token budget, and thinking off.

A reasoning model writes its thinking between a start and an end marker (``<think>`` …
``</think>`` for DeepSeek-R1 distills, Qwen3 and QwQ, by their chat templates) before the answer;
many chat templates open the block themselves (the generation prompt ends with the start marker).
Everything here is shared by the llama.cpp and transformers engines:

* :class:`ThinkSplitter` turns streamed text into (thinking, answer) pieces, markers removed and a
  marker split across tokens held back until it is known;
* :class:`ThinkingBudget` runs on the model's lane at sampling time: it counts the tokens sampled
  inside the block and, once the budget is spent, hands out the closing text's tokens (a newline,
  the end marker, a blank line) in place of samples, so the model goes on to answer;
* :class:`SequenceReasoning` is one sequence's pair of them (its output split and its budget);
* :class:`ModelReasoning` is a loaded model's resolved catalog ``reasoning`` block (markers detected
  from the chat template, the budgets) and plans each request (budget, thinking off, first phase).

Counting rule (both sides apply it to the same tokens, so they agree): a token is a thinking token
when it arrives inside the block, or opens it; the model's own end marker counts, the closing tokens
the engine forces do not. A budget of N therefore allows at most N thinking tokens.
"""

from __future__ import annotations

import codecs
import collections
import enum
from dataclasses import dataclass, field

from engines.errors import InvalidArgumentError
from engines.generation.options import ReasoningOptions
from engines.types import GenerationRequest, ReasoningEffort

#: Marker pairs recognised in chat templates, first match wins (``<think>``: DeepSeek-R1, Qwen3,
#: QwQ; ``[THINK]``: Magistral; ``<|START_THINKING|>``: Command A Reasoning; ``<seed:think>``: Seed-OSS).
KNOWN_MARKERS: tuple[tuple[str, str], ...] = (
    ("<think>", "</think>"),
    ("[THINK]", "[/THINK]"),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
    ("<seed:think>", "</seed:think>"),
)
DEFAULT_MARKERS = KNOWN_MARKERS[0]


class Phase(enum.Enum):
    """Where a sequence's output is: before any thinking, inside the think block, or in the answer."""

    START = "start"  # the block may still open (the model writes the start marker itself)
    THINKING = "thinking"
    ANSWER = "answer"


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for length in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:length]):
            return length
    return 0


class ThinkSplitter:
    """Splits streamed output text into thinking and answer, removing the markers.

    Text that may be the start of a marker is held back until the next piece decides. The
    thinking is trimmed of whitespace at both ends and the answer of leading whitespace, as
    Qwen3's chat template trims a turn's ``reasoning_content`` and content when it renders them.
    Only one think block is parsed: after it, marker text is answer text.

    Args:
        start: the start marker (``<think>``).
        end: the end marker (``</think>``).
        phase: where the output begins: THINKING when the prompt opened the block, START when
            the model may open it, ANSWER when thinking is off.

    """

    def __init__(self, start: str, end: str, phase: Phase) -> None:
        self._start, self._end = start, end
        self.phase = phase
        self.thought = phase is Phase.THINKING  # the block was opened at some point
        self._held = ""  # raw text that may begin a marker (or leading whitespace)
        self._pending_space = ""  # thinking's trailing whitespace, dropped if the block ends here
        self._thinking_started = False
        self._answer_started = False

    def push(self, text: str) -> tuple[str, str]:
        """Add streamed ``text``; return the (thinking, answer) text that became safe to emit."""
        buffer, self._held = self._held + text, ""
        thinking: list[str] = []
        answer: list[str] = []
        while buffer:
            if self.phase is Phase.START:
                stripped = buffer.lstrip()
                if stripped.startswith(self._start):
                    self.phase, self.thought = Phase.THINKING, True
                    buffer = stripped[len(self._start) :]
                elif not stripped or self._start.startswith(stripped):
                    self._held = buffer  # whitespace, or a start marker still arriving
                    break
                else:
                    self.phase, buffer = Phase.ANSWER, stripped
            elif self.phase is Phase.THINKING:
                at = buffer.find(self._end)
                if at >= 0:
                    thinking.append(self._thinking(buffer[:at], last=True))
                    self.phase, buffer = Phase.ANSWER, buffer[at + len(self._end) :]
                    continue
                keep = _partial_suffix(buffer, self._end)
                thinking.append(self._thinking(buffer[: len(buffer) - keep], last=False))
                self._held = buffer[len(buffer) - keep :]
                break
            else:
                if not self._answer_started:
                    buffer = buffer.lstrip()
                    self._answer_started = bool(buffer)
                answer.append(buffer)
                break
        return "".join(thinking), "".join(answer)

    def flush(self) -> tuple[str, str]:
        """The held-back text at the end of generation: a block left open keeps its thinking."""
        held, self._held = self._held, ""
        if self.phase is Phase.THINKING:
            return self._thinking(held, last=True), ""
        if self.phase is Phase.START:
            self.phase = Phase.ANSWER
            return "", held.strip()
        return "", ""

    def _thinking(self, piece: str, *, last: bool) -> str:
        if not self._thinking_started:
            piece = piece.lstrip()
            if not piece:
                return ""
            self._thinking_started = True
        text = self._pending_space + piece
        trimmed = text.rstrip()
        self._pending_space = "" if last else text[len(trimmed) :]
        return trimmed


class _TokenCounter:
    """A :class:`ThinkSplitter` fed token by token, counting thinking tokens (see the module's rule)."""

    def __init__(self, splitter: ThinkSplitter) -> None:
        self.splitter = splitter
        self.thinking_tokens = 0

    def push(self, text: str, *, forced: bool) -> tuple[str, str]:
        before = self.splitter.phase
        pieces = self.splitter.push(text)
        opened_now = before is Phase.START and self.splitter.thought
        if not forced and (before is Phase.THINKING or opened_now):
            self.thinking_tokens += 1
        return pieces


class ThinkingBudget:
    """The lane side of one sequence: counts thinking tokens at sampling time and forces the block closed.

    Engines call :meth:`forced_token` before sampling (a token id to feed instead of a sample, or
    None) and :meth:`observe` with every token they chose. Written on the lane only; the output
    side reads :attr:`forced_positions` after the step that filled them was delivered.

    Args:
        splitter: a splitter of its own (the output side has another, fed the same tokens).
        budget: most thinking tokens; None: unbounded (within max_tokens).
        closing: token ids of the closing text (:attr:`ModelReasoning.closing_text`).

    """

    def __init__(self, splitter: ThinkSplitter, budget: int | None, closing: list[int]) -> None:
        self._counter = _TokenCounter(splitter)
        self._budget = budget
        self._closing = closing
        self._queue: collections.deque[int] = collections.deque()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._position = 0
        self._forcing = False
        self.forced_positions: set[int] = set()

    @property
    def thinking(self) -> bool:
        """Whether the output is inside the think block (the unconstrained sampler's turn)."""
        return self._counter.splitter.phase is Phase.THINKING

    def forced_token(self) -> int | None:
        """The next closing token to feed instead of a sample, or None to sample."""
        if (
            not self._forcing
            and self.thinking
            and self._budget is not None
            and self._counter.thinking_tokens >= self._budget
        ):
            self._forcing = True
            self._queue.extend(self._closing)
        if self._queue:
            self.forced_positions.add(self._position)
            return self._queue.popleft()
        return None

    def observe(self, piece: bytes) -> None:
        """Record the chosen token (its bytes), forced or sampled."""
        forced = self._position in self.forced_positions
        self._counter.push(self._decoder.decode(piece), forced=forced)
        self._position += 1


class SequenceReasoning:
    """One sequence's reasoning: the output split (event loop) and the budget (model lane).

    Attributes:
        budget: the lane side, used by the engine's sampling.

    """

    def __init__(self, start: str, end: str, phase: Phase, budget: int | None, closing: list[int]) -> None:
        self._output = _TokenCounter(ThinkSplitter(start, end, phase))
        self.budget = ThinkingBudget(ThinkSplitter(start, end, phase), budget, closing)

    @property
    def thinking_tokens(self) -> int:
        """Thinking tokens of the output so far (``Usage.reasoning_tokens``)."""
        return self._output.thinking_tokens

    def split(self, text: str, position: int) -> tuple[str, str]:
        """(thinking, answer) of the decoded text of completion token ``position``."""
        return self._output.push(text, forced=position in self.budget.forced_positions)

    def flush(self, tail: str = "") -> tuple[str, str]:
        """(thinking, answer) of the decoder's ``tail`` and all held back, at the end of generation."""
        splitter = self._output.splitter
        thinking, answer = splitter.push(tail)
        rest_thinking, rest_answer = splitter.flush()
        return thinking + rest_thinking, answer + rest_answer


def markers_in(template: str | None) -> tuple[str, str] | None:
    """The first pair of :data:`KNOWN_MARKERS` that ``template`` names both of, or None."""
    if not template:
        return None
    return next(((s, e) for s, e in KNOWN_MARKERS if s in template and e in template), None)


def in_open_block(text: str, start: str, end: str) -> bool:
    """Whether ``text`` (a prompt) ends inside a think block (its last start marker follows its last end)."""
    opened = text.rfind(start)
    return opened >= 0 and opened > text.rfind(end)


@dataclass(frozen=True, slots=True)
class RequestReasoning:
    """How one request thinks: its budget (None: unbounded; 0: off) and whether the prompt was rewritten."""

    budget: int | None
    off: bool


@dataclass(frozen=True)
class ModelReasoning:
    """A loaded reasoning model's resolved ``reasoning`` block.

    Attributes:
        start, end: the think markers.
        template_opens: the chat template opens the block itself (its generation prompt ends
            with ``start``).
        budget: default thinking budget in tokens (None: unbounded).
        effort_budgets: budget of each effort level (NONE is 0).
        enable_thinking: the template reads ``enable_thinking`` (Qwen3): thinking off passes False.
        takes_reasoning_content: the template renders an earlier turn's ``reasoning_content``.
        closing: token ids of :attr:`closing_text` (forced when a budget is spent).

    """

    start: str
    end: str
    template_opens: bool
    budget: int | None
    effort_budgets: dict[ReasoningEffort, int]
    enable_thinking: bool
    takes_reasoning_content: bool
    closing: list[int] = field(default_factory=list)

    @property
    def closing_text(self) -> str:
        """The text that closes a think block: newline, end marker, blank line (Qwen3's layout)."""
        return f"\n{self.end}\n\n"

    def plan(self, request: GenerationRequest) -> RequestReasoning:
        """The request's budget: ``reasoning_budget``, else its effort's, else the catalog default.

        Raises:
            InvalidArgumentError: a negative budget (field ``parameters.reasoning_budget``); the
                service refuses one before, engines are called directly in tests.

        """
        budget = request.reasoning_budget
        if budget is not None and budget < 0:
            raise InvalidArgumentError(
                f"parameters.reasoning_budget must be >= 0, got {budget}", field="parameters.reasoning_budget"
            )
        if budget is None and request.reasoning_effort is not None:
            budget = self.effort_budgets[request.reasoning_effort]
        if budget is None:
            budget = self.budget
        return RequestReasoning(budget=budget, off=budget == 0)

    def thinking_off_prompt(self, text: str) -> str:
        """``text`` with thinking off: a block the prompt opened is closed, else an empty block prefilled.

        A prompt that ends with a closed block already (Qwen3's template with
        ``enable_thinking=False`` writes an empty block) is left as it is.
        """
        if in_open_block(text, self.start, self.end):
            return text + self.closing_text
        if text.rstrip().endswith(self.end):
            return text
        return f"{text}{self.start}\n{self.closing_text}"

    def opened_prompt(self, text: str) -> str:
        """``text`` ending inside a think block: the start marker (and a newline) appended unless open.

        For constrained output (a JSON grammar applies to the answer only): a model whose template
        leaves the block to it (Qwen3) could not write the start marker under the grammar.
        """
        return text if in_open_block(text, self.start, self.end) else f"{text}{self.start}\n"

    def first_phase(self, text: str, off: bool) -> Phase:
        """Where the output of a prompt ``text`` begins (after :meth:`thinking_off_prompt` when off)."""
        if off:
            return Phase.ANSWER
        if in_open_block(text, self.start, self.end):
            return Phase.THINKING
        return Phase.START


def resolve_reasoning(
    options: ReasoningOptions | None, template: str | None, generation_prompt: str | None
) -> ModelReasoning | None:
    """The model's reasoning settings from its catalog block and chat template, or None if it does not reason.

    Args:
        options: the catalog's ``reasoning`` block (None: not written).
        template: the chat template's source (None: none).
        generation_prompt: a probe conversation rendered with the generation prompt (None: no
            template, or it failed to render); the template opens the block when it ends with
            the start marker.

    A model reasons when its block says ``enabled: true``, or leaves ``enabled`` unset and either
    names markers or has a template naming a known pair.

    """
    options = options or ReasoningOptions()
    detected = markers_in(template)
    if options.enabled is False or (options.enabled is None and detected is None and options.start is None):
        return None
    start, end = detected or DEFAULT_MARKERS
    start, end = options.start or start, options.end or end
    opens = options.template_opens
    if opens is None:
        opens = bool(generation_prompt) and generation_prompt.rstrip().endswith(start)
    return ModelReasoning(
        start=start,
        end=end,
        template_opens=opens,
        budget=options.budget,
        effort_budgets={
            ReasoningEffort.NONE: 0,
            ReasoningEffort.LOW: options.low_budget,
            ReasoningEffort.MEDIUM: options.medium_budget,
            ReasoningEffort.HIGH: options.high_budget,
        },
        enable_thinking=bool(template) and "enable_thinking" in template,
        takes_reasoning_content=bool(template) and "reasoning_content" in template,
    )
