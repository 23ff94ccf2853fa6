"""A consumer's own directory: made by a Job, owned by its user, served alone by its claim."""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
from collections.abc import Callable

import directories
import pytest
from efs_env import APP, Env, storage_relation
from ops import testing

import charm
from fakes.kube_admission import LevelVersion, evaluate_pod

OWN = {"directory": "tensorflow", "uid": "1000", "gid": "1000"}
JOBS = f"/apis/batch/v1/namespaces/{APP}/jobs/"


class JobController:
    """What Kubernetes' Job controller and kubelet do to the charm's Job, on demand.

    Rules (kubernetes.io/docs/concepts/workloads/controllers/job/): a finished Job gets a
    condition `Complete` or `Failed` with status "True"; its pods carry the label
    `batch.kubernetes.io/job-name`; a container that failed with
    `terminationMessagePolicy: FallbackToLogsOnError` reports the tail of its log as
    `state.terminated.message`. `finish_on_sleep` makes the Job finish while the charm
    waits for it (its `sleep` boundary), as a quick Job does on a real cluster.
    """

    def __init__(self, env: Env):
        self.env = env
        self.outcome: str | None = None  # "Complete" or "Failed" when the charm sleeps
        self.log = ""
        self.slept = 0

    def jobs(self) -> list[dict]:
        return self.env.api.objects(JOBS)

    def finish(self, outcome: str = "Complete", log: str = "") -> None:
        for job in self.jobs():
            name = job["metadata"]["name"]
            job["status"] = {"conditions": [{"type": outcome, "status": "True"}]}
            if outcome == "Complete":
                job["status"]["succeeded"] = 1
            self.env.api.put_object(f"{JOBS}{name}", job)
            exit_code = 0 if outcome == "Complete" else 1
            self.env.api.put_object(
                f"/api/v1/namespaces/{APP}/pods/{name}-x1",
                {
                    "metadata": {
                        "labels": {"batch.kubernetes.io/job-name": name},
                        "creationTimestamp": "2026-11-23T10:00:00Z",
                    },
                    "spec": {"containers": [{"name": "prepare", "image": "busybox"}]},
                    "status": {
                        "phase": "Succeeded" if exit_code == 0 else "Failed",
                        "containerStatuses": [
                            {
                                "name": "prepare",
                                "state": {"terminated": {"exitCode": exit_code, "message": log}},
                            }
                        ],
                    },
                },
            )

    def sleep(self, _: float) -> None:
        self.slept += 1
        if self.outcome:
            self.finish(self.outcome, self.log)


@pytest.fixture
def jobs(env: Env, monkeypatch: pytest.MonkeyPatch) -> JobController:
    controller = JobController(env)
    clock = iter(range(0, 10_000, 2))
    monkeypatch.setattr(charm.EfsStorageCharm, "sleep", staticmethod(controller.sleep))
    monkeypatch.setattr(charm.EfsStorageCharm, "monotonic", staticmethod(lambda: next(clock)))
    monkeypatch.setattr(charm.EfsStorageCharm, "directory_wait", 0.0)
    return controller


def _state(env: Env, request: dict[str, str] | None = None, **kwargs) -> testing.State:
    relations = [
        env.kube_api_relation(),
        storage_relation("tensorflow", "training", **(OWN if request is None else request)),
    ]
    return env.state(relations=relations, **kwargs)


def _answer(state: testing.State) -> dict[str, str]:
    rel = next(r for r in state.relations if r.endpoint == "shared-storage")
    return dict(rel.local_app_data)


def _serve_tensorflow(ctx, env: Env, jobs: JobController, monkeypatch) -> None:
    """Serve tensorflow its directory (the Job ends while the hook waits); bind the claim."""
    env.add_node("us-east-1a")
    jobs.outcome = "Complete"
    monkeypatch.setattr(charm.EfsStorageCharm, "directory_wait", 10.0)
    ctx.run(ctx.on.install(), _state(env))
    env.bind("training", "efs-storage-tensorflow")


def _volume(env: Env) -> dict | None:
    claim = env.pvc("training", "efs-storage-tensorflow")
    return env.pv(claim["spec"]["volumeName"]) if claim else None


def test_the_directory_is_made_by_a_job_before_the_claim_serves_it(ctx, env, jobs):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), _state(env))
    (job,) = jobs.jobs()
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    fs_id = env.file_systems()[0]["FileSystemId"]
    assert job["metadata"]["namespace"] == APP
    assert container["image"] == "busybox:1.37.0"
    assert container["args"] == ["/efs", "tensorflow", "1000:1000"]
    assert pod["volumes"] == [
        {"name": "efs", "nfs": {"server": f"{fs_id}.efs.us-east-1.amazonaws.com", "path": "/"}}
    ]
    assert pod["securityContext"] == {
        "runAsUser": 0,
        "runAsGroup": 0,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["automountServiceAccountToken"] is False
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    # No volume before the directory exists: a pod would mount a missing path.
    assert env.pvc("training", "efs-storage-tensorflow") is None
    assert out.unit_status == testing.WaitingStatus(
        f"preparing /tensorflow for tensorflow (Job {APP}/{job['metadata']['name']} not finished)"
    )
    assert _answer(out)["ready"] == "false"
    jobs.finish()
    out = ctx.run(ctx.on.update_status(), out)
    volume = _volume(env)
    assert volume is not None
    assert volume["spec"]["nfs"]["path"] == "/tensorflow"
    assert volume["metadata"]["annotations"]["gpu-k8s.io/efs-directory-owner"] == "1000:1000"
    assert jobs.jobs() == []  # deleted once it did its work
    env.bind("training", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active", out.unit_status.message
    assert _answer(out) == {
        "claim-name": "efs-storage-tensorflow",
        "capacity": "1Ti",
        "file-system-id": fs_id,
        "namespace": "training",
        "ready": "true",
        **OWN,
    }


def test_a_quick_job_is_waited_for_within_the_hook(ctx, env, jobs, monkeypatch):
    monkeypatch.setattr(charm.EfsStorageCharm, "directory_wait", 30.0)
    jobs.outcome = "Complete"
    env.add_node("us-east-1a")
    ctx.run(ctx.on.install(), _state(env))
    assert jobs.slept == 1
    assert _volume(env) is not None and jobs.jobs() == []


def test_a_served_directory_costs_no_request_in_the_steady_state(ctx, env, jobs):
    env.add_node("us-east-1a")
    jobs.outcome = "Complete"
    out = ctx.run(ctx.on.install(), _state(env))
    jobs.finish()
    out = ctx.run(ctx.on.update_status(), out)
    env.bind("training", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.update_status(), out)
    before = len(env.api.requests)
    writes = env.kube_writes()
    out = ctx.run(ctx.on.update_status(), out)
    assert env.kube_writes() == writes
    job_requests = [r for r in env.api.requests[before:] if "/jobs" in r.path]
    assert job_requests == []
    assert out.unit_status.name == "active"


def test_a_failed_job_blocks_with_its_last_words_and_is_retried(ctx, env, jobs):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), _state(env))
    jobs.finish("Failed", "mkdir: can't create directory '/efs/tensorflow': Permission denied")
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "blocked"
    assert "could not prepare /tensorflow on fs-" in out.unit_status.message
    assert "exit code 1: mkdir: can't create directory" in out.unit_status.message
    assert "Permission denied" in _answer(out)["error"]
    assert jobs.jobs() == [] and _volume(env) is None
    out = ctx.run(ctx.on.update_status(), out)  # the next event tries again
    assert len(jobs.jobs()) == 1
    assert out.unit_status.name == "waiting"


def test_a_new_owner_reruns_the_job_and_keeps_the_claim(ctx, env, jobs, monkeypatch):
    env.add_node("us-east-1a")
    jobs.outcome = "Complete"
    monkeypatch.setattr(charm.EfsStorageCharm, "directory_wait", 10.0)
    out = ctx.run(ctx.on.install(), _state(env))
    env.bind("training", "efs-storage-tensorflow")
    env.add_pod("training", "trainer-0", "efs-storage-tensorflow")
    claim_uid = env.pvc("training", "efs-storage-tensorflow")["metadata"]["uid"]
    out = ctx.run(ctx.on.update_status(), _state(env, {**OWN, "uid": "2000", "gid": "2000"}))
    volume = _volume(env)
    assert volume["metadata"]["annotations"]["gpu-k8s.io/efs-directory-owner"] == "2000:2000"
    assert env.pvc("training", "efs-storage-tensorflow")["metadata"]["uid"] == claim_uid
    assert _answer(out)["uid"] == "2000"
    assert out.unit_status.name == "active", out.unit_status.message


def test_a_new_directory_while_pods_use_the_claim_blocks_and_starts_nothing(
    ctx, env, jobs, monkeypatch
):
    _serve_tensorflow(ctx, env, jobs, monkeypatch)
    env.add_pod("training", "trainer-0", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.update_status(), _state(env, {**OWN, "directory": "tf2"}))
    assert out.unit_status.name == "blocked"
    assert "used by pods trainer-0" in out.unit_status.message
    assert jobs.jobs() == []
    assert _volume(env)["spec"]["nfs"]["path"] == "/tensorflow"


def test_the_directory_lies_below_the_configured_path_and_the_image_is_mirrored(ctx, env, jobs):
    env.add_node("us-east-1a")
    config = {"path": "/shared", "image-registry": "registry.example.com:5000/mirror"}
    ctx.run(ctx.on.install(), _state(env, {"directory": "teams/tf"}, config=config))
    (job,) = jobs.jobs()
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com:5000/mirror/library/busybox:1.37.0"
    assert container["args"] == ["/efs", "shared/teams/tf", "0:0"]


def test_a_consumer_without_a_directory_is_served_the_root_as_before(ctx, env, jobs):
    env.add_node("us-east-1a")
    ctx.run(ctx.on.install(), _state(env, {}))
    assert jobs.jobs() == []
    volume = _volume(env)
    assert volume["spec"]["nfs"]["path"] == "/"
    assert "gpu-k8s.io/efs-directory-owner" not in volume["metadata"]["annotations"]


def _run_script(root: str, directory: str, owner: str) -> subprocess.CompletedProcess:
    argv = ["sh", "-c", directories.SCRIPT, "prepare-directory", root, directory, owner]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@pytest.fixture
def me() -> Callable[[], str]:
    """An owner this process may give files to: any as root, else its own ids."""
    return lambda: "1000:1000" if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}"


def test_the_jobs_script_makes_the_directory_group_writable_and_leaves_its_content(tmp_path, me):
    owner = me()
    uid, gid = (int(x) for x in owner.split(":"))
    (tmp_path / "teams").mkdir()
    done = _run_script(str(tmp_path), "teams/tf/run", owner)
    assert done.returncode == 0, done.stderr
    made = tmp_path / "teams" / "tf" / "run"
    info = made.stat()
    assert (info.st_uid, info.st_gid) == (uid, gid)
    assert stat.S_IMODE(info.st_mode) == 0o2775
    assert owner.replace(":", " ") in " ".join(done.stdout.split())  # ls -ldn shows it
    inside = made / "model.ckpt"
    inside.write_text("weights")
    os.chmod(inside, 0o600)
    before = inside.stat()
    assert _run_script(str(tmp_path), "teams/tf/run", owner).returncode == 0
    after = inside.stat()
    assert (after.st_uid, after.st_gid, after.st_mode) == (
        before.st_uid,
        before.st_gid,
        before.st_mode,
    )
    assert inside.read_text() == "weights"


def test_the_jobs_script_fails_loudly_when_it_cannot_chown(tmp_path):
    if os.getuid() == 0:
        pytest.skip("root may chown to anyone; the failure is shown by non-root runs")
    done = _run_script(str(tmp_path), "tf", "0:0")
    assert done.returncode != 0
    assert "chown" in done.stderr


def test_its_own_namespace_missing_waits_and_creates_nothing(ctx, env, jobs):
    env.add_node("us-east-1a")
    env.api.delete_object(f"/api/v1/namespaces/{APP}")
    out = ctx.run(ctx.on.install(), _state(env))
    assert out.unit_status == testing.WaitingStatus(
        f"namespace {APP} for the directory Jobs does not exist yet"
    )
    assert jobs.jobs() == [] and _volume(env) is None


def test_the_job_manifest_is_valid_kubernetes():
    import kubernetes_validate
    from claims import Owner
    from storage import claim_spec

    from fakes.kube_admission import KUBERNETES_VERSION

    owner = Owner(APP, "0b9a4e1c-5f0a-4c5e-8a5f-2d7f1f3b7c11")
    spec = claim_spec(
        owner,
        consumer="tensorflow",
        namespace="training",
        capacity="1Ti",
        server="fs-0123456789abcdef0.efs.us-east-1.amazonaws.com",
        path="/",
        file_system_id="fs-0123456789abcdef0",
        directory="tensorflow",
        directory_owner=(1000, 1000),
    )
    job = directories.job_manifest(owner, spec, namespace=APP, image="busybox:1.37.0")
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    assert len(job["metadata"]["name"]) <= 63


def test_a_new_directory_waits_for_the_old_volume_to_go_before_making_the_new_one(
    ctx, env, jobs, monkeypatch
):
    _serve_tensorflow(ctx, env, jobs, monkeypatch)
    old = _volume(env)
    # The StorageObjectInUseProtection admission plugin gives every PV this finalizer; the
    # pv-protection controller lifts it only once no claim is bound to the volume.
    path = f"/api/v1/persistentvolumes/{old['metadata']['name']}"
    env.api.put_object(path, {**old, "metadata": {**old["metadata"], "finalizers": [PV_GUARD]}})
    out = ctx.run(ctx.on.update_status(), _state(env, {**OWN, "directory": "tf2"}))
    assert out.unit_status.name == "waiting", out.unit_status.message
    assert "waiting for the old volume" in out.unit_status.message
    lingering = env.pv(old["metadata"]["name"])
    assert lingering["metadata"].get("deletionTimestamp")  # terminating, source unchanged
    assert lingering["spec"]["nfs"]["path"] == "/tensorflow"
    out = ctx.run(ctx.on.update_status(), out)  # still there: nothing is sent again
    assert out.unit_status.name == "waiting"
    gone = {**lingering, "metadata": {**lingering["metadata"], "finalizers": []}}
    env.api.put_object(path, gone)
    env.api.delete_object(path)  # what the controller's finalizer removal completes
    out = ctx.run(ctx.on.update_status(), out)
    assert _volume(env)["spec"]["nfs"]["path"] == "/tf2"


PV_GUARD = "kubernetes.io/pv-protection"


def test_no_job_runs_before_the_mount_targets_are_available(ctx, env, jobs):
    env.add_node("us-east-1a")
    env.proxy.creating_describes = {"file-system": 0, "mount-target": 1}
    out = ctx.run(ctx.on.install(), _state(env))
    assert jobs.jobs() == []
    assert out.unit_status.name == "waiting"
    out = ctx.run(ctx.on.update_status(), out)
    assert jobs.jobs() == [] and "once EFS is ready" in out.unit_status.message
    ctx.run(ctx.on.update_status(), out)  # the mount targets are available now
    assert len(jobs.jobs()) == 1


def test_the_jobs_script_refuses_a_path_through_a_symbolic_link(tmp_path, me):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "teams").symlink_to(tmp_path / "elsewhere")
    done = _run_script(str(tmp_path), "teams/tf", me())
    assert done.returncode == 1
    assert "refusing: " in done.stderr and "teams is a symbolic link" in done.stderr
    assert not (tmp_path / "elsewhere" / "tf").exists()


def test_consumers_asking_for_overlapping_directories_are_refused_but_the_first(ctx, env, jobs):
    """Issue 29: the first related keeps it (was: the first by name, review N2)."""
    env.add_node("us-east-1a")
    env.add_namespace("research", "notebook")
    relations = [
        env.kube_api_relation(),
        storage_relation("tensorflow", "training", directory="teams"),
        storage_relation("notebook", "research", directory="teams/nb"),
    ]
    out = ctx.run(ctx.on.install(), env.state(relations=relations))
    answers = _answers(out)
    assert "error" not in answers["tensorflow"]  # related first (lower relation id)
    assert answers["notebook"]["error"] == (
        "directory teams/nb overlaps /teams, held by tensorflow; ask for another"
    )
    assert [j["spec"]["template"]["spec"]["containers"][0]["args"][1] for j in jobs.jobs()] == [
        "teams"
    ]
    # the holder stays whatever order the relations come in, and whoever sorts first
    reordered = sorted(out.relations, key=lambda r: -r.id)
    out = ctx.run(ctx.on.update_status(), dataclasses.replace(out, relations=reordered))
    assert "error" in _answers(out)["notebook"]
    assert _holders(out) == '{"tensorflow":"/teams"}'
    assert directories.overlap("/x", "/x/y") and directories.overlap("/", "/z")
    assert not directories.overlap("/x", "/xy") and not directories.overlap("/x/y", "/z")


def test_the_directory_job_passes_pod_security_baseline_and_says_why_not_restricted(
    ctx, env, jobs
):
    """Its namespace can enforce baseline; restricted refuses exactly what the Job needs.

    Root, CHOWN/DAC_OVERRIDE/FOWNER/FSETID and the nfs volume of the file system's root
    (the fake's PodSecurity checks, pod-security-admission policy/ at v1.36).
    """
    env.add_node("us-east-1a")
    ctx.run(ctx.on.install(), _state(env))
    (job,) = jobs.jobs()
    template = job["spec"]["template"]
    assert (
        evaluate_pod(LevelVersion("baseline", (1, 36)), template["metadata"], template["spec"])
        == []
    )
    refused = evaluate_pod(
        LevelVersion("restricted", (1, 36)), template["metadata"], template["spec"]
    )
    assert sorted(reason for reason, _ in refused) == [
        "restricted volume types",
        "runAsNonRoot != true",
        "runAsUser=0",
        "unrestricted capabilities",
    ]


# -- who holds a directory (review N2, N3) --------------------------------------------------
def _answers(state: testing.State) -> dict[str, dict[str, str]]:
    return {
        r.remote_app_name: dict(r.local_app_data)
        for r in state.relations
        if r.endpoint == "shared-storage"
    }


def _holders(state: testing.State) -> str | None:
    peers = next(r for r in state.relations if r.endpoint == "peers")
    return peers.local_app_data.get("directory-holders")


def _with(state: testing.State, *relations: testing.Relation) -> testing.State:
    return dataclasses.replace(state, relations=[*state.relations, *relations])


def test_a_newcomer_asking_for_a_served_directory_is_refused_and_takes_nothing(
    ctx, env, jobs, monkeypatch
):
    """The review's reproduction (N2): `aaa` sorts first and asks for tensorflow's directory.

    Before: tensorflow was refused, its claim deleted and `aaa`'s volume exported
    /tensorflow owned by 2000:2000. Now the first one served keeps it.
    """
    _serve_tensorflow(ctx, env, jobs, monkeypatch)
    out = ctx.run(ctx.on.update_status(), _state(env))
    claim_uid = env.pvc("training", "efs-storage-tensorflow")["metadata"]["uid"]
    volume = _volume(env)
    env.add_namespace("intruder", "aaa")
    aaa = storage_relation("aaa", "intruder", directory="tensorflow", uid="2000", gid="2000")
    for asked in (aaa, storage_relation("aaa", "intruder", directory="tensorflow/checkpoints")):
        out = ctx.run(ctx.on.relation_changed(asked), _with(out, asked))
        answers = _answers(out)
        assert answers["aaa"]["error"].endswith("held by tensorflow; ask for another")
        assert "/tensorflow" in answers["aaa"]["error"]
        assert "error" not in answers["tensorflow"]
        assert env.pvc("training", "efs-storage-tensorflow")["metadata"]["uid"] == claim_uid
        assert _volume(env) == volume  # same path, same owner annotation
        assert env.pvc("intruder", "efs-storage-aaa") is None
        assert jobs.jobs() == []  # nothing chowns tensorflow's directory
        assert out.unit_status == testing.BlockedStatus(
            f"aaa: {answers['aaa']['error']}; fix that consumer"
        )
        out = dataclasses.replace(out, relations=[r for r in out.relations if r.id != asked.id])
    assert _holders(out) == '{"tensorflow":"/tensorflow"}'


def test_a_holder_gone_frees_its_directory_only_once_no_pod_uses_its_claim(
    ctx, env, jobs, monkeypatch
):
    _serve_tensorflow(ctx, env, jobs, monkeypatch)
    env.add_pod("training", "trainer-0", "efs-storage-tensorflow")
    env.add_namespace("research", "notebook")
    later = storage_relation("notebook", "research", directory="tensorflow")
    state = env.state(relations=[env.kube_api_relation(), later])
    out = ctx.run(ctx.on.update_status(), state)  # tensorflow's relation is gone
    assert "held by tensorflow" in _answers(out)["notebook"]["error"]
    env.api.delete_object("/api/v1/namespaces/training/pods/trainer-0")
    out = ctx.run(ctx.on.update_status(), out)  # its claim is released now
    assert env.pvc("training", "efs-storage-tensorflow") is None
    out = ctx.run(ctx.on.update_status(), out)
    assert "error" not in _answers(out)["notebook"]
    assert _holders(out) == '{"notebook":"/tensorflow"}'


def test_holders_are_learned_from_the_volumes_of_a_revision_that_recorded_none(
    ctx, env, jobs, monkeypatch
):
    """After an upgrade the peer data is empty: the volumes say who was served first."""
    _serve_tensorflow(ctx, env, jobs, monkeypatch)
    env.add_namespace("intruder", "aaa")
    aaa = storage_relation("aaa", "intruder", directory="tensorflow")
    out = ctx.run(ctx.on.upgrade_charm(), _with(_state(env), aaa))  # fresh peer data
    assert "held by tensorflow" in _answers(out)["aaa"]["error"]
    assert env.pvc("training", "efs-storage-tensorflow") is not None


def test_a_consumer_asking_for_no_directory_is_refused_the_root_beside_directories(
    ctx, env, jobs, monkeypatch
):
    """Review N3: the root holds every directory; it is refused unless the operator allows it."""
    _serve_tensorflow(ctx, env, jobs, monkeypatch)
    env.add_namespace("research", "rooty")
    rooty = storage_relation("rooty", "research")
    out = ctx.run(ctx.on.relation_changed(rooty), _with(_state(env), rooty))
    assert _answers(out)["rooty"]["error"] == (
        "the file system's root / holds /tensorflow, held by tensorflow; ask for a directory "
        "of your own (or the operator names you in root-consumers)"
    )
    assert env.pvc("research", "efs-storage-rooty") is None
    allowed = dataclasses.replace(out, config={"root-consumers": "backup, rooty"})
    out = ctx.run(ctx.on.config_changed(), allowed)
    assert "error" not in _answers(out)["rooty"]
    assert (
        env.pv(env.pvc("research", "efs-storage-rooty")["spec"]["volumeName"])["spec"]["nfs"][
            "path"
        ]
        == "/"
    )
    assert _holders(out) == '{"tensorflow":"/tensorflow"}'


def test_a_root_consumer_served_first_holds_the_root_against_directories(ctx, env, jobs):
    env.add_node("us-east-1a")
    env.add_namespace("research", "rooty")
    rooty = storage_relation("rooty", "research")
    out = ctx.run(ctx.on.install(), env.state(relations=[env.kube_api_relation(), rooty]))
    assert "error" not in _answers(out)["rooty"]
    tf = storage_relation("tensorflow", "training", **OWN)
    out = ctx.run(ctx.on.relation_changed(tf), _with(out, tf))
    assert _answers(out)["tensorflow"]["error"] == (
        "directory tensorflow overlaps /, held by rooty; ask for another"
    )
    assert jobs.jobs() == []


def test_root_consumers_must_be_application_names(ctx, env):
    out = ctx.run(ctx.on.config_changed(), env.state(config={"root-consumers": "ok, Not_App"}))
    assert out.unit_status.name == "blocked"
    assert "'Not_App' is not an application name" in out.unit_status.message


def test_without_the_peer_relation_nothing_is_served_or_released(ctx, env, jobs, monkeypatch):
    """Who holds what lives in the peer data: without it nothing changes hands."""
    _serve_tensorflow(ctx, env, jobs, monkeypatch)
    before = env.kube_writes()
    state = _state(env)
    state = dataclasses.replace(
        state, relations=[r for r in state.relations if r.endpoint != "peers"]
    )
    out = ctx.run(ctx.on.install(), state)
    assert out.unit_status == testing.WaitingStatus(
        "waiting for the peer relation to record directory holders"
    )
    assert env.kube_writes() == before


# -- whose namespace a claim goes into (review N3) ------------------------------------------
@pytest.mark.parametrize(
    ("namespace", "error"),
    [
        (
            "training",
            "namespace training is granted to tensorflow on kube-api, not to other-team; "
            "ask for the namespace the control plane granted you",
        ),
        (APP, f"namespace {APP} is {APP}'s own; ask for yours"),
        (
            "handmade",
            "namespace handmade was not granted to other-team on kube-api; ask for the "
            "namespace the control plane granted you",
        ),
        *[
            (ns, f"namespace {ns} is reserved; ask for your own namespace")
            for ns in (
                "kube-system",
                "kube-public",
                "kube-node-lease",
                "default",
                "gpu-k8s-system",
                "kueue-system",
                "jobset-system",
                "kube-anything",
            )
        ],
    ],
)
def test_a_claim_goes_only_into_the_namespace_granted_to_its_consumer(
    ctx, env, jobs, monkeypatch, namespace, error
):
    _serve_tensorflow(ctx, env, jobs, monkeypatch)
    env.add_namespace("handmade")
    other = storage_relation("other-team", namespace, directory="other-team")
    out = ctx.run(ctx.on.relation_changed(other), _with(_state(env), other))
    assert _answers(out)["other-team"] == {"error": error}
    assert env.pvc(namespace, "efs-storage-other-team") is None
    assert [
        pv["metadata"]["labels"]["gpu-k8s.io/consumer"]
        for pv in env.api.objects("/api/v1/persistentvolumes/")
    ] == ["tensorflow"]
    assert "error" not in _answers(out)["tensorflow"]
