"""Legacy completions: OpenAI completion request to ``Generate*Request``, answers to ``text_completion``.

Response shapes follow https://platform.openai.com/docs/api-reference/completions/object; streamed
chunks are ``text_completion`` objects too, as OpenAI sends them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from universal_runtime.v1 import generation_pb2

from gateway.schemas.completions import CompletionRequest
from gateway.translate.generation import (
    GenerationApi,
    StreamTranslator,
    finish_reason_label,
    generation_parameters,
    response_envelope,
)

OBJECT_COMPLETION = "text_completion"
ID_PREFIX = "cmpl"


def completion_parameters(request: CompletionRequest) -> generation_pb2.GenerationParameters:
    """Build ``GenerationParameters`` for a legacy completion request."""
    # Legacy ``logprobs`` is a count: N alternatives per token (0 = only the sampled token).
    return generation_parameters(
        request,
        max_tokens=request.max_tokens,
        logprobs=request.logprobs is not None,
        top_logprobs=request.logprobs or 0,
    )


def _prompt(request: CompletionRequest) -> dict[str, Any]:
    return {"prompt": request.prompt_text}


def completion_logprobs(
    items: Iterable[generation_pb2.TokenLogprobs], *, text_offset: int = 0
) -> dict[str, Any] | None:
    """Return the legacy ``logprobs`` object, or ``None`` when there are no entries.

    Shape: ``{"tokens": [str], "token_logprobs": [float], "top_logprobs": [{token: logprob}],
    "text_offset": [int]}``; offsets count characters of the generated text from ``text_offset``.
    """
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    offsets: list[int] = []
    offset = text_offset
    for item in items:
        tokens.append(item.sampled.token)
        token_logprobs.append(item.sampled.logprob)
        top_logprobs.append({top.token: top.logprob for top in item.top_logprobs})
        offsets.append(offset)
        offset += len(item.sampled.token)
    if not tokens:
        return None
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }


def completion_from_proto(
    response: generation_pb2.GenerateResponse, *, requested_model: str
) -> dict[str, Any]:
    """Convert a ``GenerateResponse`` to an OpenAI ``text_completion`` object.

    Shape: ``{"id", "object": "text_completion", "created", "model", "choices": [{"index", "text",
    "finish_reason", "logprobs"}], "usage", "timings"}`` (``timings`` is an extension).
    """
    choices = [
        {
            "index": choice.index,
            "text": choice.text,
            "finish_reason": finish_reason_label(choice.finish_reason),
            "logprobs": completion_logprobs(choice.logprobs),
        }
        for choice in response.choices
    ]
    return response_envelope(
        response, requested_model, choices, object_name=OBJECT_COMPLETION, id_prefix=ID_PREFIX
    )


class CompletionStreamTranslator(StreamTranslator):
    """Turns ``GenerateStreamResponse`` messages into streamed ``text_completion`` chunks.

    One chunk per message with text or log probabilities, then one with empty text and the
    ``finish_reason``; with ``include_usage`` a last chunk with empty ``choices`` and the usage.
    Arguments as for :class:`StreamTranslator`.
    """

    object_name = OBJECT_COMPLETION
    id_prefix = ID_PREFIX

    def __init__(self, *, requested_model: str, include_usage: bool) -> None:
        super().__init__(requested_model=requested_model, include_usage=include_usage)
        self._offsets: dict[int, int] = {}

    def message_chunks(self, message: generation_pb2.GenerateStreamResponse) -> list[dict[str, Any]]:
        """The chunks of one message."""
        chunks = []
        index = message.index
        offset = self._offsets.get(index, 0)
        logprobs = completion_logprobs(message.logprobs, text_offset=offset)
        self._offsets[index] = offset + len(message.text)
        if message.text or logprobs is not None:
            choice = {"index": index, "text": message.text, "finish_reason": None, "logprobs": logprobs}
            chunks.append(self._chunk([choice]))
        finish_reason = finish_reason_label(message.finish_reason)
        if finish_reason is not None:
            choice = {"index": index, "text": "", "finish_reason": finish_reason, "logprobs": None}
            chunks.append(self._chunk([choice]))
        return chunks


API = GenerationApi(
    prompt_fields=_prompt,
    parameters=completion_parameters,
    response_json=completion_from_proto,
    stream_translator=CompletionStreamTranslator,
)
"""How ``/v1/completions`` translates (see :func:`gateway.calls.generate`)."""
