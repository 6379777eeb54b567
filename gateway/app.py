"""Application factory of the REST gateway."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, JSONResponse

from gateway.cors import install_cors
from gateway.dependencies import require_api_key
from gateway.errors import install_error_handlers
from gateway.grpc_clients import ChannelWrapper, GrpcClients
from gateway.json_body import DEFAULT_MAX_OBJECT_KEYS
from gateway.middleware import BodySizeLimitMiddleware, RequestIdMiddleware
from gateway.routes import (
    anomaly,
    audio,
    batches,
    chat,
    classify,
    completions,
    documents,
    embeddings,
    files,
    health,
    images,
    messages,
    metrics,
    models,
    ner,
    ocr,
    rerank,
    responses,
    tokenize,
)
from gateway.routing import ROUTING_MODES, ModelAffinityRouter
from gateway.schemas.errors import ERROR_RESPONSES, HEALTH_ERROR_RESPONSES, METRICS_ERROR_RESPONSES
from gateway.settings import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_SHUTDOWN_GRACE_S, GatewayConfig
from service.shared.api_keys import ApiKeys, load_api_keys

logger = logging.getLogger(__name__)


def create_app(
    grpc_target: str,
    *,
    api_key: str | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
    api_keys_file: Path | str | None = None,
    api_keys: ApiKeys | None = None,
    auth_public_health: bool = True,
    cors_origins: Sequence[str] = (),
    grpc_credentials: grpc.ChannelCredentials | None = None,
    routing: str = "round-robin",
    wrap_channel: ChannelWrapper | None = None,
    embeddings_truncate: bool = False,
    max_json_object_keys: int = DEFAULT_MAX_OBJECT_KEYS,
) -> FastAPI:
    """Build the OpenAI-compatible REST gateway for the gRPC server at ``grpc_target``.

    The app's lifespan opens one ``grpc.aio`` channel (``app.state.grpc``, a
    :class:`gateway.grpc_clients.GrpcClients`) and closes it on shutdown; without a running
    lifespan the routes fail, so tests must enter ``app.router.lifespan_context(app)`` when they
    drive the app through ``httpx.ASGITransport``.

    Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/embeddings``,
    ``GET /v1/models``, ``GET /v1/models/{name}``, ``GET /health``; encoders: ``POST /v1/rerank``
    (also at ``/rerank``), ``POST /v2/rerank`` (Cohere v2's shape), ``POST /v1/classify``,
    ``POST|GET /v1/classifiers``, ``DELETE /v1/classifiers/{name}``, ``POST /v1/ner``; files:
    ``POST /v1/ocr``, ``POST /v1/documents/{analyze,ask,extract,classify}``; tokenizers:
    ``POST /tokenize``, ``POST /detokenize``; the Batch API: ``/v1/files`` and ``/v1/batches``
    (:mod:`gateway.routes.files`, :mod:`gateway.routes.batches`). Every response carries an
    ``x-request-id`` header (the client's, or a new one), also sent to the server as gRPC metadata.

    Args:
        grpc_target: ``host:port`` of the Universal Runtime gRPC server.
        api_key: When set, ``/v1/*`` requests need ``Authorization: Bearer <api_key>`` (401
            otherwise) and the header is forwarded as ``authorization`` metadata; ``/health`` is open.
        max_message_bytes: Largest HTTP request body (413 above it) and gRPC message, in bytes.
        shutdown_grace_s: Seconds SSE streams may go on once the server shuts down; a stream still
            running then ends with an error event (never a silent cut).
        api_keys_file: A keys file (:mod:`service.shared.api_keys`): its keys are accepted too, and the
            client's own token is forwarded, so the server can name the key in its log.
        api_keys: Keys already loaded (by the server beside it), used instead of ``api_key`` and
            ``api_keys_file``.
        auth_public_health: ``/health`` needs no key (default); ``False`` guards it like ``/v1``, and
            the API docs (``/docs``, ``/redoc``, ``/openapi.json``) with it.
        cors_origins: Origins allowed cross-origin calls (:mod:`gateway.cors`); empty: CORS off.
        grpc_credentials: TLS credentials of the channel to the server
            (:func:`service.shared.tls.channel_credentials`); ``None`` for plaintext.
        routing: ``round-robin`` (every call to the next replica) or ``model-affinity`` (a request
            naming a model goes to a replica that holds it; :mod:`gateway.routing`).
        wrap_channel: Turns the gateway's channel into the one its stubs use (the server in the
            same process passes its in-process calls; see :class:`gateway.grpc_clients.GrpcClients`).
        embeddings_truncate: ``/v1/embeddings`` truncates inputs over the model's window when the
            request does not say; ``False`` (default) refuses them, as OpenAI does.
        max_json_object_keys: Most keys one JSON object of a request body may have; more is a
            400 before validation (:mod:`gateway.json_body`).

    Raises:
        ValueError: ``max_message_bytes`` is not positive, or a CORS origin is malformed.
        service.shared.api_keys.ApiKeyError: The keys file is unreadable or malformed (a ``ValueError``).

    """
    if max_message_bytes <= 0:
        raise ValueError(f"max_message_bytes must be positive, got {max_message_bytes}")
    config = GatewayConfig(
        grpc_target=grpc_target,
        api_key=api_key,
        max_message_bytes=max_message_bytes,
        shutdown_grace_s=shutdown_grace_s,
        api_keys=api_keys if api_keys is not None else load_api_keys(api_key, api_keys_file),
        auth_public_health=auth_public_health,
        embeddings_truncate=embeddings_truncate,
        max_json_object_keys=max_json_object_keys,
    )

    if routing not in ROUTING_MODES:
        raise ValueError(f"routing must be one of {', '.join(ROUTING_MODES)}, got {routing!r}")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        clients = GrpcClients.open(
            grpc_target,
            max_message_bytes=max_message_bytes,
            credentials=grpc_credentials,
            wrap_channel=wrap_channel,
        )
        app.state.grpc = clients
        router = None
        if routing == "model-affinity":
            router = ModelAffinityRouter(
                grpc_target, max_message_bytes=max_message_bytes, credentials=grpc_credentials
            )
            router.start()
        app.state.router = router
        logger.info("gateway forwarding to gRPC server at %s (%s)", grpc_target, routing)
        try:
            yield
        finally:
            app.state.grpc = app.state.router = None
            if router is not None:
                await router.close()
            await clients.close()

    # Without keys the check would pass every request: leave the dependency out (one less per call).
    authenticated = [Depends(require_api_key)] if config.api_keys else []
    # Probes (/health, and /metrics beside it) are open unless auth_public_health is off; so are
    # the API docs (/docs, /redoc, /openapi.json), which FastAPI would otherwise serve to anyone.
    probes = [] if auth_public_health else authenticated
    app = FastAPI(
        title="Universal Runtime gateway",
        summary="OpenAI-compatible REST API in front of the Universal Runtime gRPC server.",
        lifespan=lifespan,
        **({} if not probes else {"docs_url": None, "redoc_url": None, "openapi_url": None}),
    )
    if probes:
        _install_guarded_docs(app, probes)
    app.state.config = config
    app.state.grpc = app.state.router = None
    install_error_handlers(app)
    # Added last = outermost: the request id is set first, so even a 413 carries it.
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=max_message_bytes)
    app.add_middleware(RequestIdMiddleware)
    install_cors(app, cors_origins)  # outermost: error responses carry the CORS headers too

    app.include_router(health.router, dependencies=probes, responses=HEALTH_ERROR_RESPONSES)
    app.include_router(metrics.router, dependencies=probes, responses=METRICS_ERROR_RESPONSES)
    for module in (
        chat,
        completions,
        embeddings,
        models,
        ocr,
        documents,
        audio,
        images,
        anomaly,
        rerank,
        classify,
        ner,
        tokenize,
        responses,
        files,
        batches,
    ):
        app.include_router(module.router, dependencies=authenticated, responses=ERROR_RESPONSES)
    # The Anthropic Messages API: its router lists Anthropic's error shape, not OpenAI's.
    app.include_router(messages.router, dependencies=authenticated)
    return app


def _install_guarded_docs(app: FastAPI, dependencies: list[Any]) -> None:
    """FastAPI's ``/openapi.json``, ``/docs`` (with its OAuth2 redirect), ``/redoc``, behind ``dependencies``.

    A browser does not send the key when Swagger UI fetches ``/openapi.json``; clients with the
    key read the schema from ``/openapi.json`` directly.
    """
    title = f"{app.title} - docs"

    @app.get("/openapi.json", include_in_schema=False, dependencies=dependencies)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=dependencies)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title=title, oauth2_redirect_url="/docs/oauth2-redirect"
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False, dependencies=dependencies)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False, dependencies=dependencies)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title=title)
