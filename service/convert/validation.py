"""Small helpers that raise INVALID_ARGUMENT naming the offending field (client input checks)."""

from __future__ import annotations

import itertools
import json
import re

from engines.errors import InvalidArgumentError
from engines.generation.json_schema_bounds import check_schema_bounds
from engines.reasons import Reason

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in client JSON (schemas): real schemas stay
far below, while thousands of levels make ``json.loads``, the JSON Schema validator and the
grammar compilers recurse past Python's limit (RecursionError, which would be INTERNAL)."""

MAX_JSON_CHARS = 256 * 1024
"""Longest client JSON text accepted (schemas), in characters. Converters run on the event loop
(a depth scan, then parsing and validation, each linear in the text), so the text is
refused by its length first; OpenAI caps a structured-output schema's names and enum values at
120,000 characters in all, and real tool schemas are a few KB."""

# A JSON string, matched possessively so the scan stays linear on any input: an unterminated
# string (or one ending in a lone backslash) runs to the end of the text instead of failing
# and being retried from every quote inside it.
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


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
    # Each read of a protobuf string field decodes it anew, on the event loop:
    # read once, and test blankness without copying (``isspace`` stops at the first letter).
    texts = list(values)
    for i, text in enumerate(texts):
        require(bool(text) and not text.isspace(), f"{field}[{i}]", "must not be empty")
    return texts


def json_nesting_depth(text: str) -> int:
    """Deepest nesting of arrays and objects in JSON ``text``, found without parsing it.

    Brackets inside strings do not count. Linear in ``len(text)`` and recursion-free, so it is
    safe on any input; for invalid JSON the result is only an upper bound of what a parser sees.
    """
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


def parse_json(text: str, field: str, *, reason: str = Reason.INVALID_JSON_SCHEMA) -> object:
    """Parse client JSON ``text`` that may nest at most :data:`MAX_JSON_DEPTH` levels.

    The length (at most :data:`MAX_JSON_CHARS`) and then the depth are checked before parsing, so
    that long input cannot hold the event loop and deep input cannot make the parser (or whatever
    walks the result) recurse.

    Raises:
        InvalidArgumentError: longer than :data:`MAX_JSON_CHARS` (reason INPUT_TOO_LONG), nested too
            deep, or not valid JSON (``reason``; ``field`` in the metadata).

    """
    if len(text) > MAX_JSON_CHARS:
        raise InvalidArgumentError(
            f"{field}: {len(text)} characters of JSON; at most {MAX_JSON_CHARS} are allowed",
            reason=Reason.INPUT_TOO_LONG,
            field=field,
            characters=len(text),
            max_characters=MAX_JSON_CHARS,
        )
    depth = json_nesting_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise InvalidArgumentError(
            f"{field}: JSON nested {depth} levels deep; at most {MAX_JSON_DEPTH} levels are allowed",
            reason=reason,
            field=field,
            depth=depth,
            max_depth=MAX_JSON_DEPTH,
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(
            f"{field}: not valid JSON ({exc.msg} at position {exc.pos})", reason=reason, field=field
        ) from None


def validate_json_schema(schema: object, field: str) -> dict:
    """Return ``schema`` if it is a valid JSON Schema object.

    The structured-output bounds come first (linear, a few ms at most, stopping at the first
    one exceeded), so that the meta-schema check (costly in the schema's size, on the event
    loop) only ever sees a bounded schema.

    Raises:
        InvalidArgumentError: not an object, over a bound of :func:`check_schema_bounds` (reason
            JSON_SCHEMA_TOO_COMPLEX), or invalid under the JSON Schema meta-schema (reason
            INVALID_JSON_SCHEMA).

    """
    from jsonschema import Draft202012Validator, SchemaError

    if not isinstance(schema, dict):
        raise InvalidArgumentError(
            f"{field}: a JSON Schema must be a JSON object", reason=Reason.INVALID_JSON_SCHEMA, field=field
        )
    try:
        check_schema_bounds(schema)
    except InvalidArgumentError as exc:
        metadata = {**exc.metadata, "field": field}
        raise InvalidArgumentError(f"{field}: {exc.message}", reason=exc.reason, **metadata) from None
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise InvalidArgumentError(
            f"{field}: invalid JSON Schema: {exc.message}", reason=Reason.INVALID_JSON_SCHEMA, field=field
        ) from None
    return schema
