"""Self-signed TLS material for servers the tests run on 127.0.0.1."""

from __future__ import annotations

import _ssl
import ctypes
import dataclasses
import datetime
import functools
import ipaddress
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclasses.dataclass(frozen=True)
class ServerCert:
    """A CA and a server certificate it signed for 127.0.0.1 and localhost (PEM)."""

    ca_pem: str
    cert_pem: str
    key_pem: str
    ca_key_pem: str = ""

    def client_pem(
        self,
        common_name: str,
        organization: str | tuple[str, ...],
        *,
        valid_from: datetime.datetime | None = None,
        valid_until: datetime.datetime | None = None,
        usages: tuple[x509.ObjectIdentifier, ...] | None = (ExtendedKeyUsageOID.CLIENT_AUTH,),
    ) -> str:
        """A client certificate this CA signed, and its key, in one PEM.

        As kubelet keeps its own (kubelet-client-current.pem): CN system:node:<name>, O
        system:nodes, extended key usage clientAuth (k8s.io/client-go util/certificate
        csr: the kubelet's CSR asks for "client auth"). `organization`: one O or several;
        `usages`: None for no extendedKeyUsage extension at all.
        """
        now = datetime.datetime.now(datetime.timezone.utc)
        ca = x509.load_pem_x509_certificate(self.ca_pem.encode())
        ca_key = serialization.load_pem_private_key(self.ca_key_pem.encode(), None)
        key = ec.generate_private_key(ec.SECP256R1())
        orgs = (organization,) if isinstance(organization, str) else organization
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        if common_name:
            attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid_from or now - datetime.timedelta(days=1))
            .not_valid_after(valid_until or now + datetime.timedelta(days=30))
        )
        if usages is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        return _pem(cert) + _key_pem(key)

    def requesting_server_context(self) -> ssl.SSLContext:
        """Serve this certificate; ask for a client certificate but accept any (or none).

        kube-apiserver's TLS: `tls.RequestClientCert` (k8s.io/apiserver pkg/server/
        secure_serving.go), so an unknown or expired certificate still completes the
        handshake and the x509 authenticator answers 401 (fakes/kube_auth.py). Python's ssl
        verifies whatever it requests, so OpenSSL is given a verify callback that accepts
        every certificate (SSL_CTX_set_verify on the context's SSL_CTX, the first field of
        CPython's PySSLContext after the object header).
        """
        context = self.server_context()
        context.verify_mode = ssl.CERT_OPTIONAL
        handle = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
        _libssl().SSL_CTX_set_verify(handle, _SSL_VERIFY_PEER, _ACCEPT_ANY)
        return context

    def mutual_server_context(self, serving: ServerCert) -> ssl.SSLContext:
        """Serve `serving`'s certificate; require a client certificate from this CA."""
        context = serving.server_context()
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=self.ca_pem)
        return context

    def server_context(self) -> ssl.SSLContext:
        """An SSLContext serving this certificate (its sockets: `ServerSocket`)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.sslsocket_class = ServerSocket
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_text(self.cert_pem)
            key.write_text(self.key_pem)
            context.load_cert_chain(cert, key)
        return context

    def client_context(self) -> ssl.SSLContext:
        """An SSLContext that trusts only this CA."""
        return ssl.create_default_context(cadata=self.ca_pem)


class ServerSocket(ssl.SSLSocket):
    """A server's TLS socket (listening or accepted) that closes itself when dropped.

    `SSLSocket.accept` wraps the new connection before returning it, and the wrapping
    reads from it when the peer is already gone (CPython 3.11 Lib/ssl.py `_create`:
    `recv(1)` after `getpeername` fails): a client that connects and resets at once, as a
    TCP health check does (HAProxy's, tests/haproxy_runner.py), makes it raise ECONNRESET
    with the half-made socket unreferenced and open. Collected, a plain SSLSocket warns
    (ResourceWarning, an error under this project's filterwarnings) in whichever test
    runs then; this one closes quietly. Sockets the server did return are closed by
    socketserver as before.
    """

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


_SSL_VERIFY_PEER = 0x01  # openssl/ssl.h
_VerifyCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)


def _accept_any(_preverified: int, _store: int | None) -> int:
    """Accept the certificate, dropping the errors a failed check queued.

    Left on the thread's OpenSSL error queue, they would fail the connection's next read.
    """
    _libssl().ERR_clear_error()
    return 1


_ACCEPT_ANY = _VerifyCallback(_accept_any)


@functools.cache
def _libssl() -> ctypes.CDLL:
    """The libssl CPython's _ssl module links it (dlsym searches its dependencies)."""
    lib = ctypes.CDLL(_ssl.__file__)
    lib.SSL_CTX_set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VerifyCallback]
    lib.SSL_CTX_set_verify.restype = None
    lib.ERR_clear_error.restype = None
    return lib


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
