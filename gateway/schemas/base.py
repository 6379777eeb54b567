"""Base classes of the request models.

OpenAI-format bodies (:class:`OpenAIRequestModel`) accept fields they do not know and log them;
the bodies of the runtime's own routes (:class:`StrictRequestModel`) refuse them.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, model_validator

logger = logging.getLogger("gateway.schemas")

# Integer fields bound for int32/int64 proto fields: out-of-range values must be a 400 here, not
# a ValueError (500) when the proto field is assigned.
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]

MAX_JSON_DEPTH = 64
"""Deepest nesting of objects and arrays accepted in a free-form JSON field (the server's limit too).

Deeper values would make ``json.dumps`` (forwarding them) recurse past Python's limit, a 500.
"""


def json_depth(value: object, limit: int = MAX_JSON_DEPTH) -> int:
    """Levels of nested dicts and lists in ``value`` (a scalar is 0, ``{}`` is 1).

    Walks level by level without recursion and stops counting past ``limit``, so the result is
    at most ``limit + 1``.
    """
    depth, level = 0, [value]
    while depth <= limit:
        containers = [item for item in level if isinstance(item, dict | list)]
        if not containers:
            break
        depth += 1
        level = [
            child for item in containers for child in (item.values() if isinstance(item, dict) else item)
        ]
    return depth


def _shallow_json(value: dict[str, Any]) -> dict[str, Any]:
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested too deep: at most {MAX_JSON_DEPTH} levels of objects and arrays")
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_shallow_json)]
"""A free-form JSON object (a JSON Schema, tool arguments) nested at most :data:`MAX_JSON_DEPTH` levels."""


#: Unknown field names one warning names; the rest are counted. Each name is cut to
#: :data:`LOGGED_NAME_CHARS` characters, so the line stays under about 1 KB whatever the body holds.
LOGGED_UNKNOWN_FIELDS = 10
LOGGED_NAME_CHARS = 64


def unknown_fields_text(names: list[str]) -> str:
    """The first :data:`LOGGED_UNKNOWN_FIELDS` of ``names`` (sorted, each cut short), then how many more.

    For example ``"a, b, c"`` or ``"k0, k1, ..., k9 and 999990 more"``.
    """
    shown = [
        name if len(name) <= LOGGED_NAME_CHARS else f"{name[:LOGGED_NAME_CHARS]}…"
        for name in sorted(names)[:LOGGED_UNKNOWN_FIELDS]
    ]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


class OpenAIRequestModel(BaseModel):
    """A request body (or part of one) that tolerates fields it does not know.

    OpenAI clients send fields this gateway does not implement (``user``, ``store``,
    ``parallel_tool_calls`` ...). Rejecting them would break those clients, and ignoring them
    quietly would hide that the request is not served as asked, so they are accepted, kept in
    ``model_extra`` and logged at warning level (at most :data:`LOGGED_UNKNOWN_FIELDS` names; the
    body's objects are bounded in keys before validation, :mod:`gateway.json_body`).
    """

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="wrap")
    @classmethod
    def _warn_about_unknown_fields(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if isinstance(data, cls):
            return data  # validated already (FastAPI checks the body gateway.json_body parsed)
        model = handler(data)
        if model.model_extra:
            unknown = unknown_fields_text(list(model.model_extra))
            logger.warning("%s: ignoring unsupported fields %s", cls.__name__, unknown)
        return model


class StrictRequestModel(BaseModel):
    """A body (or part of one) of the runtime's own routes: a field it does not know is a 400.

    Anomaly detection, classifiers, NER, OCR and documents have no outside clients to stay
    compatible with, so a misspelt field (``"contamnation": 0.1``) is refused with its name
    instead of being served with the default. A model inheriting an OpenAI-tolerant base becomes
    strict by naming this class last among its bases (pydantic merges configs left to right).
    """

    model_config = ConfigDict(extra="forbid")


def keep_alive_duration(value: str | int | None) -> str:
    """Convert a request's ``keep_alive`` to the server's duration string.

    Strings pass through (``"5m"``, ``"0"``, ``"-1"``); an integer counts seconds (Ollama's
    convention), except 0 and -1 which keep their special meanings; ``None`` gives ``""`` (the
    model's configured keep-alive).
    """
    if value is None:
        return ""
    if isinstance(value, int) and value not in (0, -1):
        return f"{value}s"
    return str(value)
