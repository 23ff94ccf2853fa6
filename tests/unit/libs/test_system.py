"""The machine boundary: real subprocesses, file writes that report change, the fake runner."""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from charms.gpu_k8s.v0.system import CommandError, Host, SubprocessRunner, machine, poll_until
from fakes.host import FakeRunner


def test_subprocess_runner_returns_stdout():
    out = SubprocessRunner().run([sys.executable, "-c", "print('hello')"])
    assert out == "hello\n"


def test_subprocess_runner_error_carries_exit_status_and_stderr():
    with pytest.raises(CommandError) as failure:
        SubprocessRunner().run(
            [
                sys.executable,
                "-c",
                "import sys; sys.stderr.write('boom\\nreal cause'); sys.exit(3)",
            ]
        )
    assert failure.value.returncode == 3
    assert "real cause" in failure.value.stderr
    assert "exited 3: real cause" in str(failure.value)


def test_subprocess_runner_reports_a_missing_program():
    with pytest.raises(CommandError) as failure:
        SubprocessRunner().run(["/nonexistent/program"])
    assert failure.value.returncode == 127


def test_a_command_given_no_timeout_still_ends_with_one(monkeypatch):
    # review deploy.md N16: Juju has no hook timeout, and a hung program holds the
    # machine lock (every charm on the machine) for ever
    from charms.gpu_k8s.v0 import system

    assert system.DEFAULT_TIMEOUT <= 1800
    monkeypatch.setattr(system, "DEFAULT_TIMEOUT", 0.5)
    with pytest.raises(CommandError) as failure:
        SubprocessRunner().run([sys.executable, "-c", "import time; time.sleep(30)"])
    assert failure.value.returncode == -1
    assert failure.value.last_line == "timed out after 0.5s"


def _state(pid: int) -> str | None:
    """Process `pid`'s state letter (proc_pid_stat(5) field 3), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def test_a_timeout_kills_the_whole_process_group_of_the_program(tmp_path):
    # `sh -c` runs the real program as its child (nvidia.py runs nvidia-smi so): killing
    # the shell alone would leave that child running, holding its GPU or its lock
    pidfile = tmp_path / "pid"
    script = f"sleep 30 & echo $! > {pidfile}; wait"
    with pytest.raises(CommandError) as failure:
        SubprocessRunner().run(["/bin/sh", "-c", script], timeout=1)
    assert failure.value.last_line == "timed out after 1s"
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        if _state(grandchild) in (None, "Z"):
            break
        time.sleep(0.05)
    assert _state(grandchild) in (None, "Z")  # killed (a zombie until init reaps it)


def test_a_killed_program_that_does_not_end_is_given_up_after_a_few_seconds(monkeypatch):
    """leptonai/gpud#117: nvidia-smi on a hung driver sits in state D and takes no signal.

    A program no kill reaches (the kill made a no-op here; in state D it is not a process
    that ignores it) made `subprocess.run` wait for it for ever, holding the hook.
    """
    from charms.gpu_k8s.v0 import system

    monkeypatch.setattr(system, "KILL_WAIT_S", 0.3)
    monkeypatch.setattr(system.os, "killpg", lambda pid, sig: None)  # the kill never lands
    started = time.monotonic()
    with pytest.raises(CommandError) as failure:
        SubprocessRunner().run(["sleep", "20"], timeout=0.3)
    assert time.monotonic() - started < 5
    assert failure.value.returncode == -1
    (left,) = system.ABANDONED
    assert left.poll() is None  # still running: left to init
    monkeypatch.undo()
    left.kill()
    left.wait()
    system.ABANDONED.remove(left)


def test_subprocess_runner_passes_input_and_env():
    code = "import os, sys; print(sys.stdin.read() + os.environ['GPU_K8S_PROBE'])"
    out = SubprocessRunner().run(
        [sys.executable, "-c", code], input="a", env={"GPU_K8S_PROBE": "b"}
    )
    assert out.strip() == "ab"


def test_host_write_reports_change_only_when_content_differs(tmp_path):
    host = Host(runner=SubprocessRunner(), root=tmp_path)
    assert host.write("/etc/demo/app.conf", "x=1\n", mode=0o600) is True
    assert host.write("/etc/demo/app.conf", "x=1\n", mode=0o600) is False
    assert (tmp_path / "etc/demo/app.conf").stat().st_mode & 0o777 == 0o600
    assert host.write("/etc/demo/app.conf", "x=2\n", mode=0o600) is True
    assert host.read("/etc/demo/app.conf") == "x=2\n"
    assert host.read("/etc/demo/missing") is None
    assert not list((tmp_path / "etc/demo").glob(".*.tmp")), "no temporary file left behind"


def test_host_write_fixes_mode_of_unchanged_file(tmp_path):
    host = Host(runner=SubprocessRunner(), root=tmp_path)
    host.write("/etc/secret", "s", mode=0o644)
    assert host.write("/etc/secret", "s", mode=0o600) is False
    assert (tmp_path / "etc/secret").stat().st_mode & 0o777 == 0o600


def test_a_private_file_is_never_readable_by_others_even_while_written(tmp_path):
    """Review S8: the temporary file was created with the umask (0644), then chmod 0600.

    A reader who opened the leftover temporary file of an earlier write (a crash between
    write and rename) kept reading whatever went into it; and a file created 0644 can be
    opened by anyone before the chmod. Now the temporary file is a new inode created with
    the final mode (O_CREAT|O_EXCL): nothing written reaches an earlier reader.
    """
    host = Host(runner=SubprocessRunner(), root=tmp_path)
    leftover = tmp_path / "run/gpu-k8s/.kubeadm-join.yaml.tmp"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("")
    leftover.chmod(0o644)
    with leftover.open() as reader:  # an unprivileged reader, waiting
        assert host.write("/run/gpu-k8s/kubeadm-join.yaml", "token: abc.def\n", mode=0o600)
        assert reader.read() == "", "the secret went into a file another reader holds"
    written = tmp_path / "run/gpu-k8s/kubeadm-join.yaml"
    assert written.stat().st_mode & 0o777 == 0o600
    assert written.read_text() == "token: abc.def\n"
    assert not leftover.exists()


def test_a_private_file_gets_a_private_directory_and_a_symlink_is_not_followed(tmp_path):
    host = Host(runner=SubprocessRunner(), root=tmp_path)
    host.write("/run/gpu-k8s/kubeadm-certs.yaml", "key: k\n", mode=0o600)
    assert (tmp_path / "run/gpu-k8s").stat().st_mode & 0o777 == 0o700
    host.write("/etc/demo/public.conf", "x\n", mode=0o644)
    assert (tmp_path / "etc/demo").stat().st_mode & 0o777 == 0o755
    # a symlink planted as the temporary file is replaced, never written through
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    (tmp_path / "run/gpu-k8s/.kubeadm-certs.yaml.tmp").symlink_to(elsewhere)
    host.write("/run/gpu-k8s/kubeadm-certs.yaml", "key: k2\n", mode=0o600)
    assert elsewhere.read_text() == ""
    assert host.read("/run/gpu-k8s/kubeadm-certs.yaml") == "key: k2\n"


def test_fake_runner_dispatches_records_and_injects_failures(tmp_path):
    runner = FakeRunner(tmp_path)
    runner.on("echo", lambda argv, _input: " ".join(argv[1:]))
    host = runner.host()
    assert host.run("/usr/bin/echo", "hi") == "hi"
    runner.fail("/usr/bin/echo boom", returncode=2, stderr="E: failed", times=2)
    for _ in range(2):
        with pytest.raises(CommandError, match="E: failed"):
            host.run("/usr/bin/echo", "boom")
    assert host.run("/usr/bin/echo", "boom") == "boom"
    assert runner.lines("echo") == ["/usr/bin/echo hi"] + ["/usr/bin/echo boom"] * 3
    with pytest.raises(CommandError) as unknown:
        host.run("/usr/bin/unknown")
    assert unknown.value.returncode == 127


def test_command_error_last_line_is_the_last_error_line_or_the_exit_status():

    stderr = "[preflight] x\n\nerror: port in use\n\n"
    error = CommandError(["/usr/bin/kubeadm", "join"], 1, stderr)
    assert error.last_line == "error: port in use"
    assert CommandError(["/usr/bin/true"], 3, "  \n").last_line == "exit status 3"


class _Clock:
    """A clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_poll_until_returns_the_first_answer_and_sleeps_between_checks():
    clock = _Clock()
    answers = iter([None, None, "ready"])

    assert poll_until(lambda: next(answers), 10, poll=2, clock=clock, sleep=clock.sleep) == "ready"
    assert clock.slept == [2, 2]


def test_poll_until_gives_up_at_the_timeout_with_a_last_shorter_sleep():
    clock = _Clock()
    checks = []

    assert poll_until(lambda: checks.append(1), 5, poll=2, clock=clock, sleep=clock.sleep) is None
    assert clock.slept == [2, 2, 1]
    assert len(checks) == 4  # at 0, 2, 4 and 5


def test_poll_until_is_bounded_by_its_polls_when_the_clock_stands_still():
    checks = []

    assert (
        poll_until(lambda: checks.append(1), 4, poll=1, clock=lambda: 0.0, sleep=lambda s: None)
        is None
    )
    assert len(checks) == 6  # timeout / poll + 2


def test_machine_is_the_real_runner_on_the_root():
    host = machine()
    assert isinstance(host.runner, SubprocessRunner)
    assert host.path("/etc/hostname") == Path("/etc/hostname")


def test_a_request_to_a_unix_socket_gets_all_it_answers_once_the_question_ended(tmp_path):
    """As a command socket (HAProxy's master CLI) answers: after the client's end of input."""
    path = str(tmp_path / "cli.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            question = b""
            while chunk := conn.recv(1024):  # until the client shut its writing side
                question += chunk
            conn.sendall(b"asked: " + question)

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        assert SubprocessRunner().request(path, "show proc\n", timeout=5) == "asked: show proc\n"
    finally:
        thread.join(5)
        server.close()

    with pytest.raises(CommandError) as nobody:
        SubprocessRunner().request(str(tmp_path / "gone.sock"), "show proc\n", timeout=5)
    assert nobody.value.argv == ["connect", str(tmp_path / "gone.sock")]
    assert nobody.value.last_line == "No such file or directory"
