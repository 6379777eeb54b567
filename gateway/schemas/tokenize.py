"""Request bodies of ``POST /tokenize`` and ``POST /detokenize`` (vLLM's shapes plus runtime extensions).

Source of the shapes: vLLM's OpenAI-compatible server (``vllm/entrypoints/openai`` serving_tokenization
and protocol): a completion request (``prompt``) or a chat request (``messages``) for ``/tokenize``,
answered with ``count``, ``max_model_len``, ``tokens`` and ``token_strs``; ``tokens`` for
``/detokenize``, answered with ``prompt``.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from gateway.schemas.base import Int32
from gateway.schemas.chat import ChatMessageParam
from gateway.schemas.encoder_base import EncoderRequestModel


class TokenizeRequest(EncoderRequestModel):
    """Body of ``POST /tokenize``: exactly one of ``prompt`` and ``messages``.

    Attributes:
        model: Catalog name of any generation or encoder model.
        prompt: Text to tokenize as it is.
        messages: A chat conversation, rendered with the model's chat template first.
        add_special_tokens: Add the tokenizer's special tokens (BOS, [CLS]...). Unset: as the model's
            own calls do, so ``count`` equals a chat completion's ``usage.prompt_tokens`` for the same
            messages (vLLM defaults it to true for a prompt, false for messages).
        add_generation_prompt: With messages, end with the assistant turn's opening (default true).
        return_token_strs: Also return each token's vocabulary string (``token_strs``).
        return_offsets: Extension: also return each token's ``[start, end)`` character span in the
            text (``offsets``); with messages, in the rendered prompt (returned as ``prompt``).
        keep_alive: Extension: keep-alive override, as in chat completions.

    """

    model: str
    prompt: str | None = None
    messages: list[ChatMessageParam] | None = Field(default=None, min_length=1)
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = None
    return_token_strs: bool = False
    return_offsets: bool = False

    @model_validator(mode="after")
    def _prompt_or_messages(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("send exactly one of prompt and messages")
        return self


class DetokenizeRequest(EncoderRequestModel):
    """Body of ``POST /detokenize``.

    Attributes:
        model: Catalog name of any generation or encoder model.
        tokens: Token ids to decode (ids outside the vocabulary are a 400).
        skip_special_tokens: Extension: leave special tokens out of the text (default false).
        keep_alive: Extension: keep-alive override, as in chat completions.

    """

    model: str
    tokens: list[Int32]
    skip_special_tokens: bool = False
