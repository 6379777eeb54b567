"""ResponseStoreService protos ↔ :mod:`service.responses` dataclasses and the create task's jobs."""

from __future__ import annotations

import json

from universal_runtime.v1 import generation_pb2
from universal_runtime.v1 import response_store_pb2 as pb

from service.convert.generation import choice_count, generate_response, generation_request, stream_response
from service.convert.validation import require
from service.responses import Answer, PutResult, StoredResponse, Turn
from service.tasks.generation import Choice, ChoiceDelta, Completion, Timings
from service.tasks.response_create import CreatedResponse, ResponseJob, ResponseStored


def stored_response_from_pb(request: pb.PutStoredResponseRequest) -> StoredResponse:
    """The response a put asks to store (``expires_at`` and ``turns`` are the server's: ignored).

    Raises:
        InvalidArgumentError: ``response`` is unset, or ``created_at`` is negative.

    """
    require(request.HasField("response"), "response", "must be set")
    message = request.response
    require(message.created_at >= 0, "response.created_at", "must be Unix seconds, 0 or more")
    return StoredResponse(
        id=message.id,
        created_at=message.created_at,
        previous_response_id=message.previous_response_id,
        response_json=message.response_json,
        input_items_json=message.input_items_json,
    )


def answer_pb(answer: Answer) -> generation_pb2.GenerateResponse:
    """A turn's answer as Generate answers it: one choice, its model and usage (no timings)."""
    choice = Choice(
        index=0,
        text=answer.text,
        reasoning_content=answer.reasoning_content,
        tool_calls=answer.tool_calls,
        finish_reason=answer.finish_reason,
    )
    completion = Completion(answer.completion_id, [choice], answer.usage, Timings())
    response = generate_response(answer.model, completion)
    response.ClearField("timings")
    return response


def turn_pb(turn: Turn) -> pb.ResponseTurn:
    """The wire form of one turn of a created response's conversation."""
    return pb.ResponseTurn(
        response_id=turn.id,
        input_items_json=_json_bytes(turn.input_items),
        answer=answer_pb(turn.answer),
    )


def _json_bytes(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def stored_response_pb(response: StoredResponse, turns: list[Turn] | None = None) -> pb.StoredResponse:
    """The wire form of a stored response, with the turns of a created one (work in its size)."""
    return pb.StoredResponse(
        id=response.id,
        created_at=response.created_at,
        previous_response_id=response.previous_response_id,
        response_json=response.response_json,
        input_items_json=response.input_items_json,
        expires_at=response.expires_at,
        turns=[turn_pb(turn) for turn in turns or ()],
    )


def put_response(result: PutResult) -> pb.PutStoredResponseResponse:
    """The answer to a put: the id, its times, and how many responses were evicted for it."""
    return pb.PutStoredResponseResponse(
        id=result.response.id,
        created_at=result.response.created_at,
        expires_at=result.response.expires_at,
        evicted_count=result.evicted,
    )


def response_stored_pb(result: PutResult) -> pb.ResponseStored:
    """The identity and lifetime of a created response that was stored."""
    return pb.ResponseStored(
        id=result.response.id,
        created_at=result.response.created_at,
        expires_at=result.response.expires_at,
        evicted_count=result.evicted,
    )


def response_job(
    request: pb.CreateResponseRequest | pb.CreateResponseStreamRequest,
    request_id: str,
    *,
    max_tokens_limit: int,
    max_choices: int,
) -> ResponseJob:
    """Validate and convert a create request (unary or streamed: they share field names).

    ``generate`` is checked as Generate checks its request, and its errors name its fields as
    Generate's do (``messages[0].content``, no ``generate.`` prefix).

    Raises:
        InvalidArgumentError: ``generate`` is refused by Generate's rules, has a ``prompt`` or more
            than one choice; ``response.created_at`` is negative.

    """
    generate = request.generate
    require(not generate.prompt, "prompt", "is not taken by CreateResponse: send messages")
    require(choice_count(generate) == 1, "parameters.n", "must be 1: a response has one answer")
    job = generation_request(generate, request_id, max_tokens_limit=max_tokens_limit, max_choices=max_choices)
    new = request.response
    require(new.created_at >= 0, "response.created_at", "must be Unix seconds, 0 or more")
    return ResponseJob(
        model=generate.model,
        keep_alive=generate.keep_alive or None,
        request=job,
        id=new.id,
        created_at=new.created_at,
        previous_response_id=new.previous_response_id,
        store=new.store,
        instructions=new.instructions,
        header_json=new.header_json,
        input_items_json=new.input_items_json,
    )


def create_response(model: str, created: CreatedResponse) -> pb.CreateResponseResponse:
    """The unary answer: Generate's answer, and the stored response's identity when stored."""
    answer = pb.CreateResponseResponse(answer=generate_response(model, created.completion))
    if created.stored is not None:
        answer.stored.CopyFrom(response_stored_pb(created.stored))
    return answer


def stream_event(model: str, event: ChoiceDelta | ResponseStored) -> pb.CreateResponseStreamResponse:
    """One stream message: a chunk as GenerateStream streams it, or the end of a stored response."""
    if isinstance(event, ResponseStored):
        return pb.CreateResponseStreamResponse(stored=response_stored_pb(event.result))
    return pb.CreateResponseStreamResponse(chunk=stream_response(model, event))
