"""TensorFlow imported once per test process and forked for each program a pod runs.

Every process standing for a training container imports TensorFlow (~3.3 s of CPU, most
of a short-lived trainer's CPU: tests/functional/test_tf_gang.py's trainers use ~3.8 s
each before their first checkpoint). So the programs the launcher runs (actions/
tf_launcher.py forks and execs `python3 <program>`) are forks of one process that
imported it, a zygote:

    python3 tf_zygote.py serve SOCKET    # imports tensorflow, then forks per request

`environment(env)` gives a container's environment the zygote's socket
(GPU_K8S_TF_ZYGOTE) and `tests/fixtures/tf_zygote` first on PYTHONPATH, whose
sitecustomize.py is the thin client: in a Python started for a script that imports
tensorflow, it hands the script's argv, environment, working directory, umask, sys.path,
CPU affinity and stdio fds (SCM_RIGHTS) to the zygote before the script runs, forwards
the signals the launcher forwards (SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2) to
the program and ends as the program ended: its exit code, or killed by the same signal (so
the launcher still reports 128+N). The client stays the launcher's child: its pid,
PR_SET_PDEATHSIG and exit codes are the launcher's protocol as before. A client that dies
(killed, its launcher gone) closes its connection and the program is SIGKILLed.

Where the fork could differ from a fresh process, the client runs the script itself, as
before (the zygote answers `exec`): an environment variable read at import time
(`IMPORT_TIME`: TF_*, KERAS_*, CUDA_*, PYTHON*..., TF_CONFIG excepted, which is read when
the strategy is made) that differs from the zygote's, other interpreter flags, or a
zygote that is not single-threaded.

Forking a process with threads can deadlock the child on a lock another thread held. After
`import tensorflow` this process has one thread besides the main one: OpenBLAS's worker
(numpy's BLAS starts its pool at load, one thread per CPU less one, as many as
OPENBLAS_NUM_THREADS says: OpenBLAS driver/others/memory.c `blas_get_cpu_number`; none
with OPENBLAS_NUM_THREADS=1, measured here: 2 threads -> 1, and tf_keras's import adds
another that goes the same way). OpenBLAS also stops its pool before a fork itself
(memory.c `openblas_fork_handler`: pthread_atfork(blas_thread_shutdown)), but the zygote
does not rely on it. The zygote runs with OPENBLAS_NUM_THREADS=1 and checks
/proc/self/task before every fork: it forks only while it is the one thread it was, so no
lock can be held by a thread the child lacks. The programs' BLAS is single-threaded then
(the tests train with --threads=1; TensorFlow's own kernels use Eigen, not OpenBLAS).

What still differs from a fresh interpreter: the program's pid is not the one its launcher
knows (that is the client's, which forwards), its str hashes share the zygote's random
seed (PYTHONHASHSEED unset: one seed per zygote, not per program), TensorFlow and what it
imports are in sys.modules before the program's first line, and its OpenBLAS has one
thread. Python's `random` is seeded again in each fork (CPython Lib/random.py:
os.register_at_fork(after_in_child=_inst.seed)).

Each fork's parent is a monitor (one per request) that waits for the program and for the
client's connection, so the test's CPU time (rusage of reaped children) counts the
programs: the zygote reaps its monitors, the test process the zygote.

`GPU_K8S_TF_ZYGOTE=0` in the test process's environment turns it off (every program a
fresh interpreter, as before).
"""

from __future__ import annotations

import atexit
import ctypes
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
import types
from pathlib import Path

ENV = "GPU_K8S_TF_ZYGOTE"
CLIENT_DIR = Path(__file__).resolve().parent / "fixtures" / "tf_zygote"
# Variables a module may read when it is imported (TensorFlow's C++ logging and oneDNN,
# Keras' backend choice, CUDA's device list, the interpreter's own PYTHON*, the BLAS and
# OpenMP thread pools, glibc's loader and allocator...): a program whose value differs
# from the zygote's runs in a fresh interpreter. TF_CONFIG is read at run time (the
# cluster resolver, when the strategy is made). TMPDIR is a container's own (fakes.kubelet
# gives each its own): Python's tempfile keeps the directory it first found
# (tempfile.tempdir), which the forked program forgets (`_program`), so it is read anew.
IMPORT_TIME = ("TF_", "KERAS_", "CUDA_", "XLA_", "TPU_", "NVIDIA_", "PYTHON", "OMP_",
               "OPENBLAS_", "GOTO", "MKL_", "LD_", "MALLOC", "GRPC_", "ABSL", "HOME",
               "LANG", "LC_")  # fmt: skip
RUNTIME = frozenset({"TF_CONFIG", "PYTHONUNBUFFERED"})  # PYTHONUNBUFFERED: stdio remade
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)  # fmt: skip
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def import_time(env: dict[str, str]) -> dict[str, str]:
    """The variables of `env` that a module may read at import (PYTHONPATH less the client)."""
    out = {k: v for k, v in env.items() if k.startswith(IMPORT_TIME) and k not in RUNTIME}
    if "PYTHONPATH" in out:
        parts = [p for p in out["PYTHONPATH"].split(os.pathsep) if p != str(CLIENT_DIR)]
        out["PYTHONPATH"] = os.pathsep.join(parts)
    out.pop(ENV, None)
    return out


# ------------------------------------------------------------------------ the test's side

_servers: dict[str, tuple[subprocess.Popen, str]] = {}
_lock = threading.Lock()
MAX_SERVERS = 3  # one per distinct import-time environment (kubelet, LocalJob, legacy Keras)


def environment(env: dict[str, str]) -> dict[str, str]:
    """`env` with the zygote for its import-time variables (started once), unless turned off."""
    if os.environ.get(ENV) == "0":
        return env
    key = json.dumps(import_time(env), sort_keys=True)
    with _lock:
        if key not in _servers:
            if len(_servers) >= MAX_SERVERS:
                return env
            _servers[key] = _start(env)
        path = _servers[key][1]
    out = dict(env)
    out[ENV] = path
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    out["PYTHONPATH"] = os.pathsep.join([str(CLIENT_DIR), *parts])
    return out


# The zygote is started as the launcher starts a program: by a Python that execs it. A
# Python started in the C locale coerces it (PEP 538: LC_CTYPE=C.UTF-8 in its environment,
# which its children inherit) and runs in UTF-8 mode (PEP 540), its children do neither;
# the zygote's interpreter flags must be its programs' (the client checks them).
_THROUGH_A_LAUNCHER = "import os, sys; os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"


def _start(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    if not _servers:
        atexit.register(stop_all)
    folder = tempfile.mkdtemp(prefix="tf-zygote-")
    path = os.path.join(folder, "socket")
    server_env = {k: v for k, v in env.items() if k != ENV}
    server_env["OPENBLAS_NUM_THREADS"] = "1"  # one thread: safe to fork (docstring)
    with open(os.path.join(folder, "zygote.log"), "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _THROUGH_A_LAUNCHER, __file__, "serve", path, str(os.getpid())],
            env=server_env,
            stdin=subprocess.PIPE,  # closed when this process ends: the zygote leaves
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    # The socket is bound before TensorFlow is imported: a client that connects now
    # waits in the backlog until the zygote is ready.
    for _ in range(600):
        if os.path.exists(path) or proc.poll() is not None:
            break
        threading.Event().wait(0.01)
    return proc, path


def stop_all() -> None:
    """End every zygote and reap it (its programs' CPU time then counts in this process's)."""
    for proc, path in _servers.values():
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        folder = os.path.dirname(path)
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)
    _servers.clear()


# ------------------------------------------------------------------------------ the zygote


_LAUNCHED: dict[str, str] = {}  # the zygote's environment before the import
_IMPORTED: dict[str, str] = {}  # what the import added to it


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def serve(path: str, parent: int) -> dict | None:
    """Accept requests until stdin closes; return the request in a forked program's process."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the test process died: so does this
    if os.getppid() != parent:
        os._exit(0)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"{path}.new")
    listener.listen(64)
    os.rename(f"{path}.new", path)
    before = dict(os.environ)
    import tensorflow  # noqa: F401  (the import this process exists to share)

    # What the import set in os.environ (TensorFlow 2.21: TF2_BEHAVIOR, TPU_ML_PLATFORM,
    # TPU_ML_PLATFORM_VERSION, ENABLE_RUNTIME_UPTIME_TELEMETRY, HDF5_PLUGIN_PATH): a fresh
    # process that imported it has them too, so each program gets them over its own.
    _IMPORTED.update({k: v for k, v in os.environ.items() if before.get(k) != v})
    _LAUNCHED.update(before)
    ready_threads = _threads()
    monitors: set[int] = set()
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
        for pid in list(monitors):  # reaped, so their programs' CPU time is counted
            if os.waitpid(pid, os.WNOHANG)[0]:
                monitors.discard(pid)
        if sys.stdin in readable:
            break
        if listener not in readable:
            continue
        conn, _ = listener.accept()
        if _threads() != 1 or ready_threads != 1:  # never fork beside another thread
            _answer(conn, {"exec": f"the zygote has {_threads()} threads"})
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            return _monitor(conn)  # the program's process returns; the monitor never does
        monitors.add(pid)
        conn.close()
    for pid in monitors:
        os.waitpid(pid, 0)
    return None


def _answer(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _monitor(conn: socket.socket) -> dict | None:
    """One request: fork the program, then report its pid and its wait status.

    Kills the program if the client goes. Returns only in the program's process.
    """
    try:
        request, fds = _request(conn)
        refusal = _refusal(request)
        if refusal:
            _answer(conn, {"exec": refusal})
            os._exit(0)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        monitor = os.getpid()
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            for fd in (wake_r, wake_w):
                os.close(fd)
            return _program(conn, fds, request, monitor)
        for fd in fds:
            os.close(fd)
        _answer(conn, {"pid": pid})
        _watch(conn, pid, wake_r)
    except BaseException:
        traceback.print_exc()
    os._exit(1)


def _request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        chunk = conn.recv(1 << 20)
        if not chunk:
            os._exit(0)
        data += chunk
    return json.loads(data), fds


def _refusal(request: dict) -> str | None:
    """Why this program must run in its own interpreter (None: the fork is the same)."""
    mine = import_time(_LAUNCHED)
    mine.pop("OPENBLAS_NUM_THREADS", None)
    theirs = import_time(request["env"])
    differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    if differ:
        return f"import-time environment differs: {differ}"
    for key in _IMPORTED.keys() & request["env"].keys():
        if request["env"][key] != _IMPORTED[key]:
            return f"{key} differs from the value the import sets"
    if request["flags"] != list(sys.flags):
        return f"interpreter flags {request['flags']} differ from {list(sys.flags)}"
    return None


def _watch(conn: socket.socket, pid: int, wake: int) -> None:
    """Until the program ends (its status to the client) or the client goes (SIGKILL)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            _answer(conn, {"status": status})
            os._exit(0)
        readable, _, _ = select.select([conn, wake], [], [])
        if wake in readable:
            os.read(wake, 4096)
        if conn in readable and not conn.recv(4096):  # the client is gone
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os._exit(0)


def _program(conn: socket.socket, fds: list[int], request: dict, monitor: int) -> dict:
    """The forked program's process: the client's streams, environment and place."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # its monitor gone: so is it
    if os.getppid() != monitor:  # it went before the line above
        os._exit(1)
    for number in (*FORWARDED, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python starts
    conn.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.sched_setaffinity(0, request["cpus"])  # a fresh process inherits its launcher's CPUs
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.update(_IMPORTED)
    tempfile.tempdir = None  # the program's TMPDIR, not the zygote's, at its first use
    return request


def _stdio(unbuffered: bool) -> None:
    """sys.stdin/stdout/stderr remade on fds 0-2 as CPython makes them (create_stdio)."""

    def stream(fd: int, write: bool, errors: str, line: bool) -> io.TextIOWrapper:
        buffering = 0 if unbuffered and write else -1
        raw = open(fd, "wb" if write else "rb", buffering=buffering, closefd=False)  # noqa: SIM115
        return io.TextIOWrapper(
            raw,  # type: ignore[arg-type]
            encoding=sys.stdout.encoding,
            errors=errors,
            line_buffering=line or (write and os.isatty(fd)),
            write_through=unbuffered and write,
        )

    sys.stdin = sys.__stdin__ = stream(0, False, "strict", False)
    sys.stdout = sys.__stdout__ = stream(1, True, "strict", False)
    sys.stderr = sys.__stderr__ = stream(2, True, "backslashreplace", True)


def run_program(request: dict) -> None:
    """Run the client's script as __main__, as `python3 script args...` runs it."""
    _stdio(bool(request["env"].get("PYTHONUNBUFFERED")))
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[:] = [os.path.dirname(os.path.abspath(script)), *request["path"]]
    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__cached__ = None  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    code = compile(Path(script).read_bytes(), script, "exec")
    try:
        exec(code, main.__dict__)  # noqa: S102  (the program's own code, as python3 runs it)
    except SystemExit:
        raise
    except BaseException as e:  # the traceback from the program's first frame, as Python's
        assert e.__traceback__ is not None
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        job = serve(sys.argv[2], int(sys.argv[3]))
        if job is not None:
            run_program(job)
