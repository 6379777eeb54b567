"""Who a queued piece of work belongs to: its key, its priority class and its fair-share weight.

The service's admission sets :data:`caller_var` once for each call (a :class:`Caller`: the API
key that authenticated it, its role, the call's :class:`Share` from the key's policy, and the
caller's fair-turn lane); every queue that admits work (the generation scheduler, the encoder
batcher, the OCR and layout lanes) reads it when the work is enqueued, in the caller's own
context. Engines import nothing above them, so the caller is a plain dataclass here.
"""

from __future__ import annotations

import contextvars
import enum
from dataclasses import dataclass


class Priority(enum.IntEnum):
    """A call's class: every queue admits all ``INTERACTIVE`` work before any ``BATCH`` work."""

    INTERACTIVE = 0
    BATCH = 1


@dataclass(frozen=True, slots=True)
class Share:
    """The owner of a queued piece of work.

    Attributes:
        key: Name of the API key ("" for an unauthenticated server: every call shares one key).
        priority: The call's class (:class:`Priority`).
        weight: Fair-share weight within the class (> 0; 1.0 by default): a key of weight 2 is
            served twice the work of a key of weight 1 while both have work queued.

    """

    key: str = ""
    priority: Priority = Priority.INTERACTIVE
    weight: float = 1.0


DEFAULT_SHARE = Share()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a call is for: the one record of its identity, read by every queue, lane and store.

    Attributes:
        name: Name of the API key that authenticated the call ("" on a server without keys);
            never the key itself. Owner of what the call stores.
        role: That key's role (``"user"`` or ``"admin"``; "" without a key).
        share: The call's class and fair-share weight in every queue (:class:`Share`).
        lane: The caller's identity in a lane's fair turns (:class:`engines.process_lane.FairTurns`):
            the key's name, or without keys the client's transport address.

    """

    name: str = ""
    role: str = ""
    share: Share = DEFAULT_SHARE
    lane: str = ""


DEFAULT_CALLER = Caller()

#: The caller of the call running in this context; set once per call by the service's admission
#: and read by queues at enqueue time (:data:`DEFAULT_CALLER` outside a call).
caller_var: contextvars.ContextVar[Caller] = contextvars.ContextVar("caller", default=DEFAULT_CALLER)


def current_caller() -> Caller:
    """The :class:`Caller` of the call running in this context (:data:`DEFAULT_CALLER` when none was set)."""
    return caller_var.get()


def current_share() -> Share:
    """The :class:`Share` of the call running in this context (:data:`DEFAULT_SHARE` when none was set)."""
    return caller_var.get().share
