"""The per-backend catalog option tables of docs/models/catalog.md, generated from the backends' options models.

One table per registered backend (option, type, default, allowed values, description), rendered
from the JSON Schema of its :attr:`engines.base.Engine.options_model` (the same schema the
catalog's, :mod:`service.catalog_schema`, embeds), between the page's
``<!-- catalog-options:begin -->`` and ``<!-- catalog-options:end -->`` lines;
``tests/docs/test_catalog_tables.py`` checks they equal what :func:`render` makes. After changing an
option, rewrite them (and the committed schema) with::

    .venv/bin/python -m tests.docs.catalog_tables
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from engines.base import Engine
from engines.registry import registered_backends
from service.catalog_schema import SCHEMA_FILE, catalog_schema

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "models" / "catalog.md"
BEGIN = "<!-- catalog-options:begin -->"
END = "<!-- catalog-options:end -->"
_REGION = re.compile(rf"{re.escape(BEGIN)}\n(.*?){re.escape(END)}", re.S)


def _code(value: Any) -> str:
    """A value as the page shows it in code: ``true``, ``0.5``, ``torch``, ``{}``."""
    text = value if isinstance(value, str) else json.dumps(value)
    return f"`{text}`"


def _plain(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The schema of the set value, and whether the option may be unset (``X | None``)."""
    choices = schema.get("anyOf")
    if choices is None:
        return schema, False
    others = [choice for choice in choices if choice.get("type") != "null"]
    if len(others) != 1:
        raise AssertionError(f"an option of several types is not rendered: {schema}")
    return others[0], len(others) < len(choices)


def _type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type(schema['items'])}s"
    if kind == "object":
        return f"mapping of {_type(schema.get('additionalProperties', {'type': 'value'}))}s"
    if schema.get("format") == "path":
        return "path"
    if kind is None:
        raise AssertionError(f"an option without a type is not rendered: {schema}")
    return str(kind)


def _allowed(schema: dict[str, Any]) -> str:
    """Allowed values or range in words: ``torch``, ``onnx``; ``0 to 19``; ``≥ 1``; ``> 0``."""
    if "enum" in schema:
        return ", ".join(_code(value) for value in schema["enum"])
    low, high = schema.get("minimum"), schema.get("maximum")
    parts = []
    if low is not None and high is not None:
        parts.append(f"{low} to {high}")
    elif low is not None:
        parts.append(f"≥ {low}")
    elif high is not None:
        parts.append(f"≤ {high}")
    if "exclusiveMinimum" in schema:
        parts.append(f"> {schema['exclusiveMinimum']}")
    if "exclusiveMaximum" in schema:
        parts.append(f"< {schema['exclusiveMaximum']}")
    if schema.get("minLength") == 1:
        parts.append("not empty")
    if "propertyNames" in schema and "enum" in schema["propertyNames"]:
        parts.append("keys " + ", ".join(_code(value) for value in schema["propertyNames"]["enum"]))
    if schema.get("type") == "array" and "enum" in schema.get("items", {}):
        parts.append("each " + ", ".join(_code(value) for value in schema["items"]["enum"]))
    return "; ".join(parts)


def _default(field: FieldInfo) -> str:
    """The option's default as the page shows it: ``unset``, a value in code, or ``required``."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    return _code(str(value) if isinstance(value, Path) else value)


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _summary(cls: type[Engine]) -> str:
    """What the backend is: its options model's docstring's first line, RST literals as Markdown."""
    doc = inspect.getdoc(cls.options_model) or inspect.getdoc(cls) or ""
    return doc.splitlines()[0].replace("``", "`") if doc else ""


def nested_model(field: FieldInfo) -> type[BaseModel] | None:
    """The pydantic model of an option that is a block of options (``reasoning``), else None."""
    for kind in (field.annotation, *typing.get_args(field.annotation)):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind
    return None


def _rows(model: type[BaseModel], prefix: str, backend: str) -> list[str]:
    """One table row per option of ``model``; a block of options is a row and then a row per key, dotted."""
    schema = model.model_json_schema()
    lines = []
    for name, field in schema["properties"].items():
        info = model.model_fields[name]
        block = nested_model(info)
        value, may_be_unset = _plain(field)
        kind = ("mapping" if block is not None else _type(value)) + (" or unset" if may_be_unset else "")
        description = field.get("description")
        if not description:
            raise AssertionError(f"option {prefix}{name} of backend {backend} has no description")
        allowed = "" if block is not None else _allowed(value)
        lines.append(
            f"| `{prefix}{name}` | {kind} | {_default(info)} | {_cell(allowed)} | {_cell(description)} |"
        )
        if block is not None:
            lines += _rows(block, f"{prefix}{name}.", backend)
    return lines


def backend_table(backend: str, cls: type[Engine]) -> str:
    """One backend's section: a heading, what it serves, and the table of its options."""
    tasks = ", ".join(sorted(task.value for task in cls.tasks))
    lines = [f"## `{backend}`", "", f"{_summary(cls)} Tasks: {tasks}.", ""]
    lines += ["| option | type | default | allowed | what |", "|---|---|---|---|---|"]
    lines += _rows(cls.options_model, "", backend)
    return "\n".join(lines)


def render() -> str:
    """Every backend's section, by backend name, as the page has them between the markers."""
    return "\n\n".join(backend_table(name, cls) for name, cls in sorted(registered_backends().items())) + "\n"


def page_region(text: str) -> str | None:
    """The page's text between the markers (None when they are missing)."""
    match = _REGION.search(text)
    return None if match is None else match.group(1)


def rewrite(page: Path = PAGE, schema_file: Path = ROOT / SCHEMA_FILE) -> None:
    """Replace the page's tables with the generated ones and rewrite the committed schema.

    Raises:
        ValueError: the page's markers are missing or repeated.

    """
    text = page.read_text()
    text, count = _REGION.subn(lambda _match: f"{BEGIN}\n{render()}{END}", text)
    if count != 1:
        raise ValueError(f"{page}: expected one {BEGIN} ... {END} region, found {count}")
    page.write_text(text)
    schema_file.write_text(json.dumps(catalog_schema(), indent=2) + "\n")


if __name__ == "__main__":
    rewrite()
