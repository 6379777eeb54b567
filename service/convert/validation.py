"""Small helpers that raise INVALID_ARGUMENT naming the offending field (client input checks)."""

from __future__ import annotations

from engines.errors import InvalidArgumentError


def require(condition: bool, field: str, message: str, **metadata: object) -> None:
    """Raise :class:`InvalidArgumentError` with ``field`` in its metadata unless ``condition``."""
    if not condition:
        raise InvalidArgumentError(f"{field}: {message}", field=field, **metadata)


def check_range(value: float, field: str, low: float, high: float, *, low_open: bool = False) -> None:
    """Require ``low <= value <= high`` (``low < value`` when ``low_open``)."""
    ok = (value > low if low_open else value >= low) and value <= high
    bracket = "(" if low_open else "["
    require(ok, field, f"must be in {bracket}{low}, {high}], got {value}", value=value)


def require_texts(values, field: str, max_inputs: int) -> list[str]:
    """Require 1..``max_inputs`` texts, none empty or blank; return them as a list.

    Raises:
        InvalidArgumentError: no texts, too many, or an empty one (``field[i]`` names it).

    """
    require(len(values) > 0, field, "must contain at least one text")
    require(len(values) <= max_inputs, field, f"at most {max_inputs} texts per request, got {len(values)}")
    for i, text in enumerate(values):
        require(bool(text.strip()), f"{field}[{i}]", "must not be empty")
    return list(values)


def validate_json_schema(schema: object, field: str) -> dict:
    """Return ``schema`` if it is a valid JSON Schema object.

    Raises:
        InvalidArgumentError: not an object, or invalid under the JSON Schema meta-schema
            (reason INVALID_JSON_SCHEMA).

    """
    from jsonschema import Draft202012Validator, SchemaError

    if not isinstance(schema, dict):
        raise InvalidArgumentError(
            f"{field}: a JSON Schema must be a JSON object", reason="INVALID_JSON_SCHEMA", field=field
        )
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise InvalidArgumentError(
            f"{field}: invalid JSON Schema: {exc.message}", reason="INVALID_JSON_SCHEMA", field=field
        ) from None
    return schema
