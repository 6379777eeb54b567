"""Sentence embeddings with sentence-transformers (from a hub id or a local folder).

The same bi-encoder also serves rerank (cosine similarity of query and document embeddings)
and zero-shot classification (cosine similarity of text and candidate-label embeddings), for
models that have no cross-encoder or classification head. Every forward pass goes through the
engine's :class:`~engines.batching.DynamicBatcher`, so concurrent requests share batches.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np

from engines.batching.engine import BatchedEncoderEngine
from engines.batching.tokens import TokenCounter, TokenIds
from engines.device import torch_dtype_for
from engines.embedding.options import SentenceTransformersOptions
from engines.embedding.quantization import CALIBRATION_TEXTS, needs_calibration, quantize
from engines.encoder_types import ClassificationRequest, ClassificationResult, RerankRequest, RerankResult
from engines.errors import FailedPreconditionError, InvalidArgumentError
from engines.hf_construction import hf_construction
from engines.reasons import Reason
from engines.registry import register_backend
from engines.rerank.ranking import ranked
from engines.scoring import classifications, softmax
from engines.sources import resolve_source
from engines.types import EmbeddingEncoding, EmbeddingRequest, EmbeddingResult, Task, Truncation

log = logging.getLogger(__name__)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Scale each row to unit L2 norm (rows of zeros stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


@register_backend
class SentenceTransformersEmbeddingEngine(BatchedEncoderEngine[SentenceTransformersOptions]):
    """Embeddings from a ``SentenceTransformer`` model; also cosine rerank and zero-shot classify.

    Catalog options: :class:`~engines.embedding.options.SentenceTransformersOptions`.
    """

    backend = "sentence_transformers"
    runs_in_backend_process = True
    tasks = frozenset({Task.EMBED, Task.RERANK, Task.CLASSIFY})

    def load(self) -> None:
        """Load the model onto the device in inference mode and set up its batcher."""
        from sentence_transformers import SentenceTransformer

        resolved = resolve_source(self.spec.source)
        dtype = torch_dtype_for(self.device, self.options.dtype)
        with hf_construction():  # one build at a time: engines/hf_construction.py
            self.model = SentenceTransformer(
                resolved.location,
                device=self.device,
                model_kwargs={"torch_dtype": dtype},
                local_files_only=resolved.path is not None,
            )
        self.model.eval()
        self.swap_transformer(self.model[0])
        if self.options.max_seq_length is not None:
            self.model.max_seq_length = self.options.max_seq_length
        self.tokens = TokenCounter(self.model.tokenizer, self.model.max_seq_length, self.spec.name)
        self._default_prompt, self._prompt_length = self._default_prompt_of(self.model)
        self.batcher = self.make_batcher(self._encode_batch)
        self._calibration: np.ndarray | None = None  # raw vectors of the int8/uint8 calibration set
        self._calibration_lock = asyncio.Lock()

    @staticmethod
    def _default_prompt_of(model: Any) -> tuple[str, int | None]:
        """The prompt ``SentenceTransformer.encode`` prefixes by default ("" if none), and its tokens.

        The token count is what the library gives its pooling (``prompt_length``), which leaves the
        prompt's tokens out when the model's pooling has ``include_prompt: false``.
        """
        name = getattr(model, "default_prompt_name", None)
        prompt = (model.prompts or {}).get(name, "") if name else ""
        measure = getattr(model[0], "_get_prompt_length", None)
        return prompt, (measure(prompt) if prompt and measure is not None else None)

    @property
    def dimensions(self) -> int:
        """Length of the model's vectors."""
        # Renamed in sentence-transformers 6; the old name still works in 5.
        model = self.model
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    @property
    def max_seq_length(self) -> int:
        """Longest input in tokens, special tokens included."""
        return int(self.model.max_seq_length)

    # -- batched forward pass ---------------------------------------------------------------

    def _encode_batch(self, batch: list[TokenIds]) -> list[np.ndarray]:
        """One forward pass over a batch of token ids (blocking; the batcher runs it on the executor).

        The ids are the model's inputs as they are (tokenized once, by :attr:`tokens`): padded here
        and run through the model's own modules (transformer, whichever runtime runs it, then its
        pooling and normalization), as ``SentenceTransformer.encode`` runs them after tokenizing.
        """
        import torch

        features: dict[str, Any] = self.tokens.padding.tensors(batch, self.device)
        if self._prompt_length is not None:  # every text starts with the default prompt
            features["prompt_length"] = self._prompt_length
        with torch.inference_mode():
            vectors = self.model(features)["sentence_embedding"]
        return list(vectors.float().cpu().numpy())

    async def encode(
        self, texts: list[str], truncation: Truncation = Truncation.END, *, field: str = "inputs"
    ) -> tuple[np.ndarray, int]:
        """Raw model vectors of ``texts`` through the batcher, and the tokens used.

        The texts are tokenized once (:meth:`TokenCounter.encode`); their ids are what the batch
        runs. The model's default prompt, if it names one, is prefixed first (as
        ``SentenceTransformer.encode`` does).

        Returns:
            (len(texts), model dimensions) float32 array, and the token count.

        Raises:
            InputTooLongError: an input over ``max_seq_length`` with truncation ERROR.
            ResourceExhaustedError: the batch queue is full (OVERLOADED).

        """
        if self._default_prompt:
            texts = [self._default_prompt + text for text in texts]
        # Places first: a request refused for a full queue is refused before it is tokenized.
        with self.batcher.reserve(len(texts)) as places:
            encoded = await self.tokens.encode_async(texts, truncation, field=field)
            lengths = [len(item) for item in encoded]
            vectors = await self.batcher.submit(encoded, lengths, places=places)
        return np.stack(vectors), sum(lengths)

    def _prefixed(self, texts: list[str], prompt_name: str | None, prompt: str | None) -> list[str]:
        if prompt_name:
            prompts = self.model.prompts or {}
            if prompt_name not in prompts:
                known = ", ".join(sorted(prompts)) or "none"
                raise InvalidArgumentError(
                    f"model {self.spec.name!r} has no prompt named {prompt_name!r}; it has: {known}",
                    field="prompt_name",
                )
            return [prompts[prompt_name] + text for text in texts]
        if prompt:
            return [prompt + text for text in texts]
        return list(texts)

    # -- tasks ----------------------------------------------------------------------------------

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        """Embed ``request.inputs``.

        ``dimensions`` keeps the first values of each vector (Matryoshka truncation,
        https://arxiv.org/abs/2205.13147); ``normalize`` then scales each to unit L2 norm.

        Returns:
            vectors of shape (len(inputs), dimensions or the model's size), float32, and for an
            encoding other than FLOAT the same vectors quantized (see
            :mod:`engines.embedding.quantization`; int8/uint8 ranges from the model's calibration set).

        Raises:
            InvalidArgumentError: ``dimensions`` larger than the model's, unknown prompt name.
            InputTooLongError: an input over ``max_seq_length`` with truncation ERROR (states both lengths).
            ResourceExhaustedError: the batch queue is full (OVERLOADED).

        """
        if request.dimensions and request.dimensions > self.dimensions:
            raise InvalidArgumentError(
                f"dimensions={request.dimensions} is larger than the model's {self.dimensions}",
                field="dimensions",
                dimensions=request.dimensions,
                model_dimensions=self.dimensions,
            )
        texts = self._prefixed(request.inputs, request.prompt_name, request.prompt)
        vectors, used = await self.encode(texts, request.truncation)
        vectors = self._as_requested(vectors, request)
        quantized = None
        if request.encoding is not EmbeddingEncoding.FLOAT:
            calibration = None
            if needs_calibration(request.encoding):
                calibration = self._as_requested(await self._calibration_vectors(), request)
            quantized = quantize(vectors, request.encoding, calibration)
        return EmbeddingResult(
            vectors=vectors, prompt_tokens=used, quantized=quantized, encoding=request.encoding
        )

    @staticmethod
    def _as_requested(vectors: np.ndarray, request: EmbeddingRequest) -> np.ndarray:
        """Raw model vectors cut to ``dimensions`` and normalized as ``request`` asks, float32."""
        if request.dimensions:
            vectors = vectors[:, : request.dimensions]
        if request.normalize:
            vectors = unit_rows(vectors)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    async def _calibration_vectors(self) -> np.ndarray:
        """Raw vectors of :data:`~engines.embedding.quantization.CALIBRATION_TEXTS`, embedded once.

        Embedded through the batcher in groups of at most ``max_queue`` texts (a small queue never
        makes calibration impossible) by the first int8/uint8 request; later ones reuse them.

        Raises:
            ResourceExhaustedError: the batch queue is full (OVERLOADED); the next request retries.

        """
        async with self._calibration_lock:
            if self._calibration is None:
                step = max(1, min(len(CALIBRATION_TEXTS), self.batcher.config.max_queue))
                parts = [
                    (await self.encode(list(CALIBRATION_TEXTS[i : i + step])))[0]
                    for i in range(0, len(CALIBRATION_TEXTS), step)
                ]
                self._calibration = np.concatenate(parts)
            return self._calibration

    def _role_prompt(self, role: str) -> str | None:
        """``role`` (``query``/``document``) when the model defines a prompt of that name, else None."""
        return role if role in (self.model.prompts or {}) else None

    async def rerank(self, request: RerankRequest) -> RerankResult:
        """Rank documents by cosine similarity of their embeddings with the query's (bi-encoder rerank).

        Scores are cosine similarities in [-1, 1]. The model's ``query`` and ``document``
        prompts are applied when it defines them.

        Raises:
            InputTooLongError: the query or a document over ``max_seq_length`` with truncation ERROR.

        """
        query = self._prefixed([request.query], self._role_prompt("query"), None)
        documents = self._prefixed(request.documents, self._role_prompt("document"), None)
        (query_vectors, query_tokens), (doc_vectors, doc_tokens) = await asyncio.gather(
            self.encode(query, request.truncation, field="query"),
            self.encode(documents, request.truncation, field="documents"),
        )
        scores = unit_rows(doc_vectors) @ unit_rows(query_vectors)[0]
        return RerankResult(results=ranked(scores, request), prompt_tokens=query_tokens + doc_tokens)

    async def classify(self, request: ClassificationRequest) -> ClassificationResult:
        """Zero-shot classification: cosine similarity of each text with each candidate label.

        Single-label scores are a softmax over the cosines divided by ``zero_shot_temperature``;
        multi-label scores are the cosines clipped to [0, 1].

        Raises:
            FailedPreconditionError: no ``candidate_labels`` (an embedding model has no trained labels).

        """
        if not request.candidate_labels:
            raise FailedPreconditionError(
                f"model {self.spec.name!r} is an embedding model: pass candidate_labels for zero-shot "
                "classification",
                reason=Reason.CANDIDATE_LABELS_REQUIRED,
                field="candidate_labels",
                model=self.spec.name,
            )
        (text_vectors, used), (label_vectors, _) = await asyncio.gather(
            self.encode(request.inputs, request.truncation),
            self.encode(request.candidate_labels, Truncation.END, field="candidate_labels"),
        )
        cosines = unit_rows(text_vectors) @ unit_rows(label_vectors).T
        if request.multi_label:
            scores = np.clip(cosines, 0.0, 1.0)
        else:
            scores = softmax(cosines / self.options.zero_shot_temperature)
        return ClassificationResult(
            classifications=classifications(scores, request.candidate_labels, request), prompt_tokens=used
        )
