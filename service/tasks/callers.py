"""Who a call is for, as the engines' process lanes see it (their turns are fair across callers)."""

from __future__ import annotations

from engines.process_lane import caller_var
from service.request_context import api_key_name_var


def note_caller(peer: str) -> None:
    """Name the current call's caller for the process lanes' turns (PDF pages, fits).

    The caller is the name of the API key the call came with, else ``peer``, the transport's
    address of the client (gRPC's ``ipv4:host:port``: one connection; ``in-process`` for the
    gateway beside the server), so that one caller's slow jobs queue only its own
    (:class:`engines.process_lane.FairTurns`).
    """
    caller_var.set(api_key_name_var.get() or peer)
