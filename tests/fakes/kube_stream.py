"""`pods/exec` and `pods/portforward` of the fake API server, over WebSocket as kubectl 1.36 asks.

The fake runs no containers. A test gives a pod's container a directory standing for its `/`
(`api.set_pod_files`) and names where a pod's port answers (`api.set_pod_port`); the fake
answers what `kubectl cp` and `kubectl port-forward` send, and refuses the rest saying so.

Upstream, as read for this module (kubernetes/kubectl, kubernetes/client-go, moby/spdystream,
kubernetes/kubernetes):

- kubectl `pkg/cmd/exec/exec.go`: a `FallbackExecutor`, first a WebSocket `GET` of
  `pods/<p>/exec?command=...&container=...&stdout=true&stderr=true` (RFC 6455 needs `GET`),
  then SPDY `POST` only when the upgrade failed (`httpstream.IsUpgradeFailure`). kubectl
  refuses a pod whose phase is Succeeded or Failed itself.
- kubectl `pkg/cmd/cp/cp.go` (copyFromPod, TarPipe, untarAll): the command is
  `tar cf - <path>`; with `--retries` it is `sh -c "tar cf - '<path>' | tail -c+<n>"`
  (both answered here); the exec's stderr goes to kubectl's *stdout* (`ErrOut: t.o.Out`), so
  GNU tar's "tar: Removing leading `/' from member names" is what `kubectl cp` prints;
  member names must start with the path, its leading `/` stripped (`StripSlashes`), else
  "tar contents corrupted".
- client-go `tools/remotecommand/websocket.go`, `v4.go`, `v5.go`: subprotocol
  `v5.channel.k8s.io` (v4 also accepted); binary messages whose first byte is the stream
  (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize, 255 close in v5); the error stream
  carries one `metav1.Status`: `Success`, or `Failure` with reason `NonZeroExitCode` and
  a cause `ExitCode` whose message is the code (kubectl: "command terminated with exit code
  N"); any other Failure is printed as its message. The streams end when the server sends
  a normal close (1000). client-go pings every 5 s; the fake answers pings with pongs.
  The kubelet side of the status: `pkg/kubelet/cri/streaming/remotecommand/httpstream.go`
  (v4WriteStatusFunc: an error other than an exit is `apierrors.NewInternalError(err)`).
- kubectl `pkg/cmd/portforward/portforward.go`: a `svc/<name>` is resolved client-side (the
  Service's selector, its first Running pod; the service port's `targetPort`, or the port
  itself, via `pkg/util/service_port.go`), then the same fallback: client-go
  `tools/portforward/tunneling_dialer.go` (a WebSocket `GET` with subprotocol
  `SPDY/3.1+portforward.k8s.io`, `constants.WebsocketsSPDYTunnelingPrefix`) carrying an
  SPDY/3.1 session in binary messages (`tunneling_connection.go`), SPDY `POST` only on an
  upgrade failure. Per local connection (`portforward.go` handleConnection) the client opens
  an `error` stream and a `data` stream (headers `streamType`, `port`, `requestID`), waits
  for each stream's SYN_REPLY, closes its side of the error stream, copies data, resets the
  data stream when the remote side ended and then reads the error stream to its end (a
  non-empty text is "an error occurred forwarding"). The server (kubelet's
  `pkg/kubelet/cri/streaming/portforward/httpstream.go`) replies to each stream, connects
  the pair's port and, when done, closes both streams; a failure is written to the error
  stream as "error forwarding port <p> to pod <name>_<namespace>, uid <uid>: <error>".
- SPDY/3 framing (moby/spdystream `spdy/types.go`, `read.go`, `write.go`; the SPDY/3 draft):
  control frames (bit 15 set, version 3, type, flags, 24-bit length): SYN_STREAM 1,
  SYN_REPLY 2, RST_STREAM 3, SETTINGS 4, PING 6, GOAWAY 7, HEADERS 8, WINDOW_UPDATE 9;
  data frames (31-bit stream id, flags with FIN 0x01, 24-bit length). Header blocks are
  zlib streams (one per direction for the whole connection, flushed with Z_SYNC_FLUSH) over
  the SPDY/3 header dictionary (`spdy/dictionary.go`, built below from its words): a
  32-bit count, then length-prefixed names and values. spdystream keeps no flow-control
  windows, so WINDOW_UPDATE and SETTINGS are ignored; PINGs are echoed.
- Authorization: the WebSocket `GET` is authorized as `get` on `pods/exec` or
  `pods/portforward` by the filter (fakes/kube_auth.py), then, since 1.35 with the
  `AuthorizePodWebsocketUpgradeCreatePermission` gate on by default (beta), the pod registry
  also requires `create` (kubernetes `pkg/registry/core/pod/rest/authorize.go`
  ensureAuthorizedForVerb: `apierrors.NewForbidden({"", "pods"}, name, reason)`; PR
  kubernetes/kubernetes#134577). SPDY's `POST` is `create` from the start.
- kube-apiserver `pkg/registry/core/pod/strategy.go` (ExecLocation, PortForwardLocation,
  streamLocation): an unknown pod is 404; with several containers and none named, 400
  "a container name must be specified for pod <p>, choose one of: [<names>]"; an unknown
  container 400 "container <c> is not valid for pod <p>"; an unscheduled pod 400 "pod <p>
  does not have a host assigned".

What the fake does not do (on purpose): SPDY itself (a `POST` that passed the checks above
answers 400 saying the fake streams over WebSocket only: kubectl never sends it while the
WebSocket upgrade works), `attach`, stdin and TTYs, other commands than kubectl cp's (an
InternalError Status naming the limit), container state checks beyond the pod's phase
(kubectl checks that), and flow control.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import posixpath
import re
import select
import socket
import struct
import tarfile
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

# RFC 6455 section 1.3
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")  # client-go remotecommand
PORTFORWARD_PROTOCOL = "SPDY/3.1+portforward.k8s.io"  # tunneling_dialer.go
STDOUT, STDERR, ERROR = 1, 2, 3
_CONTINUATION, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_CHUNK = 32 * 1024


def _spdy_dictionary() -> bytes:
    """The SPDY/3 header compression dictionary: length-prefixed words, then status texts."""
    words = (
        "options head post put delete trace accept accept-charset accept-encoding "
        "accept-language accept-ranges age allow authorization cache-control connection "
        "content-base content-encoding content-language content-length content-location "
        "content-md5 content-range content-type date etag expect expires from host if-match "
        "if-modified-since if-none-match if-range if-unmodified-since last-modified location "
        "max-forwards pragma proxy-authenticate proxy-authorization range referer retry-after "
        "server"
    ).split()
    words.append("te")  # codespell:ignore te
    words += (
        "trailer transfer-encoding upgrade user-agent vary via warning www-authenticate "
        "method get status"
    ).split()
    words += ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive"]
    words.append("origin")
    tail = (
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417"
        "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently"
        "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error"
        "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct "
        "Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,"
        "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
        "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8"
        "charset=iso-8859-1,utf-,*,enq=0."
    )
    out = b"".join(struct.pack(">I", len(w)) + w.encode() for w in words)
    return out + tail.encode()


SPDY_DICTIONARY = _spdy_dictionary()
SPDY_DICTIONARY_ADLER32 = 3821447106  # zlib.adler32 of spdystream's headerDictionary
assert zlib.adler32(SPDY_DICTIONARY) == SPDY_DICTIONARY_ADLER32, "not SPDY/3's dictionary"


# ---------------------------------------------------------------- what kubectl cp asks of tar


def gnu_tar_name(argument: str) -> tuple[str, str]:
    """(member name, stripped prefix) GNU tar 1.34 gives a path argument.

    tar's safer_name_suffix: a prefix ending in a `..` component is removed, else the
    leading slashes; the rest is kept as written (`a/./b` stays). Checked against
    `tar cf - <path> | tar tf -`.
    """
    parts = argument.split("/")
    last_dotdot = max((i for i, p in enumerate(parts) if p == ".."), default=-1)
    if last_dotdot >= 0:
        prefix = "/".join(parts[: last_dotdot + 1]) + "/"
        return argument[len(prefix) :], prefix
    name = argument.lstrip("/")
    return name, argument[: len(argument) - len(name)]


def tar_cf(root: Path, argument: str) -> tuple[bytes, bytes, int]:
    """What `tar cf - <argument>` writes (stdout, stderr, exit code) where `/` is `root`.

    GNU format, entries of a directory in name order (`--sort=name`; tar's own
    order is the directory's), owner root, and for a missing path its messages and exit 2.
    """
    name, stripped = gnu_tar_name(argument)
    stderr = f"tar: Removing leading `{stripped}' from member names\n" if stripped else ""
    # the path as the container resolves it (symlinks aside): ".." stops at its "/"
    inside = posixpath.normpath("/" + argument).lstrip("/")
    host = root / inside if inside else root
    buf = io.BytesIO()
    code = 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        if not host.exists() and not host.is_symlink():
            stderr += f"tar: {argument}: Cannot stat: No such file or directory\n"
            stderr += "tar: Exiting with failure status due to previous errors\n"
            code = 2
        else:
            _add(tar, host, name)
    return buf.getvalue(), stderr.encode(), code


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _add(tar: tarfile.TarFile, host: Path, name: str) -> None:
    tar.add(host, arcname=name, recursive=False, filter=_as_root)
    if host.is_dir() and not host.is_symlink():
        for child in sorted(host.iterdir(), key=lambda p: p.name):
            joined = f"{name}{child.name}" if name.endswith("/") else f"{name}/{child.name}"
            _add(tar, child, joined)


_RETRY = re.compile(r"tar cf - '((?:[^']|'\\'')*)' \| tail -c\+(\d+)")


def run_command(root: Path | None, command: list[str], where: str) -> tuple[bytes, bytes, dict]:
    """(stdout, stderr, error-stream Status) of one exec of kubectl cp's."""
    if root is None:
        return (
            b"",
            b"",
            internal_error(
                f"the fake API server runs no containers and has no files for {where} "
                "(api.set_pod_files)"
            ),
        )
    if command[:3] == ["tar", "cf", "-"] and len(command) == 4:
        out, err, code = tar_cf(root, command[3])
    elif command[:2] == ["sh", "-c"] and len(command) == 3 and (m := _RETRY.fullmatch(command[2])):
        out, err, code = tar_cf(root, m.group(1).replace("'\\''", "'"))
        # tail -c+N starts at byte N, counted from 1 (GNU tail: +0 is +1, the whole input)
        out = out[max(int(m.group(2)), 1) - 1 :]
    else:
        return (
            b"",
            b"",
            internal_error(
                f"the fake API server runs no containers: it answers only kubectl cp's "
                f"`tar cf - <path>` (with or without --retries), not {command}"
            ),
        )
    return out, err, exit_status(code, command)


def exit_status(code: int, command: list[str]) -> dict:
    """The error stream's Status for an exit code (v4WriteStatusFunc)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            "command terminated with non-zero exit code: error executing command "
            f"[{' '.join(command)}], exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def internal_error(text: str) -> dict:
    """apierrors.NewInternalError(err).Status(), as the kubelet writes it."""
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {text}",
        "reason": "InternalError",
        "details": {"causes": [{"message": text}]},
        "code": 500,
    }


# ---------------------------------------------------------------- WebSocket (RFC 6455)


class WebSocket:
    """The server end of an upgraded connection: frames in and out, pings answered."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self._in = bytearray()
        self._fragments = bytearray()
        self._opcode = _BINARY
        self.closed = False
        self._write = threading.Lock()

    def readable(self) -> bool:
        """Bytes already buffered (by us or TLS) need no select."""
        pending = getattr(self.conn, "pending", None)
        return bool(self._in) and self._complete() or bool(pending and pending() > 0)

    def _complete(self) -> bool:
        return self._frame_length() is not None

    def feed(self) -> bool:
        """Read what the socket has; False when the peer is gone."""
        try:
            data = self.conn.recv(65536)
        except TimeoutError:
            return True
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return False
        self._in += data
        return True

    def _frame_length(self) -> int | None:
        buf = self._in
        if len(buf) < 2:
            return None
        size, at = buf[1] & 0x7F, 2
        if size == 126:
            if len(buf) < 4:
                return None
            size, at = struct.unpack(">H", buf[2:4])[0], 4
        elif size == 127:
            if len(buf) < 10:
                return None
            size, at = struct.unpack(">Q", buf[2:10])[0], 10
        at += 4 if buf[1] & 0x80 else 0
        return at + size if len(buf) >= at + size else None

    def messages(self) -> list[bytes]:
        """The complete data messages received so far (control frames handled here)."""
        out = []
        while (end := self._frame_length()) is not None:
            frame, self._in = bytes(self._in[:end]), self._in[end:]
            fin, opcode = frame[0] & 0x80, frame[0] & 0x0F
            size, at = frame[1] & 0x7F, 2
            at += {126: 2, 127: 8}.get(size, 0)
            payload = frame[at:]
            if frame[1] & 0x80:  # clients mask every frame (RFC 6455 5.3)
                mask, payload = payload[:4], payload[4:]
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == _PING:
                self.send(payload, _PONG)
            elif opcode == _CLOSE:
                if not self.closed:
                    self.send(payload[:2], _CLOSE)
                self.closed = True
            elif opcode in (_TEXT, _BINARY, _CONTINUATION):
                if opcode != _CONTINUATION:
                    self._opcode, self._fragments = opcode, bytearray()
                self._fragments += payload
                if fin:
                    out.append(bytes(self._fragments))
        return out

    def send(self, payload: bytes, opcode: int = _BINARY) -> None:
        """One unmasked frame (servers never mask)."""
        size = len(payload)
        if size < 126:
            head = struct.pack(">BB", 0x80 | opcode, size)
        elif size < 1 << 16:
            head = struct.pack(">BBH", 0x80 | opcode, 126, size)
        else:
            head = struct.pack(">BBQ", 0x80 | opcode, 127, size)
        with self._write:
            self.conn.sendall(head + payload)

    def close(self, code: int = 1000) -> None:
        """A normal closure, then wait briefly for the client's close."""
        with contextlib.suppress(OSError):
            self.send(struct.pack(">H", code), _CLOSE)
            self.conn.settimeout(2)
            while not self.closed and self.feed():
                self.messages()


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 4.2.2)."""
    digest = hashlib.sha1((key.strip() + WEBSOCKET_GUID).encode()).digest()  # noqa: S324
    return base64.b64encode(digest).decode()


def offered_protocols(headers: Any) -> list[str]:
    """The client's Sec-WebSocket-Protocol values, in its order."""
    values = headers.get_all("Sec-WebSocket-Protocol") or []
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def is_websocket(headers: Any) -> bool:
    """An RFC 6455 upgrade request."""
    upgrade = (headers.get("Upgrade") or "").lower()
    connection = (headers.get("Connection") or "").lower()
    return upgrade == "websocket" and "upgrade" in connection


class RefusedError(Exception):
    """A 400 BadRequest with this message."""


def container_of(pod: dict, subresource: str, query: dict[str, list[str]]) -> str:
    """The exec's container, as streamLocation picks it; port-forward has none."""
    name = (pod.get("metadata") or {}).get("name", "")
    if not (pod.get("spec") or {}).get("nodeName"):
        raise RefusedError(f"pod {name} does not have a host assigned")
    if subresource == "portforward":
        return ""
    containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
    container = (query.get("container") or [""])[-1]
    if not container and len(containers) == 1:
        container = containers[0]
    elif not container:
        raise RefusedError(
            f"a container name must be specified for pod {name}, choose one of: "
            f"[{' '.join(containers)}]"
        )
    if container not in containers:
        raise RefusedError(f"container {container} is not valid for pod {name}")
    return container


def subprotocol(method: str, subresource: str, headers: Any) -> str:
    """The subprotocol chosen from the client's (its first the fake serves), or 400."""
    wanted = {"exec": EXEC_PROTOCOLS, "portforward": (PORTFORWARD_PROTOCOL,)}.get(subresource, ())
    chosen = next((p for p in offered_protocols(headers) if p in wanted), None)
    if method != "GET" or not is_websocket(headers) or chosen is None:
        raise RefusedError(
            f"the fake API server serves pods/{subresource} only as a WebSocket upgrade "
            f"with subprotocol {' or '.join(wanted) or '(none: attach is not served)'} "
            "(kubectl 1.36's first try); SPDY/3.1 and other protocols are not served"
        )
    return chosen


@dataclass
class Upgrade:
    """An accepted upgrade: the 101 answer, then `session` owns the connection."""

    key: str
    protocol: str
    session: Callable[[WebSocket], None]

    def serve(self, conn: socket.socket, wfile: Any) -> None:
        """Answer 101 and run the session on the connection."""
        wfile.write(
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\n"
                f"Sec-WebSocket-Accept: {accept_key(self.key)}\r\n"
                f"Sec-WebSocket-Protocol: {self.protocol}\r\n\r\n"
            ).encode()
        )
        wfile.flush()
        conn.settimeout(1)
        ws = WebSocket(conn)
        with contextlib.suppress(OSError):
            self.session(ws)


def exec_session(stdout: bytes, stderr: bytes, status: dict, out: bool, err: bool):
    """The exec's output on the streams it asked for, its Status, then a close.

    stderr goes first: tar writes its warnings before the archive, and kubectl cp stops
    reading at the archive's end (the race is real; this is the order tar's writes take).
    """

    def run(ws: WebSocket) -> None:
        for stream, data, wanted in ((STDERR, stderr, err), (STDOUT, stdout, out)):
            for at in range(0, len(data) if wanted else 0, _CHUNK):
                ws.send(bytes([stream]) + data[at : at + _CHUNK])
        ws.send(bytes([ERROR]) + json.dumps(status).encode())
        ws.close()

    return run


def exec_command(raw_query: str) -> list[str]:
    """The repeated `command` parameters, in order."""
    return parse_qs(raw_query, keep_blank_values=True).get("command", [])


# ---------------------------------------------------------------- SPDY/3.1 port forwarding

_SYN_STREAM, _SYN_REPLY, _RST_STREAM, _PING_FRAME, _GOAWAY = 1, 2, 3, 6, 7
_FIN = 0x01


@dataclass
class _Pair:
    """One forwarded connection: its error and data streams (kubelet's httpStreamPair)."""

    port: int = 0
    error: int = 0
    data: int = 0
    backend: socket.socket | None = None
    error_closed: bool = False
    data_closed: bool = False


@dataclass
class SpdyPortForward:
    """The kubelet's end of a port-forward session, tunneled in WebSocket messages."""

    ws: WebSocket
    ports: dict[int, str]  # pod port -> "host:port" where it answers
    pod: str  # "<name>_<namespace>"
    uid: str
    _in: bytearray = field(default_factory=bytearray)
    _inflate: Any = field(default_factory=lambda: zlib.decompressobj(zdict=SPDY_DICTIONARY))
    _deflate: Any = field(default_factory=lambda: zlib.compressobj(zdict=SPDY_DICTIONARY))
    _pairs: dict[str, _Pair] = field(default_factory=dict)
    _streams: dict[int, _Pair] = field(default_factory=dict)
    ended: bool = False

    def run(self) -> None:
        """Until the client goes: WebSocket messages in, backends' bytes out."""
        while not self.ended and not self.ws.closed:
            backends = {p.backend: p for p in self._pairs.values() if p.backend is not None}
            if self.ws.readable():
                ready = [self.ws.conn]
            else:
                ready, _, _ = select.select([self.ws.conn, *backends], [], [], 1)
            for sock in ready:
                if sock is self.ws.conn:
                    if not self.ws.feed():
                        break
                    for message in self.ws.messages():
                        self.feed(message)
                else:
                    self._from_backend(backends[sock])
        for pair in self._pairs.values():
            if pair.backend is not None:
                pair.backend.close()

    # -- frames out

    def _headers(self, headers: dict[str, str]) -> bytes:
        block = struct.pack(">I", len(headers))
        for name, value in headers.items():
            block += struct.pack(">I", len(name)) + name.encode()
            block += struct.pack(">I", len(value)) + value.encode()
        return self._deflate.compress(block) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    def _control(self, kind: int, payload: bytes, flags: int = 0) -> None:
        head = struct.pack(">HHI", 0x8003, kind, (flags << 24) | len(payload))
        self.ws.send(head + payload)

    def _data(self, stream: int, data: bytes, fin: bool = False) -> None:
        head = struct.pack(">II", stream & 0x7FFFFFFF, ((_FIN if fin else 0) << 24) | len(data))
        self.ws.send(head + data)

    def _finish(self, pair: _Pair, error: str = "") -> None:
        """Close both streams, the error text first (httpStreamHandler.portForward)."""
        if pair.backend is not None:
            pair.backend.close()
            pair.backend = None
        if not pair.data_closed:
            pair.data_closed = True
            self._data(pair.data, b"", fin=True)
        if not pair.error_closed:
            pair.error_closed = True
            self._data(pair.error, error.encode(), fin=True)

    # -- frames in

    def feed(self, message: bytes) -> None:
        """Bytes of the tunneled SPDY session (frames may span messages)."""
        self._in += message
        while len(self._in) >= 8:
            length = struct.unpack(">I", self._in[4:8])[0] & 0xFFFFFF
            if len(self._in) < 8 + length:
                return
            frame, self._in = bytes(self._in[: 8 + length]), self._in[8 + length :]
            flags = frame[4]
            if frame[0] & 0x80:
                self._on_control(struct.unpack(">H", frame[2:4])[0], flags, frame[8:])
            else:
                self._on_data(struct.unpack(">I", frame[:4])[0], flags, frame[8:])

    def _on_control(self, kind: int, flags: int, body: bytes) -> None:
        if kind == _SYN_STREAM:
            stream = struct.unpack(">I", body[:4])[0] & 0x7FFFFFFF
            self._on_stream(stream, self._parse_headers(body[10:]))
        elif kind == _PING_FRAME:
            self._control(_PING_FRAME, body)
        elif kind == _RST_STREAM:
            stream = struct.unpack(">I", body[:4])[0] & 0x7FFFFFFF
            pair = self._streams.get(stream)
            if pair is not None and stream == pair.data:
                pair.data_closed = True  # reset: nothing more is sent on it
        elif kind == _GOAWAY:
            self.ended = True
        # SETTINGS, WINDOW_UPDATE, HEADERS: spdystream keeps no windows; nothing to do

    def _parse_headers(self, block: bytes) -> dict[str, str]:
        raw = self._inflate.decompress(block)
        count, at, out = struct.unpack(">I", raw[:4])[0], 4, {}
        for _ in range(count):
            size = struct.unpack(">I", raw[at : at + 4])[0]
            name, at = raw[at + 4 : at + 4 + size].decode(), at + 4 + size
            size = struct.unpack(">I", raw[at : at + 4])[0]
            out[name], at = raw[at + 4 : at + 4 + size].decode(), at + 4 + size
        return out

    def _on_stream(self, stream: int, headers: dict[str, str]) -> None:
        self._control(_SYN_REPLY, struct.pack(">I", stream) + self._headers({}))
        pair = self._pairs.setdefault(headers.get("requestid", ""), _Pair())
        self._streams[stream] = pair
        pair.port = int(headers.get("port") or 0)
        if headers.get("streamtype") == "error":
            pair.error = stream
        elif headers.get("streamtype") == "data":
            pair.data = stream
        if pair.error and pair.data:
            self._connect(pair)

    def _connect(self, pair: _Pair) -> None:
        prefix = f"error forwarding port {pair.port} to pod {self.pod}, uid {self.uid}: "
        backend = self.ports.get(pair.port)
        if backend is None:
            self._finish(
                pair,
                prefix + "the fake API server runs no containers and has no backend for this "
                "port (api.set_pod_port)",
            )
            return
        host, _, port = backend.rpartition(":")
        try:
            pair.backend = socket.create_connection((host, int(port)), timeout=5)
        except OSError as e:
            self._finish(pair, prefix + f"dial tcp {backend}: {e.strerror or e}")

    def _on_data(self, stream: int, flags: int, data: bytes) -> None:
        pair = self._streams.get(stream)
        if pair is None or stream != pair.data or pair.backend is None:
            return
        with contextlib.suppress(OSError):
            if data:
                pair.backend.sendall(data)
            if flags & _FIN:
                pair.backend.shutdown(socket.SHUT_WR)

    def _from_backend(self, pair: _Pair) -> None:
        assert pair.backend is not None
        try:
            data = pair.backend.recv(_CHUNK)
        except OSError:
            data = b""
        if data and not pair.data_closed:
            self._data(pair.data, data)
        elif not data:
            self._finish(pair)


def portforward_session(ports: dict[int, str], pod: str, uid: str):
    """The session the 101 hands the connection to."""

    def run(ws: WebSocket) -> None:
        SpdyPortForward(ws, ports, pod, uid).run()
        ws.close()

    return run
