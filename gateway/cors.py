"""CORS for browser clients (settings ``UR_GATEWAY_CORS_ORIGINS``; off by default)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from gateway.middleware import REQUEST_ID_HEADER

#: Methods the routes use: an OpenAI client sends GET, POST and DELETE.
CORS_METHODS = ("GET", "POST", "DELETE")
#: Request headers an OpenAI or Anthropic client sends: the browser builds of the official SDKs
#: (openai-node, anthropic's TypeScript SDK) add their ``x-stainless-*``, ``openai-*`` and
#: ``anthropic-*`` headers (and the key as ``x-api-key``), which a preflight would otherwise refuse.
CORS_HEADERS = (
    "authorization",
    "content-type",
    REQUEST_ID_HEADER,
    "openai-organization",
    "openai-project",
    "x-api-key",
    "anthropic-version",
    "anthropic-beta",
    "anthropic-dangerous-direct-browser-access",
    "x-stainless-arch",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
)
#: Browsers cache a preflight answer this long (seconds), sparing a round trip per request.
CORS_MAX_AGE_S = 600

# scheme://host[:port], as a browser sends in ``Origin``: no path, no trailing slash.
_HTTP_ORIGIN = re.compile(r"https?://(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?")


def parse_cors_origins(value: str) -> tuple[str, ...]:
    """Split a comma-separated origins setting; ``""`` (or only commas and spaces) means CORS off.

    Each origin is ``http(s)://host[:port]`` exactly as browsers send it, or ``*`` alone (any
    origin; no cookies are involved, keys travel in the ``Authorization`` header).

    Raises:
        ValueError: An origin has a path or trailing slash, another scheme, or ``*`` is mixed with
            named origins; the message names the origin.

    """
    origins = tuple(part.strip() for part in value.split(",") if part.strip())
    if "*" in origins and len(origins) > 1:
        raise ValueError("CORS origins: '*' allows every origin and cannot be mixed with named ones")
    for origin in origins:
        if origin != "*" and not _HTTP_ORIGIN.fullmatch(origin):
            raise ValueError(
                f"CORS origin {origin[:200]!r} must be scheme://host[:port] with scheme http or https "
                "and no path or trailing slash, e.g. https://app.example.com"
            )
    return origins


def install_cors(app: FastAPI, origins: Sequence[str]) -> None:
    """Answer CORS preflights and tag responses for ``origins``; no-op when there are none.

    Add it after the other middleware (outermost), so errors (401, 413, 429) carry the CORS
    headers too and a browser client can read them. ``x-request-id`` is exposed to scripts.

    Raises:
        ValueError: An origin is malformed (see :func:`parse_cors_origins`).

    """
    checked = parse_cors_origins(",".join(origins))
    if not checked:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(checked),
        allow_methods=list(CORS_METHODS),
        allow_headers=list(CORS_HEADERS),
        expose_headers=[REQUEST_ID_HEADER],
        max_age=CORS_MAX_AGE_S,
    )
