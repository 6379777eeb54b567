"""What crosses the socket beside each request: the call's id, its caller and its trace context.

The server decided the caller (admission); the backend's queues and schedulers need it for their
fair turns, so it travels as metadata, read back into the same :class:`engines.fair_share.Caller`.
Only the server reaches a backend's socket (a directory only its user may enter), so the backend
trusts these values as the server's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from opentelemetry import propagate

from engines.fair_share import Caller, Priority, Share

REQUEST_ID_KEY = "x-request-id"
CALLER_NAME_KEY = "x-ur-caller-name"
CALLER_ROLE_KEY = "x-ur-caller-role"
CALLER_LANE_KEY = "x-ur-caller-lane"
SHARE_KEY = "x-ur-share-key"
SHARE_PRIORITY_KEY = "x-ur-share-priority"
SHARE_WEIGHT_KEY = "x-ur-share-weight"


def call_metadata(caller: Caller, request_id: str) -> tuple[tuple[str, str], ...]:
    """The metadata of a backend call made for ``caller``: ids, caller, and the current trace context.

    Values are the server's own (a key's name, a role, a client address already checked by
    admission); the trace context is W3C ``traceparent``/``tracestate`` when a span is active.
    """
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    share = caller.share
    return (
        (REQUEST_ID_KEY, request_id),
        (CALLER_NAME_KEY, caller.name),
        (CALLER_ROLE_KEY, caller.role),
        (CALLER_LANE_KEY, caller.lane),
        (SHARE_KEY, share.key),
        (SHARE_PRIORITY_KEY, str(int(share.priority))),
        (SHARE_WEIGHT_KEY, repr(share.weight)),
        *sorted(carrier.items()),
    )


def caller_of(metadata: Iterable[tuple[str, str | bytes]]) -> tuple[Caller, str, dict[str, str]]:
    """The caller, request id and trace carrier that :func:`call_metadata` sent.

    Missing or unreadable values fall back to the defaults (no key, interactive, weight 1).

    Returns:
        ``(caller, request_id, carrier)``: ``carrier`` holds the trace headers for
        ``opentelemetry.propagate.extract``.

    """
    values = {key: value for key, value in metadata if isinstance(value, str)}
    try:
        priority = Priority(int(values.get(SHARE_PRIORITY_KEY, "0")))
    except ValueError:
        priority = Priority.INTERACTIVE
    try:
        weight = float(values.get(SHARE_WEIGHT_KEY, "1.0"))
    except ValueError:
        weight = 1.0
    if not math.isfinite(weight) or weight <= 0:
        weight = 1.0
    share = Share(key=values.get(SHARE_KEY, ""), priority=priority, weight=weight)
    caller = Caller(
        name=values.get(CALLER_NAME_KEY, ""),
        role=values.get(CALLER_ROLE_KEY, ""),
        share=share,
        lane=values.get(CALLER_LANE_KEY, ""),
    )
    carrier = {key: values[key] for key in ("traceparent", "tracestate") if key in values}
    return caller, values.get(REQUEST_ID_KEY, ""), carrier
