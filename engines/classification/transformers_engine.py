"""Text classification with a transformers sequence-classification model (hub id or local folder)."""

from __future__ import annotations

import numpy as np

from engines.batching.engine import BatchedEncoderEngine
from engines.batching.tokens import TokenCounter, TokenIds
from engines.classification.options import TransformersClassifierOptions
from engines.encoder_types import ClassificationRequest, ClassificationResult
from engines.errors import FailedPreconditionError
from engines.reasons import Reason
from engines.registry import register_backend
from engines.scoring import classifications, probabilities
from engines.types import Task


@register_backend
class TransformersClassificationEngine(BatchedEncoderEngine[TransformersClassifierOptions]):
    """Labels from ``AutoModelForSequenceClassification``; label names from the config's ``id2label``.

    Single-label scores are the softmax of the logits; multi-label scores the sigmoid of each
    logit (the ``text-classification`` pipeline's ``function_to_apply`` convention).

    Catalog options: :class:`~engines.classification.options.TransformersClassifierOptions`.
    """

    backend = "transformers_classifier"
    runs_in_backend_process = True
    tasks = frozenset({Task.CLASSIFY})

    def load(self) -> None:
        """Load tokenizer and model onto the device and set up the batcher."""
        from transformers import AutoModelForSequenceClassification

        self.tokenizer, model = self.load_pretrained(AutoModelForSequenceClassification)
        self.model = self.export_for_runtime(model, self.tokenizer, "logits") or model
        model_config = self.model.config
        self.labels = [str(model_config.id2label[i]) for i in range(model_config.num_labels)]
        self.max_length = self.options.max_seq_length or min(
            int(self.tokenizer.model_max_length),
            int(getattr(model_config, "max_position_embeddings", 512) or 512),
        )
        self.tokens = TokenCounter(self.tokenizer, self.max_length, self.spec.name)
        self.batcher = self.make_batcher(self._logits_batch)

    def release(self) -> None:
        """Drop the tokenizer."""
        self.tokenizer = None

    def _logits_batch(self, batch: list[TokenIds]) -> list[np.ndarray]:
        """One forward pass over tokenized texts: each text's logits (blocking; run by the batcher)."""
        import torch

        with torch.inference_mode():
            logits = self.model(**self.tokens.padding.tensors(batch, self.device))["logits"]
        return list(logits.float().cpu().numpy())

    async def classify(self, request: ClassificationRequest) -> ClassificationResult:
        """Classify ``request.inputs`` with the model's own labels.

        Raises:
            FailedPreconditionError: ``candidate_labels`` were given (this model has fixed labels).
            InputTooLongError: an input over the maximum length with truncation ERROR.
            ResourceExhaustedError: the batch queue is full (OVERLOADED).

        """
        if request.candidate_labels:
            raise FailedPreconditionError(
                f"model {self.spec.name!r} has fixed labels ({', '.join(self.labels)}); candidate_labels "
                "need an embedding model",
                reason=Reason.ZERO_SHOT_NOT_SUPPORTED,
                field="candidate_labels",
                model=self.spec.name,
            )
        with self.batcher.reserve(len(request.inputs)) as places:  # refused before tokenizing when full
            encoded = await self.tokens.encode_async(request.inputs, request.truncation)
            used = [len(item) for item in encoded]
            logits = np.stack(await self.batcher.submit(encoded, used, places=places))
        scores = probabilities(logits, multi_label=request.multi_label)
        return ClassificationResult(classifications(scores, self.labels, request), prompt_tokens=sum(used))
