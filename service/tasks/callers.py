"""Who a call is for: its caller for the process lanes' fair turns, its owner, and its role.

The API key that authenticated a call names it: the call's one
:class:`engines.fair_share.Caller`, set by the admission chain (:mod:`service.core.admission`)
and read here through :func:`engines.fair_share.current_caller`. A call without a key name is a
call on a server without keys: with keys, no call reaches a servicer
without one (health and reflection, which may, call nothing here).
"""

from __future__ import annotations

from typing import TypeVar

from engines.errors import PermissionDeniedError
from engines.fair_share import current_caller
from engines.owners import OwnedStores
from service.shared.api_keys import ROLE_ADMIN


def call_owner() -> str:
    """The owner of what the current call stores: its key's name, ``""`` on a server without keys.

    Every stored object of a key (responses, classifiers, detectors, batch files) is looked up
    under this name, so another key's is simply not found (NOT_FOUND, never PERMISSION_DENIED).
    """
    return current_caller().name


def is_admin() -> bool:
    """Whether the current call may do what needs role ``admin``: an admin key's, or any without keys."""
    caller = current_caller()
    return not caller.name or caller.role == ROLE_ADMIN


def require_admin(action: str) -> None:
    """Refuse ``action`` unless the current call :func:`is_admin`.

    Args:
        action: What the call tried, for the message (``"LoadModel"``, ``"fitting a shared
            classifier"``).

    Raises:
        PermissionDeniedError: the call's key has role ``user`` (PERMISSION_DENIED, reason
            ADMIN_ROLE_REQUIRED, metadata ``action`` and ``key_name``; HTTP 403).

    """
    if not is_admin():
        key_name = current_caller().name
        raise PermissionDeniedError(
            f"{action} needs an API key with role admin; key {key_name!r} has role user",
            action=action,
            key_name=key_name,
        )


S = TypeVar("S")


def write_target(stores: OwnedStores[S], shared: bool, action: str) -> tuple[S, bool]:
    """The store a write (fit, overwrite, delete) of the current call acts on, and whether it is shared.

    The caller's own (:func:`call_owner`), or with ``shared`` the shared namespace, which only an
    admin key writes (:meth:`engines.owners.OwnedStores.target`).

    Raises:
        PermissionDeniedError: ``shared`` asked by a key without role admin (``action`` names it).

    """
    if shared:
        require_admin(action)
    return stores.target(call_owner(), shared)
