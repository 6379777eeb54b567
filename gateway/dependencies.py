"""FastAPI dependencies shared by the routes: gRPC stubs, call metadata and API key checking.

The dependencies FastAPI resolves per request are ``async def`` although they never await:
FastAPI runs a plain ``def`` dependency in its thread pool, one thread hop per dependency per
request, which cost more than the rest of a trivial call together.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gateway.errors import GatewayError
from gateway.grpc_clients import GrpcClients
from gateway.middleware import REQUEST_ID_HEADER, new_request_id
from gateway.settings import GatewayConfig
from service.shared.client_address import CLIENT_ADDRESS_METADATA_KEY, clip_address

CallMetadata = tuple[tuple[str, str], ...]
"""gRPC call metadata as ``(key, value)`` pairs."""


def get_config(request: Request) -> GatewayConfig:
    """Return the :class:`GatewayConfig` the app was created with."""
    return request.app.state.config


async def get_clients(request: Request) -> GrpcClients:
    """Return the app's gRPC stubs.

    Raises:
        RuntimeError: The app's lifespan has not run, so there is no channel. Drive the app through
            an ASGI server, or enter ``app.router.lifespan_context(app)`` in tests.

    """
    clients = getattr(request.app.state, "grpc", None)
    if clients is None:
        raise RuntimeError("gateway gRPC channel is not open: the app lifespan has not started")
    return clients


def get_request_id(request: Request) -> str:
    """Return the request id set by :class:`gateway.middleware.RequestIdMiddleware`."""
    request_id = getattr(request.state, "request_id", None)
    if request_id is None:  # only when the app is used without its middleware
        request_id = new_request_id()
        request.state.request_id = request_id
    return request_id


async def get_call_metadata(request: Request) -> CallMetadata:
    """Build the metadata sent with every gRPC call of this request.

    Always ``x-request-id``; plus ``authorization: Bearer <token>`` when the app has API keys and
    the client presented one of them: the client's own token, so the server can name its key, in
    canonical form (``Bearer`` and one space) even if the client wrote ``bearer`` or extra spaces;
    plus ``x-ur-priority`` when the client sent ``X-UR-Priority`` (:func:`_priority`); plus the
    client's address in ``x-ur-client-address`` when the server knows it, which a server without
    keys shares its PDF renderer by (:mod:`service.shared.client_address`).

    """
    request_id = (REQUEST_ID_HEADER, get_request_id(request))
    extra = (*_priority(request), *_client_address(request))
    if not get_config(request).api_keys:  # the common case: nothing to check or forward
        return (request_id, *extra)
    matched = _matched_key(request)
    if matched is None:
        return (request_id, *extra)
    return (request_id, ("authorization", f"Bearer {matched[1]}"), *extra)


def _client_address(request: Request) -> CallMetadata:
    """The ``x-ur-client-address`` metadata of the request's client (its IP address); ``()`` when unknown."""
    client = request.client
    address = clip_address(client.host) if client is not None and client.host else ""
    return ((CLIENT_ADDRESS_METADATA_KEY, address),) if address else ()


PRIORITY_HEADER = "x-ur-priority"
"""The header (and gRPC metadata) with which a call lowers its class to ``batch`` (never raises it)."""


MAX_PRIORITY_CHARS = 64
"""Most characters of ``X-UR-Priority`` forwarded (the valid values are 11 at most)."""


def _priority(request: Request) -> CallMetadata:
    """The ``x-ur-priority`` metadata for the request's ``X-UR-Priority`` header; ``()`` without one.

    Forwarded as sent, for the server's admission to accept or refuse (INVALID_PRIORITY, HTTP 400
    ``invalid_priority``): the gateway only makes it fit gRPC metadata (printable ASCII, at most
    :data:`MAX_PRIORITY_CHARS` characters; any other character becomes ``?``, which no valid value
    holds).
    """
    value = request.headers.get(PRIORITY_HEADER)
    if value is None:
        return ()
    printable = "".join(c if " " <= c <= "~" else "?" for c in value[:MAX_PRIORITY_CHARS])
    return ((PRIORITY_HEADER, printable),)


API_KEY_HEADER = "x-api-key"
"""The header Anthropic's clients send the key in (the ``anthropic`` SDK, tools built on it)."""


def _repeated_credential(request: Request) -> str | None:
    """The credential header the request sends more than once (``Authorization``, ``x-api-key``), or ``None``.

    Such a request is refused whichever of its values is right: an intermediary that adds its
    own header, or a client that tries several keys in one request, must not have one picked.
    """
    for header, name in (("authorization", "Authorization"), (API_KEY_HEADER, "x-api-key")):
        if len(request.headers.getlist(header)) > 1:
            return name
    return None


def _matched_key(request: Request) -> tuple[str, str] | None:
    """The ``(name, token)`` of the app's key the request presents, or ``None`` (checked once).

    ``Authorization: Bearer <key>`` first, else ``x-api-key: <key>`` (:data:`API_KEY_HEADER`);
    ``None`` for a request that sends either header twice (:func:`_repeated_credential`).
    """
    if not hasattr(request.state, "api_key_match"):
        keys = get_config(request).api_keys
        match = None
        if keys and _repeated_credential(request) is None:
            match = keys.match(request.headers.get("authorization", ""))
            api_key = request.headers.get(API_KEY_HEADER)
            if match is None and api_key:
                match = keys.match(f"Bearer {api_key}")
        request.state.api_key_match = match
    return request.state.api_key_match


async def require_api_key(request: Request) -> None:
    """Check ``Authorization: Bearer <key>`` or ``x-api-key: <key>`` against the keys; no-op without keys.

    The matching key's name is kept as ``request.state.api_key_name``.

    Raises:
        GatewayError: 401 ``invalid_api_key`` when the header is missing, matches no key, or is
            sent more than once.

    """
    if not get_config(request).api_keys:
        return
    matched = _matched_key(request)
    if matched is not None:
        request.state.api_key_name = matched[0]
        return
    repeated = _repeated_credential(request)
    message = (
        f"More than one {repeated} header: send one API key"
        if repeated is not None
        else "Missing or invalid API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
    )
    raise GatewayError(401, message, code="invalid_api_key", error_type="authentication_error")


Clients = Annotated[GrpcClients, Depends(get_clients)]
"""Route parameter type: the app's gRPC stubs."""

Metadata = Annotated[CallMetadata, Depends(get_call_metadata)]
"""Route parameter type: the metadata for this request's gRPC calls."""
