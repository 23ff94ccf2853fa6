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
- The repair gate's images (charms/kubernetes-worker/src/gpu_gate.py): NVIDIA's DCGM
  image runs `sh -c "nv-hostengine ...; dcgmi diag -r 2 -j; exit 0"` and prints the
  diagnostic's JSON in the form of NVIDIA/DCGM testing/python3/dcgm_diag_schema.json
  (DCGM 4.x: "DCGM Diagnostic" -> test_categories -> tests -> results per entity, with
  status "Pass" / "Fail" / "Skip" from dcgmi/Diag.cpp (a Warn prints "Fail" in JSON:
  HelperDisplayDiagResult's default DDR_NO_DISPLAY_WARN), a failed result's
  warnings[{warning, error_id, error_category, error_severity}], a skipped one's
  `info` (the plugin's reason), and `runtime_error` when the diagnostic cannot run, as it
  cannot on most MIG layouts: `_diag_mig_refusal`). Each test's `test_summary` (NVIDIA/DCGM
  @72fa3fe, DCGM 4.6.0, dcgmi/Diag.cpp HelperJsonAddTestSummary, HelperJsonAddResult with
  includeAllErrors) holds the test's overall status (nvvs Plugin::GetOverallResult: Fail
  if any GPU failed, Skip if every GPU skipped, else Pass) and every error of the test,
  those tied to no GPU too (DcgmError GpuIdTag::Unknown: the software test's Fabric
  Manager training error, Software.cpp, after which PluginTest::SetResult fails every
  GPU), which no GPU's result quotes: `diag_unattributed`;
  the test names per category are the level-2 plugins
  of NVIDIA's DCGM user guide ("DCGM Diagnostics": software, pcie, memory). NVIDIA's
  PyTorch image runs nccl-tests' `all_reduce_perf_mpi` and prints its table and the
  summary lines of nccl-tests src/common.cu (`# Out of bounds values : <n> OK|FAILED`,
  `# Avg bus bandwidth    : <g>`), on every GPU the container sees. Its table has a row per
  message size (nccl-tests v2.19.6 src/util.cu: size, count, type, redop, root, then time,
  algbw, busbw, #wrong out of place and again in place); `busbw` is what the largest size
  measures, smaller sizes measure less (latency-bound), so the average is under it.
- CUDA under MIG (NVIDIA MIG user guide, "Getting Started with MIG", CUDA device
  enumeration: "a single CUDA process can only enumerate a single MIG device", however many
  the container is given): `all_reduce_perf_mpi -g <n>` finds one device on a MIG machine
  and, asked for more, prints to stderr and exits non-zero without a table (nccl-tests
  v2.17.2 and later, src/util.cu: "Invalid number of GPUs: <n> requested but only <m> were
  found." then "Please check the number of processes and GPUs per process."; the TESTCHECK
  line of src/common.h follows). A container given a MIG device by its UUID
  (NVIDIA_VISIBLE_DEVICES=MIG-<uuid>: the MIG user guide's "Running Containers", R470 and
  later) runs vectorAdd on it; a UUID nvidia-smi does not list finds no CUDA device.
- One DCGM host engine per node: the DCGM image's `nv-hostengine` must be the node's only
  one while `dcgmi diag` runs. NVIDIA's DCGM developer on NVIDIA/DCGM#108: "Having
  multiple nv-hostengine instances on the same node is highly not recommended and not an
  officially supported configuration ... may lead to deadlocks in the driver"; on
  NVIDIA/dcgm-exporter#61, an exporter with its embedded engine "would fail to initialize
  some modules if there is another nv-hostengine process on the same physical machine";
  DCGM's "Getting Started for System Administrators": "Operate one site-managed DCGM
  endpoint per host". The DCGM exporter is such an engine (without
  --remote-hostengine-info it "initializes an embedded DCGM host engine inside its
  process": DCGM docs, command-line reference, dcgm-exporter). Upstream names no error
  message for the case (a deadlock prints none), so the fake's diagnostic answers a
  `runtime_error` naming the other engines (`hostengines`: callables naming the ones
  running now): a charm that runs the diagnostic beside one cannot pass.
- A pull that runs past the caller's timeout is killed with its `ctr` client (the runner's
  exit status -1) and leaves no image.
- A container that runs past the caller's timeout is killed with its `ctr` client, and
  stays in containerd (`--rm` removes it only when ctr sees it exit): `tasks delete --force`
  and `containers delete` remove it.
"""

from __future__ import annotations

import json

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
# vectorAdd checks every element and exits 1 after this line on stderr (cuda-samples
# Samples/0_Introduction/vectorAdd/vectorAdd.cu: "Result verification failed at element
# %d!").
VERIFICATION_FAILED = (
    "[Vector addition of 50000 elements]\nResult verification failed at element 7!\n"
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
        self.pull_hangs = 0  # the next N pulls outlive their caller's timeout
        self.pulls: list[str] = []  # the references asked for, in order
        self.output = VECTORADD_OK  # what the sample prints when it has a GPU
        self.driver_too_old = False
        self.failing_gpus: set[str] = set()  # NVIDIA_VISIBLE_DEVICES values vectorAdd fails on
        # DCGM's diagnostic: {GPU index: the failed test's warning}, or a runtime error
        self.diag_failures: dict[int, tuple[str, str]] = {}
        # {test: an error tied to no GPU}: NVVS fails every GPU of the test, and dcgmi
        # quotes the error only in the test's `test_summary` (module docstring)
        self.diag_unattributed: dict[str, str] = {}
        # {(GPU index, test): the plugin's info}: the test skipped that GPU. Not the
        # software test: its subtests set every GPU's result and a GPU keeps the highest
        # (Pass over Skip: DCGM 4.6.0 DcgmNvvsResponseWrapper.cpp SetSoftwareTestResult,
        # Software.cpp), so on a node it runs on, no GPU reads Skip there
        self.diag_skips: dict[tuple[int, str], str] = {}
        self.diag_runtime_error: str | None = None
        self.busbw = 24.5  # GB/s: what all_reduce_perf measures at its largest size
        self.wrong_values = 0
        # the node's other DCGM host engines: each callable names those running now
        self.hostengines: list = []
        self.diag_beside: list[list[str]] = []  # the other engines at each diagnostic
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
        self.pulls.append(ref)
        if self.pull_hangs:  # a slow registry: the caller's timeout kills ctr mid-pull
            self.pull_hangs -= 1
            raise CommandError(argv, -1, "timed out")
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
        if "/cloud-native/dcgm:" in ref:
            return self._dcgm(command)
        if "/nvidia/pytorch:" in ref:
            return self._nccl(command)
        return self._vectoradd(argv, flags["env"]["NVIDIA_VISIBLE_DEVICES"])

    def _vectoradd(self, argv: list[str], visible: str) -> str:
        """The CUDA sample on the device NVIDIA_VISIBLE_DEVICES names."""
        if visible.startswith("MIG-") and visible not in self._mig_uuids():
            raise CommandError(argv, 1, NO_DEVICE)
        if visible in self.failing_gpus:
            raise CommandError(argv, 1, VERIFICATION_FAILED)  # cuda-samples vectorAdd.cu
        return self.output

    def _dcgm(self, command: list[str]) -> str:
        """`dcgmi diag -r 2 -j`'s JSON (see the module docstring for its form)."""
        if "dcgmi diag -r 2 -j" not in " ".join(command):
            return ""
        beside = [name for running in self.hostengines for name in running()]
        self.diag_beside.append(beside)
        if beside:
            said = f"(fake) another DCGM host engine on this node: {', '.join(beside)}"
            return json.dumps({"DCGM Diagnostic": {"runtime_error": said}})
        if self.diag_runtime_error is not None:
            return json.dumps({"DCGM Diagnostic": {"runtime_error": self.diag_runtime_error}})
        refused = self._diag_mig_refusal()
        if refused is not None:  # dcgmi/Diag.cpp HelperDisplayFailureMessage
            error = {"version": "4.2.3", "runtime_error": f"Error: {refused}"}
            return json.dumps({"DCGM Diagnostic": error}, indent=2)

        def category(name: str, test: str) -> dict:
            rows = self._diag_results(test)
            done = {"name": test, "results": rows, "test_summary": self._diag_summary(test, rows)}
            return {"category": name, "tests": [done]}

        return json.dumps(
            {
                "DCGM Diagnostic": {
                    "test_categories": [
                        category("Deployment", "software"),
                        category("Integration", "pcie"),
                        category("Hardware", "memory"),
                    ]
                },
                "metadata": {"version": "4.2.3"},
            },
            indent=2,
        )

    @staticmethod
    def _diag_warning(text: str, error_id: int) -> dict:
        return {"error_category": 4, "error_id": error_id, "error_severity": 2, "warning": text}

    def _diag_results(self, test: str) -> list[dict]:
        """One test's result per GPU: Pass, or Fail or Skip as the test asked for."""
        rows = []
        for gpu in range(self.driver.gpus):
            row = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu}
            failed = self.diag_failures.get(gpu)
            skipped = self.diag_skips.get((gpu, test))
            if skipped is not None and test == "software":
                raise AssertionError("(fake) DCGM's software test skips no GPU (diag_skips)")
            if failed is not None and failed[0] == test:
                row |= {"status": "Fail", "warnings": [self._diag_warning(failed[1], 27)]}
            elif test in self.diag_unattributed:  # PluginTest::SetResult: every GPU
                row["status"] = "Fail"
            elif skipped is not None:
                row |= {"status": "Skip", "info": [skipped]}
            else:
                row["status"] = "Pass"
            rows.append(row)
        return rows

    def _diag_summary(self, test: str, rows: list[dict]) -> dict:
        """Diag.cpp HelperJsonAddTestSummary: the test's result and all its errors."""
        statuses = {r["status"] for r in rows}  # Plugin::GetOverallResult
        status = "Fail" if "Fail" in statuses else "Skip" if statuses == {"Skip"} else "Pass"
        errors = [w for r in rows for w in r.get("warnings", [])]
        if test in self.diag_unattributed:
            errors.append(self._diag_warning(self.diag_unattributed[test], 112))
        return {"status": status} | ({"warnings": errors} if errors else {})

    def _diag_mig_refusal(self) -> str | None:
        """Why NVVS refuses to run on this node's MIG layout, before any test; None if it runs.

        NVIDIA/DCGM nvvs/src/NvidiaValidationSuite.cpp BuildCommonGpusList (@28bfbd4c, and
        the same at 72fa3fe, DCGM 4.6.0), GPU by GPU: a MIG layout that is not one instance
        over the whole GPU "prevents access to the entire GPU" (Gpu.cpp
        IsMigModeDiagCompatible; here: anything but a single 7g device); MIG on and more than
        one GPU: "CUDA does not support enumerating GPUs with MIG mode enabled"; MIG on with
        no compute instance: "no compute instances are configured". dcgmi prints it as the
        JSON's `runtime_error` ("Error: " + NVVS's message) and exits DCGM_ST_NVVS_ERROR.
        """
        if not (self.driver.mig_devices or self.driver.mig_enabled):
            return None
        gpus = self.driver.present()
        for gpu in gpus:
            layout = self.driver.mig_devices.get(gpu, [])
            if layout and not (len(layout) == 1 and layout[0].startswith("7g.")):
                return (
                    f"GPU {gpu}'s MIG configuration is incompatible with the diagnostic "
                    "because it prevents access to the entire GPU."
                )
            if len(gpus) > 1:
                return (
                    "Cannot run diagnostic: CUDA does not support enumerating GPUs with MIG "
                    f"mode enabled, yet GPU {gpu} is MIG enabled and the diagnostic is "
                    f"attempting to run on {len(gpus)} GPUs."
                )
            if not layout:
                return (
                    "Cannot run diagnostic: MIG is enabled, but no compute instances are "
                    "configured. CUDA needs to execute on a compute instance if MIG is enabled."
                )
        return None

    def _mig_uuids(self) -> list[str]:
        """The MIG devices' UUIDs `nvidia-smi -L` lists (none without MIG)."""
        listed = self.driver.nvidia_smi(["nvidia-smi", "-L"], None)
        return [w.rstrip(")") for w in listed.split() if w.startswith("MIG-")]

    def _cuda_devices(self) -> int:
        """How many devices one CUDA process enumerates (see the module docstring)."""
        if self.driver.mig_devices or self.driver.mig_enabled:
            return min(1, sum(map(len, self.driver.mig_devices.values())))
        return self.driver.gpus

    def _nccl(self, command: list[str]) -> str:
        """all_reduce_perf_mpi's output across `-g` GPUs (nccl-tests src/util.cu lines)."""
        line = " ".join(command)
        if "all_reduce_perf_mpi" not in line:
            return f"sh: 1: {line.split()[-1]}: not found\n"
        wanted = int(line.split(" -g ")[1].split()[0])
        found = self._cuda_devices()
        if wanted > found:
            return (
                f"Invalid number of GPUs: {wanted} requested but only {found} were found.\n"
                "Please check the number of processes and GPUs per process.\n"
                " .. fake-node pid 4242: Test failure common.cu:1454\n"
            )
        bad = "FAILED" if self.wrong_values else "OK"
        rows, total = [], 0.0
        sizes = [8 << 20 << n for n in range(6)]  # -b 8M -e 256M -f 2
        for size in sizes:
            # latency-bound below the largest size: each halving of the size measures less
            busbw = self.busbw * (0.6 + 0.4 * size / sizes[-1])
            total += busbw
            rows.append(
                f"{size:12d}  {size // 4:12d}     float     sum      -1   1234.5  "
                f"{busbw / 1.5:6.2f}  {busbw:6.2f}  {self.wrong_values:5d}   1230.1  "
                f"{busbw / 1.5:6.2f}  {busbw:6.2f}  {self.wrong_values:5d}\n"
            )
        return (
            f"# nThread 1 nGpus {wanted} minBytes 8388608 maxBytes 268435456 step: 2(factor)\n"
            "#       size         count      type   redop    root     time   algbw   busbw"
            " #wrong     time   algbw   busbw #wrong\n"
            + "".join(rows)
            + f"# Out of bounds values : {self.wrong_values} {bad}\n"
            f"# Avg bus bandwidth    : {total / len(sizes):g}\n#\n"
        )
