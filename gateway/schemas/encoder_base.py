"""Base request models shared by the encoder routes (embeddings, rerank, classify, ner)."""

from __future__ import annotations

from gateway.schemas.base import OpenAIRequestModel, keep_alive_duration


class EncoderRequestModel(OpenAIRequestModel):
    """A request with the runtime's ``keep_alive`` extension.

    Attributes:
        keep_alive: Keep-alive override of the model, as in chat completions (``"5m"``, seconds, 0, -1).

    """

    keep_alive: str | int | None = None

    @property
    def keep_alive_value(self) -> str:
        """Return ``keep_alive`` as the server's duration string (``""`` when unset)."""
        return keep_alive_duration(self.keep_alive)


class TextsRequestModel(EncoderRequestModel):
    """A request whose ``input`` is one text or a list of texts (OpenAI's embeddings convention).

    Attributes:
        model: Catalog name of the model.
        input: One text or a list of texts.

    """

    model: str
    input: str | list[str]

    @property
    def inputs(self) -> list[str]:
        """Return ``input`` as a list of texts."""
        return [self.input] if isinstance(self.input, str) else list(self.input)
