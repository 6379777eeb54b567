"""The gateway's uvicorn servers and their HTTPS, whose certificate reloads in place (:class:`Https`).

The TLS files themselves (checking, watching) are :mod:`service.shared.tls`, shared with the gRPC
server; what is HTTP-only (uvicorn's ``ssl_*`` options, reloading uvicorn's live context) is here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import uvicorn
from uvicorn.main import STARTUP_FAILURE

from gateway.http_limits import HeaderLimits
from gateway.settings import ENV_PREFIX, GatewaySettings
from service.shared.settings import DEFAULT_REFRESH_INTERVAL_S
from service.shared.tls import CertificateWatch, TlsFiles, channel_credentials

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Https:
    """HTTPS of the gateway: checked files and how often to look for a new certificate.

    Attributes:
        files: Server certificate and key, and the optional client CA (clients must then present a
            certificate it signed: uvicorn's ``ssl_cert_reqs=CERT_REQUIRED``).
        refresh_interval_s: Seconds between looks at the files; 0 never reloads.

    """

    files: TlsFiles
    refresh_interval_s: float = DEFAULT_REFRESH_INTERVAL_S

    @classmethod
    def from_settings(
        cls,
        prefix: str,
        cert_file: Path | None,
        key_file: Path | None,
        client_ca_file: Path | None,
        refresh_interval_s: float = DEFAULT_REFRESH_INTERVAL_S,
    ) -> Https | None:
        """``None`` without a cert and key (plain HTTP); see :meth:`TlsFiles.server` for errors."""
        files = TlsFiles.server(prefix, cert_file, key_file, client_ca_file)
        return None if files is None else cls(files, refresh_interval_s)

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`uvicorn.Config` that turn HTTPS on."""
        options: dict[str, Any] = {"ssl_certfile": self.files.cert_file, "ssl_keyfile": self.files.key_file}
        if self.files.ca_file is not None:
            options |= {"ssl_ca_certs": self.files.ca_file, "ssl_cert_reqs": ssl.CERT_REQUIRED}
        return options

    async def reload_certificate(self, config: uvicorn.Config) -> None:
        """Run until cancelled: load new certificate files into uvicorn's live ``SSLContext``.

        ``load_cert_chain`` on the context uvicorn's listening socket holds changes what new
        handshakes present; open connections keep theirs. A new client CA is added to the trusted
        ones; a CA removed from the file stays trusted until restart (OpenSSL cannot drop one).
        Each look is a ``stat`` per file; a reload reads a few KB on the event loop.
        """
        if self.refresh_interval_s <= 0:
            return
        watch = CertificateWatch(self.files, self.refresh_interval_s)
        while True:
            await asyncio.sleep(self.refresh_interval_s)
            if config.ssl is None or watch.poll() is None:
                continue
            try:
                config.ssl.load_cert_chain(self.files.cert_file, self.files.key_file)  # type: ignore[arg-type]
                if self.files.ca_file is not None:
                    config.ssl.load_verify_locations(cafile=self.files.ca_file)
            except OSError as err:  # an ssl.SSLError: the files changed again since they were checked
                log.warning(
                    "gateway TLS reload failed, trying again in %s s: %s", self.refresh_interval_s, err
                )
                watch.retry()


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
