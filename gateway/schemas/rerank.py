"""Request body of the rerank routes (the Cohere / Jina / vLLM rerank APIs plus runtime extensions).

Sources of the shapes: https://docs.cohere.com/reference/rerank (``POST /v2/rerank``, and the older
``/v1/rerank``), https://jina.ai/reranker/ (``POST /v1/rerank``) and vLLM's ``/rerank``; all send
``model``, ``query``, ``documents`` and ``top_n``; Cohere v1 and Jina add ``return_documents``.
Cohere v2's ``max_tokens_per_doc`` is accepted and logged like any unknown field (the model's own
length limit and ``truncation`` apply instead).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from gateway.schemas.base import Int32
from gateway.schemas.encoder_base import EncoderRequestModel


class RerankDocument(BaseModel):
    """A document given as an object (Cohere's and Jina's ``{"text": ...}`` form).

    Other keys (Cohere v1's extra fields such as ``title``) are ignored: only ``text`` is ranked.
    """

    text: str


class RerankRequest(EncoderRequestModel):
    """Body of ``POST /v1/rerank``, ``POST /rerank`` and ``POST /v2/rerank``.

    Attributes:
        model: Catalog name of the reranker (a cross-encoder, or an embedding model).
        query: The search query.
        documents: Texts, or objects with a ``text`` field, to rank against the query; an empty
            list is the server's INVALID_ARGUMENT (400).
        top_n: Return only the best ``top_n`` results (all when unset).
        return_documents: Echo each document as ``{"text": ...}`` in its result (default false).
        truncation: Extension: ``"end"`` (the default, the tokenizer cuts long pairs) or
            ``"error"`` (reject pairs over the model's length); ``false`` means ``"error"``.
        keep_alive: Extension: keep-alive override, as in chat completions.

    """

    model: str
    query: str
    documents: list[str | RerankDocument]
    top_n: Int32 | None = Field(default=None, ge=1)
    return_documents: bool = False
    truncation: Literal["end", "start", "error"] | bool | None = None

    @property
    def document_texts(self) -> list[str]:
        """The documents as plain texts."""
        return [d if isinstance(d, str) else d.text for d in self.documents]
