"""Who a queued piece of work belongs to: its key, its priority class and its fair-share weight.

The service sets :data:`share_var` for each call from the API key that authenticated it (the
key's policy in the keys file); every queue that admits work (the generation scheduler, the
encoder batcher, the OCR and layout lanes) reads it when the work is enqueued, in the caller's
own context. Engines import nothing above them, so the share is a plain dataclass here.
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

#: The share of the current call; set by the service per call, read by queues at enqueue time.
share_var: contextvars.ContextVar[Share] = contextvars.ContextVar("share", default=DEFAULT_SHARE)


def current_share() -> Share:
    """The :class:`Share` of the call running in this context (:data:`DEFAULT_SHARE` when none was set)."""
    return share_var.get()
