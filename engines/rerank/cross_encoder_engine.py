"""Reranking with a cross-encoder (sentence-transformers ``CrossEncoder``, from a hub id or a local folder).

A cross-encoder reads the query and one document together and outputs a relevance logit; it
ranks better than comparing separate embeddings, at one forward pass per (query, document)
pair. Pairs from concurrent requests share batches through the engine's dynamic batcher.
"""

from __future__ import annotations

import numpy as np

from engines.batching.engine import BatchedEncoderEngine
from engines.batching.tokens import TokenCounter, TokenIds
from engines.device import torch_dtype_for
from engines.encoder_types import RerankRequest, RerankResult
from engines.hf_construction import hf_construction
from engines.registry import register_backend
from engines.rerank.options import CrossEncoderOptions
from engines.rerank.ranking import ranked
from engines.scoring import softmax
from engines.sources import resolve_source
from engines.types import Task


@register_backend
class CrossEncoderRerankEngine(BatchedEncoderEngine[CrossEncoderOptions]):
    """Relevance scores from a ``CrossEncoder``.

    A single-logit model's score is its activation (sigmoid by default, so in [0, 1]); for a
    model with several logits the score is the softmax probability of the last class (the
    "relevant" class of two-class rerankers).

    Catalog options: :class:`~engines.rerank.options.CrossEncoderOptions`.
    """

    backend = "cross_encoder"
    runs_in_backend_process = True
    tasks = frozenset({Task.RERANK})

    def load(self) -> None:
        """Load the model onto the device and set up its batcher."""
        from sentence_transformers import CrossEncoder

        resolved = resolve_source(self.spec.source)
        with hf_construction():  # one build at a time: engines/hf_construction.py
            self.model = CrossEncoder(
                resolved.location,
                device=self.device,
                model_kwargs={"torch_dtype": torch_dtype_for(self.device, self.options.dtype)},
                local_files_only=resolved.path is not None,
                max_length=self.options.max_length,
            )
        self.model.eval()
        self.swap_transformer(self.model[0])
        tokenizer = self.model.tokenizer
        # ``max_length`` was renamed ``max_seq_length`` in sentence-transformers 6.
        limit = getattr(self.model, "max_seq_length", None) or self.model.max_length
        limit = limit or min(tokenizer.model_max_length, 512)
        self.tokens = TokenCounter(tokenizer, limit, self.spec.name)
        self.batcher = self.make_batcher(self._score_batch)

    def _score_batch(self, pairs: list[TokenIds]) -> list[float]:
        """One forward pass over tokenized (query, document) pairs (blocking; run by the batcher).

        The pairs' ids run through the model's own modules and activation, as
        ``CrossEncoder.predict`` runs them after tokenizing.
        """
        import torch

        features = self.tokens.padding.tensors(pairs, self.device)
        with torch.inference_mode():
            raw = self.model(features)["scores"].float()  # float32 at least, as predict upcasts
            activation = getattr(self.model, "activation_fn", None)
            if activation is not None:
                raw = activation(raw)
        scores = raw.cpu().numpy().astype(np.float64)
        if scores.ndim == 2 and scores.shape[1] > 1:
            scores = softmax(scores)[:, -1]
        return [float(s) for s in scores.reshape(len(pairs))]

    async def rerank(self, request: RerankRequest) -> RerankResult:
        """Score every (query, document) pair and sort.

        Over-long pairs are cut on the ids by the tokenizer's own ``longest_first`` rule (the
        longer side loses tokens first, so a short query stays whole): ``END`` cuts from the end,
        ``START`` from the start (the tokenizer's ``truncation_side="left"``), as
        text-embeddings-inference's rerank ``truncation_direction`` Right/Left does (its
        ``TruncationParams`` with ``LongestFirst``, core/src/tokenization.rs). ERROR refuses them.

        Raises:
            InputTooLongError: a pair over the model's maximum length with truncation ERROR.
            ResourceExhaustedError: the batch queue is full (OVERLOADED).

        """
        with self.batcher.reserve(len(request.documents)) as places:  # refused before tokenizing when full
            pairs = await self.tokens.encode_pairs_async(request.query, request.documents, request.truncation)
            used = [len(pair) for pair in pairs]
            scores = await self.batcher.submit(pairs, used, places=places)
        return RerankResult(results=ranked(scores, request), prompt_tokens=sum(used))
