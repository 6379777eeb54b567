"""The conversation a created response stored: its turns, in the server's own terms.

A response the server created (``CreateResponse``) keeps the conversation it continued so that the
next one can continue it with one read and no knowledge of the Responses API's JSON: each turn is
one response's own input messages (as chat messages), its answer, and the gateway's JSON of its
input items (opaque here, listed by ``GET .../input_items``). Continuing a response prepends its
turns' messages and answers (:func:`chain_messages`); the new response stores them plus its own
turn.

``turns_json`` (:func:`encode_turns`) is a JSON array, oldest turn first::

    [{"id": "resp_…", "input_items": [...],
      "messages": [{"role", "content", "name", "tool_call_id", "tool_calls", "reasoning_content"}],
      "answer": {"completion_id", "model", "text", "reasoning_content",
                 "tool_calls": [{"id", "name", "arguments_json"}], "finish_reason",
                 "usage": {"prompt_tokens", "completion_tokens", "cached_prompt_tokens",
                           "reasoning_tokens"}}}]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engines.errors import RuntimeServiceError
from engines.types import ChatMessage, FinishReason, GenerationUsage, ToolCall


@dataclass(slots=True)
class Answer:
    """What the model answered in one turn (its first choice: the Responses API has no ``n``).

    Attributes:
        completion_id: the generation's id (``gen-…``).
        model: the model that answered.
        text: the answer's text.
        reasoning_content: its thinking.
        tool_calls: the calls it made (each with an id).
        finish_reason: why it ended (``None``: not finished).
        usage: its token counts.

    """

    completion_id: str = ""
    model: str = ""
    text: str = ""
    reasoning_content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    usage: GenerationUsage = field(default_factory=GenerationUsage)

    def message(self) -> ChatMessage:
        """The answer as the assistant turn a continuation sends the model."""
        return ChatMessage(
            role="assistant",
            content=self.text,
            tool_calls=[
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
                for c in self.tool_calls
            ],
            reasoning_content=self.reasoning_content,
        )


@dataclass(slots=True)
class Turn:
    """One response of a conversation.

    Attributes:
        id: the response's id.
        input_items: the gateway's JSON of its own input items (a list, opaque here).
        messages: its own input as chat messages (without ``instructions``, which do not carry over).
        answer: what the model answered.

    """

    id: str
    input_items: list[Any]
    messages: list[ChatMessage]
    answer: Answer


def chain_messages(turns: Sequence[Turn]) -> list[ChatMessage]:
    """The messages a response continuing ``turns`` starts from: each turn's input, then its answer."""
    messages: list[ChatMessage] = []
    for turn in turns:
        messages += turn.messages
        messages.append(turn.answer.message())
    return messages


def _message_json(message: ChatMessage) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name:
        data["name"] = message.name
    if message.tool_call_id:
        data["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        data["tool_calls"] = message.tool_calls
    if message.reasoning_content:
        data["reasoning_content"] = message.reasoning_content
    return data


def _answer_json(answer: Answer) -> dict[str, Any]:
    usage = answer.usage
    return {
        "completion_id": answer.completion_id,
        "model": answer.model,
        "text": answer.text,
        "reasoning_content": answer.reasoning_content,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments_json": c.arguments_json} for c in answer.tool_calls
        ],
        "finish_reason": answer.finish_reason.value if answer.finish_reason is not None else None,
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cached_prompt_tokens": usage.cached_prompt_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
        },
    }


def encode_turns(turns: Sequence[Turn]) -> bytes:
    """``turns`` as compact UTF-8 JSON (the record's ``turns_json``)."""
    data = [
        {
            "id": turn.id,
            "input_items": turn.input_items,
            "messages": [_message_json(m) for m in turn.messages],
            "answer": _answer_json(turn.answer),
        }
        for turn in turns
    ]
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def _message(data: dict[str, Any]) -> ChatMessage:
    return ChatMessage(
        role=str(data["role"]),
        content=str(data["content"]),
        name=data.get("name"),
        tool_call_id=data.get("tool_call_id"),
        tool_calls=list(data.get("tool_calls", ())),
        reasoning_content=str(data.get("reasoning_content", "")),
    )


def _answer(data: dict[str, Any]) -> Answer:
    usage = data["usage"]
    reason = data["finish_reason"]
    return Answer(
        completion_id=str(data["completion_id"]),
        model=str(data["model"]),
        text=str(data["text"]),
        reasoning_content=str(data["reasoning_content"]),
        tool_calls=[
            ToolCall(str(c["id"]), str(c["name"]), str(c["arguments_json"])) for c in data["tool_calls"]
        ],
        finish_reason=None if reason is None else FinishReason(reason),
        usage=GenerationUsage(
            prompt_tokens=int(usage["prompt_tokens"]),
            completion_tokens=int(usage["completion_tokens"]),
            cached_prompt_tokens=int(usage["cached_prompt_tokens"]),
            reasoning_tokens=int(usage["reasoning_tokens"]),
        ),
    )


def decode_turns(data: bytes, response_id: str) -> list[Turn]:
    """The turns of a record's ``turns_json`` (``[]`` for ``b""``: a record stored whole).

    Raises:
        RuntimeServiceError: INTERNAL, the bytes are not :func:`encode_turns`' (a corrupt record).

    """
    if not data:
        return []
    try:
        return [
            Turn(
                id=str(turn["id"]),
                input_items=list(turn["input_items"]),
                messages=[_message(m) for m in turn["messages"]],
                answer=_answer(turn["answer"]),
            )
            for turn in json.loads(data)
        ]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise RuntimeServiceError(f"the stored response {response_id!r} is unreadable") from exc
