"""Step ``priority``: the call's class in every queue, and its caller made current.

A call may ask for the ``batch`` class (``x-ur-priority: batch``; HTTP header ``X-UR-Priority``
at the gateway), which every queue serves after all interactive work; ``interactive`` asks for
the key's own class. A call may lower its class, never raise it (a batch key stays batch). The
value is matched in any case, spaces around it ignored; any other is refused INVALID_ARGUMENT,
reason ``INVALID_PRIORITY``.

Without API keys every call shares one key (``""``), weight 1; its lane in the fair turns of
slow jobs is its transport address (:func:`lane_of`). This step then sets the call's caller in
:data:`engines.fair_share.caller_var`, where the engines' queues and lanes read it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from engines.errors import InvalidArgumentError, clip_text
from engines.fair_share import Caller, Share, caller_var
from engines.reasons import Reason
from service.core.admission.authentication import PRIORITY_BY_NAME
from service.core.chain import CheckStep
from service.core.context import CallContext

PRIORITY_METADATA_KEY = "x-ur-priority"
"""Call metadata (HTTP header ``X-UR-Priority`` at the gateway) that lowers a call to ``batch``."""


def lane_of(peer: str, client_address: str) -> str:
    """The fair-turn lane of a call on a server without keys.

    The transport's address of the client (gRPC's ``ipv4:host:port``: one connection;
    ``in-process`` for the gateway beside the server), followed by the HTTP client's address a
    gateway passed (:mod:`service.shared.client_address`), since every gateway call comes from
    the gateway's own peer. So HTTP clients at two addresses take turns as two gRPC connections
    do. A value a client forges gains it nothing beyond what another connection would: the peer
    comes first, and a gRPC client cannot choose its peer.
    """
    return f"{peer} {client_address}" if client_address else peer


def lowered(share: Share, asked: str | None) -> Share:
    """``share`` with its class lowered to what ``asked`` names (``None``: unchanged).

    Raises:
        InvalidArgumentError: ``asked`` is neither ``batch`` nor ``interactive`` (reason
            INVALID_PRIORITY, metadata ``field`` ``x-ur-priority``).

    """
    if asked is None:
        return share
    priority = PRIORITY_BY_NAME.get(asked.strip().lower())
    if priority is None:
        raise InvalidArgumentError(
            f"metadata {PRIORITY_METADATA_KEY} (HTTP header X-UR-Priority) must be 'batch' or "
            f"'interactive', got {clip_text(asked, 64)!r}",
            reason=Reason.INVALID_PRIORITY,
            field=PRIORITY_METADATA_KEY,
        )
    if priority <= share.priority:  # BATCH > INTERACTIVE: the lower class of the two
        return share
    return dataclasses.replace(share, priority=priority)


class PriorityClass(CheckStep):
    """Decides the call's class and sets its caller for the engines (see the module)."""

    name = "priority"

    def admit(self, ctx: CallContext, request: Any) -> None:
        """Decide the call's class and set its caller (see the module), or refuse a bad class."""
        caller = ctx.caller
        if not caller.name and not caller.lane:  # no authentication step: a server without keys
            trusted = ctx.trusted_caller
            caller = trusted if trusted is not None else Caller(lane=lane_of(ctx.peer, ctx.client_address))
        share = lowered(caller.share, ctx.priority)
        if share is not caller.share:
            caller = dataclasses.replace(caller, share=share)
        ctx.caller = caller
        caller_var.set(caller)
