"""The catalog file's JSON Schema, generated from the entry model and every backend's options model.

Each entry of ``models`` is one of the registered backends' variants, told apart by ``backend``
(a ``const`` per backend, so an unknown backend matches none): the common fields of
:class:`service.catalog.CatalogEntry` (tasks, source, device, keep_alive, pinned) and, under
``options``, the schema of that backend's :attr:`engines.base.Engine.options_model` (types,
defaults, ranges, allowed values and descriptions; unknown options refused).

Editors validate a catalog against it (``# yaml-language-server: $schema=<file>`` as the first
line; ``universal-runtime catalog schema > catalog.schema.json`` writes one); the server itself
checks catalogs through the same models (:func:`service.catalog.load_catalog`,
:meth:`engines.base.Engine.check_spec`), so a file the schema accepts passes the server's option
checks and the other way round.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter, create_model

from engines.base import Engine
from engines.registry import registered_backends
from service.catalog import CatalogEntry
from service.model_names import MODEL_NAME_PATTERN

#: Where the committed copy of the schema lives, relative to the repository root (kept equal to
#: :func:`catalog_schema` by a test; the default catalog names it for editors).
SCHEMA_FILE = "service/catalog.schema.json"

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _summary(cls: type[Engine]) -> str:
    """The first line of the engine class's docstring (what the backend is), or its name."""
    doc = inspect.getdoc(cls)
    return doc.splitlines()[0] if doc else cls.__qualname__


def _entry_model(backend: str, cls: type[Engine]) -> type[BaseModel]:
    """The catalog entry of one backend: :class:`CatalogEntry` with ``backend`` fixed and typed options."""
    name = "".join(part.capitalize() for part in backend.split("_")) + "Entry"
    return create_model(
        name,
        __base__=CatalogEntry,
        __doc__=f"A catalog entry of backend {backend}: {_summary(cls)}",
        backend=(Literal[backend], Field(description="Engine backend (the engines registry's key).")),
        options=(
            cls.options_model,
            Field(default_factory=dict, description=f"Options of backend {backend}."),
        ),
    )


def entry_models() -> dict[str, type[BaseModel]]:
    """The entry model of every registered backend, by backend name (sorted)."""
    return {backend: _entry_model(backend, cls) for backend, cls in sorted(registered_backends().items())}


def catalog_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a catalog file.

    Returns:
        The schema as a JSON-ready dict: an object with one required key ``models``, a mapping of
        model name (the pattern of :func:`service.model_names.validate_model_name`) to an entry
        that is exactly one backend's variant (``oneOf``, with an OpenAPI-style ``discriminator``
        on ``backend`` for editors that use it). Deterministic for a given set of backends.

    """
    variants = tuple(entry_models().values())
    # One variant per backend, told apart by the backend's const (Union[(A, B, ...)] is A | B | ...).
    union: Any = Annotated[Union[variants], Field(discriminator="backend")]  # noqa: UP007
    entry = TypeAdapter(union).json_schema(ref_template="#/$defs/{model}")
    definitions = entry.pop("$defs", {})
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": "Universal Runtime model catalog",
        "description": "Models the server may load, by name (see service/default_catalog.yaml). Generated "
        "by `universal-runtime catalog schema`.",
        "type": "object",
        "properties": {
            "models": {
                "type": "object",
                "description": "Catalog entries by model name: the name clients use in requests.",
                "propertyNames": {"pattern": MODEL_NAME_PATTERN},
                "additionalProperties": entry,
            }
        },
        "required": ["models"],
        "additionalProperties": False,
        "$defs": dict(sorted(definitions.items())),
    }
