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
from engines.classification.options import EmbeddingHeadOptions
from engines.embedding.sentence_transformers_engine import SentenceTransformersEmbeddingEngine
from engines.encoder_types import ClassificationRequest, ClassificationResult
from engines.errors import ModelLoadError
from engines.memory_estimate import device_bytes
from engines.options import parse_options
from engines.reasons import Reason
from engines.registry import register_backend
from engines.sources import PACKAGE_SCHEME, file_in_folder, resolve_source
from engines.types import DetokenizeRequest, MemoryUsage, Task, TokenizeRequest, TokenizeResult


@register_backend
class EmbeddingHeadClassificationEngine(Engine[EmbeddingHeadOptions]):
    """A sentence-transformers encoder plus a scikit-learn head from the catalog.

    ``source`` is the folder holding the head files. Catalog options:
    :class:`~engines.classification.options.EmbeddingHeadOptions` (the head and label map files,
    the encoder's source, ``normalize``, and the encoder's own options, which go to the encoder).
    The head files load with skops' safe loader (``.skops``) or joblib, the latter only from an
    installed package (a ``pkg://`` source); both resolve inside the source folder, and only the
    catalog names them (LoadModel may not override them).
    """

    runs_torch = True
    backend = "embedding_head"
    runs_in_backend_process = True
    tasks = frozenset({Task.CLASSIFY})

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """The options, the source folder with its head (and label map) files, and the encoder entry.

        Raises:
            ModelLoadError: a missing folder, file or encoder source (MODEL_SOURCE_MISSING /
                MODEL_SOURCE_INVALID).
            InvalidArgumentError: an invalid option, of the head or the encoder (INVALID_MODEL_OPTION).

        """
        super().check_spec(spec)
        options = parse_options(EmbeddingHeadOptions, spec.options, backend=cls.backend)
        for option, path in cls._files_of(spec, options).items():
            if not path.is_file():
                raise ModelLoadError(
                    f"model {spec.name!r}: missing file {path.name} ({option}) in {path.parent}",
                    reason=Reason.MODEL_SOURCE_MISSING,
                )
            cls._check_loadable(spec, option, path)
        SentenceTransformersEmbeddingEngine.check_spec(cls._encoder_spec_of(spec, options))

    @classmethod
    def _files_of(cls, spec: ModelSpec, options: EmbeddingHeadOptions) -> dict[str, Path]:
        """The head (and label map) files by option, inside the source folder (:func:`file_in_folder`)."""
        folder = cls._folder_of(spec)
        names = {"head": options.head, "label_map": options.label_map}
        return {
            option: file_in_folder(folder, name, option=option, model=spec.name)
            for option, name in names.items()
            if name is not None
        }

    @staticmethod
    def _check_loadable(spec: ModelSpec, option: str, path: Path) -> None:
        """Refuse a pickled file outside an installed package: only skops files load from elsewhere.

        Unpickling runs code the file names, so a joblib file is trusted like the package's own
        code, and only then (:data:`engines.sources.PACKAGE_SCHEME` sources: installed with pip
        like the server itself).

        Raises:
            ModelLoadError: reason MODEL_SOURCE_INVALID (metadata ``option``).

        """
        if path.suffix != ".skops" and not spec.source.startswith(PACKAGE_SCHEME):
            raise ModelLoadError(
                f"model {spec.name!r}: {option} {path.name!r} is not a .skops file; a pickled (joblib) "
                f"file loads only from an installed package ({PACKAGE_SCHEME} source): save it with skops",
                reason=Reason.MODEL_SOURCE_INVALID,
                model=spec.name,
                option=option,
            )

    @staticmethod
    def _folder_of(spec: ModelSpec) -> Path:
        path = resolve_source(spec.source).path
        if path is not None and path.is_dir():
            return path
        message = f"model {spec.name!r}: embedding_head needs a local folder as source"
        raise ModelLoadError(message, reason=Reason.MODEL_SOURCE_INVALID)

    @staticmethod
    def _encoder_spec_of(spec: ModelSpec, options: EmbeddingHeadOptions) -> ModelSpec:
        """The entry of the encoder: ``embedding_source`` with the encoder's options of ``spec``."""
        return ModelSpec(
            name=spec.name,
            backend=SentenceTransformersEmbeddingEngine.backend,
            tasks=(Task.EMBED,),
            source=options.embedding_source,
            device=spec.device,
            options=options.encoder_options(),
        )

    def required_memory(self) -> MemoryUsage:
        """The encoder's estimate (its weights and a full batch, on this device) plus the head file.

        Raises:
            ModelLoadError: the source is not a local folder (MODEL_SOURCE_INVALID).
            FileNotFoundError: the encoder's folder is missing.

        """
        head = self._files_of(self.spec, self.options)["head"]
        encoder_spec = self._encoder_spec_of(self.spec, self.options)
        encoder = SentenceTransformersEmbeddingEngine(
            encoder_spec, self.device, self.executor
        ).required_memory()
        head_bytes = head.stat().st_size if head.is_file() else 0
        return MemoryUsage(ram_bytes=encoder.ram_bytes + head_bytes, vram_bytes=encoder.vram_bytes)

    def estimated_load_bytes(self) -> int:
        """The part of :meth:`required_memory` on the engine's device."""
        return device_bytes(self.required_memory(), self.device)

    def _read(self, option: str, path: Path) -> Any:
        if not path.is_file():
            raise ModelLoadError(
                f"model {self.spec.name!r}: missing file {path.name}", reason=Reason.MODEL_SOURCE_MISSING
            )
        if path.suffix == ".skops":
            return load_head(path)
        self._check_loadable(self.spec, option, path)
        import joblib

        # Trusted: an installed package's file, named by the operator's catalog (_check_loadable).
        return joblib.load(path)

    def load(self) -> None:
        """Load the head, the label names and the encoder."""
        import warnings

        files = self._files_of(self.spec, self.options)
        with warnings.catch_warnings():
            # Heads pickled by an older scikit-learn warn on load; the linear models are stable.
            warnings.simplefilter("ignore")
            self.head = self._read("head", files["head"])
            label_map = self._read("label_map", files["label_map"]) if "label_map" in files else None
        self.labels = label_names(list(self.head.classes_), label_map)
        encoder_spec = self._encoder_spec_of(self.spec, self.options)
        self.encoder = SentenceTransformersEmbeddingEngine(encoder_spec, self.device, self.executor)
        self.encoder.load()
        self.classifier = HeadClassifier(
            self.encoder,
            self.head,
            self.labels,
            self.executor,
            normalize=self.options.normalize,
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
