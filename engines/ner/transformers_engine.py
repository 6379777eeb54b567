"""Named entities with a transformers token-classification model (hub id or local folder).

Sub-word predictions are merged into entities by the ``token-classification`` pipeline's
aggregation (https://huggingface.co/docs/transformers/main_classes/pipelines#transformers.TokenClassificationPipeline):
``simple`` groups adjacent tokens of one entity (BIO/BIOES tags), ``first``/``average``/``max``
also keep words whole. Offsets come from the fast tokenizer's offset mapping, so
``input[start:end]`` is the entity text. Texts from concurrent requests share batches.

Each text is tokenized once, by :meth:`TokenCounter.encode_windows` when the request arrives
(ids, offsets and special-token mask of its overlapping windows, as the pipeline's own
preprocessing makes them); the batch runs those ids through the model and hands the logits to the
pipeline's ``postprocess`` (aggregation and the merging of overlapping windows), so the entities
are the pipeline's without its second tokenization.
"""

from __future__ import annotations

from typing import Any

from engines.batching.engine import BatchedEncoderEngine
from engines.batching.tokens import TextWindows, TokenCounter, TokenIds
from engines.encoder_types import Entity, EntityRequest, EntityResult
from engines.ner.filtering import check_input_characters, kept
from engines.ner.options import TransformersNerOptions
from engines.registry import register_backend
from engines.types import Task


def forward_groups(windows: list[TokenIds], max_tokens: int) -> list[list[TokenIds]]:
    """Consecutive runs of ``windows`` whose padded size (count x longest) stays within ``max_tokens``.

    A window alone over ``max_tokens`` still makes its own group: a long text's windows run in
    several forward passes rather than one (attention memory grows with the padded batch).
    """
    groups: list[list[TokenIds]] = []
    current: list[TokenIds] = []
    longest = 0
    for window in windows:  # bounded by the batch's windows
        wider = max(longest, len(window))
        if current and wider * (len(current) + 1) > max_tokens:
            groups.append(current)
            current, wider = [], len(window)
        current.append(window)
        longest = wider
    if current:
        groups.append(current)
    return groups


@register_backend
class TransformersNerEngine(BatchedEncoderEngine[TransformersNerOptions]):
    """Entities from ``AutoModelForTokenClassification``; labels from ``id2label`` without B-/I- prefixes.

    Catalog options: :class:`~engines.ner.options.TransformersNerOptions`.
    """

    backend = "transformers_ner"
    runs_in_backend_process = True
    tasks = frozenset({Task.EXTRACT_ENTITIES})

    def load(self) -> None:
        """Load tokenizer, model and pipeline; set up the batcher."""
        from transformers import AutoModelForTokenClassification, pipeline
        from transformers.pipelines import AggregationStrategy

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
        # The pipeline is kept for its postprocess (aggregation); it never tokenizes here.
        self._postprocess_params = {"aggregation_strategy": AggregationStrategy(self.options.aggregation)}
        self.batcher = self.make_batcher(self._extract_batch)

    def release(self) -> None:
        """Drop the pipeline (it holds the model)."""
        self.pipeline = None

    def _extract_batch(self, items: list[tuple[str, TextWindows]]) -> list[list[Entity]]:
        """Run the windows of a batch of texts and aggregate their entities (blocking; run by the batcher).

        The windows run padded together, in forward passes of at most ``max_batch_tokens`` padded
        tokens; each text's windows then go through the pipeline's ``postprocess`` with the ids,
        offsets and special-token mask its tokenization made.
        """
        import torch

        windows = [window for _, encoded in items for window in encoded.windows]
        logits: list[Any] = []
        with torch.inference_mode():
            for group in forward_groups(windows, self.options.max_batch_tokens):  # bounded by windows
                features = self.tokens.padding.tensors(group, self.model.device)
                output = self.model(**features)
                logits.extend(output["logits"].float().cpu())  # float32, as postprocess upcasts
        found: list[list[Entity]] = []
        at = 0
        for text, encoded in items:  # bounded by the batch's texts
            outputs = []
            for index, window in enumerate(encoded.windows):  # bounded by the text's windows
                outputs.append(
                    {
                        "logits": logits[at][None, : len(window)],
                        "input_ids": [window.input_ids],
                        "offset_mapping": [encoded.offsets[index]],
                        "special_tokens_mask": torch.tensor([encoded.special_tokens_mask[index]]),
                        "sentence": text if index == 0 else None,
                        "is_last": index == len(encoded.windows) - 1,
                    }
                )
                at += 1
            entities = self.pipeline.postprocess(outputs, **self._postprocess_params)
            found.append([_entity(text, item) for item in entities if item.get("start") is not None])
        return found

    async def extract_entities(self, request: EntityRequest) -> EntityResult:
        """Find entities in every input (through the batcher).

        Raises:
            InputTooLongError: a text over ``max_input_chars`` characters.
            ResourceExhaustedError: the batch queue is full (OVERLOADED).

        """
        check_input_characters(request.inputs, self.options.max_input_chars, self.spec.name)
        inputs = list(request.inputs)
        with self.batcher.reserve(len(inputs)) as places:  # refused before tokenizing when full
            encoded = await self.tokens.encode_windows_async(inputs, self.options.stride)
            costs = [len(item) for item in encoded]
            found = await self.batcher.submit(list(zip(inputs, encoded, strict=True)), costs, places=places)
        return EntityResult(
            entities=[kept(items, request) for items in found], prompt_tokens=sum(e.tokens for e in encoded)
        )


def _entity(text: str, item: dict[str, Any]) -> Entity:
    """An :class:`Entity` from one of the pipeline's aggregated entities (character offsets into ``text``)."""
    start, end = int(item["start"]), int(item["end"])
    label = str(item.get("entity_group", item.get("entity", "")))
    return Entity(text=text[start:end], label=label, start=start, end=end, score=float(item["score"]))
