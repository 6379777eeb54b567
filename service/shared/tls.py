"""TLS files: checking them at start-up, noticing when they change, and gRPC channel credentials.

Both faces use it: the gRPC server (:mod:`service.tls`, its ``UR_TLS_*`` files), the gateway
(its HTTPS in :mod:`gateway.https`, its channel to the server) and the admin client. It lives in
the leaf package :mod:`service.shared`, which imports neither face, so the server never imports the
REST package to reach it.

No TLS is implemented here: OpenSSL (through :mod:`ssl` and grpc) does it all; this module only
reads files and passes them on.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

log = logging.getLogger(__name__)


class TlsConfigError(ValueError):
    """A TLS setting is incomplete, or names a file that is unreadable or not what it should hold.

    The message names the setting (its environment variable), e.g. ``UR_TLS_KEY_FILE``.
    """


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """The contents of a set of TLS files, PEM bytes; ``None`` where the set has no such file."""

    cert: bytes | None
    key: bytes | None
    ca: bytes | None


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """A PEM certificate chain with its private key, and a PEM CA bundle, each optional.

    Build it with :meth:`server` or :meth:`channel`, which check the files; ``names`` holds the
    settings (environment variables) they came from, for messages.

    Attributes:
        cert_file: Certificate chain (leaf first).
        key_file: Unencrypted private key of the leaf certificate.
        ca_file: CA certificates that verify the peer (client certificates on a server, the server
            on a channel).
        names: Setting names of (cert_file, key_file, ca_file).

    """

    cert_file: Path | None
    key_file: Path | None
    ca_file: Path | None
    names: tuple[str, str, str]

    @classmethod
    def server(
        cls, prefix: str, cert_file: Path | None, key_file: Path | None, client_ca_file: Path | None
    ) -> TlsFiles | None:
        """Files of a TLS server (settings ``<prefix>CERT_FILE``, ``KEY_FILE``, ``CLIENT_CA_FILE``).

        Returns:
            ``None`` when none is set (plaintext), else the checked files.

        Raises:
            TlsConfigError: only one of cert and key is set, a client CA without them, or a file
                is unreadable or does not hold what it should (see :meth:`check`).

        """
        names = (f"{prefix}CERT_FILE", f"{prefix}KEY_FILE", f"{prefix}CLIENT_CA_FILE")
        if cert_file is None and key_file is None:
            if client_ca_file is not None:
                raise TlsConfigError(f"{names[2]} needs {names[0]} and {names[1]} (TLS is off without them)")
            return None
        files = cls(cert_file, key_file, client_ca_file, names)
        files.check()
        return files

    @classmethod
    def channel(
        cls, prefix: str, ca_file: Path | None, cert_file: Path | None, key_file: Path | None
    ) -> TlsFiles | None:
        """Files of a TLS client (settings ``<prefix>CA_FILE``, ``CERT_FILE``, ``KEY_FILE``).

        TLS is on when any is set; without a CA file the system's roots verify the server.

        Returns:
            ``None`` when none is set (plaintext), else the checked files.

        Raises:
            TlsConfigError: only one of cert and key is set, or a file is unreadable or wrong.

        """
        names = (f"{prefix}CERT_FILE", f"{prefix}KEY_FILE", f"{prefix}CA_FILE")
        if cert_file is None and key_file is None and ca_file is None:
            return None
        files = cls(cert_file, key_file, ca_file, names)
        files.check()
        return files

    @property
    def paths(self) -> tuple[Path | None, Path | None, Path | None]:
        """(cert_file, key_file, ca_file)."""
        return self.cert_file, self.key_file, self.ca_file

    def check(self) -> TlsMaterial:
        """Check the files with OpenSSL and return their contents.

        Raises:
            TlsConfigError: cert and key are not set together; a file cannot be read; the cert and
                key are not a PEM chain and its matching unencrypted key; the CA file holds no PEM
                CA certificate.

        """
        cert_name, key_name, ca_name = self.names
        if (self.cert_file is None) != (self.key_file is None):
            given, missing = (cert_name, key_name) if self.key_file is None else (key_name, cert_name)
            raise TlsConfigError(f"{given} is set but {missing} is not: set both (or neither)")
        cert, key, ca = (_read(name, path) for name, path in zip(self.names, self.paths, strict=True))
        # A throwaway context: OpenSSL parses the PEM and checks that the key matches the cert.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        if self.cert_file is not None:
            try:
                # A password callback, so an encrypted key fails here instead of prompting on a tty.
                context.load_cert_chain(self.cert_file, self.key_file, password=lambda: b"")
            except OSError as err:  # ssl.SSLError is one; or the file went since it was read
                raise TlsConfigError(
                    f"{cert_name}={self.cert_file} and {key_name}={self.key_file} are not a PEM "
                    f"certificate chain and its matching unencrypted private key ({err.reason or err})"
                ) from err
        if self.ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.ca_file)
            except OSError as err:  # ssl.SSLError is one; or the file went since it was read
                raise TlsConfigError(
                    f"{ca_name}={self.ca_file} holds no PEM CA certificate ({err.reason or err})"
                ) from err
        return TlsMaterial(cert, key, ca)

    def stamp(self) -> tuple[tuple[int, int, int], ...] | None:
        """(inode, size, mtime in ns) of each file, following links; ``None`` if one is missing."""
        try:
            stats = [os.stat(path) for path in self.paths if path is not None]
        except OSError:
            return None
        return tuple((st.st_ino, st.st_size, st.st_mtime_ns) for st in stats)


def _read(name: str, path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as err:
        raise TlsConfigError(f"{name}={path} cannot be read: {err.strerror or err}") from err


class CertificateWatch:
    """Notices new contents of a set of TLS files; safe to call from any thread, never blocks.

    A change is taken only when the new set passes :meth:`TlsFiles.check` (so a certificate
    whose key has not been replaced yet is not) and the files did not change while being read;
    until then the old certificate stays in use (a bad new set is logged, once).

    Args:
        files: The files to watch (already checked at start-up).
        interval_s: Least seconds between two looks at the files (a ``stat`` each); the files are
            read only when those stats change.
        clock: Monotonic clock, seconds (tests pass their own).

    """

    def __init__(
        self, files: TlsFiles, interval_s: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.files = files
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._next_look = clock() + interval_s
        self._loaded = files.stamp()
        self._rejected: tuple[tuple[int, int, int], ...] | None = None

    def poll(self) -> TlsMaterial | None:
        """The files' new contents if they changed since last taken, else ``None``.

        Cheap when nothing changed: a clock read, and a ``stat`` per file once per interval.
        """
        # Another thread is looking: it will take the change; this caller goes on with the old one.
        if self._clock() < self._next_look or not self._lock.acquire(blocking=False):
            return None
        try:
            self._next_look = self._clock() + self.interval_s
            stamp = self.files.stamp()
            if stamp is None or stamp == self._loaded or stamp == self._rejected:
                return None
            try:
                material = self.files.check()
            except TlsConfigError as err:
                self._rejected = stamp
                log.warning("new TLS files rejected, the current certificate stays in use: %s", err)
                return None
            if self.files.stamp() != stamp:  # changed while being read: take it next time
                return None
            self._loaded = stamp
            log.info("TLS certificate reloaded from %s", self.files.cert_file)
            return material
        finally:
            self._lock.release()

    def retry(self) -> None:
        """Take the files again at the next look, though unchanged (the last ones failed to load)."""
        self._loaded = None


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """Channel credentials of gRPC from checked files (CA to verify the server, optional client cert).

    Raises:
        TlsConfigError: the files can no longer be read or are wrong (see :meth:`TlsFiles.check`).

    """
    material = files.check()
    return grpc.ssl_channel_credentials(
        root_certificates=material.ca, private_key=material.key, certificate_chain=material.cert
    )
