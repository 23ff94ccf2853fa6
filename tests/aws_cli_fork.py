"""The AWS CLI v2, loaded once and forked for each command (tests/aws_cli.py's local Shell).

Starting Debian's `aws` costs about 0.6 s of CPU, nearly all of it Python importing
awscli and botocore; the docs' teardown transcripts run a dozen commands a test. So the
local Shell's `aws` is a small client of this server instead of a new interpreter:

    python3 aws_cli_fork.py serve SOCKET           # imports awscli.clidriver, then waits
    python3 -I -S aws_cli_fork.py SOCKET ARGS...   # one `aws ARGS...`, as bash ran it

The client hands its stdin, stdout and stderr (SCM_RIGHTS), its environment, working
directory and arguments to the server, which forks; the child takes those as its own and
runs what /usr/bin/aws runs (`awscli.clidriver.main()`: a new driver and botocore session
per command, reading HOME, AWS_* and the arguments then), and the client exits with the
child's status. So each command is still the real CLI's code with the command line bash
made, writing to the same terminal-like stream; only the imports are shared. The server
runs on the interpreter /usr/bin/aws names (its `#!` line), so it is the same CLI.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import traceback

_MAX_FDS = 3


def serve(path: str) -> None:
    """Accept commands on the Unix socket `path` until stdin closes (the test process ended)."""
    import selectors

    import awscli.clidriver  # noqa: F401  (the import this server exists to share)

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"{path}.new")
    listener.listen(16)
    os.rename(f"{path}.new", path)  # the test process waits for this name: ready
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)
    children: set[int] = set()
    while True:
        ready = {key.fileobj for key, _ in selector.select()}
        _reap(children, block=False)
        if sys.stdin in ready:
            break
        conn, _ = listener.accept()
        pid = os.fork()
        if pid == 0:
            listener.close()
            _child(conn)  # never returns
        children.add(pid)
        conn.close()
    _reap(children, block=True)  # so their CPU time is counted with the test run's


def _reap(children: set[int], *, block: bool) -> None:
    for pid in list(children):
        done, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
        if done:
            children.discard(pid)


def _child(conn: socket.socket) -> None:
    status = 255
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 16, _MAX_FDS)
        while chunk := conn.recv(1 << 16):  # the client shut its side after the request
            message += chunk
        request = json.loads(message)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        # sys.stdin, sys.stdout and sys.stderr are the ones Python made at start-up for
        # fds 0-2 (nothing written yet): now on the client's streams, with the buffering
        # and encoding a freshly started CLI gets for them (LANG as the Shell's).
        os.environ.clear()
        os.environ.update(request["env"])
        # What importing awscli did to the server's environment, done to this one: its
        # data directory appended to AWS_DATA_PATH (awscli/__init__.py), where botocore
        # finds the CLI's own models ("Unable to load data for: cli" without it).
        import awscli

        data = os.path.join(os.path.dirname(os.path.abspath(awscli.__file__)), "data")
        paths = [p for p in os.environ.get("AWS_DATA_PATH", "").split(os.pathsep) if p]
        os.environ["AWS_DATA_PATH"] = os.pathsep.join([*paths, data])
        os.chdir(request["cwd"])
        sys.argv = ["aws", *request["args"]]
        if os.environ.get("LC_CTYPE", "") == "UTF-8":  # as /usr/bin/aws does
            os.environ["LC_CTYPE"] = "en_US.UTF-8"
        import awscli.clidriver

        try:
            status = awscli.clidriver.main()
        except SystemExit as exit_:
            code = exit_.code
            status = code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:  # as an uncaught exception ends python: traceback, status 1
        traceback.print_exc()
        status = 1
    finally:
        with contextlib.suppress(OSError):  # a reader that went away
            sys.stdout.flush()
            sys.stderr.flush()
        try:
            conn.sendall(str(status & 0xFF).encode())
        finally:
            os._exit(0)


def client(path: str, args: list[str]) -> int:
    """Run `aws ARGS` in the server's fork with this process's streams; its exit status."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = {"env": dict(os.environ), "cwd": os.getcwd(), "args": args}
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    conn.shutdown(socket.SHUT_WR)
    answer = b""
    while chunk := conn.recv(16):
        answer += chunk
    return int(answer) if answer else 255


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        sys.exit(client(sys.argv[1], sys.argv[2:]))
