"""Test certificates made at run time with ``cryptography``: a CA, server and client certificates.

Keys are EC P-256 (fast to generate). Everything is written as PEM files; nothing is cached.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from service.shared.tls import TlsFiles, channel_credentials

SERVER_NAMES = ("localhost", "127.0.0.1")
#: Seconds between looks at the files in tests: short, so a replaced certificate is seen quickly.
REFRESH_S = 0.05


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM bytes."""

    cert: bytes
    key: bytes

    def write(self, folder: Path, stem: str) -> tuple[Path, Path]:
        """Write ``<stem>.crt`` and ``<stem>.key`` under ``folder``; return (cert path, key path)."""
        cert, key = folder / f"{stem}.crt", folder / f"{stem}.key"
        cert.write_bytes(self.cert)
        key.write_bytes(self.key)
        return cert, key


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, common_name: str = "Universal Runtime test CA") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(common_name)
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        """The CA certificate, PEM."""
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, *, server: bool) -> Issued:
        """A leaf certificate: for a server (SANs ``localhost`` and ``127.0.0.1``) or a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        else:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def common_name(pem: bytes) -> str:
    """The subject common name of a PEM (or DER) certificate."""
    cert = (
        x509.load_pem_x509_certificate(pem)
        if pem.startswith(b"-----")
        else x509.load_der_x509_certificate(pem)
    )
    return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


@dataclass
class Pki:
    """A CA and files: server cert/key, client cert/key (both from the CA), and the CA's PEM."""

    ca: CertificateAuthority
    folder: Path
    ca_file: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def credentials(self, *, client: bool = False) -> grpc.ChannelCredentials:
        return channel_credentials(
            TlsFiles.channel(
                "TEST_",
                self.ca_file,
                self.client_cert if client else None,
                self.client_key if client else None,
            )
        )


def make_pki(folder: Path) -> Pki:
    ca = CertificateAuthority()
    ca_file = folder / "ca.crt"
    ca_file.write_bytes(ca.pem)
    server_cert, server_key = ca.issue("server-one", server=True).write(folder, "server")
    client_cert, client_key = ca.issue("client-one", server=False).write(folder, "client")
    return Pki(ca, folder, ca_file, server_cert, server_key, client_cert, client_key)


async def served_certificate(port: int, ca: CertificateAuthority, client: Pki | None = None) -> str:
    """Common name of the certificate a new TLS connection to ``port`` is shown (ALPN h2 for grpc)."""
    context = ssl.create_default_context(cadata=ca.pem.decode())
    context.set_alpn_protocols(["h2", "http/1.1"])
    if client is not None:
        context.load_cert_chain(client.client_cert, client.client_key)
    _, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost"), 5
    )
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return common_name(der)


def replace_files(issued: Issued, cert: Path, key: Path) -> None:
    """Swap in new files the way certificate managers do: written aside, then renamed over."""
    for data, path in ((issued.cert, cert), (issued.key, key)):
        path.with_suffix(".new").write_bytes(data)
        os.replace(path.with_suffix(".new"), path)


async def wait_for_certificate(
    port: int, ca: CertificateAuthority, name: str, client: Pki | None = None
) -> None:
    """Wait (5 s at most) until new connections are shown the certificate named ``name``."""
    async with asyncio.timeout(5):
        while True:
            try:
                if await served_certificate(port, ca, client) == name:
                    return
            except ssl.SSLError:  # the old certificate, from a CA the client no longer trusts
                pass
            await asyncio.sleep(REFRESH_S)
