"""FastAPI dependencies shared by the routes: gRPC stubs, call metadata and API key checking."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Request

from gateway.errors import GatewayError
from gateway.grpc_clients import GrpcClients
from gateway.middleware import REQUEST_ID_HEADER, new_request_id
from gateway.settings import GatewayConfig

CallMetadata = tuple[tuple[str, str], ...]
"""gRPC call metadata as ``(key, value)`` pairs."""


def get_config(request: Request) -> GatewayConfig:
    """Return the :class:`GatewayConfig` the app was created with."""
    return request.app.state.config


def get_clients(request: Request) -> GrpcClients:
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


def get_call_metadata(request: Request) -> CallMetadata:
    """Build the metadata sent with every gRPC call of this request.

    Always ``x-request-id``; plus ``authorization: Bearer <key>`` when the app has an API key and
    the client presented it (the server compares the header byte for byte, so the canonical form
    is sent even if the client wrote ``bearer`` or extra spaces).
    """
    metadata: list[tuple[str, str]] = [(REQUEST_ID_HEADER, get_request_id(request))]
    api_key = get_config(request).api_key
    if api_key is not None and _presents_key(request, api_key):
        metadata.append(("authorization", f"Bearer {api_key}"))
    return tuple(metadata)


def _presents_key(request: Request, api_key: str) -> bool:
    """Tell whether the request's ``Authorization`` header is ``Bearer <api_key>``."""
    scheme, _, supplied = request.headers.get("authorization", "").partition(" ")
    # compare_digest: the comparison time must not reveal how much of the key matched.
    return scheme.lower() == "bearer" and secrets.compare_digest(supplied.strip().encode(), api_key.encode())


def require_api_key(request: Request) -> None:
    """Check ``Authorization: Bearer <key>`` against the app's API key; no-op without a key.

    Raises:
        GatewayError: 401 ``invalid_api_key`` when the header is missing or the key differs.

    """
    expected = get_config(request).api_key
    if expected is None:
        return
    if not _presents_key(request, expected):
        raise GatewayError(
            401,
            "Missing or invalid API key: send 'Authorization: Bearer <key>'",
            code="invalid_api_key",
            error_type="authentication_error",
        )


Clients = Annotated[GrpcClients, Depends(get_clients)]
"""Route parameter type: the app's gRPC stubs."""

Metadata = Annotated[CallMetadata, Depends(get_call_metadata)]
"""Route parameter type: the metadata for this request's gRPC calls."""
