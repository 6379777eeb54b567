"""Keep-alive durations, as in docker/model-runner's backend interface (``pkg/inference/backend.go``).

* a Go duration string (``"30s"``, ``"5m"``, ``"1h30m"``, ``"250ms"``): stay loaded that long
  after the last request;
* ``"0"``: unload as soon as the model is idle;
* ``"-1"`` or any negative duration: never unload on idle.

Source: Go's ``time.ParseDuration`` grammar (https://pkg.go.dev/time#ParseDuration).
"""

from __future__ import annotations

import math
import re

from engines.errors import InvalidArgumentError
from engines.reasons import Reason

DEFAULT_KEEP_ALIVE = "5m"
FOREVER = math.inf

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_COMPONENT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
#: The strings :func:`parse_keep_alive` accepts, as one regular expression (for the catalog's JSON
#: Schema; the same in Python's and ECMAScript's dialects).
KEEP_ALIVE_PATTERN = rf"^\s*(0|-1|[+-]?({_COMPONENT.pattern})+)\s*$"


def parse_keep_alive(value: str) -> float:
    """Parse a keep-alive string into seconds; ``math.inf`` means never unload.

    Raises:
        InvalidArgumentError: not ``"0"``, ``"-1"`` or a Go duration (reason INVALID_KEEP_ALIVE).

    """
    text = value.strip()
    if text == "0":
        return 0.0
    if text == "-1":
        return FOREVER
    sign = 1.0
    body = text
    if body[:1] in "+-" and body:
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    total = 0.0
    position = 0
    for match in _COMPONENT.finditer(body):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not body or position != len(body):
        raise InvalidArgumentError(
            f'invalid keep_alive {value!r}: expected a duration such as "30s", "5m", "1h", or "0" or "-1"',
            reason=Reason.INVALID_KEEP_ALIVE,
            field="keep_alive",
            value=value,
        )
    return FOREVER if sign < 0 else total


def format_keep_alive(seconds: float) -> str:
    """Format seconds like Go's ``time.Duration.String`` (``"5m0s"``); ``"-1"`` for never, ``"0s"`` for 0."""
    if math.isinf(seconds):
        return "-1"
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    secs_text = f"{secs:g}s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{secs_text}"
    if minutes:
        return f"{int(minutes)}m{secs_text}"
    return secs_text
