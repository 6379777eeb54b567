"""Registry of engine backends: catalog ``backend`` strings map to engine classes.

Backend modules register themselves with :func:`register_backend` when imported;
:func:`engine_class` imports the built-in modules on first use, so adding a backend means
adding a module and a line to ``_BUILTIN_MODULES``, never an if/elif chain.
"""

from __future__ import annotations

import importlib

from engines.base import Engine
from engines.errors import FailedPreconditionError
from engines.reasons import Reason

_BACKENDS: dict[str, type[Engine]] = {}

# Modules that define the built-in backends; imported lazily so that importing the registry
# does not import torch or llama.cpp.
_BUILTIN_MODULES = (
    "engines.generation.llama_cpp_engine",
    "engines.generation.transformers_engine",
    "engines.embedding.sentence_transformers_engine",
    "engines.ocr.rapidocr_engine",
    "engines.ocr.tesseract_engine",
    "engines.documents.rapid_layout_engine",
    "engines.rerank.cross_encoder_engine",
    "engines.classification.transformers_engine",
    "engines.classification.embedding_head_engine",
    "engines.ner.spacy_engine",
    "engines.ner.transformers_engine",
    "engines.documents.layoutlmv3_engine",
    "engines.documents.donut_engine",
    "engines.speech.pocketsphinx_engine",
    "engines.speech.whisper_engine",
    "engines.speech.espeak_engine",
    "engines.images.diffusers_engine",
)
_builtins_loaded = False


def register_backend(cls: type[Engine]) -> type[Engine]:
    """Class decorator: make ``cls`` available under ``cls.backend``.

    Raises:
        ValueError: another class already registered the same backend name.

    """
    existing = _BACKENDS.get(cls.backend)
    if existing is not None and existing is not cls:
        raise ValueError(f"backend {cls.backend!r} already registered by {existing.__qualname__}")
    _BACKENDS[cls.backend] = cls
    return cls


def import_engine_modules(modules: list[str] | tuple[str, ...]) -> None:
    """Import ``modules``, whose classes register more backends with :func:`register_backend`.

    For engines of the operator's own (setting ``engine_modules``): the server imports them when
    it starts, and each backend process before it loads, so both know the same backend names.
    The names come from the server's settings only, never from a request.

    Raises:
        ImportError: a module cannot be imported (named in the message).

    """
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ImportError(f"engine module {module!r} cannot be imported: {exc}") from exc


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        for module in _BUILTIN_MODULES:
            importlib.import_module(module)
        _builtins_loaded = True


def engine_class(backend: str) -> type[Engine]:
    """Return the engine class registered for ``backend``.

    Raises:
        FailedPreconditionError: no such backend (reason UNKNOWN_BACKEND): backends are named by
            the catalog, so an unknown one is the operator's to fix, not the request's.

    """
    _load_builtins()
    try:
        return _BACKENDS[backend]
    except KeyError:
        known = ", ".join(sorted(_BACKENDS))
        raise FailedPreconditionError(
            f"unknown backend {backend!r}; known backends: {known}",
            reason=Reason.UNKNOWN_BACKEND,
            backend=backend,
        ) from None


def registered_backends() -> dict[str, type[Engine]]:
    """All registered backends by name."""
    _load_builtins()
    return dict(_BACKENDS)
