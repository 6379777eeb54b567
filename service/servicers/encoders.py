"""InferenceService encoder RPCs: Embed, Classify, ExtractEntities, Rerank, and custom classifiers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from universal_runtime.v1 import encoders_pb2

from engines.classification.custom import (
    ClassifierInfo,
    ClassifierStore,
    CustomClassifier,
    now_unix_ms,
    validate_classifier_name,
)
from engines.classification.heads import classify_with_head, fit_logistic_head
from engines.embedding.sentence_transformers_engine import unit_rows
from engines.errors import FailedPreconditionError, InvalidArgumentError, ModelNotFoundError
from engines.types import Task
from service.convert.embedding import embed_response, embedding_request
from service.convert.encoders import (
    classification_request,
    classifier_message,
    classify_response,
    entities_response,
    entity_request,
    fit_examples,
    rerank_request,
    rerank_response,
)
from service.request_context import note_model
from service.servicers.base import RpcBase

# Folder under settings.data_dir where custom classifiers are saved.
CLASSIFIERS_DIR = "classifiers"


T = TypeVar("T")


def _require_encoder(engine: Any, model: str) -> Any:
    """The engine, if it can embed texts for a classifier head (a sentence-transformers model)."""
    if not hasattr(engine, "encode"):
        raise FailedPreconditionError(
            f"model {model!r} cannot embed texts for a classifier head; use a sentence-transformers model",
            reason="TASK_NOT_SUPPORTED",
            model=model,
        )
    return engine


class EncoderRpcs(RpcBase):
    """Encoder-model RPCs."""

    _classifier_store: ClassifierStore | None = None
    _fit_lock: asyncio.Lock | None = None

    @property
    def _classifiers(self) -> ClassifierStore:
        if self._classifier_store is None:
            self._classifier_store = ClassifierStore(Path(self._settings.data_dir) / CLASSIFIERS_DIR)
        return self._classifier_store

    async def _on_engine(self, request, task: Task, call: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``call(engine)`` on the request's model, held loaded for ``task`` meanwhile."""
        note_model(request.model)
        async with self._manager.acquire(request.model, task, request.keep_alive or None) as engine:
            return await call(engine)

    async def Embed(self, request, context: grpc.aio.ServicerContext):
        """Embed texts; vectors come back in input order."""
        job = embedding_request(request, max_inputs=self._settings.max_batch_inputs)
        result = await self._on_engine(request, Task.EMBED, lambda engine: engine.embed(job))
        return embed_response(request.model, result)

    async def Rerank(self, request, context):
        """Rank documents by relevance to the query (cross-encoder or embedding cosine)."""
        job = rerank_request(request, max_inputs=self._settings.max_batch_inputs)
        result = await self._on_engine(request, Task.RERANK, lambda engine: engine.rerank(job))
        return rerank_response(request.model, result)

    async def ExtractEntities(self, request, context):
        """Find named entities in each input."""
        job = entity_request(request, max_inputs=self._settings.max_batch_inputs)
        result = await self._on_engine(
            request, Task.EXTRACT_ENTITIES, lambda engine: engine.extract_entities(job)
        )
        return entities_response(request.model, result)

    async def Classify(self, request, context):
        """Classify texts with a catalog classifier, a custom classifier, or zero-shot labels."""
        job = classification_request(request, max_inputs=self._settings.max_batch_inputs)
        note_model(request.model)
        keep_alive = request.keep_alive or None
        custom = await self._custom_classifier(request.model)
        if custom is None:
            async with self._manager.acquire(request.model, Task.CLASSIFY, keep_alive) as engine:
                result = await engine.classify(job)
        else:
            embedding_model = custom.info.embedding_model
            async with self._manager.acquire(embedding_model, Task.EMBED, keep_alive) as engine:
                encoder = _require_encoder(engine, embedding_model)
                result = await classify_with_head(encoder, custom.head, custom.labels, job, normalize=True)
        return classify_response(request.model, result)

    async def _custom_classifier(self, name: str) -> CustomClassifier | None:
        """The custom classifier called ``name``; None when ``name`` is a catalog model.

        Raises:
            InvalidArgumentError: a malformed name.
            ModelNotFoundError: neither a catalog model nor a saved classifier.

        """
        try:
            self._manager.get(name)
            return None
        except ModelNotFoundError as not_found:
            try:
                validate_classifier_name(name)
            except InvalidArgumentError:
                raise not_found from None
            custom = await asyncio.to_thread(self._classifiers.get, name)
            if custom is None:
                raise ModelNotFoundError(
                    f"no model or custom classifier named {name!r}", field="model", model=name
                ) from None
            return custom

    async def FitClassifier(self, request, context):
        """Fit a logistic-regression head on embeddings of the examples, save it (skops) and register it."""
        texts, labels = fit_examples(request, max_examples=self._settings.max_batch_inputs)
        name = request.name
        try:
            self._manager.get(name)
        except ModelNotFoundError:
            pass
        else:
            raise InvalidArgumentError(
                f"{name!r} is a catalog model name; choose another classifier name",
                reason="CLASSIFIER_NAME_TAKEN",
                field="name",
                name=name,
            )
        if self._fit_lock is None:
            self._fit_lock = asyncio.Lock()
        async with self._fit_lock:
            if not request.overwrite and await asyncio.to_thread(self._classifiers.exists, name):
                raise FailedPreconditionError(
                    f"a classifier named {name!r} exists; set overwrite to replace it",
                    reason="CLASSIFIER_EXISTS",
                    field="name",
                    name=name,
                )
            model = request.embedding_model
            async with self._manager.acquire(model, Task.EMBED, request.keep_alive or None) as engine:
                encoder = _require_encoder(engine, model)
                vectors, _ = await encoder.encode(texts)
                head, accuracy = await encoder.executor.run(fit_logistic_head, unit_rows(vectors), labels)
            info = ClassifierInfo(
                name=name,
                embedding_model=model,
                labels=sorted(set(labels)),
                example_count=len(texts),
                created_at_unix_ms=now_unix_ms(),
                training_accuracy=accuracy,
            )
            await asyncio.to_thread(self._classifiers.save, info, head)
        return encoders_pb2.FitClassifierResponse(classifier=classifier_message(info))

    async def ListClassifiers(self, request, context):
        """List saved custom classifiers, sorted by name."""
        infos = await asyncio.to_thread(self._classifiers.list)
        return encoders_pb2.ListClassifiersResponse(classifiers=[classifier_message(i) for i in infos])

    async def DeleteClassifier(self, request, context):
        """Delete a saved custom classifier (NOT_FOUND when there is none)."""
        validate_classifier_name(request.name)
        info = await asyncio.to_thread(self._classifiers.delete, request.name)
        return encoders_pb2.DeleteClassifierResponse(classifier=classifier_message(info))
