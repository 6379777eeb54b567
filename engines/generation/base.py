"""Base class of generation engines: prepare, step and release, driven by the scheduler.

:class:`GenerationEngine` does what every backend does the same way (request checks, chat
templating and its errors, length limits, releasing before a step) and leaves the model-specific
parts to a few blocking hooks: :meth:`~GenerationEngine._render_chat`,
:meth:`~GenerationEngine._tokenize`, :meth:`~GenerationEngine._new_state`,
:meth:`~GenerationEngine._forward` and :meth:`~GenerationEngine._free`.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from engines.base import Engine
from engines.batching.tokens import character_limit
from engines.errors import InputTooLongError, InvalidArgumentError
from engines.generation.options import GenerationOptions
from engines.generation.reasoning import (
    ModelReasoning,
    SequenceReasoning,
    in_open_block,
    resolve_reasoning,
)
from engines.generation.scheduler import ContinuousBatchScheduler, StepModel, StepResult
from engines.generation.sequence import GenerationSequence
from engines.generation.structured import (
    message_dict,
    messages_with_tools,
    output_constraint,
    output_postprocessor,
)
from engines.reasons import Reason
from engines.stats import EngineStats, GenerationStats, KvCacheStats
from engines.tokenization import Offsets, check_token_ids, no_chat_template
from engines.types import (
    DetokenizeRequest,
    GenerationDelta,
    GenerationRequest,
    SamplingParams,
    Task,
    TokenizeRequest,
    TokenizeResult,
)

log = logging.getLogger(__name__)


@dataclass(eq=False)
class SequenceState:
    """Engine-side state of one sequence (``GenerationSequence.engine_state``); engines extend it.

    Attributes:
        sampler: the backend's sampler for this sequence.
        logprobs: return the log probability of each sampled token.
        top_logprobs: alternatives returned with it (0 to 20).
        n_past: tokens of this sequence in the KV cache.
        next_input: the last sampled token, fed at the next step; None until the prompt is prefilled.
        released: :meth:`GenerationEngine.release` freed it; later releases do nothing.
        thinking_sampler: a reasoning model's sampler inside the think block when ``sampler``
            carries an output constraint (the constraint applies to the answer only); else None.

    """

    sampler: Any
    logprobs: bool
    top_logprobs: int
    n_past: int = 0
    next_input: int | None = None
    released: bool = False
    thinking_sampler: Any = None


GenerationOptionsT = TypeVar("GenerationOptionsT", bound=GenerationOptions)


class GenerationEngine(Engine[GenerationOptionsT]):
    """An engine for :attr:`Task.GENERATE` with continuous batching.

    :meth:`stream` is the async entry point. The scheduler runs the blocking :meth:`prepare`,
    :meth:`step` and :meth:`release` on the model's lane; they do the shared checks and
    call the hooks each backend implements:

    * :meth:`_render_chat` and :meth:`_tokenize`: the prompt's token ids;
    * :meth:`_new_state`: a sequence's sampler and KV bookkeeping;
    * :meth:`_forward`: one forward pass over the running batch;
    * :meth:`_free`: a sequence's KV cells and sampler;

    plus the vocabulary methods :meth:`is_end_of_generation` and :meth:`token_bytes`. A
    backend's ``load`` sets :attr:`context_length` and :attr:`vocab_size` and calls
    :meth:`_set_chat_template`.

    Catalog options read here (:class:`~engines.generation.options.GenerationOptions`):
    ``max_sequences`` (sequences batched together, default 8), ``max_waiting`` (requests being
    prepared or queued for a slot beyond those running, default 64) and ``max_queue_wait_s`` (the
    longest a request may wait for a slot; 0, the default: no limit; the server's
    ``max_queue_wait_s`` setting fills it in).

    Reasoning models (:mod:`engines.generation.reasoning`): a backend's ``load`` calls
    :meth:`_setup_reasoning` once its template and tokenizer are ready; sampling goes through
    :meth:`_choose_token`, which forces the think block closed when its budget is spent.

    Attributes:
        context_length: tokens one sequence can hold (prompt plus completion).
        vocab_size: token ids the model scores; valid ids are ``0 .. vocab_size - 1``.
        scheduler: the continuous-batching scheduler that drives this engine.
        reasoning: the resolved ``reasoning`` settings of a reasoning model, else None.

    """

    tasks = frozenset({Task.GENERATE})
    options_model = GenerationOptions
    context_length: int
    vocab_size: int
    reasoning: ModelReasoning | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._set_chat_template(None)
        # The scheduler's way back to its engine is weak, so an unloaded engine ends when its last
        # reference goes (no cycle for a full garbage collection to find: service.garbage_collector).
        self.scheduler = ContinuousBatchScheduler(
            cast("StepModel", weakref.proxy(self)),
            max_sequences=self.max_sequences,
            max_waiting=self.options.max_waiting,
            max_queue_wait_s=self.options.max_queue_wait_s,
        )

    @property
    def model_name(self) -> str:
        """Catalog name of the model."""
        return self.spec.name

    def kv_cells(self) -> tuple[int, int] | None:
        """``(used, total)`` KV cache cells (tokens) of the loaded model, or None when unknown.

        Read at metrics scrapes from another thread: backends answer from their own bookkeeping,
        never by calling into the runtime that the lane may be using.
        """
        return None

    def kv_cache(self) -> KvCacheStats | None:
        """The KV cells of :meth:`kv_cells`, with those only cached prompts hold; None when unknown.

        The default knows no cached prompts (``cells_cached`` 0); a backend with a prompt cache
        overrides it, reading its figures once so that the parts agree.
        """
        cells = self.kv_cells()
        return KvCacheStats(*cells) if cells is not None else None

    def stats(self) -> EngineStats:
        """The scheduler's sequences running and waiting, and the KV cells (:meth:`kv_cache`)."""
        return EngineStats(
            generation=GenerationStats(
                running=self.scheduler.active_count,
                waiting=self.scheduler.waiting_count,
                kv_cache=self.kv_cache(),
            )
        )

    @property
    def max_sequences(self) -> int:
        """Sequences decoded together in one step."""
        return self.options.max_sequences

    # -- vocabulary (TokenVocabulary) -----------------------------------------------------------

    @abc.abstractmethod
    def is_end_of_generation(self, token_id: int) -> bool:
        """Whether ``token_id`` ends generation (EOS, EOT, ``<|im_end|>``…)."""

    @abc.abstractmethod
    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token decodes to (special tokens decode to nothing)."""

    # -- requests -------------------------------------------------------------------------------

    def _set_chat_template(self, template: str | None) -> None:
        """Remember the model's chat template source (None or empty: it has none).

        Tools and developer messages are passed to the template as they are only when its
        source mentions them; otherwise :func:`messages_with_tools` rewrites them.
        """
        self._chat_template = template or None
        self._template_has_tools = bool(template) and "tools" in template
        self._template_has_developer = bool(template) and "developer" in template

    def tokenize_prompt(self, request: GenerationRequest) -> list[int]:
        """Token ids of the request's prompt: the raw prompt, or the messages rendered by the chat template.

        Raises:
            InputTooLongError: the prompt is over the character limit of the context.
            InvalidArgumentError: no chat template (reason NO_CHAT_TEMPLATE) or the template
                rejects the messages (reason CHAT_TEMPLATE_ERROR).

        """
        return self._tokenize(self.prompt_text(request), templated=request.messages is not None)

    def prompt_text(self, request: GenerationRequest, *, add_generation_prompt: bool = True) -> str:
        """The text a request's prompt is tokenized from: the raw prompt, or the rendered messages.

        With a reasoning model whose request turns thinking off (budget 0), the template gets
        ``enable_thinking=False`` where it reads it, and the prompt then closes a think block it
        opened or prefills an empty one (:meth:`ModelReasoning.thinking_off_prompt`); with thinking
        on and an output constraint, the prompt ends inside an opened block
        (:meth:`ModelReasoning.opened_prompt`).

        Raises:
            InputTooLongError, InvalidArgumentError: as :meth:`tokenize_prompt`; a negative
                reasoning budget.

        """
        self._check_characters(request)
        reasoning = self.reasoning
        off = reasoning is not None and add_generation_prompt and reasoning.plan(request).off
        if request.messages is None:
            text = request.prompt or ""
        else:
            text = self._render_messages(request, add_generation_prompt, off)
        if reasoning is None or not add_generation_prompt:
            return text
        if request.messages is None:  # a raw prompt is the client's own: only a block it left open is closed
            closes = off and in_open_block(text, reasoning.start, reasoning.end)
            return reasoning.thinking_off_prompt(text) if closes else text
        if off:
            return reasoning.thinking_off_prompt(text)
        # Constrained output: the grammar starts after the block, so the block is opened here.
        return reasoning.opened_prompt(text) if output_constraint(request) is not None else text

    def _render_messages(self, request: GenerationRequest, add_generation_prompt: bool, off: bool) -> str:
        if self._chat_template is None:
            raise no_chat_template(self.spec.name)
        messages, tools = messages_with_tools(request, self._template_has_tools, self._template_has_developer)
        # An earlier turn's thinking goes to templates that render it; others drop it (as OpenAI
        # and vLLM do for earlier turns).
        keep_thinking = self.reasoning is not None and self.reasoning.takes_reasoning_content
        dicts = [message_dict(m, reasoning=keep_thinking) for m in messages]
        template_reads_flag = self.reasoning is not None and self.reasoning.enable_thinking
        extra = {"enable_thinking": False} if off and template_reads_flag else {}
        try:
            return self._render_chat(dicts, tools, add_generation_prompt, **extra)
        except Exception as exc:  # template errors (raise_exception in the template) are client errors
            raise InvalidArgumentError(
                f"the chat template of model {self.spec.name!r} rejected the messages: {exc}",
                reason=Reason.CHAT_TEMPLATE_ERROR,
            ) from None

    def _setup_reasoning(self) -> None:
        """Resolve the catalog's ``reasoning`` block against the chat template (blocking; end of ``load``).

        The template opens the think block when a one-message probe rendered with the
        generation prompt ends with the start marker; the closing text is tokenized once.
        """
        probe = None
        if self._chat_template is not None:
            try:
                probe = self._render_chat([{"role": "user", "content": "Hi"}], None, True)
            except Exception:  # a template that refuses the probe: detection says it does not open
                probe = None
        reasoning = resolve_reasoning(self.options.reasoning, self._chat_template, probe)
        if reasoning is not None:
            closing = self._tokenize(reasoning.closing_text, templated=True, add_special=False)
            reasoning = dataclasses.replace(reasoning, closing=closing)
        self.reasoning = reasoning

    # -- Tokenize / Detokenize (the Tokenizer capability) -----------------------------------------

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        """Token ids of the prompt or rendered messages, on the model's lane (see ``Tokenizer``).

        With ``add_special_tokens`` unset the ids are exactly those :meth:`prepare` feeds the model,
        so their count is Generate's ``prompt_tokens`` for the same prompt or messages.
        """
        return await self.executor.run(self._tokenize_job, request)

    def _tokenize_job(self, request: TokenizeRequest) -> TokenizeResult:
        templated = request.messages is not None
        # The same GenerationRequest fields that shape the prompt :meth:`prepare` feeds.
        text = self.prompt_text(
            GenerationRequest(
                request_id="",
                prompt=request.prompt,
                messages=request.messages,
                tools=request.tools,
                tool_choice=request.tool_choice,
                tool_choice_function=request.tool_choice_function,
                reasoning_budget=request.reasoning_budget,
                reasoning_effort=request.reasoning_effort,
            ),
            add_generation_prompt=request.add_generation_prompt,
        )
        ids = self._tokenize(text, templated=templated, add_special=request.add_special_tokens)
        return TokenizeResult(
            token_ids=ids,
            max_context_tokens=self.context_length,
            token_strings=self._token_strings(ids) if request.return_token_strings else [],
            offsets=(
                self._offsets(text, ids, templated=templated, add_special=request.add_special_tokens)
                if request.return_offsets
                else []
            ),
            rendered_prompt=text if templated else None,
        )

    async def detokenize(self, request: DetokenizeRequest) -> str:
        """The text of ``request.token_ids``, decoded on the model's lane (see ``Tokenizer``)."""
        ids = check_token_ids(
            request.token_ids,
            self.tokenizer_vocabulary_size,
            character_limit(self.context_length),
            self.spec.name,
        )
        return await self.executor.run(self._detokenize, ids, request.skip_special_tokens)

    @property
    def tokenizer_vocabulary_size(self) -> int:
        """Ids the tokenizer can decode (``0 ..`` this ``- 1``); the model's :attr:`vocab_size` by default."""
        return self.vocab_size

    def _check_characters(self, request: GenerationRequest) -> None:
        """Refuse a prompt that cannot fit the context before it is templated or tokenized.

        Tokenizing is proportional to the text (a huge prompt holds the device for seconds), so a
        prompt over :func:`~engines.batching.tokens.character_limit` of the context is refused
        on its character count alone.

        The tools count too: a chat template renders their schemas into the prompt, so tools hold
        the device as long as messages of the same size.

        Raises:
            InputTooLongError: the prompt (or the messages' content and the tools together) is over
                the limit.

        """
        if request.messages is None:
            characters = len(request.prompt or "")
        else:
            characters = sum(
                len(m.content) + len(m.reasoning_content) + sum(len(str(call)) for call in m.tool_calls)
                for m in request.messages
            )
            characters += sum(
                len(tool.name) + len(tool.description) + len(json.dumps(tool.parameters))
                for tool in request.tools
            )
        limit = character_limit(self.context_length)
        if characters > limit:
            raise InputTooLongError(
                f"prompt is {characters} characters; the context of model {self.spec.name!r} holds "
                f"{self.context_length} tokens, and prompts over {limit} characters are refused without "
                "tokenizing",
                prompt_characters=characters,
                max_characters=limit,
                context_length=self.context_length,
            )

    def prepare(self, request: GenerationRequest) -> GenerationSequence:
        """Check the parameters, tokenize, check the length and set up sampling of ``request`` (blocking).

        Raises:
            InputTooLongError: the prompt does not fit the context.
            InvalidArgumentError: a logit bias names a token outside the vocabulary (field
                ``parameters.logit_bias``), the prompt is empty once tokenized (field ``prompt``),
                or the request cannot be templated or constrained.

        """
        self._check_logit_bias(request.params)
        text = self.prompt_text(request)
        tokens = self._tokenize(text, templated=request.messages is not None)
        if not tokens:
            raise InvalidArgumentError("the prompt is empty once tokenized", field="prompt")
        sequence = GenerationSequence(request, tokens, self.max_new_tokens(request, len(tokens)), self)
        sequence.engine_state = state = self._new_state(request)
        if self.reasoning is not None:
            plan = self.reasoning.plan(request)
            phase = self.reasoning.first_phase(text, plan.off)
            sequence.reasoning = SequenceReasoning(
                self.reasoning.start, self.reasoning.end, phase, plan.budget, self.reasoning.closing
            )
            if output_constraint(request) is not None:
                # The constraint applies to the answer: the think block is sampled without it.
                state.thinking_sampler = self._thinking_sampler(request)
        return sequence

    def _thinking_sampler(self, request: GenerationRequest) -> Any:
        """A sampler of ``request`` without its output constraint (None: use the sequence's sampler)."""
        return None

    def _choose_token(self, sequence: GenerationSequence, sample: Callable[[Any], int]) -> int:
        """The sequence's next token: a closing token of a spent thinking budget, else ``sample(sampler)``.

        Inside the think block the unconstrained :attr:`SequenceState.thinking_sampler` samples
        when there is one. Runs on the lane, in the step that feeds the token next.
        """
        state: SequenceState = sequence.engine_state
        if sequence.reasoning is None:
            return sample(state.sampler)
        budget = sequence.reasoning.budget
        token = budget.forced_token()
        if token is None:
            thinking = budget.thinking and state.thinking_sampler is not None
            token = sample(state.thinking_sampler if thinking else state.sampler)
        budget.observe(self.token_bytes(token))
        return token

    def _check_logit_bias(self, params: SamplingParams) -> None:
        unknown = [t for t in params.logit_bias if not 0 <= t < self.vocab_size]
        if unknown:
            raise InvalidArgumentError(
                f"logit_bias token ids {unknown[:5]} are outside the vocabulary (0..{self.vocab_size - 1})",
                field="parameters.logit_bias",
            )

    def max_new_tokens(self, request: GenerationRequest, prompt_tokens: int) -> int:
        """Tokens the completion may have: ``max_tokens`` capped by the room left in the context.

        Raises:
            InputTooLongError: the prompt leaves no room (message states both lengths).

        """
        room = self.context_length - prompt_tokens
        if room <= 0:
            raise InputTooLongError(
                f"prompt is {prompt_tokens} tokens but the context of model {self.spec.name!r} "
                f"holds {self.context_length} tokens",
                prompt_tokens=prompt_tokens,
                context_length=self.context_length,
            )
        return min(room, request.params.max_tokens or room)

    @abc.abstractmethod
    def _render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list | None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        """Render OpenAI-style ``messages`` with the chat template.

        The text ends with the assistant turn's opening when ``add_generation_prompt``;
        ``template_kwargs`` are further template variables (``enable_thinking``). Called only
        when the model has a chat template; any exception is reported to the client as
        CHAT_TEMPLATE_ERROR.
        """

    @abc.abstractmethod
    def _tokenize(self, text: str, *, templated: bool, add_special: bool | None = None) -> list[int]:
        """Token ids of ``text``; ``templated`` text carries its own special tokens (BOS included).

        ``add_special`` overrides whether the tokenizer adds its special tokens (None: by ``templated``).
        """

    @abc.abstractmethod
    def _token_strings(self, ids: list[int]) -> list[str]:
        """The vocabulary string of each id (blocking)."""

    @abc.abstractmethod
    def _offsets(self, text: str, ids: list[int], *, templated: bool, add_special: bool | None) -> Offsets:
        """Character span in ``text`` of each of ``ids`` (blocking).

        ``ids`` are what :meth:`_tokenize` gave for the same arguments.

        Raises:
            FailedPreconditionError: the tokenizer cannot give them (OFFSETS_NOT_SUPPORTED).

        """

    @abc.abstractmethod
    def _detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        """The text of ``ids``, all in the vocabulary (blocking)."""

    @abc.abstractmethod
    def _new_state(self, request: GenerationRequest) -> SequenceState:
        """Sampling state of a new sequence (after the shared checks passed).

        Raises:
            InvalidArgumentError: the output constraint (JSON schema) cannot be built.

        """

    # -- batching -------------------------------------------------------------------------------

    def step(self, running: list[GenerationSequence], released: list[GenerationSequence]) -> list[StepResult]:
        """Free ``released``, then advance every sequence of ``running`` by one forward pass (blocking).

        Returns:
            ``(sequence, token id, logprobs or None)`` for each sequence of ``running`` that
            sampled a token this step (one still prefilling its prompt samples none).

        """
        # Freed first, so that sequences joining in this step can take the cells and slots.
        self.release(released)
        # A sequence may have finished or been cancelled after this step was queued (the
        # scheduler queues a step ahead): skip it rather than compute a token nobody reads.
        return self._forward([s for s in running if s.finish_reason is None])

    def release(self, sequences: list[GenerationSequence]) -> None:
        """Free the KV cells and sampling state of ``sequences`` (blocking; idempotent)."""
        leaving: list[GenerationSequence] = []
        for sequence in sequences:
            state: SequenceState | None = sequence.engine_state
            if state is None or state.released:
                continue
            state.released = True
            leaving.append(sequence)
        if leaving:
            self._free(leaving)

    @abc.abstractmethod
    def _forward(self, running: list[GenerationSequence]) -> list[StepResult]:
        """One forward pass over ``running``: next tokens of decoding sequences, prompt chunks of new ones."""

    @abc.abstractmethod
    def _free(self, sequences: list[GenerationSequence]) -> None:
        """Free the KV cells and sampler of ``sequences``, each released for the first time."""

    # -- scheduling -----------------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait for the scheduler to release every sequence (cancelled ones included) and stop."""
        await self.scheduler.drained()

    def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        """Yield deltas for ``request``; the last has ``finish_reason`` and ``usage`` set.

        Use with ``contextlib.aclosing`` so that a consumer that stops early frees its slot.

        Raises:
            ResourceExhaustedError: the wait queue is full (reason OVERLOADED).
            InputTooLongError, InvalidArgumentError: the request was refused by :meth:`prepare`.
            Exception: a forward pass failed (every sequence of that step gets the error).

        """
        return self.scheduler.stream(request, output_postprocessor(request))
