# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The pod launcher: TF_CONFIG for every role and index, environment, directories, exec."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tf_launcher
from tf_demo import free_ports
from tf_launcher import build_tf_config, main, parse_hosts, trainer_command


def test_mwms_tf_config_for_every_worker_index():
    for index in range(3):
        config = build_tf_config("mnist", "mnist-svc", "mwms", "worker", index, 3, 0)
        assert config == {
            "cluster": {
                "worker": [
                    "mnist-worker-0-0.mnist-svc:2222",
                    "mnist-worker-0-1.mnist-svc:2222",
                    "mnist-worker-0-2.mnist-svc:2222",
                ]
            },
            "task": {"type": "worker", "index": index},
        }


def test_mwms_single_worker_is_its_own_cluster():
    config = build_tf_config("solo", "solo", "mwms", "worker", 0, 1, 0, port=3333)
    assert config == {
        "cluster": {"worker": ["solo-worker-0-0.solo:3333"]},
        "task": {"type": "worker", "index": 0},
    }


PS_CLUSTER = {
    "chief": ["big-chief-0-0.big:2222"],
    "ps": ["big-ps-0-0.big:2222", "big-ps-0-1.big:2222"],
    "worker": ["big-worker-0-0.big:2222", "big-worker-0-1.big:2222", "big-worker-0-2.big:2222"],
}


@pytest.mark.parametrize(
    "role,index",
    [("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1), ("worker", 2)],
)
def test_ps_tf_config_for_every_role_and_index(role, index):
    config = build_tf_config("big", "big", "ps", role, index, workers=3, ps=2)
    assert config == {"cluster": PS_CLUSTER, "task": {"type": role, "index": index}}
    assert "evaluator" not in config["cluster"]


def test_hosts_override_replaces_every_address():
    hosts = {("worker", 0): "127.0.0.1:4001", ("worker", 1): "127.0.0.1:4002"}
    config = build_tf_config("demo", "demo", "mwms", "worker", 1, 2, 0, hosts=hosts)
    assert config["cluster"] == {"worker": ["127.0.0.1:4001", "127.0.0.1:4002"]}
    assert config["task"] == {"type": "worker", "index": 1}


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"strategy": "horovod"}, "unknown strategy 'horovod'"),
        ({"index": 2}, "index 2 is out of range for role 'worker'"),
        ({"index": -1}, "index must be an integer >= 0"),
        ({"role": "ps"}, "role 'ps' is not part of a 'mwms' job: use one of worker"),
        ({"role": "chief"}, "role 'chief' is not part of a 'mwms' job"),
        ({"role": "evaluator", "strategy": "ps", "ps": 1}, "use one of chief, ps, worker"),
        ({"role": "chief", "index": 1, "strategy": "ps", "ps": 1}, "must be 0..0"),
        ({"role": "ps", "index": 1, "strategy": "ps", "ps": 1}, "index 1 is out of range"),
        ({"strategy": "ps", "ps": 0}, "needs at least one parameter server"),
        ({"strategy": "ps", "ps": 1, "workers": 0}, "workers must be an integer >= 1"),
        ({"workers": 0}, "workers must be an integer >= 1"),
        ({"ps": 1}, "strategy 'mwms' has no parameter servers"),
        ({"job": "My_Job"}, "job 'My_Job' is not a valid DNS label"),
        ({"service": "-svc"}, "service '-svc' is not a valid DNS label"),
        ({"port": 70000}, "port must be at most 65535"),
        ({"hosts": {("worker", 0): "127.0.0.1:1"}}, "no address for worker[1]"),
    ],
)
def test_bad_input_raises_clear_error(kwargs, message):
    args = {
        "job": "mnist",
        "service": "mnist",
        "strategy": "mwms",
        "role": "worker",
        "index": 0,
        "workers": 2,
        "ps": 0,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build_tf_config(**args)


def test_parse_hosts_maps_role_and_index():
    hosts = parse_hosts('{"chief": ["a:1"], "worker": ["b:2", "c:3"]}')
    assert hosts == {("chief", 0): "a:1", ("worker", 0): "b:2", ("worker", 1): "c:3"}


@pytest.mark.parametrize(
    "text,message",
    [
        ("{", "not valid JSON"),
        ('["a:1"]', "must be a JSON object"),
        ('{"worker": "a:1"}', "must be a list"),
        ('{"worker": ["nohost"]}', r"\['worker'\]\[0\] must be 'host:port'"),
    ],
)
def test_parse_hosts_rejects_bad_text(text, message):
    with pytest.raises(ValueError, match=message):
        parse_hosts(text)


def test_trainer_command_defaults_to_builtin_trainer():
    trainer = str(Path(tf_launcher.__file__).resolve().parent / "tf_trainer.py")
    assert trainer_command([], python="/py") == ["/py", trainer]
    assert trainer_command(["--steps", "5"], python="/py") == ["/py", trainer, "--steps", "5"]
    assert trainer_command(["python3", "train.py", "-v"]) == ["python3", "train.py", "-v"]


# ----------------------------------------------------------------------------- main()


class Exec:
    """Records the exec call at the process boundary instead of replacing the process.

    Only the launcher's fallback (no writable replica log) execs in its own process; the
    normal path forks a real child, which the `Recorder` below observes instead.
    """

    def __init__(self, monkeypatch, error: OSError | None = None):
        self.calls: list[tuple[str, list[str], dict[str, str]]] = []
        self.error = error
        monkeypatch.setattr(os, "execvpe", self)

    def __call__(self, file, args, env):
        self.calls.append((file, list(args), dict(env)))
        if self.error:
            raise self.error


class Recorder:
    """A real program standing in for the trainer: it records its argv and environment."""

    def __init__(self, tmp_path: Path, monkeypatch, *, prints: str = "", code: int = 0):
        self.record = tmp_path / "record.json"
        self.script = tmp_path / "trainer.py"
        self.script.write_text(
            "import json, os, sys\n"
            f"open({str(self.record)!r}, 'w').write("
            "json.dumps({'argv': sys.argv, 'env': dict(os.environ)}))\n"
            f"sys.stdout.write({prints!r}); sys.stdout.flush()\n"
            f"sys.exit({code})\n"
        )
        monkeypatch.setattr(tf_launcher, "TRAINER", self.script)

    @property
    def calls(self) -> list[tuple[list[str], dict[str, str]]]:
        if not self.record.exists():
            return []
        data = json.loads(self.record.read_text())
        return [(data["argv"], data["env"])]


@pytest.fixture
def pod_env(tmp_path):
    return {
        "GPU_K8S_JOB": "mnist",
        "GPU_K8S_SERVICE": "mnist-tf",
        "GPU_K8S_STRATEGY": "ps",
        "GPU_K8S_ROLE": "worker",
        "GPU_K8S_WORKERS": "2",
        "GPU_K8S_PS": "1",
        "JOB_COMPLETION_INDEX": "1",
        "GPU_K8S_DATA_DIR": str(tmp_path),
        "PATH": "/usr/bin",
        # no peer runs in these tests: a failed program's task need not look for a stop
        "GPU_K8S_FAULT_WINDOW_SECONDS": "0",
    }


def test_main_sets_tf_config_creates_dirs_and_runs_trainer(monkeypatch, pod_env, tmp_path):
    trainer = Recorder(tmp_path, monkeypatch)

    assert main(["--", "--steps", "50"], pod_env) == 0

    job = tmp_path / "jobs" / "mnist"
    assert (job / "checkpoints").is_dir() and (job / "logs").is_dir()
    [(argv, env)] = trainer.calls
    assert argv == [str(trainer.script), "--steps", "50"]
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {
            "chief": ["mnist-chief-0-0.mnist-tf:2222"],
            "ps": ["mnist-ps-0-0.mnist-tf:2222"],
            "worker": ["mnist-worker-0-0.mnist-tf:2222", "mnist-worker-0-1.mnist-tf:2222"],
        },
        "task": {"type": "worker", "index": 1},
    }
    assert env["GPU_K8S_CHECKPOINT_DIR"] == str(job / "checkpoints")
    assert env["GPU_K8S_LOG_DIR"] == str(job / "logs")
    assert env["GPU_K8S_PROGRESS_FILE"] == str(job / "progress.json")
    assert env["GPU_K8S_EXPORT_DIR"] == str(job / "export")
    assert env["GPU_K8S_POD_LOG"] == str(job / "pod-logs" / "worker-1.log")
    assert env["PATH"] == "/usr/bin"  # the rest of the pod's environment passes through


def test_main_runs_user_command_with_same_environment(monkeypatch, pod_env, tmp_path):
    trainer = Recorder(tmp_path, monkeypatch)

    main(["--", sys.executable, str(trainer.script), "--epochs", "3"], pod_env)

    [(argv, env)] = trainer.calls
    assert argv == [str(trainer.script), "--epochs", "3"]
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}


def test_main_defaults_mwms_worker_service_and_port(monkeypatch, tmp_path):
    trainer = Recorder(tmp_path, monkeypatch)
    env = {
        "GPU_K8S_JOB": "j",
        "GPU_K8S_WORKERS": "2",
        "JOB_COMPLETION_INDEX": "0",
        "GPU_K8S_DATA_DIR": str(tmp_path),
    }

    main([], env)

    [(_, exported)] = trainer.calls
    assert json.loads(exported["TF_CONFIG"]) == {
        "cluster": {"worker": ["j-worker-0-0.j:2222", "j-worker-0-1.j:2222"]},
        "task": {"type": "worker", "index": 0},
    }


def test_gpu_k8s_index_wins_over_completion_index(monkeypatch, pod_env, tmp_path):
    trainer = Recorder(tmp_path, monkeypatch)
    pod_env.update(
        GPU_K8S_INDEX="0",
        GPU_K8S_HOSTS=json.dumps(
            {
                "chief": ["127.0.0.1:1"],
                "ps": ["127.0.0.1:2"],
                "worker": ["127.0.0.1:3", "127.0.0.1:4"],
            }
        ),
    )

    main([], pod_env)

    config = json.loads(trainer.calls[0][1]["TF_CONFIG"])
    assert config["task"] == {"type": "worker", "index": 0}
    assert config["cluster"]["worker"] == ["127.0.0.1:3", "127.0.0.1:4"]


def test_print_tf_config_creates_nothing(monkeypatch, pod_env, tmp_path, capsys):
    exec_ = Exec(monkeypatch)

    assert main(["--print-tf-config"], pod_env) == 0

    assert json.loads(capsys.readouterr().out)["task"] == {"type": "worker", "index": 1}
    assert exec_.calls == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "change,message",
    [
        ({"GPU_K8S_JOB": ""}, "GPU_K8S_JOB is not set"),
        ({"GPU_K8S_WORKERS": None}, "GPU_K8S_WORKERS is not set"),
        ({"GPU_K8S_WORKERS": "two"}, "GPU_K8S_WORKERS must be an integer, got 'two'"),
        ({"JOB_COMPLETION_INDEX": None}, "JOB_COMPLETION_INDEX is not set"),
        ({"JOB_COMPLETION_INDEX": "5"}, "index 5 is out of range for role 'worker'"),
        ({"GPU_K8S_ROLE": "evaluator"}, "role 'evaluator' is not part of a 'ps' job"),
        ({"GPU_K8S_STRATEGY": "mwms"}, "strategy 'mwms' has no parameter servers"),
        ({"GPU_K8S_HOSTS": "{"}, "GPU_K8S_HOSTS is not valid JSON"),
        ({"GPU_K8S_DATA_DIR": "/nonexistent/data"}, "mount the shared volume there"),
        ({"GPU_K8S_FAULT_WINDOW_SECONDS": "-1"}, "FAULT_WINDOW_SECONDS must be a number >= 0"),
        ({"GPU_K8S_FAULT_WINDOW_SECONDS": "soon"}, "must be a number >= 0, got 'soon'"),
    ],
)
def test_bad_environment_fails_before_creating_anything(
    monkeypatch, pod_env, tmp_path, capsys, change, message
):
    exec_ = Exec(monkeypatch)
    for key, value in change.items():
        if value is None:
            pod_env.pop(key)
        else:
            pod_env[key] = value

    assert main([], pod_env) == tf_launcher.EXIT_SETUP  # fails the job: a restart cannot help

    assert message in capsys.readouterr().err
    assert exec_.calls == []
    assert list(tmp_path.iterdir()) == []
    assert "TF_CONFIG" not in pod_env


def test_unknown_launcher_argument_is_rejected(monkeypatch, pod_env, capsys):
    exec_ = Exec(monkeypatch)

    assert main(["--steps", "5"], pod_env) == tf_launcher.EXIT_SETUP

    assert "unknown arguments ['--steps', '5']" in capsys.readouterr().err
    assert exec_.calls == []


def test_a_program_that_cannot_run_is_a_setup_error(pod_env, tmp_path):
    assert main(["--", "no-such-trainer"], pod_env) == tf_launcher.EXIT_SETUP

    log = (tmp_path / "jobs" / "mnist" / "pod-logs" / "worker-1.log").read_text()
    assert "cannot run 'no-such-trainer'" in log


def test_without_a_replica_log_the_launcher_still_runs_the_program(
    monkeypatch, pod_env, tmp_path, capfd
):
    """No exec in its place: the launcher stays PID 1, for the SIGTERM protocol."""
    (tmp_path / "jobs" / "mnist").mkdir(parents=True)
    (tmp_path / "jobs" / "mnist" / "pod-logs").write_text("not a directory")
    Recorder(tmp_path, monkeypatch, prints="trained\n", code=5)

    assert main([], pod_env) == 5

    out, err = capfd.readouterr()
    assert "the pod's log is the only copy" in err
    assert "trained" in out
    assert main(["--", "no-such-trainer"], pod_env) == tf_launcher.EXIT_SETUP
    assert "cannot run 'no-such-trainer'" in capfd.readouterr().err


# ------------------------------------------------- the replica's log on the shared volume


def test_output_goes_to_stdout_and_the_replica_file_and_the_status_passes_through(
    monkeypatch, pod_env, tmp_path, capfd
):
    Recorder(tmp_path, monkeypatch, prints="step 10 loss 0.5\n", code=7)
    pod_env["HOSTNAME"] = "mnist-worker-0-1"

    assert main([], pod_env) == 7

    assert "step 10 loss 0.5" in capfd.readouterr().out
    log = (tmp_path / "jobs" / "mnist" / "pod-logs" / "worker-1.log").read_text()
    assert "start of mnist-worker-0-1 =====" in log.splitlines()[0]
    assert log.endswith("step 10 loss 0.5\n")


def test_every_start_appends_and_a_full_file_is_moved_aside(monkeypatch, pod_env, tmp_path):
    Recorder(tmp_path, monkeypatch, prints="first\n")
    main([], pod_env)
    Recorder(tmp_path, monkeypatch, prints="second\n")
    main([], pod_env)
    log = tmp_path / "jobs" / "mnist" / "pod-logs" / "worker-1.log"
    assert [line for line in log.read_text().splitlines() if "=====" not in line] == [
        "first",
        "second",
    ]

    monkeypatch.setattr(tf_launcher, "LOG_FILE_LIMIT", 10)
    Recorder(tmp_path, monkeypatch, prints="third\n")
    main([], pod_env)

    assert "second" in log.with_name("worker-1.log.1").read_text()
    assert "third" in log.read_text() and "first" not in log.read_text()


def test_copying_to_the_file_stops_at_the_limit_and_says_so(tmp_path, capfd):
    with (tmp_path / "r.log").open("ab", buffering=0) as out:
        code = tf_launcher.run_copying_output(
            [sys.executable, "-c", "print('x' * 100)"], dict(os.environ), out, limit=50
        )
    assert code == 0
    assert "x" * 100 in capfd.readouterr().out  # the pod's log keeps everything
    text = (tmp_path / "r.log").read_text()
    assert "x" not in text and "50 bytes copied; the rest is only in the pod's log" in text


def test_sigterm_is_forwarded_and_the_trainer_status_is_the_launcher_status(tmp_path):
    """The launcher as PID 1: kubelet's SIGTERM reaches the trainer.

    The trainer's exit code (143 after an agreed stop) is the container's, which the Job's
    podFailurePolicy reads.
    """
    # As tf_trainer does: the handler only takes note. A handler that prints can meet the
    # main code's print still flushing ("RuntimeError: reentrant call inside
    # <_io.BufferedWriter name='<stdout>'>", exit 1: what failed this test once in CI).
    program = (
        "import signal, sys, time\n"
        "stop = []\n"
        "signal.signal(signal.SIGTERM, lambda *_: stop.append(1))\n"
        "print('ready', flush=True)\n"
        "for _ in range(600):\n"
        "    if stop:\n"
        "        print('saving', flush=True)\n"
        "        sys.exit(143)\n"
        "    time.sleep(0.1)\n"
    )
    env = {
        **os.environ,
        "GPU_K8S_JOB": "j",
        "GPU_K8S_WORKERS": "1",
        "JOB_COMPLETION_INDEX": "0",
        "GPU_K8S_DATA_DIR": str(tmp_path),
    }

    def start() -> subprocess.Popen:
        launcher = subprocess.Popen(
            [sys.executable, tf_launcher.__file__, "--", sys.executable, "-c", program],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert launcher.stdout is not None
        assert launcher.stdout.readline() == b"ready\n"
        return launcher

    launcher = start()
    launcher.send_signal(signal.SIGTERM)
    status = launcher.wait(timeout=30)
    log = (tmp_path / "jobs" / "j" / "pod-logs" / "worker-0.log").read_text()
    assert status == 143, (launcher.stderr.read(), log)  # type: ignore[union-attr]
    launcher.stdout.close()  # type: ignore[union-attr]
    launcher.stderr.close()  # type: ignore[union-attr]
    assert log.endswith("ready\nsaving\n")

    # A trainer whose launcher is killed dies with it, as in a container.
    launcher = start()
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
    launcher.kill()
    launcher.wait(timeout=30)
    launcher.stdout.close()  # type: ignore[union-attr]
    launcher.stderr.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{c}").exists() for c in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [
        c
        for c in children
        if Path(f"/proc/{c}/status").exists()
        and "State:\tZ" not in Path(f"/proc/{c}/status").read_text()
    ]


def _fake_python(tmp_path: Path, prints: str, code: int = 0) -> str:
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\necho '{prints}'\nexit {code}\n")
    script.chmod(0o755)
    return str(script)


def test_check_gpus_only_when_gpus_were_asked_for(tmp_path):
    none = _fake_python(tmp_path, "0")
    assert tf_launcher.check_gpus({"GPU_K8S_GPUS": "0"}, none) is None
    assert tf_launcher.check_gpus({}, none) is None
    problem = tf_launcher.check_gpus({"GPU_K8S_GPUS": "2"}, none)
    assert problem is not None and "asked for 2 GPU(s) but TensorFlow sees none" in problem
    assert tf_launcher.check_gpus({"GPU_K8S_GPUS": "2"}, _fake_python(tmp_path, "2")) is None


def test_check_gpus_starts_anyway_when_tensorflow_cannot_tell(tmp_path, capsys):
    broken = _fake_python(tmp_path, "ModuleNotFoundError: tensorflow", code=1)
    assert tf_launcher.check_gpus({"GPU_K8S_GPUS": "1"}, broken) is None
    assert "cannot import tensorflow" in capsys.readouterr().err


def test_main_refuses_a_malformed_gpu_count(tmp_path, capsys):
    env = {
        "GPU_K8S_JOB": "j",
        "GPU_K8S_WORKERS": "1",
        "JOB_COMPLETION_INDEX": "0",
        "GPU_K8S_DATA_DIR": str(tmp_path),
        "GPU_K8S_GPUS": "many",
    }
    assert main([], env) == tf_launcher.EXIT_SETUP
    assert "GPU_K8S_GPUS must be an integer" in capsys.readouterr().err


# ------------------------------------------------------ the SIGTERM protocol, exit codes

# A stand-in program (no TensorFlow): it writes "<event> <time>" lines to its own file
# under EVENTS, and behaves on SIGTERM as `--on-term` says: `save` (note "saved" after
# `--save-seconds`, exit `--term-code`, 143 unless given, as tf_trainer does), `ignore`
# (train on), `die` (the default action); `--exit N` ends it with N (noting "exit") after
# `--after` seconds; `--peer-gone` exits 1 once that pid is gone, as a survivor's failed
# collective does; `--alive` notes "alive" at every turn of its loop (every 0.02 s), so
# the last note is at most the moment it was killed.
PROGRAM = """
import argparse, json, os, signal, sys, time
p = argparse.ArgumentParser()
p.add_argument("--on-term", default="save")
p.add_argument("--save-seconds", type=float, default=0.0)
p.add_argument("--term-code", type=int, default=143)
p.add_argument("--exit", type=int)
p.add_argument("--after", type=float, default=0.0)
p.add_argument("--peer-gone", type=int)
p.add_argument("--alive", action="store_true")
a = p.parse_args()
task = json.loads(os.environ["TF_CONFIG"])["task"]
events = os.path.join(os.environ["EVENTS"], f"{task['type']}-{task['index']}")
def note(what):
    with open(events, "a") as f:
        f.write(f"{what} {time.time()}\\n")
term = []
if a.on_term == "save":
    signal.signal(signal.SIGTERM, lambda *_: term.append(1))
elif a.on_term == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
note("ready")
started = time.monotonic()
while True:
    if term:
        note("sigterm")
        time.sleep(a.save_seconds)
        note("saved")
        sys.exit(a.term_code)
    if a.exit is not None and time.monotonic() - started >= a.after:
        note("exit")
        sys.exit(a.exit)
    if a.peer_gone and not os.path.exists(f"/proc/{a.peer_gone}"):
        note("collective failed")
        sys.exit(1)
    if a.alive:
        note("alive")
    time.sleep(0.02)
"""


class Task:
    """One launcher process of a gang running PROGRAM (a pod's container, locally)."""

    def __init__(
        self,
        tmp_path: Path,
        strategy: str,
        role: str,
        index: int,
        *args: str,
        window: str = "",
        workers: int = 2,
        gpus: int = 0,
        grace: float = 2,
    ):
        program = tmp_path / "program.py"
        program.write_text(PROGRAM)
        (tmp_path / "events").mkdir(exist_ok=True)
        self.events = tmp_path / "events" / f"{role}-{index}"
        env = {
            **os.environ,
            "GPU_K8S_JOB": "j",
            "GPU_K8S_STRATEGY": strategy,
            "GPU_K8S_ROLE": role,
            "GPU_K8S_WORKERS": str(workers) if strategy == "mwms" else "1",
            "GPU_K8S_PS": "0" if strategy == "mwms" else "1",
            "JOB_COMPLETION_INDEX": str(index),
            "GPU_K8S_DATA_DIR": str(tmp_path),
            "GPU_K8S_GRACE_SECONDS": str(grace),
            "EVENTS": str(tmp_path / "events"),
            "HOSTNAME": f"j-{role}-0-{index}",
            "GPU_K8S_FAULT_WINDOW_SECONDS": window,  # "": the launcher's default
            "GPU_K8S_GPUS": str(gpus),
        }
        self.err = tmp_path / f"{role}-{index}.err"
        with self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, tf_launcher.__file__, "--", sys.executable, str(program), *args],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def ready(self) -> Task:
        deadline = time.monotonic() + 10
        while not self.times("ready") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.times("ready"), self.stderr()
        return self

    def times(self, event: str) -> list[float]:
        try:
            lines = self.events.read_text().splitlines()
        except OSError:
            return []
        return [float(line.rsplit(" ", 1)[1]) for line in lines if line.rsplit(" ", 1)[0] == event]

    def program_pid(self) -> int:
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return int(path.read_text().split()[0])

    def wait(self) -> int:
        code = self.proc.wait(timeout=20)
        return code

    def stderr(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return self.err.read_text()


@pytest.mark.parametrize(
    "args,code",
    [
        (["--exit", "0"], 0),  # finished: the pod Succeeded
        (["--exit", "1"], 1),  # a failure: the gang restarts, counted
        (["--exit", "3"], 3),  # a user program's 3 is an ordinary failure now
        (["--exit", "42"], 42),  # PreemptionCheckpointHandler's exit without a stop
        (["--exit", "143"], tf_launcher.EXIT_FAILED),  # reserved codes without a stop
        (["--exit", "82"], tf_launcher.EXIT_FAILED),
        (["--exit", "83"], tf_launcher.EXIT_FAILED),
        # SIGTERM forwarded: whatever the program exits with after it, the task stopped.
        # A chief that saves and exits 0 would otherwise succeed its pod, and the Job's
        # and the JobSet's successPolicy would end the job mid-training
        (["--stop", "--term-code", "0"], tf_launcher.EXIT_STOPPED),
        (["--stop", "--term-code", "1"], tf_launcher.EXIT_STOPPED),
    ],
)
def test_the_program_s_exit_code_follows_the_table(tmp_path, args, code):
    if args[0] == "--stop":  # the chief (worker 0 under MWMS), drained mid-training
        task = Task(tmp_path, "mwms", "worker", 0, *args[1:], window="0").ready()
        task.proc.send_signal(signal.SIGTERM)
    else:  # worker-0 never starts: no stop can show up, so the task looks for one once
        task = Task(tmp_path, "mwms", "worker", 1, *args, window="0")
    assert task.wait() == code, task.stderr()
    if code == tf_launcher.EXIT_FAILED and args[1] != "1":
        assert f"the program exited {args[1]}, a code the launcher reserves" in task.stderr()


def test_a_program_that_ignores_sigterm_is_killed_in_time_and_the_task_stopped(tmp_path):
    """Killed before kubelet's SIGKILL at the grace period (2 s), not at once.

    When it was killed is its last "alive" note (the launcher's exit comes after, later
    still on a loaded machine: 2.07 s once at a load of ~10).
    """
    task = Task(tmp_path, "mwms", "worker", 0, "--on-term", "ignore", "--alive").ready()
    sent, sent_at = time.monotonic(), time.time()
    task.proc.send_signal(signal.SIGTERM)
    assert task.wait() == tf_launcher.EXIT_STOPPED
    assert time.monotonic() - sent > 1.0  # it had its time to stop
    assert task.times("alive")[-1] - sent_at < 2.0  # killed before the grace period ended
    assert "did not stop within the grace period: killed" in task.stderr()


def test_a_drained_worker_stops_its_mwms_peer_and_both_exit_stopped(tmp_path):
    """The peer sees the mark, gets SIGTERM from its own launcher, saves with the gang."""
    drained = Task(tmp_path, "mwms", "worker", 1).ready()
    chief = Task(tmp_path, "mwms", "worker", 0).ready()
    drained.proc.send_signal(signal.SIGTERM)
    assert (drained.wait(), chief.wait()) == (143, 143), chief.stderr()
    assert chief.times("saved")
    assert "worker-1 is stopping: stopping" in chief.stderr()
    marks = tmp_path / "jobs" / "j" / "gang"
    assert json.loads((marks / "worker-0.json").read_text())["state"] == "exited"


def test_a_peer_leaving_mid_step_is_a_stop_and_a_crashed_peer_a_failure(tmp_path):
    # the drained worker dies at once; its peer's collective fails before any SIGTERM
    drained = Task(tmp_path, "mwms", "worker", 1, "--on-term", "die").ready()
    pid = drained.program_pid()
    survivor = Task(tmp_path, "mwms", "worker", 0, "--on-term", "ignore", "--peer-gone", str(pid))
    survivor.ready()
    drained.proc.send_signal(signal.SIGTERM)
    assert (drained.wait(), survivor.wait()) == (143, 143), survivor.stderr()

    # a crash is no stop: the survivor's failure is its own (and the crash counts)
    other = tmp_path / "other"
    other.mkdir()
    # (no stop mark ever comes: each looks for one for 0.5 s, not the default 2 s)
    crashed = Task(other, "mwms", "worker", 1, "--exit", "1", "--after", "1.5", window="0.5")
    crashed.ready()
    pid = crashed.program_pid()
    survivor = Task(
        other, "mwms", "worker", 0, "--on-term", "ignore", "--peer-gone", str(pid), window="0.5"
    )
    assert (crashed.wait(), survivor.wait()) == (1, 1), survivor.stderr()


# A grace period that ends no test's hold: the chief's exit does (tests that hold the ps)
GRACE_HELD = 8


def test_a_drained_ps_serves_until_the_chief_saved(tmp_path):
    """strategy=ps: SIGTERM reaches the ps program only after the chief's task exited.

    The grace period is long (GRACE_HELD): at 2 s a held ps forwards SIGTERM 1.25 s after
    its own, whether the chief exited or not, and a loaded machine's chief (its launcher
    reading the ps's mark, then 0.5 s of saving) may take that long.
    """
    ps = Task(tmp_path, "ps", "ps", 0, grace=GRACE_HELD).ready()
    worker = Task(tmp_path, "ps", "worker", 0, grace=GRACE_HELD).ready()
    chief = Task(tmp_path, "ps", "chief", 0, "--save-seconds", "0.5", grace=GRACE_HELD).ready()
    ps.proc.send_signal(signal.SIGTERM)
    assert (ps.wait(), chief.wait(), worker.wait()) == (143, 143, 143), ps.stderr()
    [saved] = chief.times("saved")
    assert ps.times("sigterm")[0] > saved and worker.times("sigterm")[0] > saved
    assert "SIGTERM: stopping; the job resumes from its last checkpoint (serving until" in (
        ps.stderr()
    )


def test_a_preempted_ps_gang_s_ps_and_worker_serve_until_the_chief_saved(tmp_path):
    """Kueue's preemption deletes every pod at once: the ps and the worker hold SIGTERM too.

    Their own SIGTERM comes with the chief's, and they forward it only once the chief's task
    has exited (rereview31 finding 1: forwarding at once would pass every other test).
    """
    tasks = [  # GRACE_HELD: the chief's exit, not the grace period, ends the hold
        Task(tmp_path, "ps", "ps", 0, grace=GRACE_HELD),
        Task(tmp_path, "ps", "worker", 0, grace=GRACE_HELD),
        Task(tmp_path, "ps", "chief", 0, "--save-seconds", "0.5", grace=GRACE_HELD),
    ]
    ps, worker, chief = (task.ready() for task in tasks)
    for task in (chief, ps, worker):
        task.proc.send_signal(signal.SIGTERM)
    assert [task.wait() for task in (chief, ps, worker)] == [143, 143, 143], ps.stderr()
    [saved] = chief.times("saved")
    assert ps.times("sigterm")[0] > saved and worker.times("sigterm")[0] > saved
    for task in (ps, worker):
        assert "the chief's task exited: SIGTERM forwarded" in task.stderr()


def test_a_held_ps_is_stopped_before_the_grace_period_ends_when_the_chief_does_not_exit(
    tmp_path,
):
    """A chief that ignores SIGTERM is killed at its deadline; the ps does not wait for it."""
    ps = Task(tmp_path, "ps", "ps", 0).ready()
    chief = Task(tmp_path, "ps", "chief", 0, "--on-term", "ignore").ready()
    sent = time.time()
    for task in (chief, ps):
        task.proc.send_signal(signal.SIGTERM)
    assert ps.wait() == 143, ps.stderr()
    # its program had SIGTERM before kubelet's SIGKILL at the grace period (2 s)
    assert ps.times("sigterm")[0] - sent < 2.0
    assert chief.wait() == 143
    assert "the chief's task still runs as the grace period ends: SIGTERM forwarded" in (
        ps.stderr()
    )


def test_a_failed_task_waits_the_fault_window_for_a_stop_mark_and_no_longer(tmp_path, capfd):
    """A peer's stop mark that shows up while the failed task waits makes it a stop."""
    marks = tmp_path / "gang"
    marks.mkdir()
    config = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    pid_file = tmp_path / "program.pid"
    fails = [
        sys.executable,
        "-c",
        f"import os, pathlib; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); "
        "raise SystemExit(1)",
    ]

    def peer_stops_once_the_program_exited() -> None:
        """The peer's mark, written while the failed task waits.

        Not at a fixed 0.3 s after the start: a loaded machine's interpreter may not have
        exited by then, and a mark seen while the program runs stops it instead.
        """
        deadline = time.monotonic() + 30
        while not _exited(pid_file) and time.monotonic() < deadline:
            time.sleep(0.01)
        mark = json.dumps({"state": "stopping", "token": "peer"})
        (marks / "worker-0.json").write_text(mark)

    gang = tf_launcher.Gang.join(marks, config, "j-worker-0-1")
    peer = threading.Thread(target=peer_stops_once_the_program_exited)
    peer.start()
    code = tf_launcher.run_copying_output(fails, dict(os.environ), None, gang=gang, fault_window=5)
    peer.join()
    assert code == tf_launcher.EXIT_STOPPED
    assert "exit 1 after worker-0 left: stopped at the last checkpoint" in capfd.readouterr().err

    # a new gang whose peer runs on: the wait ends without a stop, the failure counts
    gang = tf_launcher.Gang.join(marks, config, "j-worker-0-1")
    (marks / "worker-0.json").write_text(json.dumps({"state": "running", "token": "next"}))
    code = tf_launcher.run_copying_output(
        fails, dict(os.environ), None, gang=gang, fault_window=0.2
    )
    assert code == 1
    assert "stopped at the last checkpoint" not in capfd.readouterr().err


def _exited(pid_file: Path) -> bool:
    """Whether the program that wrote its pid to `pid_file` has exited (a zombie, or reaped)."""
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):  # not written yet, or half
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # reaped
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # proc(5): the state after the name


def _evict_after_exit(
    task: Task, delay: float = 0.7, first: tuple[Task, str] | None = None
) -> None:
    """SIGTERM to the task's launcher `delay` s after its program exited (the eviction).

    `first`: a task's event that must have happened before (on a loaded machine a peer may
    take longer than `delay` to see the crash; the order is the scenario, not the time).
    """
    deadline = time.monotonic() + 10
    while not task.times("exit") and time.monotonic() < deadline:
        time.sleep(0.01)
    [exited] = task.times("exit")
    time.sleep(max(0.0, exited + delay - time.time()))
    while first is not None and not first[0].times(first[1]) and time.monotonic() < deadline:
        time.sleep(0.01)
    task.proc.send_signal(signal.SIGTERM)


def test_a_gpu_fault_s_crash_then_the_eviction_is_a_stop_not_a_failure(tmp_path):
    """XID 79: CUDA fails in the program ~0.65 s before the watcher's eviction (issue 32).

    A lone GPU task (no peer): the launcher holds the exit for its fault window, the
    eviction's SIGTERM comes, and it exits 143, marked as a stop its peers would read.
    """
    task = Task(tmp_path, "mwms", "worker", 0, "--exit", "1", workers=1, gpus=1).ready()
    marks = tmp_path / "jobs" / "j" / "gang"
    peer = tf_launcher.Gang(marks, "worker-1", ["worker-0"], "worker-0", "peer")
    _evict_after_exit(task)
    assert task.wait() == tf_launcher.EXIT_STOPPED, task.stderr()
    err = task.stderr()
    assert "the program exited 1; holding the exit up to 10 s for an eviction" in err
    assert "SIGTERM after exit 1: stopped at the last checkpoint" in err
    assert json.loads((marks / "worker-0.json").read_text())["code"] == 143
    assert peer.stopping_peer() == "worker-0"  # what a peer of its gang reads: a stop


def test_a_crash_without_an_eviction_counts_once_the_fault_window_is_over(tmp_path):
    task = Task(tmp_path, "mwms", "worker", 0, "--exit", "1", workers=1, gpus=1, window="0.5")
    assert task.wait() == 1, task.stderr()
    [exited] = task.times("exit")
    # held for the window, then the program's code; not for the default FAULT_WINDOW (10 s)
    assert 0.5 <= time.time() - exited < 5


def test_a_gpu_fault_in_a_gang_stops_the_crashed_task_and_its_peer(tmp_path):
    """Task 1's GPU fails its program, task 0's collective fails, task 1 is evicted.

    The eviction comes 0.7 s after the crash; both exit 143: the gang restarts uncounted.
    """
    crashed = Task(tmp_path, "mwms", "worker", 1, "--exit", "1", "--after", "0.3").ready()
    pid = crashed.program_pid()
    survivor = Task(tmp_path, "mwms", "worker", 0, "--on-term", "ignore", "--peer-gone", str(pid))
    # the survivor's collective fails first, so it holds its exit until the eviction
    _evict_after_exit(crashed, first=(survivor, "collective failed"))
    assert (crashed.wait(), survivor.wait()) == (143, 143), survivor.stderr()
    assert "exit 1 after worker-1 left: stopped at the last checkpoint" in survivor.stderr()
    assert "SIGTERM after exit 1: stopped at the last checkpoint" in crashed.stderr()


def test_an_earlier_gang_s_marks_do_not_stop_a_new_one(tmp_path):
    first = Task(tmp_path, "mwms", "worker", 1).ready()
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait() == 143  # its mark says exited 143
    task = Task(tmp_path, "mwms", "worker", 0, "--exit", "0", "--after", "0.3")
    assert task.wait() == 0, task.stderr()
    assert not task.times("sigterm")


# ------------------------------------------------------------- training progress metrics


def _progress_line(**fields) -> bytes:
    return ("GPU_K8S_PROGRESS " + json.dumps(fields) + "\n").encode()


def _samples(text: str) -> dict[str, float]:
    """`name{labels}` -> value of a Prometheus text exposition (TYPE lines checked)."""
    typed = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            assert name.split("{")[0] in typed, f"{name} has no # TYPE line"
            out[name] = float(value)
    return out


def test_progress_lines_become_gauges_even_when_split_across_reads(tmp_path):
    metrics = tf_launcher.TrainingMetrics(tmp_path / "checkpoints", clock=lambda: 1000.0)
    line = _progress_line(
        step=120, steps=500, loss=0.25, examples_per_sec=640.0, global_batch_size=64
    )
    metrics.feed(b"step 119 loss 0.3\n" + line[:20])
    assert "gpu_k8s_training_step" not in _samples(metrics.render())
    metrics.feed(line[20:] + b"eval at step 120\n")

    samples = _samples(metrics.render())

    assert samples["gpu_k8s_training_step"] == 120
    assert samples["gpu_k8s_training_steps_target"] == 500
    assert samples["gpu_k8s_training_loss"] == 0.25
    assert samples["gpu_k8s_training_examples_per_second"] == 640
    assert samples["gpu_k8s_training_steps_per_second"] == 10  # 640 examples/s / 64
    assert samples["gpu_k8s_training_last_step_timestamp_seconds"] == 1000
    assert "gpu_k8s_training_last_checkpoint_timestamp_seconds" not in samples


def test_the_step_time_moves_only_when_the_step_does(tmp_path):
    now = [1000.0]
    metrics = tf_launcher.TrainingMetrics(tmp_path, clock=lambda: now[0])
    metrics.feed(_progress_line(step=5, steps=10, loss=None, examples_per_sec=0))
    now[0] = 1300.0
    metrics.feed(_progress_line(step=5, steps=10, loss=None, examples_per_sec=0))  # stalled
    samples = _samples(metrics.render())
    assert samples["gpu_k8s_training_last_step_timestamp_seconds"] == 1000
    assert "gpu_k8s_training_loss" not in samples  # null (nothing trained yet): no sample


def test_malformed_progress_lines_are_ignored(tmp_path):
    metrics = tf_launcher.TrainingMetrics(tmp_path)
    metrics.feed(b"GPU_K8S_PROGRESS {not json\nGPU_K8S_PROGRESS [1]\n")
    metrics.feed(b"GPU_K8S_PROGRESS " + b"x" * 100_000)  # no newline: not kept forever
    metrics.feed(b"\n" + _progress_line(step="ten"))
    assert "gpu_k8s_training_step" not in _samples(metrics.render())


def test_the_last_checkpoint_is_the_newest_checkpoint_file_of_its_directory(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "ckpt-100.index").write_text("")
    os.utime(checkpoints / "ckpt-100.index", (1500, 1500))
    (checkpoints / "checkpoint").write_text("")  # CheckpointManager's state file
    os.utime(checkpoints / "checkpoint", (1600, 1600))
    # not checkpoints: the trainer's model spec, rewritten at every start, and a temp file
    for name in ("model.json", ".model.json.abc"):
        (checkpoints / name).write_text("{}")
        os.utime(checkpoints / name, (1700, 1700))
    metrics = tf_launcher.TrainingMetrics(checkpoints)
    assert _samples(metrics.render())["gpu_k8s_training_last_checkpoint_timestamp_seconds"] == 1600


def test_a_keras_backup_in_its_chief_subdirectory_is_the_last_checkpoint(tmp_path):
    """Keras 2's BackupAndRestore saves in <backup_dir>/chief; its temp copies do not count.

    BackupAndRestore(backup_dir=GPU_K8S_CHECKPOINT_DIR), as TensorFlow's multi-worker
    Keras tutorial writes it (Keras 2: tf_keras 2.21.0, TF_USE_LEGACY_KERAS=1), saves with
    a CheckpointManager in <backup_dir>/chief (tf_keras/src/distribute/
    worker_training_state.py), and a worker that must not save writes a throw-away copy in
    <backup_dir>/workertemp_<task> (distributed_file_utils.write_dirpath), removed after
    each backup: that is no checkpoint of the job.
    """
    checkpoints = tmp_path / "checkpoints"
    chief, temp = checkpoints / "chief", checkpoints / "workertemp_1"
    chief.mkdir(parents=True)
    temp.mkdir()
    for directory, seconds in ((chief, 1500), (temp, 1800)):
        for name in ("checkpoint", "ckpt-3.index"):
            (directory / name).write_text("")
            os.utime(directory / name, (seconds, seconds))
    (checkpoints / "model.json").write_text("{}")  # the trainer's, not a checkpoint
    os.utime(checkpoints / "model.json", (1700, 1700))
    metrics = tf_launcher.TrainingMetrics(checkpoints)
    assert _samples(metrics.render())["gpu_k8s_training_last_checkpoint_timestamp_seconds"] == 1500


def test_the_launcher_serves_its_program_progress_on_the_metrics_port(tmp_path):
    """GPU_K8S_METRICS_PORT set (the pod spec sets it): GET /metrics answers while it runs."""
    port = free_ports(1)[0]  # none the kernel hands to another process's connection
    line = _progress_line(step=7, steps=9, loss=1.5, examples_per_sec=32, global_batch_size=32)
    program = (
        "import sys, time\n"
        f"sys.stdout.write({line.decode()!r}); sys.stdout.flush()\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    env = {
        **os.environ,
        "GPU_K8S_JOB": "j",
        "GPU_K8S_WORKERS": "1",
        "JOB_COMPLETION_INDEX": "0",
        "GPU_K8S_DATA_DIR": str(tmp_path),
        "GPU_K8S_METRICS_PORT": str(port),
        "GPU_K8S_METRICS_ADDRESS": "127.0.0.1",
    }
    with subprocess.Popen(
        [sys.executable, tf_launcher.__file__, "--", sys.executable, "-c", program],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as launcher:
        _scrape_while_running(launcher, port)


def _scrape_while_running(launcher: subprocess.Popen, port: int) -> None:
    import urllib.error
    import urllib.request

    try:
        assert launcher.stdout is not None
        while b"ready" not in launcher.stdout.readline():
            pass
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            samples = _samples(answer.read().decode())
        assert samples["gpu_k8s_training_step"] == 7
        assert samples["gpu_k8s_training_steps_per_second"] == 1
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
            raise AssertionError("only /metrics is served")
        except urllib.error.HTTPError as e:
            assert e.code == 404
    finally:
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=30)
