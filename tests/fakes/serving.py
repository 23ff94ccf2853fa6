"""http.server's ThreadingHTTPServer whose `shutdown()` returns as soon as its loop sees it.

socketserver's `serve_forever` looks for a shutdown request only between `select()` calls
of `poll_interval` (CPython 3.11 Lib/socketserver.py `BaseServer.serve_forever`, whose
`shutdown` sets `__shutdown_request` and waits for the loop to notice), so every `stop`
of a fake waited out the rest of that interval: ~25 ms on average at the fakes' 0.05 s,
twice per control plane unit test (the API server and etcd), ~70 ms of idle wall time per
test's teardown measured 2026-11-27. Here the loop also watches one end of a socket pair,
and `shutdown` writes to the other: the loop ends at once (what the XXX comment in that
`serve_forever` proposes: "another file descriptor ... to wake this up instead of
polling"). Everything else (accepting, `service_actions` every `poll_interval`,
`shutdown` waiting for the loop to end, a `shutdown` before `serve_forever` making it
return at once) is socketserver's.
"""

from __future__ import annotations

import contextlib
import http.server
import selectors
import socket
import threading
from typing import Any

# socketserver's own choice (`_ServerSelector`)
_Selector = getattr(selectors, "PollSelector", selectors.SelectSelector)


class ThreadingHTTPServer(http.server.ThreadingHTTPServer):
    """`http.server.ThreadingHTTPServer` with a prompt `shutdown` (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._loop_ended = threading.Event()

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._loop_ended.clear()
        try:
            with _Selector() as selector:
                selector.register(self, selectors.EVENT_READ)
                selector.register(self._wake_reader, selectors.EVENT_READ)
                while True:
                    ready = {key.fileobj for key, _ in selector.select(poll_interval)}
                    if self._wake_reader in ready:
                        # this request is answered (a later serve_forever serves again, as
                        # socketserver's does); closed by server_close without a shutdown,
                        # the loop ends quietly, as socketserver's ignores its failed accept
                        with contextlib.suppress(OSError):
                            self._wake_reader.recv(1)
                        break
                    if self in ready:
                        self._handle_request_noblock()
                    self.service_actions()
        finally:
            self._loop_ended.set()

    def shutdown(self) -> None:
        """Stop the `serve_forever` loop and wait until it has ended (another thread's)."""
        self._wake_writer.send(b"\0")
        self._loop_ended.wait()

    def server_close(self) -> None:
        super().server_close()
        self._wake_reader.close()
        self._wake_writer.close()
