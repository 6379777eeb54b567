"""Named entities with a transformers token-classification model (hub id or local folder).

Sub-word predictions are merged into entities by the ``token-classification`` pipeline's
aggregation (https://huggingface.co/docs/transformers/main_classes/pipelines#transformers.TokenClassificationPipeline):
``simple`` groups adjacent tokens of one entity (BIO/BIOES tags), ``first``/``average``/``max``
also keep words whole. Offsets come from the fast tokenizer's offset mapping, so
``input[start:end]`` is the entity text. Texts from concurrent requests share batches.
"""

from __future__ import annotations

from typing import Any

from engines.batching.engine import BatchedEncoderEngine
from engines.batching.tokens import TokenCounter
from engines.encoder_types import Entity, EntityRequest, EntityResult
from engines.ner.filtering import check_input_characters, kept
from engines.ner.options import TransformersNerOptions
from engines.registry import register_backend
from engines.types import Task, Truncation


@register_backend
class TransformersNerEngine(BatchedEncoderEngine[TransformersNerOptions]):
    """Entities from ``AutoModelForTokenClassification``; labels from ``id2label`` without B-/I- prefixes.

    Catalog options: :class:`~engines.ner.options.TransformersNerOptions`.
    """

    backend = "transformers_ner"
    tasks = frozenset({Task.EXTRACT_ENTITIES})

    def load(self) -> None:
        """Load tokenizer, model and pipeline; set up the batcher."""
        from transformers import AutoModelForTokenClassification, pipeline

        tokenizer, model = self.load_pretrained(AutoModelForTokenClassification)
        self.model = model
        self.pipeline = pipeline(
            "token-classification",
            model=model,
            tokenizer=tokenizer,
            aggregation_strategy=self.options.aggregation,
            stride=self.options.stride,
            device=model.device,
        )
        limit = min(
            int(tokenizer.model_max_length), int(getattr(model.config, "max_position_embeddings", 512))
        )
        self.tokens = TokenCounter(tokenizer, limit, self.spec.name)
        self.batcher = self.make_batcher(self._extract_batch)

    def release(self) -> None:
        """Drop the pipeline (it holds the model)."""
        self.pipeline = None

    def _extract_batch(self, texts: list[str]) -> list[list[Entity]]:
        """Run the pipeline over a batch of texts (blocking; run by the batcher)."""
        import torch

        with torch.inference_mode():
            outputs: Any = self.pipeline(texts, batch_size=len(texts))
        if texts and outputs and isinstance(outputs[0], dict):  # one text gives a flat list
            outputs = [outputs]
        return [
            [
                Entity(
                    text=text[int(item["start"]) : int(item["end"])],
                    label=str(item.get("entity_group", item.get("entity", ""))),
                    start=int(item["start"]),
                    end=int(item["end"]),
                    score=float(item["score"]),
                )
                for item in found
                if item.get("start") is not None and item.get("end") is not None
            ]
            for text, found in zip(texts, outputs, strict=True)
        ]

    async def extract_entities(self, request: EntityRequest) -> EntityResult:
        """Find entities in every input (through the batcher).

        Raises:
            InputTooLongError: a text over ``max_input_chars`` characters.
            ResourceExhaustedError: the batch queue is full (OVERLOADED).

        """
        check_input_characters(request.inputs, self.options.max_input_chars, self.spec.name)
        inputs = list(request.inputs)
        with self.batcher.reserve(len(inputs)) as places:  # refused before tokenizing when full
            lengths = await self.tokens.lengths_async(inputs)
            costs = self.tokens.check(lengths, Truncation.END)
            found = await self.batcher.submit(inputs, costs, places=places)
        return EntityResult(entities=[kept(items, request) for items in found], prompt_tokens=sum(lengths))
