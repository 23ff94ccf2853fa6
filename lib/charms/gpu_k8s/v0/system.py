# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The boundary between gpu-k8s charms and the machine they run on.

Every workload module runs programs through a `Runner` and reaches files through a
`Host` root, so tests swap the real machine for a fake one at exactly this boundary
(a fake runner that emulates `apt-get`, `kubeadm`, `systemctl`, ... and a temporary
directory as the file system root). No ops imports here: libraries never set status.

Why not charmlibs-systemd and charmlibs-sysctl (1.0.0, read 2026-11-22): both run
`systemctl`/`sysctl` through `subprocess` and write under /etc themselves, so they cannot
run against this boundary and tests would have to mock subprocess, which this project does
not do; what the charms need of them is one command each (`systemctl enable|restart|
reload`, `sysctl --system` after writing a drop-in). charmlibs-sysctl's merging of several
charms' settings on one machine is not needed: of the charms sharing machine 0, only the
control plane sets sysctls.

Also here, because every charm needs them and they are about the machine and its clock:
`machine()` (this unit's machine, what the charms' `host_factory` returns outside tests),
`SYSTEMCTL` and `poll_until` (wait for a condition on an injectable clock).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

LIBID = "3dec0f436d2c448586bd6ef84b7629c5"
LIBAPI = 0
LIBPATCH = 7

logger = logging.getLogger(__name__)

SYSTEMCTL = "/usr/bin/systemctl"
# The longest any program may run when its caller names no timeout of its own (seconds).
# Juju has no hook timeout and a hook holds the machine lock that every charm on the
# machine waits for, so a program that hangs (a stalled download, a kubelet that never
# answers) would stop them all for ever (review deploy.md N16). Long enough for an apt
# install of the NVIDIA driver on a slow mirror; callers that know better pass less.
# A timeout is a `CommandError` (exit status -1), which each caller turns into a status.
DEFAULT_TIMEOUT = 1800.0
# How long a timed-out program, killed, is waited for before it is given up. A program in
# the kernel's uninterruptible sleep (state D: nvidia-smi on a hung NVIDIA driver,
# leptonai/gpud#117) takes no signal until it leaves it, maybe never, and CPython's
# `subprocess.run` waits for the killed child without a bound (Lib/subprocess.py run():
# `process.kill()` then `process.wait()`, and Popen.__exit__ `self.wait()` again; as in the
# python3.12 of Ubuntu 24.04, the charms' base): the hook would never end. So
# `SubprocessRunner` kills the program's process group (coreutils src/timeout.c puts its
# command in a group of its own "so all subprocesses can be killed"), waits this long, then
# leaves the child (kept in `ABANDONED`, so Python neither waits for it nor warns); once
# the hook's process ends, init reaps it.
KILL_WAIT_S = 5.0
ABANDONED: list[subprocess.Popen] = []

T = TypeVar("T")


class CommandError(Exception):
    """A program exited non-zero; carries its argv, exit status and stderr."""

    def __init__(self, argv: list[str], returncode: int, stderr: str):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        detail = self.stderr.splitlines()[-1] if self.stderr else "no error output"
        super().__init__(f"{' '.join(self.argv[:3])} exited {returncode}: {detail}")

    @property
    def last_line(self) -> str:
        """The program's last non-empty error line, or its exit status when it printed none."""
        if not self.stderr:
            return f"exit status {self.returncode}"
        return self.stderr.splitlines()[-1].strip()


class Runner(Protocol):
    """Runs a program given as an argument list and returns its stdout."""

    def run(
        self,
        argv: list[str],
        *,
        input: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> str:
        """Run `argv`; raise `CommandError` when it exits non-zero."""
        ...

    def request(self, path: str, text: str, *, timeout: float) -> str:
        """Send `text` to the Unix stream socket `path` and return what it answers.

        Raise `CommandError` when nobody listens there or no answer came within `timeout`.
        """
        ...


class SubprocessRunner:
    """The real runner: absolute paths, argument lists, check and capture."""

    def run(
        self,
        argv: list[str],
        *,
        input: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> str:
        """Run `argv` with subprocess; raise `CommandError` carrying stderr on failure.

        Without a `timeout` it gets `DEFAULT_TIMEOUT`: nothing runs unbounded, and a
        program that outlives its kill is given up after KILL_WAIT_S (`_give_up`).
        """
        full_env = {**os.environ, **env} if env else None
        if timeout is None:
            timeout = DEFAULT_TIMEOUT
        try:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if input is not None else None,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=full_env,
                text=True,
                start_new_session=True,  # its own process group: a timeout ends them all
            )
        except FileNotFoundError:
            raise CommandError(argv, 127, f"{argv[0]}: not found") from None
        try:
            stdout, stderr = child.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            _give_up(child)
            raise CommandError(argv, -1, f"timed out after {timeout}s") from None
        except BaseException:
            _give_up(child)
            raise
        if child.returncode:
            raise CommandError(argv, child.returncode, stderr or "")
        return stdout

    def request(self, path: str, text: str, *, timeout: float) -> str:
        """Send `text` to the Unix stream socket `path`, then read until the peer closes.

        The write side is shut once `text` is sent, as `socat` does at the end of its
        input: a daemon's command socket (HAProxy's master CLI) answers and closes then.
        """
        argv = ["connect", path]
        chunks = []
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(timeout)
                conn.connect(path)
                conn.sendall(text.encode())
                conn.shutdown(socket.SHUT_WR)
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
        except TimeoutError:
            raise CommandError(argv, -1, f"no answer within {timeout}s") from None
        except OSError as e:
            raise CommandError(argv, e.errno or -1, e.strerror or str(e)) from None
        return b"".join(chunks).decode(errors="replace")


def _give_up(child: subprocess.Popen) -> None:
    """Kill `child`'s process group, wait at most KILL_WAIT_S, then leave it (`ABANDONED`)."""
    if child.poll() is None:  # not reaped: its pid, its group's id, is still its own
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        child.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        logger.warning("%s did not end %ss after SIGKILL: left to init", child.args, KILL_WAIT_S)
        ABANDONED.append(child)
    for pipe in (child.stdin, child.stdout, child.stderr):
        if pipe is not None:
            pipe.close()


@dataclasses.dataclass(frozen=True)
class Host:
    """The machine a charm manages: a runner for programs and a root for files.

    `path("/etc/kubernetes/admin.conf")` resolves under `root`, which is `/` on a real
    machine and a temporary directory in tests.
    """

    runner: Runner
    root: Path = Path("/")

    def path(self, absolute: str) -> Path:
        """Return `absolute` (an absolute path on the machine) under this host's root."""
        return self.root / absolute.lstrip("/")

    def run(self, *argv: str, input: str | None = None, timeout: float | None = None) -> str:
        """Run a program on this host; see `Runner.run`."""
        return self.runner.run(list(argv), input=input, timeout=timeout)

    def request(self, absolute: str, text: str, *, timeout: float = 5.0) -> str:
        """Ask the Unix socket at `absolute` on this host; see `Runner.request`."""
        return self.runner.request(absolute, text, timeout=timeout)

    def write(self, absolute: str, content: str, mode: int = 0o644) -> bool:
        """Write `content` to a file if it differs; return True when the file changed.

        The file is replaced whole (a temporary file renamed over it), and the temporary
        file is a new inode created with `mode` (O_CREAT|O_EXCL|O_NOFOLLOW): a private file
        (no bits for group or others) is never readable by anyone else, not even while it
        is written, and a leftover or planted `.name.tmp` is removed, never written
        through. Directories created for a private file are 0700.
        """
        target = self.path(absolute)
        if target.exists() and target.read_text() == content:
            if (target.stat().st_mode & 0o777) != mode:
                target.chmod(mode)
            return False
        private = not mode & 0o077
        target.parent.mkdir(mode=0o700 if private else 0o755, parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.unlink(missing_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, mode)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(content)
            os.chmod(tmp, mode)  # the umask may have taken bits of `mode`; it never adds any
            tmp.replace(target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return True

    def read(self, absolute: str) -> str | None:
        """Return a file's text, or None when it does not exist."""
        target = self.path(absolute)
        return target.read_text() if target.exists() else None


def machine() -> Host:
    """The machine this unit runs on: the real runner and `/`."""
    return Host(SubprocessRunner())


def poll_until(
    check: Callable[[], T | None],
    timeout: float,
    *,
    poll: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T | None:
    """Call `check` until it returns something other than None, or `timeout` passes.

    Returns that result, or None on timeout. `check` runs at least once; the loop is also
    bounded by the number of polls `timeout` allows, so a clock that stands still (as in
    tests) cannot make it spin forever.
    """
    deadline = clock() + timeout
    for _ in range(int(timeout / max(poll, 1e-3)) + 2):
        result = check()
        if result is not None:
            return result
        left = deadline - clock()
        if left <= 0:
            break
        sleep(min(poll, left))
    return None
