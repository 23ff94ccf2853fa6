# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The TensorFlow zygote (tests/tf_zygote.py) keeps what the launcher relies on.

A program run through it must look to its launcher as a fresh interpreter does: its
arguments, environment, working directory, CPUs and streams, its exit code, a signal's exit
(128+N seen by the launcher), the signals the launcher forwards, and its end when the
process the launcher started dies. Each program here is a fork of one zygote (one
TensorFlow import for the file); the fallback case never imports TensorFlow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import tf_zygote
from conftest import has_tensorflow

from fakes.kubelet import TENSORFLOW_IMAGE

pytestmark = [
    pytest.mark.skipif(not has_tensorflow(sys.executable), reason="tox -e functional has it"),
    pytest.mark.skipif(os.environ.get(tf_zygote.ENV) == "0", reason="GPU_K8S_TF_ZYGOTE=0"),
]

# Reports what it was given, reads a line from stdin, then does what argv[1] says.
PROGRAM = """
import json, os, signal, sys, tempfile, time
import tensorflow as tf

def said(*_):  # os.write: the handler may run inside print's own write
    os.write(1, b"SIGTERM reached the program\\n")
    os._exit(7)

signal.signal(signal.SIGTERM, said)
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "var": os.environ.get("ZYGOTE_TEST"),
    "main": __name__, "file": __file__, "path0": sys.path[0], "tf": tf.__version__,
    "stdin": sys.stdin.readline().strip(), "pid": os.getpid(), "ppid": os.getppid(),
    "tf2": os.environ.get("TF2_BEHAVIOR"), "umask": os.umask(0o022),
    "cpus": sorted(os.sched_getaffinity(0)), "tmp": tempfile.gettempdir(),
}), flush=True)
what = sys.argv[1]
if what == "exit":
    sys.exit(int(sys.argv[2]))
if what == "raise":
    raise RuntimeError("the program failed")
if what == "signal":
    os.kill(os.getpid(), int(sys.argv[2]))
print("waiting", flush=True)
time.sleep(120)
"""


_STARTED: list[subprocess.Popen] = []


@pytest.fixture
def program(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    yield path
    while _STARTED:
        proc = _STARTED.pop()
        proc.kill()
        proc.wait(timeout=60)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _base() -> dict[str, str]:
    """A container's environment, as the kubelet gives it (one zygote for the file)."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(TENSORFLOW_IMAGE)}
    # LC_CTYPE as the launcher's Python hands it down to the program in the C locale (PEP
    # 538), so the program's interpreter is not in UTF-8 mode, as the zygote's is not
    env.update(TF_CPP_MIN_LOG_LEVEL="2", ZYGOTE_TEST="given", LC_CTYPE="C.UTF-8")
    return env


def _start(
    program: Path, *args: str, env: dict[str, str] | None = None, cpu: int | None = None
) -> subprocess.Popen:
    """The program as a launcher starts it (`cpu`: pinned to that CPU, as fakes.kubelet can)."""
    pinned = [] if cpu is None else ["taskset", "--cpu-list", str(cpu)]
    proc = subprocess.Popen(
        [*pinned, sys.executable, str(program), *args],
        env={**tf_zygote.environment(_base()), **(env or {})},
        cwd=program.parent,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _STARTED.append(proc)
    assert proc.stdin is not None
    proc.stdin.write("a line\n")
    proc.stdin.close()
    return proc


def _stream(stream: IO[str] | None) -> IO[str]:
    assert stream is not None
    return stream


def _report(proc: subprocess.Popen) -> dict:
    line = _stream(proc.stdout).readline()
    assert line, _stream(proc.stderr).read()
    return json.loads(line)


def test_the_program_gets_what_the_process_was_given_and_its_exit_code_is_the_process_s(
    program: Path,
):
    cpu = max(os.sched_getaffinity(0))  # the zygote itself may run on every CPU
    proc = _start(program, "exit", "3", cpu=cpu)
    report = _report(proc)
    assert proc.wait(timeout=60) == 3
    assert report["argv"] == [str(program), "exit", "3"]
    assert (report["cwd"], report["var"], report["stdin"]) == (
        str(program.parent),
        "given",
        "a line",
    )
    assert (report["main"], report["file"], report["path0"]) == (
        "__main__",
        str(program),
        str(program.parent),
    )
    assert report["tf2"] == "1"  # what TensorFlow's import sets, as in a fresh process
    assert report["cpus"] == [cpu]  # the CPUs its process may run on, not the zygote's
    umask = os.umask(0o022)
    os.umask(umask)
    assert report["umask"] == umask
    assert report["pid"] != proc.pid  # a fork of the zygote, not the process itself
    assert "runs in its own interpreter" not in _stream(proc.stderr).read()


def test_a_container_s_own_tmpdir_is_the_forked_program_s(program: Path, tmp_path: Path):
    """Each container has its own TMPDIR (fakes.kubelet): still a fork, and its directory."""
    own = tmp_path / "container-tmp"
    own.mkdir()
    proc = _start(program, "exit", "0", env={"TMPDIR": str(own)})
    report = _report(proc)
    assert proc.wait(timeout=60) == 0
    assert report["tmp"] == str(own)
    assert report["pid"] != proc.pid  # a fork of the zygote, not the process itself
    assert "runs in its own interpreter" not in _stream(proc.stderr).read()


def test_an_uncaught_exception_is_exit_1_with_its_traceback(program: Path):
    proc = _start(program, "raise")
    _report(proc)
    assert proc.wait(timeout=60) == 1
    err = _stream(proc.stderr).read()
    assert "RuntimeError: the program failed" in err
    assert "tf_zygote.py" not in err  # the program's frames, as Python prints them


def test_a_program_killed_by_a_signal_kills_its_process_with_that_signal(program: Path):
    proc = _start(program, "signal", str(int(signal.SIGKILL)))
    _report(proc)
    assert proc.wait(timeout=60) == -signal.SIGKILL  # the launcher reports 128+9


def test_sigterm_to_the_process_reaches_the_program(program: Path):
    proc = _start(program, "wait")
    _report(proc)
    assert _stream(proc.stdout).readline() == "waiting\n"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    out, err = _stream(proc.stdout).read(), _stream(proc.stderr).read()
    assert (proc.returncode, out) == (7, "SIGTERM reached the program\n"), err


def test_the_program_dies_with_the_process(program: Path):
    proc = _start(program, "wait")
    pid = _report(proc)["pid"]
    proc.kill()  # as PR_SET_PDEATHSIG does when the launcher dies
    proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
        if status == "Z":
            break  # killed, not yet reaped by its monitor
        time.sleep(0.05)
    else:
        assert not Path(f"/proc/{pid}").exists()


def test_an_import_time_variable_that_differs_runs_the_program_in_its_own_interpreter(
    tmp_path: Path,
):
    script = tmp_path / "never_imports.py"  # names tensorflow at the top, never imports it
    script.write_text("import os, sys\nprint(os.getpid())\nsys.exit(5)\nimport tensorflow\n")
    env = {**tf_zygote.environment(_base()), "TF_USE_LEGACY_KERAS": "1"}  # not the zygote's
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 5
    assert int(done.stdout) > 0
    assert "import-time environment differs: ['TF_USE_LEGACY_KERAS']" in done.stderr
