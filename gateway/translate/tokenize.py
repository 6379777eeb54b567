"""Tokenize/detokenize: vLLM-shaped JSON to ``TokenizeRequest``/``DetokenizeRequest`` and back."""

from __future__ import annotations

from typing import Any

from universal_runtime.v1 import tokenization_pb2

from gateway.schemas.tokenize import DetokenizeRequest, TokenizeRequest
from gateway.translate.chat import chat_message_to_proto


def to_tokenize_request(body: TokenizeRequest) -> tokenization_pb2.TokenizeRequest:
    """Convert a ``/tokenize`` body; unset optional flags stay unset (the server's defaults)."""
    request = tokenization_pb2.TokenizeRequest(
        model=body.model,
        prompt=body.prompt or "",
        messages=[chat_message_to_proto(m) for m in body.messages or ()],
        return_token_strings=body.return_token_strs,
        return_offsets=body.return_offsets,
        keep_alive=body.keep_alive_value,
    )
    if body.add_special_tokens is not None:
        request.add_special_tokens = body.add_special_tokens
    if body.add_generation_prompt is not None:
        request.add_generation_prompt = body.add_generation_prompt
    return request


def tokenize_from_proto(response: tokenization_pb2.TokenizeResponse, body: TokenizeRequest) -> dict[str, Any]:
    """VLLM's tokenize answer: ``count``, ``max_model_len``, ``tokens``, and ``token_strs`` when asked.

    Extensions: ``offsets`` (``[[start, end], ...]``) when asked, and ``prompt`` (the rendered chat
    prompt) for messages with offsets, since the offsets index into it.
    """
    answer: dict[str, Any] = {
        "count": response.count,
        "max_model_len": response.max_context_tokens,
        "tokens": list(response.token_ids),
        "token_strs": list(response.token_strings) if body.return_token_strs else None,
    }
    if body.return_offsets:
        answer["offsets"] = [[o.start, o.end] for o in response.offsets]
        if body.messages is not None:
            answer["prompt"] = response.rendered_prompt
    return answer


def to_detokenize_request(body: DetokenizeRequest) -> tokenization_pb2.DetokenizeRequest:
    """Convert a ``/detokenize`` body."""
    return tokenization_pb2.DetokenizeRequest(
        model=body.model,
        token_ids=body.tokens,
        skip_special_tokens=body.skip_special_tokens,
        keep_alive=body.keep_alive_value,
    )
