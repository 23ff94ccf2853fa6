"""Self-signed TLS material for servers the tests run on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclasses.dataclass(frozen=True)
class ServerCert:
    """A CA and a server certificate it signed for 127.0.0.1 and localhost (PEM)."""

    ca_pem: str
    cert_pem: str
    key_pem: str
    ca_key_pem: str = ""

    def client_pem(self, common_name: str, organization: str) -> str:
        """A client certificate this CA signed, and its key, in one PEM.

        As kubelet keeps its own: CN system:node:<name>, O system:nodes.
        """
        now = datetime.datetime.now(datetime.timezone.utc)
        ca = x509.load_pem_x509_certificate(self.ca_pem.encode())
        ca_key = serialization.load_pem_private_key(self.ca_key_pem.encode(), None)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            ]
        )
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        return _pem(cert) + _key_pem(key)

    def mutual_server_context(self, serving: ServerCert) -> ssl.SSLContext:
        """Serve `serving`'s certificate; require a client certificate from this CA."""
        context = serving.server_context()
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=self.ca_pem)
        return context

    def server_context(self) -> ssl.SSLContext:
        """An SSLContext serving this certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_text(self.cert_pem)
            key.write_text(self.key_pem)
            context.load_cert_chain(cert, key)
        return context

    def client_context(self) -> ssl.SSLContext:
        """An SSLContext that trusts only this CA."""
        return ssl.create_default_context(cadata=self.ca_pem)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_server_cert(common_name: str = "kube-apiserver") -> ServerCert:
    """A fresh CA and a server certificate for 127.0.0.1/localhost signed by it."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("test-ca"))
        .issuer_name(_name("test-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServerCert(
        ca_pem=_pem(ca), cert_pem=_pem(cert), key_pem=_key_pem(key), ca_key_pem=_key_pem(ca_key)
    )


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
