"""OpenAI's ``x-ratelimit-*`` headers, written from a key's bucket state: one formatter for both faces.

The server (:mod:`service.quotas`) describes a key's request and token buckets as a state of
strings: ``limit_requests`` (the bucket's size), ``remaining_requests`` (whole calls left now),
``reset_requests_s`` (seconds until the bucket is full again, ``"2.000"``), and the same
``_tokens`` entries for ``tokens_per_minute``. That state travels in two places: the ErrorInfo
metadata of a call refused ``QUOTA_EXCEEDED``, and, already written as headers by
:func:`rate_limit_headers`, the initial metadata of every admitted call of a key with either quota.
The gateway turns the first into a 429's headers with this same function and copies the second to
the HTTP answer as it is, so both spell the headers alike: names as OpenAI sends them
(https://platform.openai.com/docs/guides/rate-limits, "Rate limits in headers"), the reset as a
Go-style duration (``250ms``, ``1.5s``, ``6m0s``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

RATE_LIMIT_HEADERS = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
)
"""Every header :func:`rate_limit_headers` may write (gRPC metadata keys and HTTP headers alike)."""

# What a value of those headers may hold: a count or a duration (``1m30.5s``), 32 characters at
# most. Anything else from a peer is dropped rather than copied into an HTTP header.
_VALUE = re.compile(r"[0-9a-z.]{1,32}")


def openai_duration(seconds: float) -> str:
    """A duration as OpenAI's ``x-ratelimit-reset-*`` headers write it: ``250ms``, ``1.5s``, ``6m0s``.

    Under a second, whole milliseconds rounded up; else minutes and seconds (to the millisecond).
    A negative, zero or non-finite figure is ``0s``.
    """
    if not math.isfinite(seconds) or seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(round(seconds, 3), 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".")
    return f"{int(minutes)}m{text}s" if minutes else f"{text}s"


def rate_limit_headers(state: Mapping[str, str]) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers of a key's bucket state (see the module docstring).

    Args:
        state: ``limit_{name}``, ``remaining_{name}`` and ``reset_{name}_s`` for ``name`` in
            ``requests`` and ``tokens`` (any other entry is ignored). A bucket whose three
            entries are not all there gets no headers.

    Returns:
        ``x-ratelimit-limit-{name}`` and ``x-ratelimit-remaining-{name}`` as given, and
        ``x-ratelimit-reset-{name}`` in :func:`openai_duration`'s form; ``{}`` for a state
        without a bucket. A reset that is not a number (a peer's malformed figure) leaves that
        one header out; the others still hold.

    """
    headers: dict[str, str] = {}
    for name in ("requests", "tokens"):
        limit, remaining = state.get(f"limit_{name}"), state.get(f"remaining_{name}")
        reset = state.get(f"reset_{name}_s")
        if limit is None or remaining is None or reset is None:
            continue
        headers[f"x-ratelimit-limit-{name}"] = limit
        headers[f"x-ratelimit-remaining-{name}"] = remaining
        try:
            headers[f"x-ratelimit-reset-{name}"] = openai_duration(float(reset))
        except ValueError:
            continue
    return headers


def received_rate_limit_headers(metadata: Any) -> dict[str, str]:
    """The ``x-ratelimit-*`` entries of a call's received metadata, fit to copy into HTTP headers.

    Args:
        metadata: A call's initial metadata: anything with ``get(name)`` (``grpc.aio.Metadata``,
            a dict); ``None`` for none.

    Returns:
        Each of :data:`RATE_LIMIT_HEADERS` that is there as text of at most 32 characters of
        ``[0-9a-z.]`` (counts and durations), by name; binary, longer or other values are
        dropped. Reads only those six names, whatever the peer sent.

    """
    if metadata is None:
        return {}
    headers: dict[str, str] = {}
    for name in RATE_LIMIT_HEADERS:  # six names, not the peer's entries
        value = metadata.get(name)
        if isinstance(value, str) and _VALUE.fullmatch(value):
            headers[name] = value
    return headers
