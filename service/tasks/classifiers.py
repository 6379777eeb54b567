"""Classify (catalog, custom or zero-shot) and custom classifiers: fit, list, delete, and their store.

Custom classifiers belong to the calling API key (:func:`service.tasks.callers.call_owner`), or
to the shared namespace every key may use and only admin keys write (:mod:`engines.owners`; a
server without keys keeps everything there).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, replace

from engines.capabilities import Classifier, Embedder
from engines.classification.custom import ClassifierStore, CustomClassifier, now_unix_ms
from engines.classification.heads import HeadClassifier, fit_logistic_head
from engines.encoder_types import (
    ClassificationRequest,
    ClassificationResult,
    ClassifierInfo,
    validate_classifier_name,
)
from engines.errors import FailedPreconditionError, InvalidArgumentError, ModelNotFoundError
from engines.executor import DeviceExecutor
from engines.owners import OwnedStores
from engines.reasons import Reason
from engines.types import EmbeddingRequest
from service.model_manager import ModelManager
from service.tasks.callers import call_owner, write_target


@dataclass(slots=True)
class ClassifierFit:
    """A validated FitClassifier call: ``texts[i]`` is labelled ``labels[i]`` (two labels or more).

    ``shared``: save it in the shared namespace (an admin key's call only) instead of the key's own.
    """

    name: str
    embedding_model: str
    texts: list[str]
    labels: list[str]
    overwrite: bool = False
    keep_alive: str | None = None
    shared: bool = False


class ClassifierTask:
    """Classification by catalog models and by custom heads fitted through the API.

    A custom classifier is a logistic-regression head over a catalog embedding model's unit
    vectors, saved in ``stores``: the calling key's own, or the shared ones; its name shares the
    namespace of catalog models (a catalog name wins and cannot be fitted over). A key finds its
    own classifier of a name first, then a shared one; another key's is NOT_FOUND.

    Args:
        manager: where classifiers and embedders are acquired.
        stores: saved custom classifiers, shared and per key.
        cpu: executor for fitting and scoring heads (scikit-learn, blocking).

    """

    def __init__(
        self, manager: ModelManager, stores: OwnedStores[ClassifierStore], cpu: DeviceExecutor
    ) -> None:
        self._manager = manager
        self._stores = stores
        self._cpu = cpu
        self._fit_lock = asyncio.Lock()  # one fit at a time: check-then-save must not interleave

    async def classify(
        self, model: str, keep_alive: str | None, request: ClassificationRequest
    ) -> ClassificationResult:
        """Classify with the catalog model or custom classifier called ``model``.

        Raises:
            ModelNotFoundError: neither a catalog model nor a saved classifier.
            Errors of :meth:`ModelManager.acquire` and of the engine.

        """
        custom = await self._custom_classifier(model)
        if custom is None:
            async with self._manager.acquire(model, Classifier, keep_alive) as classifier:
                return await classifier.classify(request)
        async with self._manager.acquire(custom.info.embedding_model, Embedder, keep_alive) as embedder:
            head = HeadClassifier(embedder, custom.head, custom.labels, self._cpu, normalize=True)
            return await head.classify(request)

    async def _custom_classifier(self, name: str) -> CustomClassifier | None:
        """The custom classifier called ``name`` the caller may use; None when ``name`` is a catalog model.

        Raises:
            InvalidArgumentError: a malformed name.
            ModelNotFoundError: neither a catalog model nor a classifier of the caller's or shared.

        """
        try:
            self._manager.get(name)
            return None
        except ModelNotFoundError as not_found:
            try:
                validate_classifier_name(name)
            except InvalidArgumentError:
                raise not_found from None
            custom = await asyncio.to_thread(self._find, call_owner(), name)
            if custom is None:
                raise ModelNotFoundError(
                    f"no model or custom classifier named {name!r}", field="model", model=name
                ) from None
            return custom

    def _find(self, owner: str, name: str) -> CustomClassifier | None:
        """``owner``'s classifier ``name``, else the shared one, else None (blocking: store reads)."""
        for store, _ in self._stores.visible(owner):
            found = store.get(name)
            if found is not None:
                return found
        return None

    async def fit(self, fit: ClassifierFit) -> ClassifierInfo:
        """Fit a head on the embeddings of the examples, save it (skops) and return its description.

        Saved as the calling key's own, or with ``fit.shared`` in the shared namespace.
        Bounded by the examples' count (validated by the caller) and the embedder's input length.

        Raises:
            PermissionDeniedError: ``shared`` from a key without role admin (ADMIN_ROLE_REQUIRED).
            InvalidArgumentError: an invalid name, or the name of a catalog model (CLASSIFIER_NAME_TAKEN).
            FailedPreconditionError: a classifier of that name exists in the namespace and
                ``overwrite`` is false.
            ResourceExhaustedError: the classifier store is full (reason STORAGE_QUOTA_EXCEEDED).
            UnavailableError: the state store failed (reason STATE_STORE_UNAVAILABLE).
            Errors of :meth:`ModelManager.acquire` and of the embedder.

        """
        store, shared = write_target(self._stores, fit.shared, "fitting a shared classifier")
        name = validate_classifier_name(fit.name)
        try:
            self._manager.get(name)
        except ModelNotFoundError:
            pass
        else:
            raise InvalidArgumentError(
                f"{name!r} is a catalog model name; choose another classifier name",
                reason=Reason.CLASSIFIER_NAME_TAKEN,
                field="name",
                name=name,
            )
        async with self._fit_lock:
            if not fit.overwrite and await asyncio.to_thread(store.exists, name):
                raise FailedPreconditionError(
                    f"a classifier named {name!r} exists; set overwrite to replace it",
                    reason=Reason.CLASSIFIER_EXISTS,
                    field="name",
                    name=name,
                )
            # A full store is refused before the embedding work, not after (the size check repeats at save).
            await asyncio.to_thread(store.check_quota, name)
            async with self._manager.acquire(fit.embedding_model, Embedder, fit.keep_alive) as embedder:
                embedded = await embedder.embed(EmbeddingRequest(inputs=fit.texts, normalize=True))
            head, accuracy = await self._cpu.run(fit_logistic_head, embedded.vectors, fit.labels)
            info = ClassifierInfo(
                name=name,
                embedding_model=fit.embedding_model,
                labels=sorted(set(fit.labels)),
                example_count=len(fit.texts),
                created_at_unix_ms=now_unix_ms(),
                training_accuracy=accuracy,
                shared=shared,
            )
            # overwrite again at the save: another replica may have saved this name meanwhile.
            await asyncio.to_thread(functools.partial(store.save, info, head, overwrite=fit.overwrite))
        return info

    async def list(self) -> list[ClassifierInfo]:
        """The custom classifiers the caller may use, its own and the shared ones, sorted by name.

        A name in both is listed twice, its own first (``shared`` false), as Classify finds it.
        """

        def listing() -> list[ClassifierInfo]:
            return [
                replace(info, shared=shared)
                for store, shared in self._stores.visible(owner)
                for info in store.list()
            ]

        owner = call_owner()
        return sorted(await asyncio.to_thread(listing), key=lambda info: (info.name, info.shared))

    async def delete(self, name: str, shared: bool = False) -> ClassifierInfo:
        """Delete the caller's own custom classifier ``name`` (or with ``shared`` the shared one).

        Raises:
            PermissionDeniedError: ``shared`` from a key without role admin (ADMIN_ROLE_REQUIRED).
            InvalidArgumentError: an invalid name.
            ModelNotFoundError: the namespace has no such classifier (CLASSIFIER_NOT_FOUND; also
                for another key's).

        """
        store, in_shared = write_target(self._stores, shared, "deleting a shared classifier")
        validate_classifier_name(name)
        return replace(await asyncio.to_thread(store.delete, name), shared=in_shared)
