"""Creating a Responses API response in one server operation: continue, generate, store.

The workflow of ``CreateResponse`` / ``CreateResponseStream``, for one owner (the caller's API key's
name, ``""`` without keys):

1. read the conversation of ``previous_response_id`` (the owner's own: another key's id is
   NOT_FOUND, as an unknown one), and put it between ``instructions`` and the new turn's messages;
   a tool message of the new turn without a name gets the name of the call it answers;
2. with ``store``, check before any generation that the new response could be stored (its ids,
   its JSON and its size with the whole conversation: RESPONSE_TOO_LARGE otherwise);
3. generate through :class:`~service.tasks.generation.GenerationTask`, as Generate and
   GenerateStream do (one choice);
4. with ``store``, keep the new response (the conversation plus its own turn and answer), and
   only then answer: a stream yields its :class:`ResponseStored` after the last chunk, so the
   response is readable before the client hears that it is complete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from engines.errors import InvalidArgumentError
from engines.reasons import Reason
from engines.types import ChatMessage, GenerationRequest, ToolCall
from service.responses import Answer, PutResult, StoredResponse, Turn, validate_response_id
from service.responses.records import load_json
from service.responses.turns import chain_messages, encode_turns
from service.tasks.generation import ChoiceDelta, Completion, GenerationTask
from service.tasks.response_store import ResponseStoreTask


@dataclass(frozen=True, slots=True)
class ResponseJob:
    """A response to create.

    Attributes:
        model: catalog name of a model serving ``generate``.
        keep_alive: optional keep-alive override.
        request: the new turn, validated: its ``messages`` are the request's own (no
            instructions, no earlier conversation).
        id: the new response's id (checked only with ``store``).
        created_at: Unix seconds; 0 means now.
        previous_response_id: the response to continue, or ``""``.
        store: keep the new response.
        instructions: a system message put first, or ``""``; never stored.
        header_json: opaque JSON object kept as the stored response's ``response_json``.
        input_items_json: opaque JSON array kept as the new turn's input items.

    """

    model: str
    keep_alive: str | None
    request: GenerationRequest
    id: str
    created_at: int
    previous_response_id: str
    store: bool
    instructions: str
    header_json: bytes
    input_items_json: bytes


@dataclass(frozen=True, slots=True)
class CreatedResponse:
    """A unary create's outcome: the generation's result, and the stored response with ``store``."""

    completion: Completion
    stored: PutResult | None


@dataclass(frozen=True, slots=True)
class ResponseStored:
    """The last event of a streamed create with ``store``: the response is stored."""

    result: PutResult


@dataclass(slots=True)
class _Prepared:
    """A job made ready: the full generation request and what its record needs."""

    request: GenerationRequest
    earlier: list[Turn]
    own: list[ChatMessage]
    items: list | None  # the new turn's input items, parsed once (None without store)


def _name_tool_results(earlier: Sequence[ChatMessage], own: list[ChatMessage]) -> None:
    """Give each tool message of ``own`` without a name the name of the call it answers.

    Raises:
        InvalidArgumentError: a tool message answers no call before it (TOOL_CALL_NOT_FOUND,
            metadata ``field`` ``messages[i].tool_call_id`` and ``tool_call_id``).

    """
    names = {call["id"]: call["function"]["name"] for m in earlier for call in m.tool_calls}
    for index, message in enumerate(own):
        names.update((call["id"], call["function"]["name"]) for call in message.tool_calls)
        if message.role != "tool" or message.name or not message.tool_call_id:
            continue
        name = names.get(message.tool_call_id)
        if name is None:
            raise InvalidArgumentError(
                f"messages[{index}].tool_call_id: {message.tool_call_id!r} answers no tool call of "
                "the conversation",
                reason=Reason.TOOL_CALL_NOT_FOUND,
                field=f"messages[{index}].tool_call_id",
                tool_call_id=message.tool_call_id,
            )
        message.name = name


class _AnswerBuilder:
    """Gathers the first choice of a generation's events into an :class:`Answer`."""

    def __init__(self, model: str) -> None:
        self.answer = Answer(model=model)
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: dict[int, ToolCall] = {}

    def add(self, event: ChoiceDelta) -> None:
        """Take one event (other choices' are ignored); a call's first piece gets an id if it has none."""
        self.answer.completion_id = event.completion_id
        if event.usage is not None:
            self.answer.usage = event.usage
        if event.index != 0:
            return
        delta = event.delta
        self._text.append(delta.text)
        self._thinking.append(delta.reasoning)
        for piece in delta.tool_calls:
            call = self._calls.get(piece.index)
            if call is None:
                # The id is what a later tool message names: every call needs one, streamed too.
                piece.id = piece.id or f"call_{uuid.uuid4().hex[:24]}"
                call = self._calls[piece.index] = ToolCall(id=piece.id, name="", arguments_json="")
                self.answer.tool_calls.append(call)
            call.name = call.name or piece.name
            call.arguments_json += piece.arguments_delta
        if delta.finish_reason is not None:
            self.answer.finish_reason = delta.finish_reason

    def done(self) -> Answer:
        """The answer gathered."""
        self.answer.text = "".join(self._text)
        self.answer.reasoning_content = "".join(self._thinking)
        return self.answer


def _answer_of(completion: Completion, model: str) -> Answer:
    """The first choice of a unary generation as an :class:`Answer` (every call with an id)."""
    if not completion.choices:
        return Answer(completion_id=completion.completion_id, model=model, usage=completion.usage)
    choice = completion.choices[0]
    for call in choice.tool_calls:
        call.id = call.id or f"call_{uuid.uuid4().hex[:24]}"
    return Answer(
        completion_id=completion.completion_id,
        model=model,
        text=choice.text,
        reasoning_content=choice.reasoning_content,
        tool_calls=list(choice.tool_calls),
        finish_reason=choice.finish_reason,
        usage=completion.usage,
    )


@dataclass(frozen=True, slots=True)
class ResponseCreateTask:
    """Creates responses: the chain read, the generation and the store, as one operation.

    Attributes:
        responses: the stored responses.
        generation: the generation Generate and GenerateStream use.

    """

    responses: ResponseStoreTask
    generation: GenerationTask

    def _record(self, job: ResponseJob, prepared: _Prepared, answer: Answer) -> StoredResponse:
        """The stored form of the new response (blocking: encodes the whole conversation)."""
        assert prepared.items is not None
        turn = Turn(id=job.id, input_items=prepared.items, messages=prepared.own, answer=answer)
        return StoredResponse(
            id=job.id,
            created_at=job.created_at,
            previous_response_id=job.previous_response_id,
            response_json=job.header_json,
            input_items_json=b"[]",
            turns_json=encode_turns([*prepared.earlier, turn]),
        )

    async def _prepare(self, owner: str, job: ResponseJob) -> _Prepared:
        """Read the chain, build the full request and, with ``store``, check the record before generation.

        Raises:
            InvalidArgumentError: a malformed id (INVALID_RESPONSE_ID), JSON of the wrong kind
                (INVALID_RESPONSE_JSON), a record over ``max_bytes`` (RESPONSE_TOO_LARGE), a tool
                message answering no call (TOOL_CALL_NOT_FOUND).
            ResponseNotFoundError: ``previous_response_id`` is not the owner's (NOT_FOUND).
            FailedPreconditionError: the previous response was stored whole (RESPONSE_NOT_CONTINUABLE).

        """
        if job.store:
            validate_response_id(job.id, "id")
        earlier: list[Turn] = []
        if job.previous_response_id:
            validate_response_id(job.previous_response_id, "previous_response_id")
            earlier = await self.responses.conversation(owner, job.previous_response_id)
        chain = chain_messages(earlier)
        own = list(job.request.messages or ())
        _name_tool_results(chain, own)
        system = [ChatMessage(role="system", content=job.instructions)] if job.instructions else []
        request = dataclasses.replace(job.request, messages=[*system, *chain, *own])
        prepared = _Prepared(request, earlier, own, None)
        if job.store:
            prepared.items = await self.responses.reads.run(
                load_json, job.input_items_json, list, "input_items_json"
            )
            await self.responses.check_built(lambda: self._record(job, prepared, Answer(model=job.model)))
        return prepared

    async def create(self, owner: str, job: ResponseJob) -> CreatedResponse:
        """Create a response whole: continue, generate, and store with ``job.store``.

        Raises:
            The errors of :meth:`_prepare`, of :meth:`GenerationTask.stream` (model, parameters,
            context length, overload ...) and of :meth:`ResponseStoreTask.put` (the answer took
            the response over ``max_bytes``; an id taken; the store down or full).

        """
        prepared = await self._prepare(owner, job)
        completion = await self.generation.complete(job.model, job.keep_alive, prepared.request, 1)
        stored = None
        if job.store:
            answer = _answer_of(completion, job.model)
            stored = await self.responses.put_built(owner, lambda: self._record(job, prepared, answer))
        return CreatedResponse(completion, stored)

    async def stream(self, owner: str, job: ResponseJob) -> AsyncIterator[ChoiceDelta | ResponseStored]:
        """Create a response, streamed: the generation's events, then with ``store`` :class:`ResponseStored`.

        Nothing is yielded before the chain is read and the record checked, so those errors come
        before the first event. The response is stored after the last event of the generation
        and before :class:`ResponseStored`; a stream that fails or is cancelled stores nothing.

        Raises:
            The errors of :meth:`create`.

        """
        prepared = await self._prepare(owner, job)
        builder = _AnswerBuilder(job.model)
        events = self.generation.stream(job.model, job.keep_alive, prepared.request, 1)
        async with contextlib.aclosing(events) as generated:
            async for event in generated:
                builder.add(event)
                yield event
        if job.store:
            answer = builder.done()
            yield ResponseStored(
                await self.responses.put_built(owner, lambda: self._record(job, prepared, answer))
            )
