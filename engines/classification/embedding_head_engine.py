"""Classification by a scikit-learn head over sentence embeddings, both named by the catalog.

The embedded default is the CLINC150-style intent classifier of the ``rag-intent-classifier``
package: logistic-regression (and other) heads over all-MiniLM-L6-v2 vectors, 157 classes. Its
files are read directly; the package's ``infer_intent()`` is never called (it reaches the hub).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engines.base import Engine, ModelSpec
from engines.classification.heads import HeadClassifier, label_names, load_head
from engines.embedding.sentence_transformers_engine import SentenceTransformersEmbeddingEngine
from engines.encoder_types import ClassificationRequest, ClassificationResult
from engines.errors import ModelLoadError
from engines.registry import register_backend
from engines.sources import path_size_bytes, resolve_source
from engines.types import DetokenizeRequest, MemoryUsage, Task, TokenizeRequest, TokenizeResult

DEFAULT_HEAD = "LogisticRegression.joblib"


@register_backend
class EmbeddingHeadClassificationEngine(Engine):
    """A sentence-transformers encoder plus a scikit-learn head from the catalog.

    ``source`` is the folder holding the head files. Catalog options:

    * ``head``: head file in that folder (default ``LogisticRegression.joblib``). ``.skops`` files
      load with skops' safe loader; other files with joblib, so they must come from a trusted
      install (the catalog is operator configuration, never client input);
    * ``label_map``: optional file (same rules) with a dict from class ids to names;
    * ``embedding_source``: the encoder (a ``sources`` string; required);
    * ``normalize``: scale vectors to unit norm before the head (default false: the head sees
      the encoder's own output, as it was trained);
    * the encoder's options (``dtype``, ``max_seq_length``) and batching limits.
    """

    runs_torch = True
    backend = "embedding_head"
    tasks = frozenset({Task.CLASSIFY})

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """The source folder, its head (and label map) files and the encoder entry are all there.

        Raises:
            ModelLoadError: a missing folder, file or encoder source (MODEL_SOURCE_MISSING /
                MODEL_SOURCE_INVALID).
            InvalidArgumentError: an invalid encoder or batching option.

        """
        folder = cls._folder_of(spec)
        for key, default in (("head", DEFAULT_HEAD), ("label_map", None)):
            name = spec.options.get(key, default)
            if name and not (folder / str(name)).is_file():
                raise ModelLoadError(
                    f"model {spec.name!r}: missing file {name} in {folder}", reason="MODEL_SOURCE_MISSING"
                )
        SentenceTransformersEmbeddingEngine.check_spec(cls._encoder_spec_of(spec))

    @staticmethod
    def _folder_of(spec: ModelSpec) -> Path:
        resolved = resolve_source(spec.source)
        if resolved.path is None or not resolved.path.is_dir():
            raise ModelLoadError(
                f"model {spec.name!r}: embedding_head needs a local folder as source",
                reason="MODEL_SOURCE_INVALID",
            )
        return resolved.path

    @staticmethod
    def _encoder_spec_of(spec: ModelSpec) -> ModelSpec:
        source = spec.options.get("embedding_source")
        if not source:
            raise ModelLoadError(
                f"model {spec.name!r}: option embedding_source is required",
                reason="MODEL_SOURCE_INVALID",
            )
        return ModelSpec(
            name=spec.name,
            backend=SentenceTransformersEmbeddingEngine.backend,
            tasks=(Task.EMBED,),
            source=str(source),
            device=spec.device,
            options=spec.options,
        )

    def _folder(self) -> Path:
        return self._folder_of(self.spec)

    def _encoder_spec(self) -> ModelSpec:
        return self._encoder_spec_of(self.spec)

    def estimated_load_bytes(self) -> int:
        """Head file plus encoder folder sizes."""
        head = self._folder() / str(self.option("head", DEFAULT_HEAD))
        encoder = resolve_source(self._encoder_spec().source)
        return (head.stat().st_size if head.exists() else 0) + (
            path_size_bytes(encoder.path) if encoder.path else 0
        )

    def _read(self, path: Path) -> Any:
        if not path.is_file():
            raise ModelLoadError(
                f"model {self.spec.name!r}: missing file {path.name}", reason="MODEL_SOURCE_MISSING"
            )
        if path.suffix == ".skops":
            return load_head(path)
        import joblib

        # Trusted: an installed package's file named by the operator's catalog (module docstring).
        return joblib.load(path)

    def load(self) -> None:
        """Load the head, the label names and the encoder."""
        import warnings

        folder = self._folder()
        with warnings.catch_warnings():
            # Heads pickled by an older scikit-learn warn on load; the linear models are stable.
            warnings.simplefilter("ignore")
            self.head = self._read(folder / str(self.option("head", DEFAULT_HEAD)))
            label_map = (
                self._read(folder / str(self.option("label_map"))) if self.option("label_map") else None
            )
        self.labels = label_names(list(self.head.classes_), label_map)
        self.encoder = SentenceTransformersEmbeddingEngine(self._encoder_spec(), self.device, self.executor)
        self.encoder.load()
        self.classifier = HeadClassifier(
            self.encoder,
            self.head,
            self.labels,
            self.executor,
            normalize=bool(self.option("normalize", False)),
        )

    def unload(self) -> None:
        """Unload the encoder and drop the head."""
        encoder = getattr(self, "encoder", None)
        if encoder is not None:
            encoder.unload()
        self.encoder = None
        self.head = None
        self.classifier = None

    def memory_usage(self) -> MemoryUsage:
        """The encoder's memory (the head is a few hundred kilobytes)."""
        encoder = getattr(self, "encoder", None)
        return encoder.memory_usage() if encoder is not None else MemoryUsage()

    async def classify(self, request: ClassificationRequest) -> ClassificationResult:
        """Embed the inputs (batched) and score them with the head.

        Raises:
            FailedPreconditionError: ``candidate_labels`` given.
            InputTooLongError, ResourceExhaustedError: from the encoder.

        """
        return await self.classifier.classify(request)

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        """The encoder's tokenization (see :meth:`BatchedEncoderEngine.tokenize`)."""
        return await self.encoder.tokenize(request)

    async def detokenize(self, request: DetokenizeRequest) -> str:
        """The encoder's decoding (see :meth:`BatchedEncoderEngine.detokenize`)."""
        return await self.encoder.detokenize(request)
