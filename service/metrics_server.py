"""The gRPC server's own ``/metrics`` port (``UR_METRICS_PORT``), secured like the gRPC port.

prometheus_client's WSGI app (the default registry, :mod:`service.metrics`) on its thread-per-request
server, behind the server's API keys (a bearer key) and TLS (HTTPS with the server's certificate,
client certificates under mutual TLS). Kept apart from :mod:`service.metrics`, which the tasks
import, so that they stay free of the transport modules this one needs.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from service.shared.api_keys import ApiKeys
from service.shared.tls import CertificateWatch, TlsFiles

log = logging.getLogger(__name__)


class _QuietHandler(WSGIRequestHandler):
    """Logs no access lines (a scrape every few seconds would flood the log); bounded in time."""

    # Seconds a connection may stay silent (its TLS handshake included) before it is closed.
    timeout = 10.0

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""


class _MetricsHttpServer(ThreadingWSGIServer):
    """prometheus_client's thread-per-request server; with TLS, the certificate reloaded when it changes."""

    watch: CertificateWatch | None = None
    context: ssl.SSLContext | None = None

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failed TLS handshake, a silent or broken connection: a debug line, not a stderr trace."""
        log.debug("metrics port: connection from %s failed", client_address, exc_info=True)

    def get_request(self) -> tuple[socket.socket, Any]:
        """Accept a connection, on a certificate reloaded if it changed (the handshake runs in its thread)."""
        if self.watch is not None and self.context is not None and self.watch.poll() is not None:
            try:
                self.context.load_cert_chain(self.watch.files.cert_file, self.watch.files.key_file)  # type: ignore[arg-type]
            except OSError as err:  # changed again since it was checked: take it at the next look
                log.warning("metrics port: new certificate not loaded: %s", err)
                self.watch.retry()
        return super().get_request()


def _bearer_guard(app: Callable, keys: ApiKeys) -> Callable:
    """``app`` answering 401 unless the request has ``Authorization: Bearer <one of keys>``."""

    def guarded(environ: dict[str, Any], start_response: Callable) -> Any:
        if keys.match(environ.get("HTTP_AUTHORIZATION", "")) is None:
            start_response(
                "401 Unauthorized",
                [
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("WWW-Authenticate", 'Bearer realm="metrics"'),
                ],
            )
            return [b"missing or invalid API key\n"]
        return app(environ, start_response)

    return guarded


def _tls_context(files: TlsFiles) -> ssl.SSLContext:
    """A server context with ``files``' certificate; client certificates required when a CA is set."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.cert_file, files.key_file)  # type: ignore[arg-type]
    if files.ca_file is not None:
        context.load_verify_locations(cafile=files.ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def start_metrics_server(
    host: str,
    port: int,
    *,
    tls: TlsFiles | None = None,
    api_keys: ApiKeys | None = None,
    tls_refresh_interval_s: float = 0.0,
) -> WSGIServer:
    """Serve ``/metrics`` on ``host:port`` from a background thread (prometheus_client's WSGI app).

    The port follows the gRPC port's security: with ``tls`` it speaks HTTPS with the server's
    certificate (reloaded like the gRPC port's, every ``tls_refresh_interval_s``; 0 never), and
    requires a client certificate signed by ``tls.ca_file`` when it is set (mutual TLS); with
    ``api_keys`` a scrape needs ``Authorization: Bearer <key>`` (else 401), which Prometheus sends
    from its scrape config (``authorization: {credentials_file: ...}``).

    Returns:
        The server: ``server_port`` is the bound port (``port`` 0 picks a free one); stop it
        with ``shutdown()`` and ``server_close()``.

    Raises:
        OSError: the port cannot be bound, or the TLS files cannot be loaded.

    """
    app = make_wsgi_app(REGISTRY)
    if api_keys:
        app = _bearer_guard(app, api_keys)
    family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("MetricsHttpServer", (_MetricsHttpServer,), {"address_family": family})
    server = make_server(host, port, app, server_class, handler_class=_QuietHandler)
    if tls is not None:
        try:
            server.context = _tls_context(tls)
            # The handshake on the connection's own thread (first read), bounded by the handler's
            # timeout: a client that never speaks cannot hold the accept loop.
            server.socket = server.context.wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
        except BaseException:
            server.server_close()
            raise
        if tls_refresh_interval_s > 0:
            server.watch = CertificateWatch(tls, tls_refresh_interval_s)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
