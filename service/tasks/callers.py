"""Who a call is for: its caller for the process lanes' fair turns, its owner, and its role.

The API key that authenticated a call names it (``api_key_name_var``, set by
:class:`service.interceptors.AuthInterceptor` with the key's role in ``api_key_role_var``). A
call without a key name is a call on a server without keys: with keys, no call reaches a servicer
without one (health and reflection, which may, call nothing here).
"""

from __future__ import annotations

from typing import TypeVar

from engines.errors import PermissionDeniedError
from engines.owners import OwnedStores
from engines.process_lane import caller_var
from service.request_context import api_key_name_var, api_key_role_var
from service.shared.api_keys import ROLE_ADMIN


def note_caller(peer: str, client_address: str = "") -> None:
    """Name the current call's caller for the process lanes' turns (PDF pages, fits).

    The caller is the name of the API key the call came with; on a server without keys, ``peer``,
    the transport's address of the client (gRPC's ``ipv4:host:port``: one connection;
    ``in-process`` for the gateway beside the server), followed by ``client_address`` when the
    call carries one: the HTTP client's address a gateway passes
    (:mod:`service.shared.client_address`), since every gateway call comes from the gateway's own
    peer. So one caller's slow jobs queue only its own (:class:`engines.process_lane.FairTurns`),
    and HTTP clients at two addresses take turns as two gRPC connections do.

    With keys, the key's name is the caller and ``client_address`` is ignored. Without keys,
    anyone may call, and a value a client forges gains it nothing beyond what another connection
    would: the address only splits the caller of its own connection (``peer`` comes first, and a
    gRPC client cannot choose its peer), so naming another client's address joins neither that
    client's turns nor the gateway's.
    """
    key_name = api_key_name_var.get()
    caller_var.set(key_name or (f"{peer} {client_address}" if client_address else peer))


def call_owner() -> str:
    """The owner of what the current call stores: its key's name, ``""`` on a server without keys.

    Every stored object of a key (responses, classifiers, detectors, batch files) is looked up
    under this name, so another key's is simply not found (NOT_FOUND, never PERMISSION_DENIED).
    """
    return api_key_name_var.get()


def is_admin() -> bool:
    """Whether the current call may do what needs role ``admin``: an admin key's, or any without keys."""
    return not api_key_name_var.get() or api_key_role_var.get() == ROLE_ADMIN


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
        key_name = api_key_name_var.get()
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
