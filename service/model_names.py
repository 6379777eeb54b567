"""Validation of model and resource names that clients send.

Clients name catalog entries (``smollm2-135m-instruct``) or, when the server allows it,
Hugging Face hub ids (``org/name``). Nothing that looks like a filesystem path is accepted,
so a name can never make the server read an arbitrary file.
"""

from __future__ import annotations

import re

# One or two segments of [A-Za-z0-9._-], each starting with an alphanumeric (the shape of
# hub ids); "..", absolute paths, backslashes and empty segments cannot match.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9][A-Za-z0-9._-]{0,127})?")
#: The names :func:`validate_model_name` accepts, as one regular expression (for the catalog's
#: JSON Schema; the same in Python's and ECMAScript's dialects).
MODEL_NAME_PATTERN = rf"^(?!.*\.\.){_NAME.pattern}$"


def validate_model_name(name: str) -> str:
    r"""Return ``name`` if it is a safe model name.

    Raises:
        ValueError: empty, too long, path-like (``/etc/passwd``, ``../x``, ``a\\b``) or
            containing characters outside ``[A-Za-z0-9._-/]``.

    """
    if not name:
        raise ValueError("model name is empty")
    if not _NAME.fullmatch(name) or ".." in name:
        raise ValueError(
            "model names are catalog names or hub ids ([A-Za-z0-9._-], at most one '/'); "
            "paths are not allowed"
        )
    return name
