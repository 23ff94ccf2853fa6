"""The pure parts: admission, manifests, progress parsing, sparkline, ETA, code lookup."""

from __future__ import annotations

import shutil
from pathlib import Path

import datasets
import exports
import kubernetes_validate
import manifests
import pytest
import serving
import training
import yaml
from conftest import node
from job_state import queue_position, queue_reason, queue_state, requeues
from params import (
    RESERVED_PREFIXES,
    RESERVED_SUFFIXES,
    LogsParams,
    ScaleParams,
    StopParams,
    TrainRequest,
    parse_user,
)
from placement import never_fits
from progress import eta_seconds, format_duration, parse_progress, resumed_step, sparkline
from scale_records import seconds

from fakes.crds import validate_jobset
from fakes.kube_admission import KUBERNETES_VERSION
from fakes.kube_enums import enum_errors

CHARM_DIR = Path(__file__).resolve().parents[3] / "charms" / "tensorflow"
CTX = manifests.Context(
    namespace="tf",
    app="tensorflow",
    claim="claim",
    default_image="tensorflow/tensorflow:2.21.0",
    tensorboard_image="tensorflow/tensorflow:2.21.0",
)
CODE = {"tf_launcher.py": "# launcher\n", "tf_trainer.py": "# trainer\n"}


def request(**kw) -> TrainRequest:
    return TrainRequest(**kw)


def pod_of(req: TrainRequest, ctx: manifests.Context, role: str) -> dict:
    """The pod spec of one role of the job's JobSet."""
    return manifests.replicated_job(req, ctx, role)["template"]["spec"]["template"]["spec"]


# -------------------------------------------------------------------- never fits


def test_a_job_that_fits_the_cluster_is_left_to_the_queue():
    # 4 GPUs on two nodes: busy or not, Kueue decides when it runs.
    assert never_fits(request(workers=4, gpus_per_worker=1), [node("a", 2), node("b", 2)]) is None


def test_more_gpus_per_pod_than_any_node_never_fits():
    why = never_fits(request(workers=1, gpus_per_worker=3), [node("a", 2), node("b", 2)])
    assert why is not None and "largest schedulable node has 2" in why


def _time_sliced(n: dict) -> dict:
    """As kubernetes-worker labels a node whose GPUs the device plugin time-slices."""
    n["metadata"]["labels"]["nvidia.com/gpu.sharing-strategy"] = "time-slicing"
    return n


def test_more_than_one_time_sliced_gpu_per_pod_never_fits():
    """Issue 31 leftover: two replicas may be one GPU; the plugin fails such a pod."""
    shared = [_time_sliced(node("a", 8)), _time_sliced(node("b", 8))]
    why = never_fits(request(workers=1, gpus_per_worker=2), shared)
    assert why is not None and "GPUs are time-sliced" in why
    assert "use gpus-per-worker=1" in why
    assert never_fits(request(workers=4, gpus_per_worker=1), shared) is None
    # a node of whole GPUs still holds it
    assert never_fits(request(workers=1, gpus_per_worker=2), [*shared, node("c", 2)]) is None


def test_more_gpus_than_the_cluster_never_fits():
    why = never_fits(request(workers=5, gpus_per_worker=1), [node("a", 2), node("b", 2)])
    assert why is not None and "needs 5 GPUs but the cluster's schedulable nodes have 4" in why


def test_multi_gpu_pods_are_counted_per_node():
    """A pod's GPUs come from one node: 3 nodes of 3 GPUs hold 3 pods of 2, not 4.

    kube-scheduler's NodeResourcesFit places a pod only on a node whose free allocatable
    holds all of its requests; Kueue's quota counts GPUs, not nodes, so a gang of 4 pods
    of 2 GPUs fits a 9-GPU quota, is admitted, its fourth pod is never scheduled, and
    waitForPodsReady evicts and requeues it again and again.
    """
    nodes = [node("a", 3), node("b", 3), node("c", 3)]
    assert never_fits(request(workers=3, gpus_per_worker=2), nodes) is None
    why = never_fits(request(workers=4, gpus_per_worker=2), nodes)
    assert why == (
        "the 4 worker pods need 2 GPUs each on one node, but the schedulable nodes of one "
        "GPU model hold at most 3 such pods (3 NVIDIA-A10G nodes: 3, 3, 3 GPUs): lower "
        "workers or gpus-per-worker, or add GPU nodes"
    )


def test_a_role_must_fit_one_gpu_model():
    """Kueue gives a pod set one GPU flavor (one product): 2 A10G + 2 T4 hold no 4 workers."""
    mixed = [node("a", 2), node("t", 2, product="Tesla-T4")]
    why = never_fits(request(workers=4, gpus_per_worker=1), mixed)
    assert why is not None
    assert "the 4 worker pods need 4 GPUs of one model" in why
    assert "(2 NVIDIA-A10G, 2 Tesla-T4)" in why
    assert never_fits(request(workers=2, gpus_per_worker=1), mixed) is None


def test_a_pod_larger_than_every_node_never_fits():
    """kube-scheduler places a pod only where its requests fit (8 CPUs, 64Gi per node)."""
    why = never_fits(request(workers=1, cpu="12"), [node("a", 2), node("b")])
    assert why == (
        "each worker requests 12 of cpu but the largest schedulable node has 8: lower cpu"
    )
    ps = request(workers=1, strategy="ps", ps=1, ps_memory="100Gi")
    assert "each ps requests 100Gi of memory" in (never_fits(ps, [node("a", 2)]) or "")
    assert "lower ps-memory" in (never_fits(ps, [node("a", 2)]) or "")


def test_a_job_larger_than_all_nodes_together_never_fits():
    assert never_fits(request(workers=3, memory="40Gi"), [node("a", 2), node("b")]) is None
    why = never_fits(request(workers=4, memory="40Gi"), [node("a", 2), node("b")])
    assert why == (
        "the job requests 160.0Gi of memory but the schedulable nodes have 128.0Gi: "
        "lower workers or memory"
    )


def test_gpus_without_a_product_label_hold_no_role():
    """No ResourceFlavor selects a GPU node the worker charm has not labelled (yet)."""
    unlabelled = node("u", 4)
    del unlabelled["metadata"]["labels"]["nvidia.com/gpu.product"]
    why = never_fits(request(workers=1, gpus_per_worker=1), [unlabelled])
    assert why is not None and "(none)" in why


@pytest.mark.parametrize(
    "bad",
    [
        node("n", 8, unschedulable=True),
        node("n", 8, ready=False),
        node("n", 8, taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
    ],
)
def test_unusable_nodes_do_not_count(bad):
    assert never_fits(request(workers=1, gpus_per_worker=1), [bad]) is not None


def test_gpu_taint_is_tolerated_and_prefer_no_schedule_ignored():
    taints = [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "spot", "effect": "PreferNoSchedule"},
    ]
    assert never_fits(request(gpus_per_worker=1, workers=1), [node("g", 1, taints=taints)]) is None


def test_cpu_jobs_need_no_gpus():
    assert never_fits(request(workers=64), []) is None


def test_only_workers_need_gpus_in_ps_jobs():
    r = request(strategy="ps", ps=3, workers=2, gpus_per_worker=1)
    assert r.gpu_demands() == [1, 1]


# -------------------------------------------------------------------- manifests


@pytest.mark.parametrize(
    "req",
    [
        request(workers=3, gpus_per_worker=2, env="A=1"),
        request(job="p", strategy="ps", ps=2, workers=2, gpus_per_worker=1),
        request(job="own", command="python3 /data/t.py", args="--x 1", image="me/tf:1"),
    ],
)
def test_every_manifest_is_valid_kubernetes(req):
    for manifest in [*manifests.manifests(req, CTX, CODE), manifests.purge_job(req.job, CTX)]:
        if manifest["kind"] == "JobSet":
            validate_jobset(manifest)  # JobSet v0.12.0's CRD and its webhook's create checks
        else:
            kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
            # and the enums its schemas lack, as kube-apiserver checks them
            assert enum_errors(manifest["apiVersion"], manifest["kind"], manifest) == []


def test_the_longest_job_name_makes_valid_jobset_names():
    req = request(job="j" * 40, strategy="ps", ps=9, workers=999)
    validate_jobset(manifests.jobset(req, CTX))


def test_the_jobset_schema_check_is_strict():
    js = manifests.jobset(request(), CTX)
    js["spec"]["successPolicy"] = {"operator": "Some"}
    with pytest.raises(Exception, match="Some"):
        validate_jobset(js)


def test_every_manifest_is_labelled():
    req = request(job="p", strategy="ps", ps=1, workers=1)
    for manifest in manifests.manifests(req, CTX, CODE):
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "tensorflow"
        assert labels["gpu-k8s.io/job"] == "p"
        template = manifest.get("spec", {}).get("template")
        if template:
            assert template["metadata"]["labels"]["gpu-k8s.io/job"] == "p"


def test_every_pod_runs_as_the_run_as_user_with_a_writable_home():
    req = request(job="p", strategy="ps", ps=1, workers=1, env="HOME=/data/home")
    pods = [
        r["template"]["spec"]["template"]["spec"]
        for r in manifests.jobset(req, CTX)["spec"]["replicatedJobs"]
    ] + [
        m["spec"]["template"]["spec"]
        for m in [*manifests.manifests(req, CTX, CODE), manifests.purge_job("p", CTX)]
        if "template" in m.get("spec", {})
    ]
    assert len(pods) == len(req.replicas()) + 2  # each role, tensorboard, purge
    for pod in pods:
        assert pod["securityContext"] == {
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        assert pod["automountServiceAccountToken"] is False
        for container in pod["containers"]:
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            }
    worker = pod_of(request(job="w"), CTX, "worker")
    env = {e["name"]: e["value"] for e in worker["containers"][0]["env"]}
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == ("/tmp", "tensorflow", "tensorflow")
    for pod in pods[-2:]:  # tensorboard and purge too
        assert {"name": "HOME", "value": "/tmp"} in pod["containers"][0]["env"]
    own_home = {e["name"]: e["value"] for e in pods[0]["containers"][0]["env"]}
    assert own_home["HOME"] == "/data/home"  # the job's env wins
    # gid 0 is no privilege Pod Security restricted forbids (no check reads runAsGroup).
    group_root = manifests.Context("tf", "tensorflow", "c", "tf:1", "tb:1", user=(1000, 0))
    pod = pod_of(request(job="r"), group_root, "worker")
    assert pod["securityContext"]["runAsGroup"] == 0


@pytest.mark.parametrize("text", ["0:0", "0:1000"])
def test_parse_user_refuses_root_which_restricted_forbids(text):
    with pytest.raises(ValueError, match=r"uid 0 \(root\) is refused.*restricted"):
        parse_user(text)
    assert parse_user("1000:0") == (1000, 0)


@pytest.mark.parametrize("text", ["1000", "a:b", "-1:0", ":5", f"{2**32}:1"])
def test_parse_user_refuses_what_is_not_uid_gid(text):
    with pytest.raises(ValueError):
        parse_user(text)


def test_only_roles_with_gpus_get_the_gpu_image_and_shared_memory():
    req = request(job="p", strategy="ps", ps=1, workers=2, gpus_per_worker=2)
    specs = {r: pod_of(req, CTX, r) for r in req.replicas()}
    images = {r: s["containers"][0]["image"] for r, s in specs.items()}
    assert images == {
        "chief": "tensorflow/tensorflow:2.21.0",
        "ps": "tensorflow/tensorflow:2.21.0",
        "worker": "tensorflow/tensorflow:2.21.0-gpu",
    }
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    assert shm in specs["worker"]["volumes"] and shm not in specs["chief"]["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in specs["worker"]["containers"][0][
        "volumeMounts"
    ]
    one = pod_of(request(gpus_per_worker=1), CTX, "worker")
    assert "dshm" not in {v["name"] for v in one["volumes"]}  # one GPU: no NCCL peers


def test_the_environment_says_gpus_per_role_and_ps_jobs_fail_fast():
    req = request(job="p", strategy="ps", ps=1, workers=1, gpus_per_worker=1)
    env = {
        r: {e["name"]: e["value"] for e in pod_of(req, CTX, r)["containers"][0]["env"]}
        for r in req.replicas()
    }
    assert (env["worker"]["GPU_K8S_GPUS"], env["chief"]["GPU_K8S_GPUS"]) == ("1", "0")
    assert {e["GRPC_FAIL_FAST"] for e in env.values()} == {"use_caller"}
    mwms = pod_of(request(), CTX, "worker")["containers"][0]
    assert "GRPC_FAIL_FAST" not in {e["name"] for e in mwms["env"]}


def test_gpu_image_variant_only_for_tensorflow_images():
    assert CTX.image_for(request(gpus_per_worker=1)) == "tensorflow/tensorflow:2.21.0-gpu"
    assert CTX.image_for(request()) == "tensorflow/tensorflow:2.21.0"
    other = manifests.Context("tf", "tensorflow", "c", "me/custom:1", "tb:1")
    assert other.image_for(request(gpus_per_worker=1)) == "me/custom:1"


def test_purge_refuses_a_path_like_name():
    with pytest.raises(ValueError, match="not a valid job name"):
        manifests.purge_job("../..", CTX)


def test_request_round_trips_through_the_annotation():
    req = request(job="x", workers=3, env="A='b c'", steps=7)
    assert TrainRequest.from_json(req.to_json()) == req
    with pytest.raises(ValueError, match="not JSON"):
        TrainRequest.from_json("{")


def test_reserved_job_names_are_the_names_the_charm_derives():
    """Params' reserved forms are exactly what the modules name their objects (review N6)."""
    js = manifests.jobset(request(job="resnet"), CTX)
    made = {
        "-serving": serving.name_of("resnet"),
        "-tensorboard": manifests.tensorboard(request(job="resnet"), CTX)[1]["metadata"]["name"],
        "-code": manifests.code_configmap(request(job="resnet"), CTX, {})["metadata"]["name"],
        "-purge": manifests.purge_job("resnet", CTX)["metadata"]["name"],
        "export-": exports.job_name("resnet"),
        "fetch-": exports.fetch_name("resnet"),
        "upload-": exports.upload_name("resnet"),
        "import-": datasets.job_name("resnet"),
    }
    assert js["spec"]["network"]["subdomain"] == "resnet"  # JobSet's Service: the job's name
    for form, name in made.items():
        assert name == ("resnet" + form if form.startswith("-") else form + "resnet")
    assert set(made) == set(RESERVED_SUFFIXES) | set(RESERVED_PREFIXES)


def test_a_stored_request_with_a_name_reserved_since_still_reads():
    with pytest.raises(ValueError, match="is reserved"):
        request(job="resnet-serving")
    assert TrainRequest.from_json('{"job": "resnet-serving"}').job == "resnet-serving"


def test_param_models_match_charmcraft_defaults():
    actions = yaml.safe_load((CHARM_DIR / "charmcraft.yaml").read_text())["actions"]
    for action, model in [
        ("train", TrainRequest),
        ("scale", ScaleParams),
        ("logs", LogsParams),
        ("stop", StopParams),
        ("import-dataset", datasets.ImportParams),
        ("export", exports.ExportParams),
        ("fetch-model", exports.FetchParams),
        ("serve", serving.ServeParams),
    ]:
        spec = actions[action]
        assert spec["additionalProperties"] is False
        params = spec.get("params", {})
        assert {p.replace("-", "_") for p in params} == set(model.model_fields), action
        for name, p in params.items():
            field = model.model_fields[name.replace("-", "_")]
            if "default" in p:
                assert field.default == p["default"], (action, name)
            else:
                assert field.is_required(), (action, name)


# -------------------------------------------------------------------- progress


def test_parse_progress_takes_the_last_valid_report():
    log = "\n".join(
        [
            'GPU_K8S_PROGRESS {"step": 1}',
            "step 2/10 loss 1.0",
            'GPU_K8S_PROGRESS {"step": 3}',
            "GPU_K8S_PROGRESS {truncated",
            "done",
        ]
    )
    assert parse_progress(log) == {"step": 3}
    assert parse_progress("nothing here") is None


def test_resumed_step_from_progress_or_announcement():
    assert resumed_step('GPU_K8S_PROGRESS {"resumed_from": 40}') == 40
    assert resumed_step("resumed from checkpoint at step 300 (target 1000)") == 300
    assert resumed_step("starting from step 0 (target 10)") == 0
    assert resumed_step("still importing tensorflow") is None


def test_sparkline():
    assert sparkline([3, 2, 1, 0]) == "█▆▃▁"
    assert sparkline([1, 1]) == "▁▁"
    assert sparkline([]) == ""
    assert sparkline([float("nan"), 1.0, None]) == "▁"
    long = sparkline(range(100), width=20)
    assert len(long) == 20 and long[0] == "▁" and long[-1] == "█"


def test_eta():
    progress = {"step": 100, "steps": 1100, "examples_per_sec": 320.0, "global_batch_size": 64}
    assert eta_seconds(progress) == pytest.approx(200)
    assert format_duration(200) == "3m 20s"
    assert format_duration(7300) == "2h 01m"
    assert eta_seconds({**progress, "state": "finished"}) == 0
    assert eta_seconds({**progress, "examples_per_sec": 0}) is None
    assert eta_seconds({"step": 1}) is None
    assert format_duration(None) == "unknown"


# -------------------------------------------------------------------- code lookup


def test_actions_dir_in_the_repository():
    found = training.actions_dir(CHARM_DIR / "src" / "training.py")
    assert found == CHARM_DIR.parents[1] / "actions"
    assert set(training.read_code(found)) == {"tf_launcher.py", "tf_trainer.py"}


def test_actions_dir_in_a_packed_charm(tmp_path):
    src = tmp_path / "charm" / "src"
    (src / "actions").mkdir(parents=True)
    for name in ("tf_launcher.py", "tf_trainer.py"):
        shutil.copy(CHARM_DIR.parents[1] / "actions" / name, src / "actions" / name)
    assert training.actions_dir(src / "training.py") == src / "actions"


def test_actions_dir_missing(tmp_path):
    src = tmp_path / "a" / "b" / "src"
    src.mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="tf_launcher.py"):
        training.actions_dir(src / "training.py")


def test_assembled_charm_imports_alone_and_finds_its_actions(tmp_path):
    import subprocess
    import sys

    import pack

    built = pack.assemble("tensorflow", tmp_path)
    probe = (
        "import sys; import charm, training; "
        "assert 'kubernetes' not in sys.modules, 'kubernetes imported at charm import'; "
        "print(training.actions_dir())"
    )
    env = {"PYTHONPATH": f"{built / 'src'}:{built / 'lib'}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(built / "src" / "actions")


def test_the_exit_codes_the_pod_failure_policy_names_are_the_programs_own():
    import tf_launcher
    from literals import EXIT_NO_GPU, EXIT_SETUP, EXIT_STOPPED

    assert tf_launcher.EXIT_NO_GPU == EXIT_NO_GPU
    assert tf_launcher.EXIT_SETUP == EXIT_SETUP
    assert tf_launcher.EXIT_STOPPED == EXIT_STOPPED
    trainer = (Path(__file__).resolve().parents[3] / "actions" / "tf_trainer.py").read_text()
    assert f"os._exit({EXIT_STOPPED})" in trainer


def test_queue_state_and_reason_from_the_workload_conditions():
    fresh = {
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": ""}
            ]
        }
    }
    assert queue_state(fresh) == ("Queued", "waiting for quota")
    assert queue_reason(fresh) == ""  # not evaluated yet: train keeps looking
    pending = {
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "message": "insufficient quota"}
            ]
        }
    }
    assert queue_reason(pending) == "insufficient quota"
    admitted = {"status": {"conditions": [{"type": "Admitted", "status": "True"}]}}
    assert queue_state(admitted) == ("Admitted", "")
    preempted = {
        "status": {
            "conditions": [
                {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "by high"},
                {"type": "QuotaReserved", "status": "False", "message": "waiting"},
            ]
        }
    }
    assert queue_state(preempted) == ("Preempted", "Preempted: by high")
    assert queue_state(None)[0] == "Unknown"


def _workload(name: str, *conditions: tuple, priority: int = 0, created: str = "", **status):
    return {
        "metadata": {"name": name, "creationTimestamp": created or "2026-11-24T06:00:00Z"},
        "spec": {"priority": priority},
        "status": {
            "conditions": [
                {
                    "type": c[0],
                    "status": c[1],
                    "reason": c[2],
                    "message": c[3],
                    **(c[4:] or [{}])[0],
                }
                for c in conditions
            ],
            **status,
        },
    }


def test_queue_state_follows_kueues_condition_sequences():
    # Kueue marks Evicted while the reservation still stands and clears it only once the
    # job stopped (jobframework reconciler): the job is being preempted, not admitted
    stopping = _workload(
        "w",
        ("QuotaReserved", "True", "QuotaReserved", ""),
        ("Admitted", "True", "Admitted", ""),
        ("Evicted", "True", "Preempted", "for a higher priority"),
    )
    assert queue_state(stopping) == ("Preempted", "Preempted: for a higher priority")
    # pods not all ready in time: requeued, not preempted
    timed_out = _workload(
        "w",
        ("QuotaReserved", "False", "Pending", ""),
        ("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/w"),
    )
    state, why = queue_state(timed_out)
    assert state == "Requeued"
    assert "pods-ready-timeout" in why and "Exceeded the PodsReady timeout ns/w" in why
    stopped = _workload(
        "w", ("Evicted", "True", "ClusterQueueStopped", "The ClusterQueue is stopped")
    )
    assert queue_state(stopped) == (
        "Evicted",
        "ClusterQueueStopped: The ClusterQueue is stopped",
    )
    # readmitted: Kueue turns Evicted False
    again = _workload(
        "w",
        ("Admitted", "True", "Admitted", ""),
        ("Evicted", "False", "QuotaReserved", ""),
    )
    assert queue_state(again) == ("Admitted", "")
    # Finished keeps QuotaReserved and Admitted True (workload/finish/finish.go)
    done = _workload(
        "w", ("Admitted", "True", "Admitted", ""), ("Finished", "True", "Succeeded", "")
    )
    assert queue_state(done) == ("Finished", "Succeeded")


def test_queue_position_orders_as_kueue_does():
    pending = ("QuotaReserved", "False", "Pending", "insufficient quota")
    mine = _workload("mine", pending, created="2026-11-24T06:05:00Z")
    older = _workload("older", pending, created="2026-11-24T06:01:00Z")
    urgent = _workload("urgent", pending, priority=10000, created="2026-11-24T06:09:00Z")
    done = _workload(
        "done", ("Admitted", "True", "Admitted", ""), ("Finished", "True", "Succeeded", "")
    )
    # requeued after a PodsReadyTimeout: queues from its eviction (timestamp: Eviction)
    evicted_late = _workload(
        "late",
        pending,
        (
            "Evicted",
            "True",
            "PodsReadyTimeout",
            "",
            {"lastTransitionTime": "2026-11-24T06:07:00Z"},
        ),
        created="2026-11-24T05:00:00Z",
    )
    # waiting out its requeue backoff: not a candidate yet
    backing_off = _workload(
        "backoff",
        pending,
        created="2026-11-24T05:00:00Z",
        requeueState={"count": 2, "requeueAt": "2026-11-24T06:30:00Z"},
    )
    everyone = [mine, older, urgent, done, evicted_late, backing_off]
    now = "2026-11-24T06:10:00Z"
    assert queue_position(mine, everyone, now) == 3  # behind urgent and older
    assert queue_position(evicted_late, everyone, now) == 4
    assert queue_position(mine, everyone, "2026-11-24T07:00:00Z") == 4  # backoff over


def test_requeues_say_how_often_and_until_when_kueue_holds_the_job():
    """status.requeueState as Kueue v0.19.2 writes it (fakes/batch.py K15), read at `now`."""
    now = seconds("2026-11-24T06:10:00Z")
    assert now is not None
    assert requeues(_workload("w"), now) == ""  # never requeued
    waiting = _workload("w", requeueState={"count": 3, "requeueAt": "2026-11-24T06:14:00Z"})
    assert requeues(waiting, now) == (
        "3 (its pods were not all ready in time); Kueue holds it out of the queue until "
        "2026-11-24T06:14:00Z (4m 00s from now), its backoff doubling with each requeue"
    )
    # Kueue clears requeueAt as it queues the job again: until then, a moment
    assert requeues(waiting, now + 240) == (
        "3 (its pods were not all ready in time); Kueue's backoff ended at "
        "2026-11-24T06:14:00Z: it is queued again any moment"
    )
    assert requeues(_workload("w", requeueState={"count": 3}), now) == (
        "3 (its pods were not all ready in time)"
    )
