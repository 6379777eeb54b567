"""Base class of generation engines: prepare, step and release, driven by the scheduler.

:class:`GenerationEngine` does what every backend does the same way (request checks, chat
templating and its errors, length limits, releasing before a step) and leaves the model-specific
parts to a few blocking hooks: :meth:`~GenerationEngine._render_chat`,
:meth:`~GenerationEngine._tokenize`, :meth:`~GenerationEngine._new_state`,
:meth:`~GenerationEngine._forward` and :meth:`~GenerationEngine._free`.
"""

from __future__ import annotations

import abc
import logging
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from engines.base import Engine
from engines.batching.tokens import character_limit
from engines.errors import InputTooLongError, InvalidArgumentError
from engines.generation.options import GenerationOptions
from engines.generation.scheduler import ContinuousBatchScheduler, StepModel, StepResult
from engines.generation.sequence import GenerationSequence
from engines.generation.structured import message_dict, messages_with_tools, output_postprocessor
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

    """

    sampler: Any
    logprobs: bool
    top_logprobs: int
    n_past: int = 0
    next_input: int | None = None
    released: bool = False


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

    Attributes:
        context_length: tokens one sequence can hold (prompt plus completion).
        vocab_size: token ids the model scores; valid ids are ``0 .. vocab_size - 1``.
        scheduler: the continuous-batching scheduler that drives this engine.

    """

    tasks = frozenset({Task.GENERATE})
    options_model = GenerationOptions
    context_length: int
    vocab_size: int

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

    def stats(self) -> EngineStats:
        """The scheduler's sequences running and waiting, and the KV cells (:meth:`kv_cells`)."""
        cells = self.kv_cells()
        return EngineStats(
            generation=GenerationStats(
                running=self.scheduler.active_count,
                waiting=self.scheduler.waiting_count,
                kv_cache=KvCacheStats(*cells) if cells is not None else None,
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

        Raises:
            InputTooLongError, InvalidArgumentError: as :meth:`tokenize_prompt`.

        """
        self._check_characters(request)
        if request.messages is None:
            return request.prompt or ""
        if self._chat_template is None:
            raise no_chat_template(self.spec.name)
        messages, tools = messages_with_tools(request, self._template_has_tools, self._template_has_developer)
        try:
            return self._render_chat([message_dict(m) for m in messages], tools, add_generation_prompt)
        except Exception as exc:  # template errors (raise_exception in the template) are client errors
            raise InvalidArgumentError(
                f"the chat template of model {self.spec.name!r} rejected the messages: {exc}",
                reason="CHAT_TEMPLATE_ERROR",
            ) from None

    # -- Tokenize / Detokenize (the Tokenizer capability) -----------------------------------------

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        """Token ids of the prompt or rendered messages, on the model's lane (see ``Tokenizer``).

        With ``add_special_tokens`` unset the ids are exactly those :meth:`prepare` feeds the model,
        so their count is Generate's ``prompt_tokens`` for the same prompt or messages.
        """
        return await self.executor.run(self._tokenize_job, request)

    def _tokenize_job(self, request: TokenizeRequest) -> TokenizeResult:
        templated = request.messages is not None
        text = self.prompt_text(
            GenerationRequest(request_id="", prompt=request.prompt, messages=request.messages),
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

        Tokenizing is proportional to the text (a 50 MB prompt held the device for 20 s), so a
        prompt over :func:`~engines.batching.tokens.character_limit` of the context is refused
        on its character count alone.

        Raises:
            InputTooLongError: the prompt (or the messages' content together) is over the limit.

        """
        if request.messages is None:
            characters = len(request.prompt or "")
        else:
            characters = sum(
                len(m.content) + sum(len(str(call)) for call in m.tool_calls) for m in request.messages
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
        tokens = self.tokenize_prompt(request)
        if not tokens:
            raise InvalidArgumentError("the prompt is empty once tokenized", field="prompt")
        sequence = GenerationSequence(request, tokens, self.max_new_tokens(request, len(tokens)), self)
        sequence.engine_state = self._new_state(request)
        return sequence

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
        self, messages: list[dict[str, Any]], tools: list | None, add_generation_prompt: bool = True
    ) -> str:
        """Render OpenAI-style ``messages`` with the chat template.

        The text ends with the assistant turn's opening when ``add_generation_prompt``. Called only
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
