"""The gateway's uvicorn servers; their HTTPS certificate reloads in place (:class:`gateway.tls.Https`)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

import grpc
import uvicorn
from uvicorn.main import STARTUP_FAILURE

from gateway.http_limits import HeaderLimits
from gateway.settings import ENV_PREFIX, GatewaySettings
from gateway.tls import Https, TlsFiles, channel_credentials


def uvicorn_server(
    app: Any, https: Https | None, *, header_limits: HeaderLimits | None = None, **options: Any
) -> uvicorn.Server:
    """A :class:`uvicorn.Server` for ``app`` with ``uvicorn.Config(app, **options)``.

    Its HTTP protocol bounds every request's head (:mod:`gateway.http_limits`; ``header_limits``,
    the defaults when ``None``), unless ``options`` name another ``http``. With ``https`` the
    config also gets :meth:`Https.uvicorn_options`, and the server runs
    :meth:`Https.reload_certificate` beside it while it serves.
    """
    options.setdefault("http", (header_limits or HeaderLimits()).protocol())
    if https is None:
        return uvicorn.Server(uvicorn.Config(app, **options))
    return _ReloadingServer(uvicorn.Config(app, **options, **https.uvicorn_options()), https)


def run_uvicorn(app: Any, https: Https | None, *, sockets: Any = None, **options: Any) -> None:
    """Serve like ``uvicorn.run(app, **options)`` (one process), with HTTPS when ``https`` is set.

    ``sockets``: already-bound listening sockets to serve on (a worker's, :mod:`gateway.workers`)
    instead of binding ``host:port``.

    Raises:
        SystemExit: uvicorn's start-up failure status (3) when the server could not start.

    """
    server = uvicorn_server(app, https, **options)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def gateway_tls(settings: GatewaySettings) -> tuple[Https | None, grpc.ChannelCredentials | None]:
    """HTTPS and gRPC channel TLS of the stand-alone gateway from its ``UR_GATEWAY_*`` settings.

    Raises:
        TlsConfigError: a TLS setting is half set or names an unreadable or wrong file.

    """
    https = Https.from_settings(
        f"{ENV_PREFIX}TLS_",
        settings.tls_cert_file,
        settings.tls_key_file,
        settings.tls_client_ca_file,
        settings.tls_refresh_interval_s,
    )
    files = TlsFiles.channel(
        f"{ENV_PREFIX}GRPC_TLS_",
        settings.grpc_tls_ca_file,
        settings.grpc_tls_cert_file,
        settings.grpc_tls_key_file,
    )
    return https, None if files is None else channel_credentials(files)


class _ReloadingServer(uvicorn.Server):
    """uvicorn's server with :meth:`Https.reload_certificate` running beside it."""

    def __init__(self, config: uvicorn.Config, https: Https) -> None:
        super().__init__(config)
        self.https = https

    async def serve(self, sockets: Any = None) -> None:
        reload = asyncio.create_task(self.https.reload_certificate(self.config))
        try:
            await super().serve(sockets)
        finally:
            reload.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reload
