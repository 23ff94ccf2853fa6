"""containerd's `ctr` on a fake GPU machine: image pulls and one-shot containers.

As far as the worker's `validate-gpu` relies on it (charms/kubernetes-worker/src/
validation.py), with the rules of the real programs:

- `ctr` is containerd's client: it exists once the `containerd` package is installed.
- `ctr -n <ns> images pull <ref>` fetches the image into that namespace; a reference the
  registry does not have fails as ctr does (`failed to resolve reference ...: not found`).
- `ctr -n <ns> run [--rm] [--privileged] [--runc-binary B] [--env K=V]... <ref> <id>
  <cmd>...` runs an image already in that namespace (`image "<ref>": not found` else;
  containerd cmd/ctr/commands/run NewContainer: `client.GetImage`) with the runtime binary
  B (runc by default; a missing B fails the task's create, as the shim's exec does).
- NVIDIA's runtime (`/usr/bin/nvidia-container-runtime`, package nvidia-container-toolkit)
  gives the container GPUs from NVIDIA_VISIBLE_DEVICES only when the container is
  privileged or the toolkit's config accepts the variable from unprivileged containers
  (nvidia-container-toolkit internal/modifier/cdi.go: `AcceptEnvvarUnprivileged ||
  image.IsPrivileged`); the charm turns that acceptance off (toolkit.py). Without GPUs, or
  with a driver nvidia-smi cannot use, the CUDA sample fails the way it does, on stderr
  (cuda-samples vectorAdd: "Failed to allocate device vector A (error code ...)!", exit 1).
- A container that runs past the caller's timeout is killed with its `ctr` client, and
  stays in containerd (`--rm` removes it only when ctr sees it exit): `tasks delete --force`
  and `containers delete` remove it.
"""

from __future__ import annotations

import toolkit

from charms.gpu_k8s.v0.system import CommandError

VECTORADD_OK = "[Vector addition of 50000 elements]\nTest PASSED\nDone\n"
NO_DEVICE = (
    "[Vector addition of 50000 elements]\nFailed to allocate device vector A (error code "
    "no CUDA-capable device is detected)!\n"
)
DRIVER_TOO_OLD = (
    "[Vector addition of 50000 elements]\nFailed to allocate device vector A (error code "
    "CUDA driver version is insufficient for CUDA runtime version)!\n"
)


class FakeCtr:
    """`ctr` on `machine`, whose GPUs and driver are `driver`'s (fakes.nvidia_driver)."""

    def __init__(self, machine, driver):
        self.machine, self.driver = machine, driver
        self.registry: set[str] | None = None  # None: every reference resolves
        self.images: dict[str, set[str]] = {}  # namespace -> pulled references
        self.containers: dict[str, set[str]] = {}  # namespace -> containers left behind
        self.runs: list[dict] = []  # what each `run` was given
        self.hang = False  # the next run outlives its caller's timeout
        self.output = VECTORADD_OK  # what the sample prints when it has a GPU
        self.driver_too_old = False
        machine.on("ctr", self.ctr)

    def ctr(self, argv: list[str], _input: str | None) -> str:
        if "containerd" not in self.machine.dpkg:
            raise CommandError(argv, 127, f"{argv[0]}: not found")
        args = argv[1:]
        namespace = "default"
        if args[:1] == ["-n"]:
            namespace, args = args[1], args[2:]
        if args[:2] == ["images", "pull"]:
            return self._pull(argv, namespace, args[2])
        if args[:1] == ["run"]:
            return self._run(argv, namespace, args[1:])
        if args[:3] == ["tasks", "delete", "--force"] or args[:2] == ["containers", "delete"]:
            name = args[-1]
            if name not in self.containers.get(namespace, set()):
                raise CommandError(argv, 1, f'ctr: container "{name}" in namespace: not found')
            if args[0] == "containers":
                self.containers[namespace].discard(name)
            return ""
        raise CommandError(argv, 1, f"ctr: no fake for {' '.join(args[:2])}")

    def _pull(self, argv: list[str], namespace: str, ref: str) -> str:
        if self.registry is not None and ref not in self.registry:
            raise CommandError(argv, 1, f'ctr: failed to resolve reference "{ref}": not found')
        self.images.setdefault(namespace, set()).add(ref)
        return f"{ref}: resolved\nelapsed: 1.2 s\n"

    @staticmethod
    def _flags(argv: list[str], args: list[str]) -> dict:
        """Take `run`'s flags off the front of `args` (the ones the worker may pass)."""
        flags: dict = {"env": {}, "rm": False, "privileged": False, "runc-binary": "runc"}
        while args and args[0].startswith("--"):
            flag = args.pop(0)[2:]
            if flag in ("rm", "privileged"):
                flags[flag] = True
            elif flag == "env":
                key, _, value = args.pop(0).partition("=")
                flags["env"][key] = value
            elif flag == "runc-binary":
                flags[flag] = args.pop(0)
            else:
                raise CommandError(argv, 1, f"ctr: flag provided but not defined: -{flag}")
        return flags

    def _run(self, argv: list[str], namespace: str, args: list[str]) -> str:
        flags = self._flags(argv, args)
        ref, name, *command = args
        self.runs.append({**flags, "image": ref, "name": name, "command": command})
        if ref not in self.images.get(namespace, set()):
            raise CommandError(argv, 1, f'ctr: image "{ref}": not found')
        binary = flags["runc-binary"]
        if binary == toolkit.RUNTIME_BINARY and "nvidia-container-toolkit" not in (
            self.machine.dpkg
        ):
            raise CommandError(argv, 1, f'ctr: exec: "{binary}": no such file or directory')
        if self.hang:
            self.hang = False
            self.containers.setdefault(namespace, set()).add(name)
            raise CommandError(argv, -1, "timed out")
        gpus = (
            binary == toolkit.RUNTIME_BINARY
            and bool(flags["env"].get("NVIDIA_VISIBLE_DEVICES"))
            and flags["privileged"]  # the charm refuses the variable to unprivileged ones
        )
        try:
            self.driver.nvidia_smi(["nvidia-smi", "-L"], None)
        except CommandError:
            gpus = False
        if not gpus:
            raise CommandError(argv, 1, NO_DEVICE)
        if self.driver_too_old:
            raise CommandError(argv, 1, DRIVER_TOO_OLD)
        return self.output
