"""Kubelet for tests: a pod's container runs as a local process (fakes/batch.py B5).

`BatchControllers.kubelet = ProcessKubelet(...)` makes the Job controller's pods real:
each pod's first container's command runs with the pod's environment, as kubelet would
give it (kubernetes.io/docs/tasks/inject-data-application/: `env` values, and `envFrom`
a Secret's keys, base64-decoded; a missing Secret fails the container, here the start),
the directories the pod mounts mapped to local ones (`mounts`: mount path -> local
directory, replaced in the command's words and the environment's values), `python3` the
test's interpreter. A process that exits ends its pod with its exit code (128+N for a
signal N, as container runtimes report it); a deleted pod's process gets SIGTERM, then
SIGKILL after the pod's grace period (`terminationGracePeriodSeconds`, default 30;
pod-lifecycle "Termination of Pods"). Each node's kubelet acts on its own pods, so pods
deleted together (a suspended or preempted job, a gang restart) get their SIGTERMs at
once and their grace periods run side by side (`stop_pods`), not one after another; an
evicted pod (`terminate`, a drain) gets SIGTERM and is left to end while the test goes on.

Every pod has its own network namespace (kubernetes.io/docs/concepts/workloads/pods/,
"Pod networking"), so pods of one node may listen on the same port; the processes here
share the test's. The launcher's metrics port (GPU_K8S_METRICS_PORT) is therefore given
a free port per pod (`tf_demo.free_ports`: none the kernel hands out to connections),
recorded in `metrics_ports` for the test to scrape.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tf_demo import free_ports  # actions/ (stdlib only): the demo picks its ports so too

GRACE_SECONDS = 30  # terminationGracePeriodSeconds' default


# What the tensorflow image lacks (tests/fixtures/tensorflow_image/README.md)
TENSORFLOW_IMAGE = Path(__file__).resolve().parents[1] / "fixtures" / "tensorflow_image"


class ProcessKubelet:
    """Runs the containers of the emulated controllers' pods as local processes."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        mounts: dict[str, Path],
        outputs: Path,
        python: str = sys.executable,
    ):
        self.api, self.ns, self.mounts, self.python = api, namespace, mounts, python
        self.outputs_dir = outputs
        self.procs: dict[str, subprocess.Popen] = {}
        self.pods: dict[str, dict] = {}  # each started pod as it was bound
        self.outputs: dict[str, Path] = {}
        self.deadlines: dict[str, float] = {}  # SIGTERM sent: SIGKILL at this time
        self.metrics_ports: dict[str, int] = {}  # pod -> where its metrics port is here

    def _local(self, text: str) -> str:
        for mount, local in self.mounts.items():
            text = re.sub(rf"(?<![\w.-]){re.escape(mount)}(?=/|$|[\s\"'])", str(local), text)
        return text

    def environment(self, pod: dict) -> dict[str, str]:
        """The container's environment (subclasses add what a test's cluster would)."""
        container = pod["spec"]["containers"][0]
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            ref = source.get("secretRef")
            if ref:
                path = f"/api/v1/namespaces/{self.ns}/secrets/{ref['name']}"
                secret = self.api.get_object(path)
                if secret is None:
                    raise RuntimeError(f"CreateContainerConfigError: secret {ref['name']!r}")
                for key, value in (secret.get("data") or {}).items():
                    env[key] = base64.b64decode(value).decode()
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = self._local(item["value"])
        env["HOSTNAME"] = pod["spec"].get("hostname") or pod["metadata"]["name"]
        if env.get("GPU_K8S_METRICS_PORT"):  # the pod's own port, in its own namespace
            port = self.metrics_ports.setdefault(pod["metadata"]["name"], free_ports(1)[0])
            env["GPU_K8S_METRICS_PORT"], env["GPU_K8S_METRICS_ADDRESS"] = str(port), "127.0.0.1"
        env["PATH"] = os.environ["PATH"]
        env["PYTHONPATH"] = str(TENSORFLOW_IMAGE)  # no scikit-learn, as in the image
        return env

    def cpus(self, pod: dict) -> set[int] | None:
        """The CPUs the container may run on (None: the node's; subclasses pin a pod).

        kubelet's static CPU manager policy gives a Guaranteed pod's container with an
        integer CPU request a cpuset of that many exclusive CPUs (kubernetes.io/docs/
        tasks/administer-cluster/cpu-management-policies/), and a one-vCPU node has one.
        """
        return None

    def start(self, pod: dict) -> None:
        """Run the pod's container (called when the pod is bound)."""
        container = pod["spec"]["containers"][0]
        command = [
            self.python if word == "python3" else self._local(word)
            for word in container["command"]
        ]
        cpus = self.cpus(pod)
        if cpus:  # util-linux taskset execs the command with that affinity
            command = ["taskset", "--cpu-list", ",".join(map(str, sorted(cpus))), *command]
        name = pod["metadata"]["name"]
        self.pods[name] = pod
        self.outputs[name] = self.outputs_dir / f"{name}.out"
        env = self.environment(pod)
        # A container has a /tmp of its own, new at each start (the image's file system):
        # without it, TensorFlow's autograph leaves a generated file in the host's /tmp for
        # every function of every trainer a test kills (loader.py removes them at exit only)
        scratch = self.outputs_dir / f"{name}.tmp"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        env["TMPDIR"] = str(scratch)
        with self.outputs[name].open("wb") as out:
            self.procs[name] = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def settle(self, seconds: float) -> None:
        """Give the running processes up to `seconds` of real time to end.

        Tests run on fake time, which passes in no time at all: without this, a poll of
        300 fake seconds may be over before a real process started, on a loaded machine.
        """
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    proc.wait(timeout=seconds)
                except subprocess.TimeoutExpired:
                    pass
                return

    def run_for(self, seconds: float) -> None:
        """Let up to `seconds` of real time pass for the running containers, as a sleep does.

        The charm's waits sleep between polls (`time.sleep` in the charm, charm.py) and its
        `poll_until` allows at most timeout/poll polls: a test's sleep that took less real
        time than it was asked for would give a real process less than the timeout says
        (on a loaded machine, a TensorFlow export outlives 50 polls of 0.2 s). This one
        takes the time asked, and ends early once a container exits (the charm would see
        that at its next poll anyway; its clock is the real one, so no time is made up),
        or at once when none runs (nothing but a `tick` changes anything then).
        """
        deadline = time.monotonic() + seconds
        running = [proc for proc in self.procs.values() if proc.poll() is None]
        while running and (left := deadline - time.monotonic()) > 0:
            if any(proc.poll() is not None for proc in running):
                return
            time.sleep(min(0.05, left))

    def _log(self, name: str) -> None:
        text = self.outputs[name].read_text(errors="replace")
        self.api.set_pod_log(self.ns, name, text)

    def exit_code(self, pod: dict) -> int | None:
        """The container's exit code once it ended (and its log, as kubelet keeps it)."""
        name = pod["metadata"]["name"]
        proc = self.procs.get(name)
        if proc is None:
            return None
        self._log(name)
        code = proc.poll()
        if code is None and time.monotonic() > self.deadlines.get(name, float("inf")):
            proc.kill()  # its grace period is over
            code = proc.wait(timeout=30)
        if code is None:
            return None
        return code if code >= 0 else 128 - code

    def terminate(self, pod: dict) -> None:
        """SIGTERM now; SIGKILL once the pod's grace period is over (`exit_code` checks)."""
        name = pod["metadata"]["name"]
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None or name in self.deadlines:
            return
        grace = pod["spec"].get("terminationGracePeriodSeconds", GRACE_SECONDS)
        self.deadlines[name] = time.monotonic() + grace
        proc.send_signal(signal.SIGTERM)

    def stop(self, pod: dict) -> None:
        """SIGTERM, then SIGKILL after the grace period (a deleted pod)."""
        self.stop_pods([pod])

    def stop_pods(self, pods: list[dict]) -> None:
        """Pods deleted together: SIGTERM to each at once, then wait for all of them."""
        for pod in pods:
            self.terminate(pod)
        for pod in pods:
            name = pod["metadata"]["name"]
            proc = self.procs.get(name)
            if proc is None:
                continue
            try:
                proc.wait(timeout=max(0.0, self.deadlines.get(name, 0) - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
            self._log(name)

    def removed(self, present: set[str]) -> None:
        """Stop the containers of pods someone else deleted from the API server.

        The fake's deletes are immediate (unless `graceful_pods`): a team's DELETE, the
        taint manager's (fakes/taint_eviction.py). Kubelet sees the pod gone and kills its
        containers (pkg/kubelet/kubelet.go HandlePodRemoves): SIGTERM, SIGKILL once its
        grace period is over, all of them at once (`stop_pods`), waited for as a pod the
        controllers delete is (fakes/batch.py `_delete_pods`): a replacement made in the
        same tick (podReplacementPolicy Failed waits for the old pod to end) starts after.
        `present`: the names of this namespace's pods the API server still has.
        """
        gone = [
            self.pods[name]
            for name, proc in self.procs.items()
            if name not in present and proc.poll() is None
        ]
        if gone:
            self.stop_pods(gone)

    def kill(self, pod: dict) -> None:
        """The container dies at once (OOM killer, a node lost)."""
        self.procs[pod["metadata"]["name"]].kill()

    def stop_all(self) -> None:
        """Kill whatever still runs (end of a test)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)

    def output(self, lines_each: int = 15) -> str:
        """The last lines of every container, for a failing test's message.

        With each container's exit code, or `running`: which one ended first tells a
        protocol's failure from a process that died on its own.
        """
        parts = []
        for name, path in self.outputs.items():
            proc = self.procs.get(name)
            code = None if proc is None else proc.poll()
            state = "running" if code is None else f"exit {code}"
            lines = path.read_text(errors="replace").splitlines()[-lines_each:]
            parts.append(f"--- {name} ({state}) ---\n" + "\n".join(lines))
        return "\n".join(parts)
