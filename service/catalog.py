"""The model catalog: model name → how to build its engine, read from YAML.

File format (see ``default_catalog.yaml``)::

    models:
      <name>:
        tasks: [generate]            # engines.types.Task values
        backend: llama_cpp           # engines registry key
        source: pkg://pkg/file.gguf  # see engines.sources
        device: auto                 # optional
        keep_alive: 5m               # optional, see service.keep_alive
        pinned: false                # optional
        preload: false               # optional: load at start
        options: {n_ctx: 2048}       # optional, backend-specific

Which file the server reads: ``UR_CATALOG_PATH`` (``--catalog``) when set, and only that file;
otherwise the embedded default with the user catalog (:func:`user_catalog_path`, where
``universal-runtime pull`` adds models) merged over it, its entries replacing same-named ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from engines.base import ModelSpec
from engines.errors import InvalidArgumentError
from engines.types import Task
from service.keep_alive import KEEP_ALIVE_PATTERN, parse_keep_alive
from service.model_names import validate_model_name


class CatalogEntry(BaseModel):
    """One model's configuration as written in the catalog file."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[Task] = Field(min_length=1, description="Tasks the model serves.")
    backend: str = Field(description="Engine backend (the engines registry's key).")
    source: str = Field(
        description="Where the weights come from: pkg://<package>/<path>, a local path, or a hub id "
        "(org/name)."
    )
    device: str = Field(
        default="auto", description="Device to run on: auto, cpu, cuda, cuda:<N> or mps; auto: UR_DEVICE."
    )
    keep_alive: str | None = Field(
        default=None,
        description='Idle time before the model unloads: a duration ("30s", "5m", "1h30m"), "0" (at '
        'once) or "-1" (never); unset: UR_DEFAULT_KEEP_ALIVE.',
        json_schema_extra={"pattern": KEEP_ALIVE_PATTERN},
    )
    pinned: bool = Field(default=False, description="Never unload on idle, nor evict to make room.")
    preload: bool = Field(
        default=False,
        description="Load when the server starts, in catalog order (UR_PRELOAD adds more); health is "
        "NOT_SERVING for InferenceService until every preload has ended.",
    )
    options: dict[str, Any] = Field(default_factory=dict, description="The backend's options.")

    @field_validator("keep_alive")
    @classmethod
    def _valid_keep_alive(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_keep_alive(value)
            except InvalidArgumentError as exc:
                # pydantic reports ValueErrors as the entry's problem; anything else escapes load_catalog.
                raise ValueError(exc.message) from None
        return value


class CatalogFile(BaseModel):
    """The whole catalog file; entries are checked one by one (:func:`load_catalog`)."""

    model_config = ConfigDict(extra="forbid")

    models: dict[str, Any]


class CatalogError(ValueError):
    """The catalog file is unreadable or not a catalog at all; raised at start-up."""


@dataclass(frozen=True, slots=True)
class Catalog:
    """A read catalog.

    Attributes:
        specs: the well-formed entries by name.
        invalid: the malformed entries by name, each with why (unknown keys, a bad task name,
            a missing field, an invalid model name); the server lists them as ``Error: <why>``.

    """

    specs: dict[str, ModelSpec]
    invalid: dict[str, str] = field(default_factory=dict)


def _validation_summary(exc: ValidationError) -> str:
    """One line for an entry's errors: ``tasks.0: Input should be ...; source: Field required``."""
    return "; ".join(
        f"{'.'.join(map(str, error['loc'])) or 'entry'}: {error['msg']}" for error in exc.errors()
    )


#: File name of the user catalog inside the data dir (``UR_DATA_DIR``).
USER_CATALOG_NAME = "catalog.yaml"


def user_catalog_path(data_dir: Path) -> Path:
    """The user catalog: ``<data_dir>/catalog.yaml`` (it may not exist)."""
    return Path(data_dir) / USER_CATALOG_NAME


def load_catalog(path: Path | None = None, *, user_path: Path | None = None) -> Catalog:
    """Read a catalog file, or the embedded default when ``path`` is None.

    With ``path`` None and a ``user_path`` that exists, that file's entries are merged over the
    default's (same name: the user's entry wins, valid or not). A malformed entry does not stop
    the others: it is returned in :attr:`Catalog.invalid`.

    Raises:
        CatalogError: unreadable file, invalid YAML, or not a mapping with a ``models`` mapping.

    """
    if path is None:
        text = resources.files("service").joinpath("default_catalog.yaml").read_text(encoding="utf-8")
        origin = "embedded default catalog"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise CatalogError(f"cannot read catalog {path}: {exc}") from exc
        origin = str(path)
    catalog = _parse(text, origin)
    if path is None and user_path is not None and Path(user_path).is_file():
        user = load_catalog(Path(user_path))
        for name in user.specs.keys() | user.invalid.keys():
            catalog.specs.pop(name, None)
            catalog.invalid.pop(name, None)
        catalog.specs.update(user.specs)
        catalog.invalid.update(user.invalid)
    return catalog


def _parse(text: str, origin: str) -> Catalog:
    try:
        parsed = CatalogFile.model_validate(yaml.safe_load(text) or {"models": {}})
    except (yaml.YAMLError, ValidationError) as exc:
        raise CatalogError(f"invalid catalog {origin}: {exc}") from exc
    catalog = Catalog(specs={})
    for name, raw in parsed.models.items():
        name = str(name)
        try:
            validate_model_name(name)
            entry = CatalogEntry.model_validate(raw)
        except ValidationError as exc:
            catalog.invalid[name] = f"invalid catalog entry in {origin}: {_validation_summary(exc)}"
        except ValueError as exc:
            catalog.invalid[name] = f"invalid model name in {origin}: {exc}"
        else:
            catalog.specs[name] = spec_from_entry(name, entry)
    return catalog


def spec_from_entry(name: str, entry: CatalogEntry) -> ModelSpec:
    """Build the engine-facing spec of one catalog entry."""
    return ModelSpec(
        name=name,
        backend=entry.backend,
        tasks=tuple(entry.tasks),
        source=entry.source,
        device=entry.device,
        options=dict(entry.options),
        keep_alive=entry.keep_alive,
        pinned=entry.pinned,
        preload=entry.preload,
    )
