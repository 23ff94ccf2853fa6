"""A fake machine for the `charms.gpu_k8s.v0.system.Runner` boundary.

`FakeRunner` records every command and answers through handlers registered per program
(by basename: `apt-get`, `kubeadm`, ...). A handler gets the argv and the input and
returns stdout, or raises `CommandError`. Each charm's tests register handlers that
emulate what the real program would do to the fake file system (`FakeRunner.root`),
so workload modules run unchanged against it. Failures can be injected per command.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from charms.gpu_k8s.v0.system import CommandError, Host

Handler = Callable[[list[str], "str | None"], str]
# A Unix socket's peer: gets what the client sent, returns the answer (or raises CommandError)
SocketHandler = Callable[[str], str]


@dataclasses.dataclass
class Call:
    """One command the code under test ran."""

    argv: list[str]
    input: str | None = None
    timeout: float | None = None  # what the code asked for (the real runner's default: None)

    @property
    def line(self) -> str:
        """The command as one space-separated line (for assertions)."""
        return " ".join(self.argv)


class FakeRunner:
    """A `Runner` that emulates programs with registered handlers."""

    def __init__(self, root: Path):
        self.root = root
        self.calls: list[Call] = []
        self.handlers: dict[str, Handler] = {}
        self._failures: list[tuple[str, int, str, int]] = []
        self.sockets: dict[str, SocketHandler] = {}
        self.requests: list[tuple[str, str]] = []  # (socket path, what was sent)

    def host(self) -> Host:
        """A `Host` over this runner and its root."""
        return Host(runner=self, root=self.root)

    def on(self, program: str, handler: Handler) -> None:
        """Emulate `program` (a basename such as `kubeadm`) with `handler`."""
        self.handlers[program] = handler

    def on_socket(self, path: str, handler: SocketHandler) -> None:
        """Answer requests to the Unix socket `path` (a machine path) with `handler`."""
        self.sockets[path] = handler

    def fail(self, prefix: str, *, returncode: int = 1, stderr: str = "", times: int = 1) -> None:
        """Make the next `times` commands whose line starts with `prefix` fail."""
        self._failures.append((prefix, returncode, stderr, times))

    def lines(self, program: str | None = None) -> list[str]:
        """The command lines run so far, optionally only those of one program."""
        return [
            c.line for c in self.calls if program is None or os.path.basename(c.argv[0]) == program
        ]

    def run(
        self,
        argv: list[str],
        *,
        input: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> str:
        """Record the command, then inject a failure or dispatch to its handler."""
        self.calls.append(Call(list(argv), input, timeout))
        line = " ".join(argv)
        for i, (prefix, code, stderr, times) in enumerate(self._failures):
            if line.startswith(prefix):
                if times <= 1:
                    del self._failures[i]
                else:
                    self._failures[i] = (prefix, code, stderr, times - 1)
                raise CommandError(argv, code, stderr or f"{prefix}: injected failure")
        program = os.path.basename(argv[0])
        handler = self.handlers.get(program)
        if handler is None:
            raise CommandError(argv, 127, f"{program}: no fake for this program")
        return handler(list(argv), input)

    def request(self, path: str, text: str, *, timeout: float) -> str:
        """Record the request and answer it from the socket's handler.

        No handler: nobody listens there, as connect(2) says for a missing socket file.
        """
        self.requests.append((path, text))
        handler = self.sockets.get(path)
        if handler is None:
            raise CommandError(["connect", path], 2, "No such file or directory")
        return handler(text)
