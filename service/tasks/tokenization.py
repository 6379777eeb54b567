"""Tokenize and Detokenize: one acquire of the model's tokenizer and one engine call each."""

from __future__ import annotations

from engines.capabilities import Tokenizer
from engines.types import DetokenizeRequest, TokenizeRequest, TokenizeResult
from service.model_manager import ModelManager


class TokenizationTask:
    """Tokenizer calls on any model whose engine has a tokenizer (generation and encoder models).

    Each method takes the catalog ``model``, an optional ``keep_alive`` override and a validated
    request; the engine runs the work on the model's lane.

    Args:
        manager: where engines are acquired.

    """

    def __init__(self, manager: ModelManager) -> None:
        self._manager = manager

    async def tokenize(self, model: str, keep_alive: str | None, request: TokenizeRequest) -> TokenizeResult:
        """Token ids of the prompt or rendered messages, with the strings and offsets asked for.

        Raises:
            Errors of :meth:`ModelManager.acquire` (TaskNotSupportedError, FAILED_PRECONDITION, for
            a model without a tokenizer) and of ``Tokenizer.tokenize``.

        """
        async with self._manager.acquire(model, Tokenizer, keep_alive) as tokenizer:
            return await tokenizer.tokenize(request)

    async def detokenize(self, model: str, keep_alive: str | None, request: DetokenizeRequest) -> str:
        """The text of the token ids.

        Raises:
            Errors of :meth:`ModelManager.acquire` and of ``Tokenizer.detokenize`` (ids outside
            the vocabulary or too many: INVALID_ARGUMENT).

        """
        async with self._manager.acquire(model, Tokenizer, keep_alive) as tokenizer:
            return await tokenizer.detokenize(request)
