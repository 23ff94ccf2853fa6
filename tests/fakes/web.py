"""A local HTTP file server with the faults a download meets on the way.

`FileServer(tls_dir=...)` serves https with a certificate for 127.0.0.1 from a CA of its
own, written to `ca_file` (point SSL_CERT_FILE at it: OpenSSL's default verify paths,
which Python's urllib uses, read it). `files` maps a path to its bytes; `cut` ends every
answer after that many bytes (the Content-Length still promises all of them: a connection
lost half way), `fail` answers
that many requests 500 first, `slow` sleeps between 64 KiB writes; `hold` (a
threading.Event) stops every answer after `hold_after` bytes until it is set (a transfer
caught half way, however loaded the machine); `gets` counts requests.
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import ssl
import threading
import time
from pathlib import Path

from fakes import serving


class FileServer:
    """`with FileServer() as web:` serves `web.files` at `web.url`."""

    def __init__(self, tls_dir: Path | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.cut: int | None = None
        self.fail = 0
        self.slow = 0.0
        self.hold: threading.Event | None = None
        self.hold_after = 65536
        self.gets = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # no 40 ms Nagle stall: tests/fakes/__init__.py

            def do_GET(self):  # noqa: N802 (http.server's name)
                server.gets += 1
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                if server.fail:
                    server.fail -= 1
                    self.send_error(500)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                sent = body if server.cut is None else body[: server.cut]
                for i in range(0, len(sent), 65536):
                    self.wfile.write(sent[i : i + 65536])
                    if server.hold is not None and i < server.hold_after <= i + 65536:
                        self.wfile.flush()
                        server.hold.wait(timeout=60)
                    if server.slow:
                        time.sleep(server.slow)
                self.close_connection = True

            def log_message(self, *args):
                pass

        self._httpd = serving.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        self.ca_file: Path | None = None
        if tls_dir is not None:
            self.ca_file, cert, key = _certificates(tls_dir)
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.load_cert_chain(cert, key)
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FileServer:
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed: (ca, cert, key) files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(subject, issuer, public, signer, ca: bool, sans=None):
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = cert(name("test CA"), name("test CA"), ca_key.public_key(), ca_key, True)
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server = cert(name("127.0.0.1"), ca.subject, key.public_key(), ca_key, False, sans)
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(server.public_bytes(pem))
    paths[2].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths
