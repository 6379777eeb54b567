"""TLS and mutual TLS of the gRPC server, with certificate reload, and the in-process gateway's socket.

Settings (``UR_TLS_*``, :class:`service.settings.Settings`): a certificate and key turn TLS on; a
client CA makes client certificates required (mutual TLS). The files are checked at start-up
(:class:`service.shared.tls.TlsFiles`) and watched afterwards: grpc asks
:class:`CertificateFetcher` for a new configuration at each new handshake.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import grpc

from service.settings import Settings
from service.shared.tls import CertificateWatch, TlsFiles, TlsMaterial

log = logging.getLogger(__name__)

SETTINGS_PREFIX = "UR_TLS_"


def server_tls_files(settings: Settings) -> TlsFiles | None:
    """The server's checked TLS files, or ``None`` when TLS is off (no cert and key set).

    Raises:
        service.shared.tls.TlsConfigError: half a configuration, or a file unreadable or wrong; the
            message names the setting (``UR_TLS_CERT_FILE``, ``UR_TLS_KEY_FILE``, ``UR_TLS_CLIENT_CA_FILE``).

    """
    return TlsFiles.server(
        SETTINGS_PREFIX, settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file
    )


def _configuration(material: TlsMaterial) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(material.key, material.cert)], root_certificates=material.ca
    )


class CertificateFetcher:
    """grpc's certificate-configuration fetcher: a new configuration once the files changed.

    grpc calls it from its own threads at the start of each TLS handshake (never on the event
    loop); it answers ``None`` (keep the current one) at once unless ``interval_s`` has passed, then
    costs a ``stat`` per file, and reads them only when they changed
    (:class:`service.shared.tls.CertificateWatch`).
    """

    def __init__(self, files: TlsFiles, interval_s: float) -> None:
        self.watch = CertificateWatch(files, interval_s)

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        """A configuration from the changed files, or ``None`` to keep the current one."""
        material = self.watch.poll()
        return None if material is None else _configuration(material)


def server_credentials(files: TlsFiles, refresh_interval_s: float) -> grpc.ServerCredentials:
    """Server credentials of grpc for ``files``; client certificates required when a client CA is set.

    Args:
        files: Checked files (:func:`server_tls_files`).
        refresh_interval_s: Seconds between looks at the files for a new certificate; 0 never
            reloads (static credentials).

    Raises:
        service.shared.tls.TlsConfigError: a file became unreadable or wrong since it was checked.

    """
    material = files.check()
    require_client_cert = files.ca_file is not None
    if refresh_interval_s <= 0:
        return grpc.ssl_server_credentials(
            [(material.key, material.cert)],
            root_certificates=material.ca,
            require_client_auth=require_client_cert,
        )
    return grpc.dynamic_ssl_server_credentials(
        _configuration(material),
        CertificateFetcher(files, refresh_interval_s),
        require_client_authentication=require_client_cert,
    )


def add_port(server: grpc.aio.Server, address: str, files: TlsFiles | None, refresh_interval_s: float) -> int:
    """Bind ``address`` (``host:port``) on ``server``: with TLS when ``files`` is set, else plaintext.

    Returns:
        The bound port (the free one picked for port 0); 0 when binding failed.

    """
    if files is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, server_credentials(files, refresh_interval_s))


class InternalSocket:
    """A plaintext gRPC listener on a Unix socket only this user can open, for the in-process gateway.

    Why not TLS to ourselves: the gateway would need a CA that verifies our certificate for the
    name it dials (a wildcard bind has none), and under mutual TLS a client certificate of its
    own. The socket lies in a fresh ``0700`` folder, so only this user (who can read the key
    files anyway) and root can connect; no network peer ever reaches the plaintext path. The
    gateway still forwards the caller's ``authorization``, so ``UR_API_KEY`` holds on this path too.
    """

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="ur-grpc-"))  # mode 0700

    @property
    def target(self) -> str:
        """The socket as a gRPC target, ``unix:/tmp/ur-grpc-XXXX/grpc.sock``."""
        return f"unix:{self.folder / 'grpc.sock'}"

    def bind(self, server: grpc.aio.Server) -> str:
        """Add the socket to ``server`` (before it starts); returns :attr:`target`.

        Raises:
            RuntimeError: the socket could not be bound.

        """
        if server.add_insecure_port(self.target) == 0:
            raise RuntimeError(f"could not bind {self.target}")
        return self.target

    def remove(self) -> None:
        """Delete the socket's folder (after the server stopped)."""
        shutil.rmtree(self.folder, ignore_errors=True)
