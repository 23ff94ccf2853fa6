"""The file system, mount targets and each consumer's claim, through every event."""

from __future__ import annotations

import dataclasses
import json

import efs_model
import pytest
from efs_env import APP, KUBE_TOKEN, Env, efs_grant, relation_of, status_texts, storage_relation
from efs_model import TAG_APP, TAG_MODEL, creation_token
from network import NFS_PORT
from ops import testing

from fakes.aws import REGION
from fakes.kube_grants import admit_served, service_account_path

MOUNT_OPTIONS = [
    "nfsvers=4.1",
    "rsize=1048576",
    "wsize=1048576",
    "hard",
    "timeo=600",
    "retrans=2",
    "noresvport",
]


def answer(state: testing.State, app: str) -> dict[str, str]:
    for rel in state.relations:
        if rel.endpoint == "shared-storage" and rel.remote_app_name == app:
            return dict(rel.local_app_data)
    raise AssertionError(f"no relation to {app}")


def pv_of(env: Env, claim_name: str) -> dict:
    claim = env.pvc("training", claim_name)
    assert claim is not None
    pv = env.pv(claim["spec"]["volumeName"])
    assert pv is not None
    return pv


def test_kube_api_not_related_blocks_without_touching_aws(ctx, env):
    out = ctx.run(ctx.on.install(), env.state(relations=[]))
    assert out.unit_status == testing.BlockedStatus(
        "not related to kube-api: integrate with kubernetes-control-plane"
    )
    assert env.proxy.calls == []


def test_kube_api_not_answered_yet_waits(ctx, env):
    rel = testing.Relation("kube-api", remote_app_name="kubernetes-control-plane")
    out = ctx.run(ctx.on.relation_changed(rel), env.state(relations=[rel]))
    assert out.unit_status.name == "waiting"
    assert env.proxy.calls == []
    # and the request asks for exactly what the charm needs, cluster-wide
    sent = dict(out.get_relation(rel.id).local_app_data)
    assert sent["namespace"] == APP
    assert "persistentvolumeclaims" in sent["cluster-rules"]
    assert "secrets" not in sent["cluster-rules"]


def test_kube_api_refused_blocks(ctx, env):
    rel = env.kube_api_relation(error="namespace efs-storage is reserved")
    del_keys = {"kubeconfig-secret-id", "endpoint", "namespace", "service-account"}
    rel = testing.Relation(
        "kube-api",
        remote_app_name="kubernetes-control-plane",
        remote_app_data={k: v for k, v in rel.remote_app_data.items() if k not in del_keys},
    )
    out = ctx.run(ctx.on.relation_changed(rel), env.state(relations=[rel]))
    assert out.unit_status.name == "blocked"
    assert "refused" in out.unit_status.message


def test_first_pass_creates_everything_and_waits_for_the_claim(ctx, env, scan):
    a = env.add_node("us-east-1a")
    env.add_node("us-east-1b")
    scan.start()
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    (fs,) = env.file_systems()
    fs_id = fs["FileSystemId"]
    assert fs["Encrypted"] is True
    assert fs["ThroughputMode"] == "elastic"
    assert fs["CreationToken"] == creation_token(env.model.uuid, APP)
    tags = {t["Key"]: t["Value"] for t in fs["Tags"]}
    assert tags[TAG_MODEL] == env.model.uuid and tags[TAG_APP] == APP
    mts = env.mount_targets(fs_id)
    assert sorted(m["AvailabilityZoneName"] for m in mts) == ["us-east-1a", "us-east-1b"]
    (sg_id,) = {g for m in mts for g in env.efs.describe_mount_target_security_groups(
        MountTargetId=m["MountTargetId"])["SecurityGroups"]}  # fmt: skip
    (group,) = env.ec2.describe_security_groups(GroupIds=[sg_id])["SecurityGroups"]
    (perm,) = group["IpPermissions"]
    assert (perm["IpProtocol"], perm["FromPort"], perm["ToPort"]) == ("tcp", NFS_PORT, NFS_PORT)
    assert [p["GroupId"] for p in perm["UserIdGroupPairs"]] == [env.net.node_sg]
    assert perm.get("IpRanges", []) == []
    assert a.zone == "us-east-1a"

    data = answer(out, "tensorflow")
    assert data == {
        "claim-name": "efs-storage-tensorflow",
        "capacity": "1Ti",
        "file-system-id": fs_id,
        "namespace": "training",
        "ready": "false",
    }
    claim = env.pvc("training", "efs-storage-tensorflow")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == ""
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Ti"
    pv = pv_of(env, "efs-storage-tensorflow")
    assert pv["spec"]["nfs"] == {"server": f"{fs_id}.efs.{REGION}.amazonaws.com", "path": "/"}
    assert pv["spec"]["mountOptions"] == MOUNT_OPTIONS
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["claimRef"]["namespace"] == "training"
    assert pv["spec"]["claimRef"]["name"] == "efs-storage-tensorflow"
    assert out.unit_status == testing.WaitingStatus(
        f"EFS {fs_id}: 2/2 mount targets available; waiting for claims "
        "training/efs-storage-tensorflow"
    )
    scan.check(*status_texts(ctx, out))


@pytest.mark.parametrize("provider_id", [False, True], ids=["kubeadm", "provider-id"])
def test_nodes_are_placed_whether_kubeadm_or_cloud_provider_registered_them(ctx, env, provider_id):
    a = env.add_node("us-east-1a", provider_id=provider_id)
    b = env.add_node("us-east-1b", provider_id=provider_id)
    names = [n["metadata"]["name"] for n in env.api.objects("/api/v1/nodes/")]
    assert all(n.startswith("ip-" if provider_id else "juju-") for n in names)
    out = ctx.run(ctx.on.install(), env.state())
    fs_id = env.file_systems()[0]["FileSystemId"]
    assert out.unit_status == testing.ActiveStatus(
        f"EFS {fs_id}: 2/2 mount targets available, 0 claims bound"
    )
    subnets = {m["AvailabilityZoneName"]: m["SubnetId"] for m in env.mount_targets(fs_id)}
    assert subnets == {a.zone: a.subnet_id, b.zone: b.subnet_id}


def test_nfs_is_allowed_from_the_model_group_only_even_with_one_node(ctx, env):
    env.add_node("us-east-1a")  # Juju puts it in juju-<uuid> and juju-<uuid>-0
    ctx.run(ctx.on.install(), env.state())
    name = efs_model.security_group_name(env.model.uuid, APP)
    (group,) = env.ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [name]}]
    )["SecurityGroups"]
    (perm,) = group["IpPermissions"]
    assert [p["GroupId"] for p in perm["UserIdGroupPairs"]] == [env.net.node_sg]


def test_active_only_when_mount_targets_available_and_claims_bound(ctx, env):
    env.add_node("us-east-1a")
    env.add_node("us-east-1b")
    env.add_node("us-east-1c")
    env.proxy.creating_describes = {"file-system": 0, "mount-target": 1}
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    fs_id = env.file_systems()[0]["FileSystemId"]
    assert out.unit_status == testing.WaitingStatus(f"EFS {fs_id}: 0/3 mount targets available")
    assert answer(out, "tensorflow")["ready"] == "false"
    env.bind("training", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.WaitingStatus(f"EFS {fs_id}: 0/3 mount targets available")
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus(
        f"EFS {fs_id}: 3/3 mount targets available, 1 claims bound; consumers are not "
        "confined (NFS as root, no TLS): the EFS CSI driver efs.csi.aws.com is not on every node"
    )
    assert answer(out, "tensorflow")["ready"] == "true"
    assert env.proxy.count("CreateMountTarget") == 3


def test_file_system_still_creating_waits_with_its_state(ctx, env):
    env.add_node("us-east-1a")
    env.proxy.creating_describes = {"file-system": 1, "mount-target": 0}
    out = ctx.run(ctx.on.install(), env.state())
    fs_id = env.file_systems()[0]["FileSystemId"]
    assert out.unit_status == testing.WaitingStatus(f"EFS {fs_id}: file system creating")
    assert env.proxy.count("CreateMountTarget") == 0
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.WaitingStatus(f"EFS {fs_id}: file system creating")
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active"
    assert env.proxy.count("CreateMountTarget") == 1
    assert env.proxy.count("CreateFileSystem") == 1


def test_no_nodes_yet_waits(ctx, env):
    out = ctx.run(ctx.on.install(), env.state())
    assert out.unit_status.name == "waiting"
    assert "waiting for cluster nodes" in out.unit_status.message


def test_a_node_in_a_new_zone_adds_a_mount_target(ctx, env):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state())
    assert "1/1" in out.unit_status.message
    env.add_node("us-east-1c")
    env.proxy.clear_counts()
    out = ctx.run(ctx.on.update_status(), out)
    assert env.proxy.counts(mutating=True) == {"CreateMountTarget": 1}
    assert "2/2" in out.unit_status.message


def test_adopted_file_system_is_used_and_not_created(ctx, env):
    env.add_node("us-east-1a")
    fs_id = env.efs.create_file_system(CreationToken="made-by-hand", Encrypted=True)[
        "FileSystemId"
    ]
    out = ctx.run(
        ctx.on.config_changed(),
        env.state(config={"file-system-id": fs_id}, consumers={"tensorflow": "training"}),
    )
    assert env.proxy.count("CreateFileSystem") == 0
    assert [f["FileSystemId"] for f in env.file_systems()] == [fs_id]
    assert len(env.mount_targets(fs_id)) == 1
    assert answer(out, "tensorflow")["file-system-id"] == fs_id


def test_an_adopted_mount_target_gets_the_charms_group_before_ready(ctx, env):
    env.add_node("us-east-1a")
    env.add_node("us-east-1b")
    team = env.ec2.create_security_group(
        GroupName="team-efs", Description="team", VpcId=env.net.vpc_id
    )["GroupId"]
    fs_id = env.efs.create_file_system(CreationToken="team")["FileSystemId"]
    mt_id = env.efs.create_mount_target(
        FileSystemId=fs_id, SubnetId=env.net.subnets["us-east-1a"][0], SecurityGroups=[team]
    )["MountTargetId"]
    out = ctx.run(ctx.on.install(), env.state(config={"file-system-id": fs_id}))
    ours = _group_id(env)
    groups = env.efs.describe_mount_target_security_groups(MountTargetId=mt_id)
    assert groups["SecurityGroups"] == [team, ours]
    assert out.unit_status == testing.ActiveStatus(
        f"EFS {fs_id}: 2/2 mount targets available, 0 claims bound"
    )


def test_an_adopted_mount_target_with_no_room_blocks_with_the_command_to_run(ctx, env):
    env.add_node("us-east-1a")
    team = [
        env.ec2.create_security_group(
            GroupName=f"team-{n}", Description="team", VpcId=env.net.vpc_id
        )["GroupId"]
        for n in range(5)
    ]
    fs_id = env.efs.create_file_system(CreationToken="team")["FileSystemId"]
    subnet = env.net.subnets["us-east-1a"][0]
    mt_id = env.efs.create_mount_target(FileSystemId=fs_id, SubnetId=subnet, SecurityGroups=team)[
        "MountTargetId"
    ]
    out = ctx.run(
        ctx.on.install(),
        env.state(config={"file-system-id": fs_id}, consumers={"tensorflow": "training"}),
    )
    ours = _group_id(env)
    assert out.unit_status == testing.BlockedStatus(
        f"EFS {fs_id}: 0/1 mount targets available; mount target {mt_id} in us-east-1a "
        f"({subnet}) cannot take security group {ours} (SecurityGroupLimitExceeded: The number "
        "of security groups exceeds the limit of 5.), so nodes there cannot reach NFS; "
        "replace one of its groups with it: aws efs modify-mount-target-security-groups "
        f"--region {REGION} --mount-target-id {mt_id} --security-groups "
        f"{' '.join([*team[:4], ours])}; fix it in AWS or move the nodes of us-east-1a, "
        "the charm retries on every event"
    )
    assert answer(out, "tensorflow")["ready"] == "false"


def _group_id(env: Env) -> str:
    name = efs_model.security_group_name(env.model.uuid, APP)
    (group,) = env.ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [name]}]
    )["SecurityGroups"]
    return group["GroupId"]


def test_adopting_a_missing_file_system_blocks_and_creates_nothing(ctx, env):
    env.add_node("us-east-1a")
    out = ctx.run(
        ctx.on.config_changed(), env.state(config={"file-system-id": "fs-0123456789abcdef0"})
    )
    assert out.unit_status.name == "blocked"
    assert "does not exist" in out.unit_status.message
    assert env.mutating_aws_calls() == []
    assert env.kube_writes() == []


def test_each_consumer_gets_its_own_claim_in_its_namespace(ctx, env):
    env.add_node("us-east-1a")
    env.add_namespace("research", "notebook")
    # Two consumers served the file system's root see each other's files: since issue 29
    # only the operator allows that (root-consumers); the second one is refused otherwise.
    state = env.state(
        config={"root-consumers": "tensorflow,notebook"},
        consumers={"tensorflow": "training", "notebook": "research"},
    )
    out = ctx.run(ctx.on.install(), state)
    tf, nb = answer(out, "tensorflow"), answer(out, "notebook")
    assert tf["claim-name"] == "efs-storage-tensorflow" and tf["namespace"] == "training"
    assert nb["claim-name"] == "efs-storage-notebook" and nb["namespace"] == "research"
    assert env.pvc("research", "efs-storage-notebook") is not None
    pvs = env.api.objects("/api/v1/persistentvolumes/")
    assert len(pvs) == 2 and len({p["metadata"]["name"] for p in pvs}) == 2
    env.bind("training", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.update_status(), out)
    assert answer(out, "tensorflow")["ready"] == "true"
    assert answer(out, "notebook")["ready"] == "false"
    assert out.unit_status.name == "waiting"
    assert "research/efs-storage-notebook" in out.unit_status.message


@pytest.mark.parametrize(
    "namespace,fragment",
    [("Not_A_Label", "DNS-1123"), ("kube-system", "reserved")],
)
def test_bad_consumer_request_is_refused_on_the_relation(ctx, env, namespace, fragment):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": namespace}))
    data = answer(out, "tensorflow")
    assert set(data) == {"error"} and fragment in data["error"]
    assert out.unit_status.name == "blocked"
    assert "tensorflow" in out.unit_status.message
    assert env.api.objects("/api/v1/persistentvolumes/") == []


def test_consumer_namespace_missing_waits_and_answers_not_ready(ctx, env):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "later"}))
    assert answer(out, "tensorflow")["ready"] == "false"
    assert out.unit_status == testing.WaitingStatus("namespace later does not exist yet")
    env.add_namespace("later", "tensorflow")
    out = ctx.run(ctx.on.update_status(), out)
    assert env.pvc("later", "efs-storage-tensorflow") is not None


def test_consumer_without_a_request_yet_gets_no_answer(ctx, env):
    env.add_node("us-east-1a")
    rel = storage_relation("tensorflow", None)
    out = ctx.run(
        ctx.on.relation_created(rel), env.state(relations=[env.kube_api_relation(), rel])
    )
    assert dict(out.get_relation(rel.id).local_app_data) == {}


def test_a_claim_not_made_by_us_is_never_taken_over(ctx, env):
    env.add_node("us-east-1a")
    env.api.put_object(
        "/api/v1/namespaces/training/persistentvolumeclaims/efs-storage-tensorflow",
        {
            "spec": {
                "volumeName": "somebody-elses",
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "5Gi"}},
            }
        },
    )
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    data = answer(out, "tensorflow")
    assert "not created by efs-storage" in data["error"]
    assert out.unit_status.name == "blocked"
    claim = env.pvc("training", "efs-storage-tensorflow")
    assert claim["spec"]["volumeName"] == "somebody-elses"


def test_departed_consumer_claim_is_deleted_unless_pods_use_it(ctx, env):
    env.add_node("us-east-1a")
    rel = storage_relation("tensorflow", "training")
    state = env.state(relations=[env.kube_api_relation(), rel])
    out = ctx.run(ctx.on.install(), state)
    pv_name = pv_of(env, "efs-storage-tensorflow")["metadata"]["name"]
    env.add_pod("training", "mnist-worker-0", "efs-storage-tensorflow")
    env.add_pod("training", "done-pod", "efs-storage-tensorflow", phase="Succeeded")
    out = ctx.run(ctx.on.relation_broken(out.get_relation(rel.id)), out)
    assert out.unit_status.name == "blocked"
    assert "training/efs-storage-tensorflow" in out.unit_status.message
    assert "mnist-worker-0" in out.unit_status.message
    assert "done-pod" not in out.unit_status.message
    assert env.pvc("training", "efs-storage-tensorflow") is not None
    env.api.delete_object("/api/v1/namespaces/training/pods/mnist-worker-0")
    gone = testing.State(
        leader=True,
        relations=[r for r in out.relations if r.endpoint in ("kube-api", "peers")],
        secrets=out.secrets,
        model=env.model,
        stored_states=out.stored_states,
    )
    out = ctx.run(ctx.on.update_status(), gone)
    assert env.pvc("training", "efs-storage-tensorflow") is None
    assert env.pv(pv_name) is None
    assert out.unit_status.name == "active"
    assert len(env.file_systems()) == 1  # the data stays


def test_consumer_moving_namespace_gets_a_new_claim_and_the_old_one_goes(ctx, env):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    # the control plane grants tensorflow research instead (one namespace per consumer: it
    # admits efs-storage's writes for tensorflow there only since; updated for that policy)
    env.add_namespace("research", "tensorflow")
    (rel,) = [r for r in out.relations if r.endpoint == "shared-storage"]
    moved = testing.Relation(
        "shared-storage",
        id=rel.id,
        remote_app_name="tensorflow",
        remote_app_data={"namespace": "research"},
        local_app_data=dict(rel.local_app_data),
    )
    state = testing.State(
        leader=True,
        relations=[*[r for r in out.relations if r.endpoint in ("kube-api", "peers")], moved],
        secrets=out.secrets,
        model=env.model,
    )
    out = ctx.run(ctx.on.relation_changed(moved), state)
    assert answer(out, "tensorflow")["namespace"] == "research"
    assert env.pvc("research", "efs-storage-tensorflow") is not None
    # efs-storage may list pods only where it serves (review44a G8): the old claim cannot
    # be proved unused, so it stays, said so, until its pods can be read there again
    assert env.pvc("training", "efs-storage-tensorflow") is not None
    assert any("may be in use" in text for text in status_texts(ctx, out))
    env.admit({"tensorflow": ""})  # (research) and, as a test's shortcut, training again
    admit_served(env.api, (APP, APP), {"research": "", "training": ""})
    out = ctx.run(ctx.on.update_status(), out)
    assert env.pvc("training", "efs-storage-tensorflow") is None
    assert len(env.api.objects("/api/v1/persistentvolumes/")) == 1


def test_non_leader_stands_by_without_calls(ctx, env):
    out = ctx.run(ctx.on.update_status(), env.state(leader=False))
    assert out.unit_status == testing.ActiveStatus("standby: the leader manages EFS")
    assert env.proxy.calls == [] and env.api.requests == []


def test_aws_failing_after_retries_waits(ctx, env):
    env.add_node("us-east-1a")
    env.proxy.inject("DescribeFileSystems", "500", times=10)
    out = ctx.run(ctx.on.update_status(), env.state())
    assert out.unit_status.name == "waiting"
    assert "AWS unavailable" in out.unit_status.message


def test_a_zone_aws_refuses_blocks_with_code_and_message_and_the_others_are_served(ctx, env):
    for zone in ("us-east-1a", "us-east-1b", "us-east-1c"):
        env.add_node(zone)
    bad = env.net.subnets["us-east-1c"][0]
    message = "The requested Availability Zone us-east-1c is not supported for EFS."
    env.proxy.fail("CreateMountTarget", "UnsupportedAvailabilityZone", message, times=10, when=bad)
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    fs_id = env.file_systems()[0]["FileSystemId"]
    assert out.unit_status == testing.BlockedStatus(
        f"EFS {fs_id}: 2/3 mount targets available; no mount target in us-east-1c ({bad}): "
        f"UnsupportedAvailabilityZone: {message}; fix it in AWS or move the nodes of "
        "us-east-1c, the charm retries on every event"
    )
    zones = sorted(m["AvailabilityZoneName"] for m in env.mount_targets(fs_id))
    assert zones == ["us-east-1a", "us-east-1b"]
    assert env.pvc("training", "efs-storage-tensorflow") is not None  # the claim is served
    assert answer(out, "tensorflow")["ready"] == "false"  # nodes in us-east-1c cannot mount


def test_a_zone_aws_says_to_retry_waits(ctx, env):
    env.add_node("us-east-1a")
    env.add_node("us-east-1b")
    bad = env.net.subnets["us-east-1b"][0]
    env.proxy.fail("CreateMountTarget", "DependencyTimeout", "timed out", status=504, times=2)
    out = ctx.run(ctx.on.install(), env.state())
    assert out.unit_status.name == "waiting", out.unit_status.message
    assert f"us-east-1a ({env.net.subnets['us-east-1a'][0]}): DependencyTimeout" in (
        out.unit_status.message
    )
    assert bad not in out.unit_status.message
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active", out.unit_status.message


@pytest.mark.parametrize(
    "action,code,status,retry",
    [
        ("CreateFileSystem", "FileSystemLimitExceeded", 403, False),
        ("CreateFileSystem", "InsufficientThroughputCapacity", 503, True),
        ("CreateSecurityGroup", "SecurityGroupLimitExceeded", 400, False),
    ],
)
def test_any_other_aws_error_gives_a_status_naming_it_never_a_hook_error(
    ctx, env, action, code, status, retry
):
    env.add_node("us-east-1a")
    env.proxy.fail(action, code, f"AWS says {code}", status=status, times=10)
    out = ctx.run(ctx.on.install(), env.state())
    assert out.unit_status.name == ("waiting" if retry else "blocked")
    assert f"{action} failed: {code}: AWS says {code}" in out.unit_status.message


def test_a_denied_action_blocks_naming_it_and_the_readme_policy(ctx, env):
    env.add_node("us-east-1a")
    env.proxy.deny("CreateFileSystem", denied="elasticfilesystem:TagResource")
    out = ctx.run(ctx.on.install(), env.state())
    assert out.unit_status == testing.BlockedStatus(
        "AWS denied elasticfilesystem:TagResource (calling elasticfilesystem:CreateFileSystem); "
        "allow it in the IAM policy of the credentials (docs/how-to/aws-credentials.md)"
    )
    assert env.file_systems() == []


def test_vpc_without_dns_hostnames_blocks_with_the_command_that_fixes_it(ctx, env):
    env.add_node("us-east-1a")
    vpc = env.net.vpc_id
    env.ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": False})
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    fs_id = env.file_systems()[0]["FileSystemId"]
    assert out.unit_status == testing.BlockedStatus(
        f"VPC {vpc} has DNS hostnames off, so nodes cannot resolve "
        f"{fs_id}.efs.{REGION}.amazonaws.com; run: aws ec2 modify-vpc-attribute --region "
        f"{REGION} --vpc-id {vpc} --enable-dns-hostnames '{{\"Value\":true}}'"
    )
    assert answer(out, "tensorflow")["ready"] == "false"
    env.ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "waiting"  # now only the claim binding is awaited
    assert "waiting for claims" in out.unit_status.message


def test_a_policy_without_describe_vpc_attribute_still_serves_the_claims(ctx, env, caplog):
    env.add_node("us-east-1a")
    env.proxy.deny("DescribeVpcAttribute", times=100)  # written before this check existed

    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))

    assert out.unit_status.name != "blocked"
    assert env.pvc("training", "efs-storage-tensorflow") is not None
    assert "cannot check VPC" in caplog.text


def test_kubernetes_failing_after_retries_waits(ctx, env):
    env.add_node("us-east-1a")
    env.api.inject(status=503, times=10)
    out = ctx.run(ctx.on.update_status(), env.state())
    assert out.unit_status.name == "waiting"
    assert "Kubernetes API unavailable" in out.unit_status.message
    assert env.proxy.calls == []


def test_kubernetes_refusing_our_token_blocks(ctx, env):
    env.api.delete_object(service_account_path(efs_grant()))  # the control plane revoked it
    out = ctx.run(ctx.on.update_status(), env.state())
    assert out.unit_status.name == "blocked"
    assert "kube-api grant" in out.unit_status.message


def _events(ctx: testing.Context, env: Env, state: testing.State) -> dict:
    kube = next(r for r in state.relations if r.endpoint == "kube-api")
    storage = next(r for r in state.relations if r.endpoint == "shared-storage")
    return {
        "install": ctx.on.install(),
        "config-changed": ctx.on.config_changed(),
        "update-status": ctx.on.update_status(),
        "upgrade-charm": ctx.on.upgrade_charm(),
        "leader-elected": ctx.on.leader_elected(),
        "secret-changed": ctx.on.secret_changed(env.kubeconfig_secret),
        "kube-api-relation-changed": ctx.on.relation_changed(kube),
        "shared-storage-relation-changed": ctx.on.relation_changed(storage),
        "kube-api-relation-departed": ctx.on.relation_departed(kube, remote_unit=0),
        "shared-storage-relation-departed": ctx.on.relation_departed(storage, remote_unit=0),
        "stop": ctx.on.stop(),
    }


@pytest.mark.parametrize(
    "event",
    [
        "install",
        "config-changed",
        "update-status",
        "upgrade-charm",
        "leader-elected",
        "secret-changed",
        "kube-api-relation-changed",
        "shared-storage-relation-changed",
        "kube-api-relation-departed",
        "shared-storage-relation-departed",
        "stop",
    ],
)
def test_every_event_twice_leaves_the_same_state_and_creates_nothing_twice(ctx, env, event):
    env.add_node("us-east-1a")
    env.add_node("us-east-1b")
    state = env.state(consumers={"tensorflow": "training"})
    out1 = ctx.run(_events(ctx, env, state)[event], state)
    env.bind("training", "efs-storage-tensorflow")
    objects = env.api.objects("/api/v1/persistentvolume")
    mutating = env.mutating_aws_calls()
    writes = env.kube_writes()
    out2 = ctx.run(_events(ctx, env, out1)[event], out1)
    assert env.mutating_aws_calls() == mutating  # no AWS create/authorize the second time
    assert env.kube_writes() == writes  # no Kubernetes write the second time
    assert env.api.objects("/api/v1/persistentvolume") == objects
    assert len(env.file_systems()) == 1
    assert answer(out2, "tensorflow") == {**answer(out1, "tensorflow"), "ready": "true"}
    assert out2.unit_status.name == "active", out2.unit_status.message


def _switch_to_adopted(ctx, env):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    env.bind("training", "efs-storage-tensorflow")
    other = env.efs.create_file_system(CreationToken="by-hand")["FileSystemId"]
    return dataclasses.replace(out, config={"file-system-id": other}), other


def test_switching_file_system_moves_the_claim_when_no_pod_uses_it(ctx, env):
    state, other = _switch_to_adopted(ctx, env)
    out = ctx.run(ctx.on.config_changed(), state)
    pv = pv_of(env, "efs-storage-tensorflow")
    assert pv["spec"]["nfs"]["server"] == f"{other}.efs.{REGION}.amazonaws.com"
    assert env.pvc("training", "efs-storage-tensorflow")["status"]["phase"] == "Pending"
    assert answer(out, "tensorflow")["file-system-id"] == other
    assert answer(out, "tensorflow")["ready"] == "false"
    assert len(env.file_systems()) == 2  # the old one is kept


def test_switching_file_system_is_refused_while_pods_use_the_claim(ctx, env):
    state, other = _switch_to_adopted(ctx, env)
    old_server = pv_of(env, "efs-storage-tensorflow")["spec"]["nfs"]["server"]
    env.add_pod("training", "trainer", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.config_changed(), state)
    assert out.unit_status.name == "blocked"
    assert "used by pods trainer" in out.unit_status.message
    assert other in out.unit_status.message
    assert pv_of(env, "efs-storage-tensorflow")["spec"]["nfs"]["server"] == old_server
    assert "error" in answer(out, "tensorflow")


def test_a_claim_deleted_by_hand_is_recreated_and_its_released_volume_reused(ctx, env):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    pv = pv_of(env, "efs-storage-tensorflow")
    name = pv["metadata"]["name"]
    env.api.delete_object(
        "/api/v1/namespaces/training/persistentvolumeclaims/efs-storage-tensorflow"
    )
    pv["spec"]["claimRef"]["uid"] = "old-uid"
    pv["status"] = {"phase": "Released"}
    env.api.put_object(f"/api/v1/persistentvolumes/{name}", pv)
    out = ctx.run(ctx.on.update_status(), out)
    assert env.pvc("training", "efs-storage-tensorflow") is not None
    assert "uid" not in env.pv(name)["spec"]["claimRef"]


def test_losing_kube_api_blocks_and_deletes_nothing(ctx, env):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    kube = next(r for r in out.relations if r.endpoint == "kube-api")
    env.proxy.clear_counts()
    writes = env.kube_writes()
    out = ctx.run(ctx.on.relation_broken(kube), out)
    assert out.unit_status == testing.BlockedStatus(
        "not related to kube-api: integrate with kubernetes-control-plane"
    )
    assert env.proxy.calls == []
    assert env.kube_writes() == writes
    assert env.pvc("training", "efs-storage-tensorflow") is not None


def test_a_lost_create_response_is_retried_without_a_second_file_system(ctx, env):
    env.add_node("us-east-1a")
    env.proxy.inject("CreateFileSystem", "reset-after")
    env.proxy.inject("CreateMountTarget", "throttle")
    out = ctx.run(ctx.on.install(), env.state())
    assert out.unit_status.name == "active", out.unit_status.message
    assert len(env.file_systems()) == 1
    assert len(env.mount_targets(env.file_systems()[0]["FileSystemId"])) == 1


def test_long_application_names_still_give_valid_kubernetes_names(ctx, env):
    env.add_node("us-east-1a")
    consumer = "a-very-long-consumer-application-name-for-training-jobs"
    env.add_namespace("long-team", consumer)  # its own (training is tensorflow's)
    out = ctx.run(ctx.on.install(), env.state(consumers={consumer: "long-team"}))
    claim = answer(out, consumer)["claim-name"]
    assert len(claim) <= 63 and claim.startswith("efs-storage-a-very-long")
    volume = env.pvc("long-team", claim)["spec"]["volumeName"]
    assert len(volume) <= 63 and env.pv(volume) is not None


def test_volume_left_behind_by_a_deleted_namespace_is_cleaned_up(ctx, env):
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    volume = pv_of(env, "efs-storage-tensorflow")["metadata"]["name"]
    env.api.delete_object(
        "/api/v1/namespaces/training/persistentvolumeclaims/efs-storage-tensorflow"
    )
    rel = next(r for r in out.relations if r.endpoint == "shared-storage")
    out = ctx.run(ctx.on.relation_broken(rel), out)
    assert env.pv(volume) is None
    assert out.unit_status.name == "active", out.unit_status.message


def test_the_rights_asked_for_pass_the_control_planes_policy_as_a_named_provisioner_only():
    from literals import CLUSTER_RULES, NAMESPACED_RULES

    from charms.gpu_k8s.v0.kube_api import RequirerAppData, check_policy

    request = RequirerAppData.model_validate(
        {"namespace": APP, "rules": NAMESPACED_RULES, "cluster-rules": CLUSTER_RULES}
    )
    assert check_policy(request, provisioner=True) is None
    # issue 29: PersistentVolume writes only for an application the operator names in
    # kube-api-storage-provisioners (kubernetes-control-plane)
    assert check_policy(request) is not None
    # (issue 29: the Namespace read comes first in CLUSTER_RULES and is refused first)
    without_read = request.model_copy(
        update={
            "cluster_rules": [r for r in request.cluster_rules if r.resources != ["namespaces"]]
        }
    )
    assert "persistentvolume creation" in (check_policy(without_read) or "")
    rules = request.cluster_rules
    granted = {(r, v) for rule in rules for r in rule.resources for v in rule.verbs}
    assert ("persistentvolumeclaims", "create") in granted
    # no pods cluster-wide (review44a G8): the control plane lets it list them in the
    # namespaces it serves (test_pod_reads.py)
    assert not [(r, v) for r, v in granted if r.startswith("pods")]


def test_a_namespace_is_read_by_name_only_and_never_written_with_the_grant(env):
    """The Namespace read of review N3: `get` only, as a named provisioner only.

    Real requests with efs-storage's token against the fake API server (RBAC as
    kube-apiserver): it reads a namespace's labels, and may neither list namespaces nor
    relabel one (which would let it pass any namespace off as a consumer's).
    """
    from charms.gpu_k8s.v0.kube_api import RequirerAppData, check_policy
    from charms.gpu_k8s.v0.kubeclient import Kube, KubeError

    kube = Kube.from_kubeconfig(env.api.kubeconfig(token=KUBE_TOKEN), retries=1, backoff=0.01)
    labels = kube.get("v1", "Namespace", "training")["metadata"]["labels"]
    assert labels["gpu-k8s.io/consumer"] == "tensorflow"
    for refused in (
        lambda: kube.list("v1", "Namespace"),
        lambda: kube.patch(
            "v1", "Namespace", "training", {"metadata": {"labels": {"gpu-k8s.io/consumer": "x"}}}
        ),
    ):
        with pytest.raises(KubeError) as e:
            refused()
        assert e.value.status == 403
    for verbs in (["list"], ["patch"]):
        ask = {"api-groups": [""], "resources": ["namespaces"], "verbs": verbs}
        request = RequirerAppData.model_validate({"namespace": APP, "cluster-rules": [ask]})
        assert "namespace" in (check_policy(request, provisioner=True) or "")
    read = {"api-groups": [""], "resources": ["namespaces"], "verbs": ["get"]}
    request = RequirerAppData.model_validate({"namespace": APP, "cluster-rules": [read]})
    assert check_policy(request, provisioner=True) is None
    assert "namespace modification" in (check_policy(request) or "")


def test_a_new_consumer_waits_for_the_control_plane_to_admit_it(ctx, env):
    """Its writes are refused until the policy names it (gpu-k8s-efs-within-consumers).

    The charm publishes the consumer on kube-api (storage-consumers), waits with a status
    saying so, and writes its pair on the control plane's answer (relation-changed).
    """
    env.add_node("us-east-1a")
    env.admit({})  # the control plane has not read this application's consumers yet
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    published = relation_of(out, "kube-api").local_app_data["storage-consumers"]
    assert json.loads(published) == {"tensorflow": ""}
    assert env.api.objects("/api/v1/persistentvolumes/") == []
    assert env.pvc("training", "efs-storage-tensorflow") is None
    waiting = [t for t in status_texts(ctx, out) if "admit tensorflow's claim" in t]
    assert waiting, status_texts(ctx, out)
    assert answer(out, "tensorflow")["ready"] == "false"
    answered = env.control_plane_answers(out)
    out = ctx.run(ctx.on.relation_changed(relation_of(answered, "kube-api")), answered)
    assert env.pvc("training", "efs-storage-tensorflow") is not None
