"""How a subcommand reaches the server: address, TLS, API key, deadline, and one-line errors."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc

from service.shared.tls import TlsConfigError, TlsFiles, channel_credentials

Response = TypeVar("Response")

#: Hosts a server binds to that a client cannot dial; the CLI dials the loopback instead.
_WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "")


class CommandError(Exception):
    """A subcommand failed for a reason the operator can act on; the message is one line.

    Attributes:
        exit_code: The process exit status to end with (1 unless a command says otherwise).

    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def default_address(host: str, port: int) -> str:
    """The address to dial for a server bound to ``host:port`` (a wildcard bind is dialled on 127.0.0.1)."""
    if host in _WILDCARD_HOSTS:
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):  # a bare IPv6 literal
        host = f"[{host}]"
    return f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class Connection:
    """Where and how to call the server.

    Attributes:
        address: gRPC target, ``host:port`` (or any target grpc accepts, e.g. ``unix:/path``).
        tls_ca: PEM CA bundle that verifies the server; TLS is on when any TLS file is set
            (without a CA the system's roots verify).
        tls_cert: PEM client certificate chain, for a server that requires mutual TLS.
        tls_key: PEM private key (unencrypted) of ``tls_cert``.
        api_key: Sent as ``authorization: Bearer <key>`` when set.
        timeout_s: Deadline of each call, seconds.

    """

    address: str
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    api_key: str | None = None
    timeout_s: float = 10.0

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Call metadata: the API key, when set."""
        return (("authorization", f"Bearer {self.api_key}"),) if self.api_key else ()

    def _tls_files(self) -> TlsFiles | None:
        if self.tls_ca is None and self.tls_cert is None and self.tls_key is None:
            return None
        # Named after the flags, so a bad file's message says which flag to fix.
        files = TlsFiles(self.tls_cert, self.tls_key, self.tls_ca, ("--tls-cert", "--tls-key", "--tls-ca"))
        files.check()
        return files

    @contextmanager
    def channel(self) -> Iterator[grpc.Channel]:
        """A channel to :attr:`address`, TLS when a TLS file is set, closed on exit.

        Raises:
            CommandError: a TLS file is unreadable or wrong, or only one of cert and key is set.

        """
        try:
            files = self._tls_files()
        except TlsConfigError as err:
            raise CommandError(str(err)) from None
        if files is None:
            channel = grpc.insecure_channel(self.address)
        else:
            channel = grpc.secure_channel(self.address, channel_credentials(files))
        with channel:
            yield channel

    def call(
        self, method: Callable[..., Response], request: object, *, timeout_s: float | None = None
    ) -> Response:
        """Call a unary stub ``method`` with the API key and deadline.

        Raises:
            CommandError: the call failed; the message says why in one line (see :func:`describe_rpc_error`).

        """
        try:
            return method(request, timeout=timeout_s or self.timeout_s, metadata=self.metadata())
        except grpc.RpcError as err:
            raise CommandError(describe_rpc_error(err, self.address)) from None

    def stream(
        self, method: Callable[..., Iterable[Response]], request: object, *, timeout_s: float | None = None
    ) -> Iterator[Response]:
        """Call a server-streaming stub ``method`` with the API key and deadline; yields its messages.

        The deadline covers the whole stream.

        Raises:
            CommandError: the call failed, at its start or mid-stream (see :func:`describe_rpc_error`).

        """
        try:
            yield from method(request, timeout=timeout_s or self.timeout_s, metadata=self.metadata())
        except grpc.RpcError as err:
            raise CommandError(describe_rpc_error(err, self.address)) from None


def describe_rpc_error(err: grpc.RpcError, address: str) -> str:
    """One line for a failed call: what went wrong and, where it helps, what to do about it."""
    code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (err.details() if isinstance(err, grpc.Call) else None) or str(err)
    details = " ".join(details.split())  # grpc's connection errors span lines
    if code is grpc.StatusCode.UNAVAILABLE:
        return f"cannot reach the server at {address}: {details}"
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return f"the server refused the call: {details} (pass --api-key or set UR_API_KEY)"
    if code is grpc.StatusCode.PERMISSION_DENIED:
        return f"the server refused the call: {details}"
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer from the server at {address} in time (raise --timeout): {details}"
    return f"{code.name}: {details}"
