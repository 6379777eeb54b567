"""The HTTP client's address, which the gateway passes to the server as call metadata.

Every call through the gateway reaches the server from the gateway's own peer (its gRPC
connection, or ``in-process`` in the combined process), so without API keys the server would see
all HTTP clients as one caller, and the process lanes' fair turns (PDF rendering) would serve them
first come, first served, and one client's content-bomb PDFs would hold another's one-page PDF
behind all of them (see docs/architecture/design-notes.md#fair-turns-on-the-pdf-renderer).
The gateway names the client in :data:`CLIENT_ADDRESS_METADATA_KEY` (its address as uvicorn saw
it, the ``X-Forwarded-For`` one behind a trusted proxy); the server uses it, within the gateway's
peer, as the fair-share caller when it has no keys (:func:`service.core.admission.priority.lane_of`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CLIENT_ADDRESS_METADATA_KEY = "x-ur-client-address"
"""Call metadata naming the HTTP client a gateway call is for (its IP address)."""

MAX_CLIENT_ADDRESS_CHARS = 64
"""Longest address kept (an IPv6 address with a zone is at most 45 characters); longer ones are cut."""


def clip_address(value: str) -> str:
    """``value`` cut to :data:`MAX_CLIENT_ADDRESS_CHARS` printable ASCII characters (others dropped).

    gRPC metadata values are printable ASCII; an address from a proxy's header may not be.
    """
    return "".join(c for c in value[:MAX_CLIENT_ADDRESS_CHARS] if " " <= c <= "~")


def client_address(metadata: Iterable[tuple[str, Any]]) -> str:
    """The client address in call metadata (the first entry, :func:`clip_address`), ``""`` without one."""
    for key, value in metadata:
        if key == CLIENT_ADDRESS_METADATA_KEY and isinstance(value, str):
            return clip_address(value)
    return ""
