"""TokenizeRequest / DetokenizeRequest → engine dataclasses, and their results → responses."""

from __future__ import annotations

from universal_runtime.v1 import tokenization_pb2

from engines.types import DetokenizeRequest, TokenizeRequest, TokenizeResult
from service.convert.generation import chat_messages, prompt_settings
from service.convert.validation import require


def tokenize_request(request: tokenization_pb2.TokenizeRequest, *, max_tokens_limit: int) -> TokenizeRequest:
    """Validate and convert a TokenizeRequest.

    Tools, tool choice and reasoning settings are converted by Generate's own conversion
    (:func:`~service.convert.generation.prompt_settings`), so they render the same prompt and are
    refused with the same errors (field names without ``parameters.``); a reasoning budget is
    bounded by ``max_tokens_limit``, as a Generate without ``max_tokens`` bounds it.

    Raises:
        InvalidArgumentError: no model; neither or both of prompt and messages; a message with
            no role or no content; a bad tool, tool choice, reasoning budget or effort, or tools
            with a raw prompt.

    """
    require(bool(request.model), "model", "must be set")
    prompt = request.prompt  # read once: each read decodes the string anew
    has_messages = len(request.messages) > 0
    require(bool(prompt) != has_messages, "messages", "exactly one of prompt and messages must be set")
    return TokenizeRequest(
        prompt=None if has_messages else prompt,
        messages=chat_messages(request) if has_messages else None,
        add_special_tokens=request.add_special_tokens if request.HasField("add_special_tokens") else None,
        add_generation_prompt=(
            request.add_generation_prompt if request.HasField("add_generation_prompt") else True
        ),
        return_token_strings=request.return_token_strings,
        return_offsets=request.return_offsets,
        **prompt_settings(
            request,
            has_messages=has_messages,
            prefix="",
            budget_cap=max_tokens_limit,
            cap_name="the server's max_tokens limit",
        ),
    )


def tokenize_response(model: str, result: TokenizeResult) -> tokenization_pb2.TokenizeResponse:
    """Build the TokenizeResponse (count is the number of ids)."""
    return tokenization_pb2.TokenizeResponse(
        model=model,
        token_ids=result.token_ids,
        count=len(result.token_ids),
        max_context_tokens=result.max_context_tokens,
        token_strings=result.token_strings,
        offsets=[tokenization_pb2.TokenOffset(start=a, end=b) for a, b in result.offsets],
        rendered_prompt=result.rendered_prompt or "",
    )


def detokenize_request(request: tokenization_pb2.DetokenizeRequest) -> DetokenizeRequest:
    """Validate and convert a DetokenizeRequest (ids are checked by the model, which knows its vocabulary).

    Raises:
        InvalidArgumentError: no model.

    """
    require(bool(request.model), "model", "must be set")
    return DetokenizeRequest(
        token_ids=list(request.token_ids), skip_special_tokens=request.skip_special_tokens
    )


def detokenize_response(model: str, text: str) -> tokenization_pb2.DetokenizeResponse:
    """Build the DetokenizeResponse."""
    return tokenization_pb2.DetokenizeResponse(model=model, text=text)
