"""Access points per consumer, the move onto them and the file system policy (issue 29 item 5).

moto keeps what CreateAccessPoint is sent (PosixUser, RootDirectory with CreationInfo,
tags); the fake API server holds the volumes and claims. The EFS CSI driver's node plugin
is "installed" as kubelet shows it: the Node annotation `csi.volume.kubernetes.io/nodeid`
names `efs.csi.aws.com` (kubernetes pkg/volume/csi/nodeinfomanager).
"""

from __future__ import annotations

import dataclasses
import json

from confinement import RootServed, root_note
from efs_env import Env, installed, relation_of, status_texts
from ops import testing

PV = "efs-storage-training-tensorflow-"
ROOT_CONSUMER = {"root-consumers": "tensorflow"}


def _driver_on_every_node(env: Env) -> None:
    for node in env.api.objects("/api/v1/nodes/"):
        name = node["metadata"]["name"]
        node["metadata"].setdefault("annotations", {})["csi.volume.kubernetes.io/nodeid"] = (
            json.dumps({"efs.csi.aws.com": name})
        )
        env.api.put_object(f"/api/v1/nodes/{name}", node)


def _volume(env: Env) -> dict:
    (pv,) = [
        v
        for v in env.api.objects("/api/v1/persistentvolumes/")
        if v["metadata"]["name"].startswith(PV)
    ]
    return pv


def _access_points(env: Env, fs_id: str) -> list[dict]:
    return env.efs.describe_access_points(FileSystemId=fs_id)["AccessPoints"]


def test_an_existing_consumer_moves_onto_its_access_point_once_no_pod_holds_the_claim(ctx, env):
    out = installed(ctx, env)
    fs_id = env.file_systems()[0]["FileSystemId"]
    assert _volume(env)["spec"]["nfs"]["path"] == "/"
    env.add_pod("training", "trainer-0", "efs-storage-tensorflow")
    _driver_on_every_node(env)

    out = ctx.run(ctx.on.update_status(), out)
    # the access point exists (the root it held, as root: its data is there) ...
    (ap,) = _access_points(env, fs_id)
    assert ap["RootDirectory"]["Path"] == "/"
    assert ap["PosixUser"] == {"Uid": 0, "Gid": 0}
    tags = {t["Key"]: t["Value"] for t in ap["Tags"]}
    assert tags["gpu-k8s:consumer"] == "tensorflow"
    # ... but the claim a pod holds keeps its NFS volume, and the status says so
    assert "nfs" in _volume(env)["spec"]
    assert out.unit_status.name == "active"
    assert (
        f"not confined yet: training/efs-storage-tensorflow moves onto access point "
        f"{ap['AccessPointId']} once pods trainer-0 stop" in out.unit_status.message
    )
    assert env.proxy.count("PutFileSystemPolicy") == 0

    # the consumer's access point, published on kube-api: the control plane admits it
    assert json.loads(relation_of(out, "kube-api").local_app_data["storage-consumers"]) == {
        "tensorflow": ap["AccessPointId"]
    }
    out = env.control_plane_answers(out)
    env.api.delete_object("/api/v1/namespaces/training/pods/trainer-0")
    out = ctx.run(ctx.on.update_status(), out)  # the old pair goes
    out = ctx.run(ctx.on.update_status(), out)  # the new pair, through the access point
    pv = _volume(env)
    assert pv["spec"]["csi"] == {
        "driver": "efs.csi.aws.com",
        "volumeHandle": f"{fs_id}::{ap['AccessPointId']}",
    }
    assert pv["spec"]["mountOptions"] == ["tls"]
    assert "nfs" not in pv["spec"]
    assert pv["metadata"]["annotations"]["gpu-k8s.io/efs-path"] == "/"
    env.bind("training", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.update_status(), out)

    policy = json.loads(env.efs.describe_file_system_policy(FileSystemId=fs_id)["Policy"])
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert by_sid["EncryptionInTransitOnly"]["Condition"] == {
        "Bool": {"aws:SecureTransport": "false"}
    }
    root = by_sid["RootOnlyThroughTheCharmsAccessPoints"]
    assert root["Effect"] == "Deny"
    assert root["Action"] == "elasticfilesystem:ClientRootAccess"
    assert root["Condition"] == {
        "StringNotEquals": {"elasticfilesystem:AccessPointArn": [ap["AccessPointArn"]]}
    }
    # its access point on the root acts as root on every directory: the status names it
    # (updated: review29c item 6 found it said nothing)
    assert out.unit_status == testing.ActiveStatus(
        f"EFS {fs_id}: 2/2 mount targets available, 1 claims bound; the file system's root "
        "/ is served to tensorflow (held it before access points) as uid 0"
    )

    env.proxy.clear_counts()
    again = ctx.run(ctx.on.update_status(), out)
    assert env.mutating_aws_calls() == []
    assert again.unit_status == out.unit_status
    assert len(_access_points(env, fs_id)) == 1

    # the move docs/explanation/security.md gives a holder from before access points: named
    # in root-consumers once, it holds nothing; taken out again, it is served a directory
    # named after it (its files stay at the root: moving them is the operator's)
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config=ROOT_CONSUMER))
    assert "tensorflow (root-consumers) as uid 0" in out.unit_status.message
    out = dataclasses.replace(out, config={"root-consumers": ""})
    out = env.control_plane_answers(ctx.run(ctx.on.config_changed(), out))
    out = ctx.run(ctx.on.relation_changed(relation_of(out, "kube-api")), out)
    by_path = {p["RootDirectory"]["Path"]: p for p in _access_points(env, fs_id)}
    assert _volume(env)["spec"]["csi"]["volumeHandle"] == (
        f"{fs_id}::{by_path['/tensorflow']['AccessPointId']}"
    )


def test_consumers_without_a_directory_get_one_of_their_own_never_the_root(ctx, env):
    env.add_node("us-east-1a")
    _driver_on_every_node(env)
    env.add_namespace("serving", "tf-serving")
    state = env.state(consumers={"tensorflow": "training", "tf-serving": "serving"})
    out = ctx.run(ctx.on.install(), state)
    # their access points are not admitted yet: nothing is written, each waits (updated
    # for gpu-k8s-efs-within-consumers), until the control plane answers
    assert not env.api.objects("/api/v1/persistentvolumes/")
    assert "waiting for the control plane to admit tensorflow's claim" in str(
        status_texts(ctx, out)
    )
    answered = env.control_plane_answers(out)
    out = ctx.run(ctx.on.relation_changed(relation_of(answered, "kube-api")), answered)
    fs_id = env.file_systems()[0]["FileSystemId"]
    by_consumer = {
        {t["Key"]: t["Value"] for t in ap["Tags"]}["gpu-k8s:consumer"]: ap
        for ap in _access_points(env, fs_id)
    }
    for consumer in ("tensorflow", "tf-serving"):
        assert by_consumer[consumer]["RootDirectory"] == {
            "Path": f"/{consumer}",
            "CreationInfo": {"OwnerUid": 0, "OwnerGid": 0, "Permissions": "2775"},
        }
    assert _volume(env)["spec"]["csi"]["volumeHandle"] == (
        f"{fs_id}::{by_consumer['tensorflow']['AccessPointId']}"
    )
    assert not [r for r in env.api.requests if "/jobs" in r.path]  # no directory Job
    assert out.unit_status.name == "waiting", out.unit_status.message
    env.bind("training", "efs-storage-tensorflow")
    env.bind("serving", "efs-storage-tf-serving")
    out = ctx.run(ctx.on.update_status(), out)
    # nobody is served the root: the status names nobody
    assert out.unit_status == testing.ActiveStatus(
        f"EFS {fs_id}: 1/1 mount targets available, 2 claims bound"
    )


def test_a_root_consumer_is_named_in_the_status_with_its_uid(ctx, env):
    env.add_node("us-east-1a")
    _driver_on_every_node(env)
    state = env.state(config=ROOT_CONSUMER, consumers={"tensorflow": "training"})
    out = env.control_plane_answers(ctx.run(ctx.on.install(), state))
    out = ctx.run(ctx.on.relation_changed(relation_of(out, "kube-api")), out)
    fs_id = env.file_systems()[0]["FileSystemId"]
    (ap,) = _access_points(env, fs_id)
    assert ap["RootDirectory"]["Path"] == "/"
    assert ap["PosixUser"] == {"Uid": 0, "Gid": 0}
    env.bind("training", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus(
        f"EFS {fs_id}: 1/1 mount targets available, 1 claims bound; the file system's root "
        "/ is served to tensorflow (root-consumers) as uid 0"
    )


def test_the_status_names_three_root_consumers_and_counts_the_others():
    served = [RootServed(f"team-{n}", "/", "root-consumers", 0) for n in range(5)]
    assert root_note(served) == (
        "; the file system's root / is served to team-0 (root-consumers) as uid 0, "
        "team-1 (root-consumers) as uid 0, team-2 (root-consumers) as uid 0 and 2 more"
    )
    assert root_note([]) == ""


def test_the_access_point_limit_refuses_that_consumer_only(ctx, env):
    installed(ctx, env)
    _driver_on_every_node(env)
    # EFS API reference, CreateAccessPoint errors: AccessPointLimitExceeded, HTTP 403
    env.proxy.fail(
        "CreateAccessPoint",
        "AccessPointLimitExceeded",
        "You have reached the maximum number of access points (10000) for your file system",
        status=403,
    )
    out = ctx.run(ctx.on.update_status(), env.state(consumers={"tensorflow": "training"}))
    assert out.unit_status.name == "blocked"
    assert "tensorflow: no access point: elasticfilesystem:CreateAccessPoint failed: " in (
        out.unit_status.message
    )
    assert "AccessPointLimitExceeded" in out.unit_status.message
    assert "nfs" in _volume(env)["spec"]  # its claim is left as it was
