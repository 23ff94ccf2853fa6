"""Functional tests of the efs-storage workload module: real boto3 against moto on loopback.

One moto server and one proxy serve the whole module; every test gets its own VPC and its
own model uuid, so tests never see each other's objects, and the proxy's faults and
counters are reset before each test.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from charm_modules import load

from fakes.aws import (
    ACCESS_KEY_ID,
    REGION,
    SECRET_ACCESS_KEY,
    ZONES,
    Instance,
    LocalAws,
    Network,
    build_network,
    local_aws,
    node_object,
    run_nodes,
)

aws_api = load("efs-storage", "aws")  # its module name is taken by a fixture here
efs_model = load("efs-storage", "efs_model")
network = load("efs-storage", "network")
efs = load("efs-storage", "efs")
NFS_PORT = network.NFS_PORT
TAG_APP = efs_model.TAG_APP
TAG_MODEL = efs_model.TAG_MODEL
AwsAuthError = aws_api.AwsAuthError
AwsConfigError = aws_api.AwsConfigError
AwsTransientError = aws_api.AwsTransientError
Credentials = aws_api.Credentials
Desired = efs_model.Desired
Efs = efs.Efs
Node = efs_model.Node
Observed = efs_model.Observed
creation_token = efs_model.creation_token
nodes_from_kubernetes = efs_model.nodes_from_kubernetes
parse_provider_id = efs_model.parse_provider_id
security_group_name = efs_model.security_group_name

APP = "efs-storage"


@pytest.fixture(scope="module")
def aws() -> Iterator[LocalAws]:
    with local_aws() as local:
        yield local


@pytest.fixture(scope="module")
def managers() -> dict[Any, Efs]:
    """boto3 clients are slow to build (service models); share them between tests."""
    return {}


@pytest.fixture()
def world(aws: LocalAws, managers: dict[Any, Efs]) -> World:
    # A full reset: every test's VPC has the same CIDRs, so moto hands out the same private
    # IPs, and kubeadm-shaped nodes (found by IP) would match an earlier test's instances.
    aws.reset()
    return World(aws, managers)


class World:
    """One test's VPC, nodes and charm identity, plus handles on moto and the proxy."""

    def __init__(self, aws: LocalAws, managers: dict[Any, Efs]):
        self.aws = aws
        self._managers = managers
        self.proxy = aws.proxy
        self.ec2 = aws.client("ec2")
        self.efs = aws.client("efs")
        self.model_uuid = str(uuid.uuid4())
        self.net: Network = build_network(self.ec2, model_uuid=self.model_uuid)
        self.nodes: list[Instance] = []
        # How the cluster registers its Nodes: kubeadm as in this bundle (Juju hostname,
        # no providerID, an InternalIP), or with the AWS cloud provider (providerID).
        self.provider_ids = False

    def add_nodes(self, zone: str, subnet_index: int = 0, count: int = 1) -> list[Instance]:
        added = []
        for _ in range(count):
            subnet = self.net.subnets[zone][subnet_index]
            added.append(self.net.run_machine(self.ec2, subnet, len(self.nodes)))
            self.nodes.append(added[-1])
        return added

    def manager(self, credentials: Credentials | None = None, max_attempts: int = 4) -> Efs:
        creds = credentials or Credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY)
        key = (creds.secrets(), max_attempts)
        if key not in self._managers:
            self._managers[key] = Efs.connect(
                creds, REGION, endpoint_url=self.aws.url, max_attempts=max_attempts
            )
        return self._managers[key]

    def node_objects(self) -> list[dict[str, Any]]:
        """The nodes as the Kubernetes API lists them (``v1/Node`` items)."""
        items = []
        for machine, inst in enumerate(self.nodes):
            name, obj = node_object(inst, machine, self.model_uuid, self.provider_ids)
            items.append({"metadata": {"name": name}, **obj})
        return items

    def desired(self, **kwargs: Any) -> Desired:
        nodes = nodes_from_kubernetes(self.node_objects())
        return Desired(model_uuid=self.model_uuid, app=APP, nodes=nodes, **kwargs)

    def file_systems(self) -> list[dict[str, Any]]:
        token = creation_token(self.model_uuid, APP)
        return self.efs.describe_file_systems(CreationToken=token)["FileSystems"]

    def mount_targets(self, fs_id: str) -> list[dict[str, Any]]:
        return self.efs.describe_mount_targets(FileSystemId=fs_id)["MountTargets"]

    def our_groups(self) -> list[dict[str, Any]]:
        name = security_group_name(self.model_uuid, APP)
        return self.ec2.describe_security_groups(
            Filters=[{"Name": "group-name", "Values": [name]}]
        )["SecurityGroups"]

    def until_ready(self, manager: Efs, desired: Desired, passes: int = 6) -> list[Observed]:
        seen = []
        for _ in range(passes):
            seen.append(manager.reconcile(desired))
            if seen[-1].ready:
                return seen
        raise AssertionError(f"not ready after {passes} passes: {seen[-1].progress}")


def six_node_world(world: World) -> World:
    """Two nodes per zone, one in each of the zone's two subnets."""
    for zone in ZONES:
        world.add_nodes(zone, 0)
        world.add_nodes(zone, 1)
    return world


# -- pure helpers ---------------------------------------------------------------------------
def test_creation_token_is_deterministic_short_and_unique_per_model_and_app():
    model = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    token = creation_token(model, "efs-storage")
    assert token == creation_token(model, "efs-storage")
    assert len(token) <= 64
    long_app = "a-very-long-application-name-that-goes-on-and-on-" * 2
    assert len(creation_token(model, long_app)) <= 64
    assert token != creation_token(model, "efs-storage-2")
    assert token != creation_token("2b4e28ba-2fa1-11d2-883f-0016d3cca427", "efs-storage")
    with pytest.raises(AwsConfigError):
        creation_token("", "efs-storage")


@pytest.mark.parametrize(
    "provider_id,expected",
    [
        ("aws:///us-east-1a/i-0abc1234def567890", ("us-east-1a", "i-0abc1234def567890")),
        ("aws:////i-0abc1234", (None, "i-0abc1234")),
        ("gce://project/zone/name", None),
        ("aws:///us-east-1a/not-an-instance", None),
        ("", None),
    ],
)
def test_parse_provider_id(provider_id, expected):
    assert parse_provider_id(provider_id) == expected


def test_nodes_from_kubernetes_node_objects():
    items = [
        {
            "metadata": {"name": "ip-10-0-1-5.ec2.internal"},
            "spec": {"providerID": "aws:///us-east-1a/i-0abc1234def567890"},
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.1.5"},
                    {"type": "Hostname", "address": "ip-10-0-1-5"},
                ]
            },
        },
        {"metadata": {"name": "gpu-0"}, "spec": {}, "status": {}},
    ]
    assert nodes_from_kubernetes(items) == (
        Node("gpu-0"),
        Node(
            "ip-10-0-1-5.ec2.internal",
            "aws:///us-east-1a/i-0abc1234def567890",
            ("10.0.1.5",),
        ),
    )


def test_credentials_repr_hides_every_value():
    creds = Credentials("AKIAREPRTEST", "s3cr3t/value", "session-token-value")
    for text in (repr(creds), str(creds), f"{creds}", repr([creds])):
        assert "AKIAREPRTEST" not in text
        assert "s3cr3t" not in text
        assert "session-token-value" not in text


def test_credentials_from_secret_and_cloud_credential():
    creds = Credentials.from_secret(
        {"access-key-id": "AKIAX", "secret-access-key": "sek", "session-token": "tok"}
    )
    assert (creds.access_key_id, creds.secret_access_key, creds.session_token) == (
        "AKIAX",
        "sek",
        "tok",
    )
    cloud = Credentials.from_cloud_credential({"access-key": "AKIAY", "secret-key": "sek2"})
    assert (cloud.access_key_id, cloud.session_token) == ("AKIAY", None)


def test_credentials_missing_key_names_the_key_not_the_values():
    with pytest.raises(AwsConfigError, match="secret-access-key") as err:
        Credentials.from_secret({"access-key-id": "AKIAVISIBLE"})
    assert "AKIAVISIBLE" not in str(err.value)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"performance_mode": "maxIO"}, "elastic needs performance-mode generalPurpose"),
        ({"throughput_mode": "fast"}, "throughput-mode must be one of"),
        ({"throughput_mode": "provisioned"}, "provisioned throughput"),
        ({"file_system_id": "my-efs"}, "not an EFS id"),
    ],
)
def test_bad_desired_state_fails_before_any_aws_call(world, kwargs, match):
    world.add_nodes("us-east-1a")
    with pytest.raises(AwsConfigError, match=match):
        world.manager().reconcile(world.desired(**kwargs))
    assert world.proxy.calls == []


def test_nodes_from_kubernetes_kubeadm_shaped_node():
    # kubelet without a cloud provider: Juju hostname, no providerID, InternalIP + Hostname.
    item = {
        "metadata": {"name": "juju-1a2b3c-3"},
        "spec": {"podCIDR": "10.244.3.0/24"},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "172.31.20.7"},
                {"type": "Hostname", "address": "juju-1a2b3c-3"},
            ]
        },
    }
    assert nodes_from_kubernetes([item]) == (Node("juju-1a2b3c-3", None, ("172.31.20.7",)),)


SHAPES = pytest.mark.parametrize("provider_ids", [False, True], ids=["kubeadm", "provider-id"])


# -- create path ----------------------------------------------------------------------------
@SHAPES
def test_two_subnets_in_each_of_three_zones_gives_exactly_three_mount_targets(world, provider_ids):
    world.provider_ids = provider_ids
    six_node_world(world)
    nodes = world.desired().nodes
    assert all(bool(n.provider_id) == provider_ids for n in nodes)
    assert all(n.name.startswith("ip-" if provider_ids else "juju-") for n in nodes)
    observed = world.until_ready(world.manager(), world.desired())[-1]

    [fs] = world.file_systems()
    assert observed.file_system_id == fs["FileSystemId"]
    assert observed.owned and observed.ready
    assert observed.progress == f"EFS {fs['FileSystemId']}: 3/3 mount targets available"
    assert observed.dns_name == f"{fs['FileSystemId']}.efs.{REGION}.amazonaws.com"
    assert fs["Encrypted"] is True
    assert fs["ThroughputMode"] == "elastic"
    assert fs["PerformanceMode"] == "generalPurpose"
    tags = {t["Key"]: t["Value"] for t in fs["Tags"]}
    assert tags[TAG_MODEL] == world.model_uuid and tags[TAG_APP] == APP

    mts = world.mount_targets(fs["FileSystemId"])
    assert sorted(mt["AvailabilityZoneName"] for mt in mts) == list(ZONES)
    node_subnets = {n.subnet_id for n in world.nodes}
    assert {mt["SubnetId"] for mt in mts} <= node_subnets
    [group] = world.our_groups()
    assert group["VpcId"] == world.net.vpc_id
    for mt in mts:
        sgs = world.efs.describe_mount_target_security_groups(MountTargetId=mt["MountTargetId"])
        assert sgs["SecurityGroups"] == [group["GroupId"]]


def test_security_group_allows_nfs_only_from_the_nodes_common_group(world):
    # Like Juju: every machine has the model's group plus one of its own.
    own = [
        world.ec2.create_security_group(
            GroupName=f"machine-{i}", Description="machine", VpcId=world.net.vpc_id
        )["GroupId"]
        for i in range(2)
    ]
    for i, zone in enumerate(ZONES[:2]):
        world.nodes += run_nodes(
            world.ec2, world.net.subnets[zone][0], [world.net.node_sg, own[i]]
        )
    world.manager().reconcile(world.desired())

    [group] = world.our_groups()
    assert group["IpPermissions"] == [
        {
            "IpProtocol": "tcp",
            "FromPort": NFS_PORT,
            "ToPort": NFS_PORT,
            "UserIdGroupPairs": [
                {
                    "Description": "cluster nodes (NFS)",
                    "UserId": group["OwnerId"],
                    "GroupId": world.net.node_sg,
                }
            ],
            "IpRanges": [],
            "Ipv6Ranges": [],
            "PrefixListIds": [],
        }
    ]


def _nfs_sources(group: dict[str, Any]) -> list[str]:
    return sorted(
        pair["GroupId"]
        for perm in group["IpPermissions"]
        if (perm.get("FromPort"), perm.get("ToPort")) == (NFS_PORT, NFS_PORT)
        for pair in perm["UserIdGroupPairs"]
    )


def test_a_single_node_gets_only_the_model_group_not_its_machine_group(world):
    # The control plane registers first: with one node every group of it is "shared".
    world.add_nodes("us-east-1a")
    manager = world.manager()
    manager.reconcile(world.desired())
    [group] = world.our_groups()
    assert _nfs_sources(group) == [world.net.node_sg]
    world.add_nodes("us-east-1b")
    world.proxy.clear_counts()
    manager.reconcile(world.desired())
    assert "AuthorizeSecurityGroupIngress" not in world.proxy.counts()
    assert _nfs_sources(world.our_groups()[0]) == [world.net.node_sg]


def test_rules_the_charm_no_longer_wants_are_revoked_and_other_rules_kept(world):
    world.add_nodes("us-east-1a")
    world.add_nodes("us-east-1b")
    manager, desired = world.manager(), world.desired()
    manager.reconcile(desired)
    [group] = world.our_groups()
    machine_0 = world.net.machine_group(world.ec2, 0)
    bastion = world.ec2.create_security_group(
        GroupName="bastion", Description="bastion", VpcId=world.net.vpc_id
    )["GroupId"]
    for source, description in ((machine_0, "cluster nodes (NFS)"), (bastion, "bastion")):
        world.ec2.authorize_security_group_ingress(
            GroupId=group["GroupId"],
            IpPermissions=[
                {
                    "IpProtocol": "tcp",
                    "FromPort": NFS_PORT,
                    "ToPort": NFS_PORT,
                    "UserIdGroupPairs": [{"GroupId": source, "Description": description}],
                }
            ],
        )
    world.proxy.clear_counts()
    manager.reconcile(desired)  # the earlier charm's machine-group rule goes, a person's stays
    assert world.proxy.counts(mutating=True) == {"RevokeSecurityGroupIngress": 1}
    assert _nfs_sources(world.our_groups()[0]) == sorted([world.net.node_sg, bastion])
    world.proxy.clear_counts()
    manager.reconcile(desired)
    assert world.proxy.counts(mutating=True) == {}


def test_nodes_found_by_private_dns_name_or_ip_without_provider_id(world):
    a, b = world.add_nodes("us-east-1a")[0], world.add_nodes("us-east-1b")[0]
    c = world.add_nodes("us-east-1c")[0]
    nodes = (
        Node(a.private_dns),  # ip-10-20-0-4.ec2.internal: the IP is in the name
        Node(b.private_dns.split(".")[0]),  # short hostname ip-10-20-2-4
        Node("worker-c", addresses=(c.private_ip,)),  # any name, InternalIP given
        Node("not-on-aws", addresses=("192.0.2.10",)),
    )
    desired = Desired(model_uuid=world.model_uuid, app=APP, nodes=nodes, vpc_id=world.net.vpc_id)
    observed = world.until_ready(world.manager(), desired)[-1]
    assert observed.zones == ZONES
    assert observed.unresolved_nodes == ("not-on-aws",)


def test_ip_matches_in_other_vpcs_are_ignored_once_a_provider_id_anchors_the_vpc(world):
    twin_world = build_network(world.ec2)  # same CIDRs: moto hands out the same IPs
    a = world.add_nodes("us-east-1a")[0]
    b = world.add_nodes("us-east-1b")[0]
    twin = run_nodes(world.ec2, twin_world.subnets["us-east-1b"][0], [twin_world.node_sg])[0]
    assert twin.private_ip == b.private_ip
    nodes = (Node(a.private_dns, a.provider_id), Node("worker-b", addresses=(b.private_ip,)))
    desired = Desired(model_uuid=world.model_uuid, app=APP, nodes=nodes)
    observed = world.until_ready(world.manager(), desired)[-1]
    assert observed.mount_targets_by_zone()["us-east-1b"].subnet_id == b.subnet_id

    by_ip_only = Desired(
        model_uuid=world.model_uuid, app=APP, nodes=(Node("worker-b", addresses=(b.private_ip,)),)
    )
    observed = world.manager().reconcile(by_ip_only)  # Juju's model tag picks b, not the twin
    assert observed.mount_targets_by_zone()["us-east-1b"].subnet_id == b.subnet_id


def test_an_ip_in_two_vpcs_without_juju_tags_is_a_config_error_saying_what_to_do(world):
    twin_world = build_network(world.ec2)
    b = run_nodes(world.ec2, world.net.subnets["us-east-1b"][0], [world.net.node_sg])[0]
    twin = run_nodes(world.ec2, twin_world.subnets["us-east-1b"][0], [twin_world.node_sg])[0]
    assert twin.private_ip == b.private_ip
    by_ip_only = Desired(
        model_uuid=world.model_uuid, app=APP, nodes=(Node("worker-b", addresses=(b.private_ip,)),)
    )
    with pytest.raises(AwsConfigError, match="none is a Juju machine of this model .* providerID"):
        world.manager().reconcile(by_ip_only)


def test_an_ip_in_two_vpcs_resolves_to_the_instance_juju_tagged_with_this_model(world):
    twin_world = build_network(world.ec2)
    # Juju tags the model's instances (juju-model-uuid); the twin is someone else's.
    b = world.net.run_machine(world.ec2, world.net.subnets["us-east-1b"][0], 0)
    twin = run_nodes(world.ec2, twin_world.subnets["us-east-1b"][0], [twin_world.node_sg])[0]
    assert twin.private_ip == b.private_ip
    desired = Desired(
        model_uuid=world.model_uuid,
        app=APP,
        nodes=(Node("juju-abc123-0", addresses=(b.private_ip,)),),
    )
    observed = world.until_ready(world.manager(), desired)[-1]
    assert observed.mount_targets_by_zone()["us-east-1b"].subnet_id == b.subnet_id
    assert observed.unresolved_nodes == ()


def test_every_step_twice_creates_nothing_twice(world):
    six_node_world(world)
    manager, desired = world.manager(), world.desired()
    first = manager.reconcile(desired)
    created = world.proxy.counts(mutating=True)
    assert created == {
        "CreateFileSystem": 1,
        "CreateSecurityGroup": 1,
        "AuthorizeSecurityGroupIngress": 1,
        "CreateMountTarget": 3,
    }
    world.proxy.clear_counts()

    second = manager.reconcile(desired)
    assert world.proxy.counts(mutating=True) == {}
    assert second == first
    assert len(world.file_systems()) == 1
    assert len(world.our_groups()) == 1
    assert len(world.mount_targets(first.file_system_id or "")) == 3


@SHAPES
def test_steady_state_reconcile_makes_no_mutating_call(world, provider_ids):
    world.provider_ids = provider_ids
    six_node_world(world)
    manager, desired = world.manager(), world.desired()
    world.until_ready(manager, desired)
    world.proxy.clear_counts()

    observed = manager.reconcile(desired)
    assert observed.ready
    assert world.proxy.counts(mutating=True) == {}
    assert world.proxy.counts() == {
        "DescribeFileSystems": 1,
        "DescribeInstances": 1,
        "DescribeVpcAttribute": 2,
        "DescribeSecurityGroups": 1,
        "DescribeMountTargets": 1,
        # aws-backup: the policy is read each pass (PolicyNotFound here) and put only
        # when it differs from the config
        "DescribeBackupPolicy": 1,
    }


@pytest.mark.parametrize(
    "attributes,flags",
    [
        (("EnableDnsHostnames",), ["--enable-dns-hostnames"]),
        (
            ("EnableDnsHostnames", "EnableDnsSupport"),
            ["--enable-dns-support", "--enable-dns-hostnames"],
        ),
    ],
)
def test_vpc_dns_off_is_a_problem_with_the_exact_fix_and_never_ready(world, attributes, flags):
    world.add_nodes("us-east-1a")
    for attribute in attributes:
        world.ec2.modify_vpc_attribute(VpcId=world.net.vpc_id, **{attribute: {"Value": False}})
    manager, desired = world.manager(), world.desired()
    observed = manager.reconcile(desired)
    observed = manager.reconcile(desired)  # the mount target is made all the same
    assert not observed.ready
    vpc = world.net.vpc_id
    fixes = " && ".join(
        f"aws ec2 modify-vpc-attribute --region {REGION} --vpc-id {vpc} {flag} "
        "'{\"Value\":true}'"
        for flag in flags
    )
    assert observed.dns_problem.endswith(f"; run: {fixes}")
    assert observed.dns_name in observed.dns_problem
    assert len(world.mount_targets(observed.file_system_id or "")) == 1

    for attribute in ("EnableDnsSupport", "EnableDnsHostnames"):
        world.ec2.modify_vpc_attribute(VpcId=vpc, **{attribute: {"Value": True}})
    fixed = manager.reconcile(desired)
    assert fixed.ready and fixed.dns_problem == ""


def test_waiting_progress_while_file_system_and_mount_targets_are_creating(world):
    six_node_world(world)
    world.proxy.creating_describes.update({"file-system": 1, "mount-target": 1})
    manager, desired = world.manager(), world.desired()

    first = manager.reconcile(desired)
    fs_id = first.file_system_id
    assert first.state == "creating" and not first.ready
    assert first.progress == f"EFS {fs_id}: file system creating"
    assert world.proxy.count("CreateMountTarget") == 0  # AWS refuses them while creating

    second = manager.reconcile(desired)  # the describe still says creating
    assert second.progress == f"EFS {fs_id}: file system creating"

    third = manager.reconcile(desired)
    assert third.state == "available"
    assert third.progress == f"EFS {fs_id}: 0/3 mount targets available"
    assert {mt.state for mt in third.mount_targets} == {"creating"}

    fourth = manager.reconcile(desired)  # first describe of the new targets: creating
    assert fourth.progress == f"EFS {fs_id}: 0/3 mount targets available" and not fourth.ready
    fifth = manager.reconcile(desired)
    assert fifth.ready and fifth.progress == f"EFS {fs_id}: 3/3 mount targets available"
    assert world.proxy.count("CreateMountTarget") == 3


def test_worker_in_a_new_zone_adds_one_mount_target_and_reports_progress(world):
    world.add_nodes("us-east-1a")
    world.add_nodes("us-east-1b")
    manager = world.manager()
    before = world.until_ready(manager, world.desired())[-1]
    assert before.zones == ("us-east-1a", "us-east-1b")

    [new_node] = world.add_nodes("us-east-1c", subnet_index=1)
    world.proxy.creating_describes["mount-target"] = 1
    world.proxy.clear_counts()
    during = manager.reconcile(world.desired())
    assert world.proxy.counts(mutating=True) == {"CreateMountTarget": 1}
    assert during.progress == f"EFS {before.file_system_id}: 2/3 mount targets available"
    assert during.mount_targets_by_zone()["us-east-1c"].subnet_id == new_node.subnet_id

    after = world.until_ready(manager, world.desired())[-1]
    assert after.progress.endswith("3/3 mount targets available")
    assert len(world.mount_targets(after.file_system_id or "")) == 3


def test_nodes_in_two_vpcs_is_a_config_error(world):
    world.provider_ids = True  # each node names its instance: no IP ambiguity
    world.add_nodes("us-east-1a")
    other = build_network(world.ec2, subnets_per_zone=1, zones=("us-east-1b",))
    world.nodes += run_nodes(world.ec2, other.subnets["us-east-1b"][0], [other.node_sg])
    with pytest.raises(AwsConfigError, match="several VPCs"):
        world.manager().reconcile(world.desired())


def test_no_nodes_yet_waits_without_creating_network_objects(world):
    observed = world.manager().reconcile(world.desired())
    assert observed.progress == f"EFS {observed.file_system_id}: waiting for cluster nodes"
    assert not observed.ready
    assert world.proxy.counts(mutating=True) == {"CreateFileSystem": 1}


def test_nodes_not_in_this_region_or_account_is_a_config_error(world):
    desired = Desired(
        model_uuid=world.model_uuid,
        app=APP,
        nodes=(Node("n1", "aws:///us-east-1a/i-0123456789abcdef0"),),
    )
    with pytest.raises(AwsConfigError, match="none of the cluster nodes .*n1"):
        world.manager().reconcile(desired)


# -- conflicts and retries ------------------------------------------------------------------
def test_file_system_already_exists_after_a_lost_response_is_resolved_by_token(world):
    world.add_nodes("us-east-1a")
    # moto creates the file system, the response is lost, botocore retries the create.
    world.proxy.inject("CreateFileSystem", "reset-after")
    observed = world.manager().reconcile(world.desired())

    assert world.proxy.count("CreateFileSystem") == 2
    [fs] = world.file_systems()
    assert observed.file_system_id == fs["FileSystemId"] and observed.owned
    assert world.proxy.pending_faults() == 0


def test_mount_target_conflict_after_a_lost_response_means_the_zone_is_done(world):
    six_node_world(world)
    world.proxy.inject("CreateMountTarget", "reset-after")
    observed = world.manager().reconcile(world.desired())

    assert world.proxy.count("CreateMountTarget") == 4  # one retry met MountTargetConflict
    assert observed.ready
    assert len(world.mount_targets(observed.file_system_id or "")) == 3


def test_duplicate_security_group_and_rule_after_lost_responses_are_success(world):
    world.add_nodes("us-east-1a")
    world.proxy.inject("CreateSecurityGroup", "reset-after")
    world.proxy.inject("AuthorizeSecurityGroupIngress", "reset-after")
    observed = world.manager().reconcile(world.desired())

    assert world.proxy.count("CreateSecurityGroup") == 2
    assert world.proxy.count("AuthorizeSecurityGroupIngress") == 2
    [group] = world.our_groups()
    assert observed.security_group_id == group["GroupId"]
    assert len(group["IpPermissions"]) == 1


def test_adopted_file_system_with_mount_targets_in_another_vpc_is_a_config_error(world):
    other = build_network(world.ec2, subnets_per_zone=1, zones=("us-east-1b",))
    fs_id = world.efs.create_file_system(CreationToken=str(uuid.uuid4()))["FileSystemId"]
    world.efs.create_mount_target(FileSystemId=fs_id, SubnetId=other.subnets["us-east-1b"][0])
    world.add_nodes("us-east-1a")
    with pytest.raises(AwsConfigError, match=f"mount targets in {other.vpc_id}"):
        world.manager().reconcile(world.desired(file_system_id=fs_id))
    assert world.proxy.count("CreateMountTarget") == 0


def test_adopted_mount_targets_in_another_vpc_covering_every_node_zone_are_a_config_error(
    world,
):
    # every node zone has a mount target, but in another VPC: the nodes reach none of them
    other = build_network(world.ec2, subnets_per_zone=1, zones=("us-east-1a",))
    fs_id = world.efs.create_file_system(CreationToken=str(uuid.uuid4()))["FileSystemId"]
    world.efs.create_mount_target(FileSystemId=fs_id, SubnetId=other.subnets["us-east-1a"][0])
    world.add_nodes("us-east-1a")

    with pytest.raises(AwsConfigError, match=f"mount targets in {other.vpc_id}"):
        world.manager().reconcile(world.desired(file_system_id=fs_id))

    assert world.proxy.count("ModifyMountTargetSecurityGroups") == 0


def test_throttling_500_and_connection_reset_are_retried(world):
    world.add_nodes("us-east-1a")
    world.proxy.inject("DescribeFileSystems", "throttle")
    world.proxy.inject("CreateFileSystem", "500")
    world.proxy.inject("DescribeInstances", "reset")
    world.proxy.inject("CreateMountTarget", "throttle")
    world.proxy.inject("DescribeSecurityGroups", "throttle")
    observed = world.manager().reconcile(world.desired())

    assert observed.ready
    assert world.proxy.pending_faults() == 0
    counts = world.proxy.counts()
    assert counts["DescribeFileSystems"] == 2
    assert counts["CreateFileSystem"] == 2
    assert counts["DescribeInstances"] == 2
    assert counts["CreateMountTarget"] == 2
    assert len(world.file_systems()) == 1
    faulted = [c for c in world.proxy.calls if c.fault]
    assert {c.fault for c in faulted} == {"throttle", "500", "reset"}


# The codes and HTTP statuses below are CreateMountTarget's errors in botocore's EFS model
# (efs/2015-02-01/service-2.json: UnsupportedAvailabilityZone 400, NoFreeAddressesInSubnet
# 409, DependencyTimeout 504 "the client should try the call again").
ZONE_ERRORS = [
    (
        "UnsupportedAvailabilityZone",
        400,
        "The requested Availability Zone us-east-1c is not supported for EFS.",
        False,
    ),
    ("NoFreeAddressesInSubnet", 409, "No free addresses available in subnet.", False),
    ("DependencyTimeout", 504, "The service timed out, try again.", True),
]


@pytest.mark.parametrize("code,status,message,retry", ZONE_ERRORS, ids=[e[0] for e in ZONE_ERRORS])
def test_a_zone_aws_refuses_is_reported_and_the_other_zones_are_served(
    world, code, status, message, retry
):
    for zone in ZONES:
        world.add_nodes(zone)
    bad_subnet = world.net.subnets["us-east-1c"][0]
    world.proxy.fail("CreateMountTarget", code, message, status=status, times=20, when=bad_subnet)
    manager, desired = world.manager(), world.desired()

    observed = manager.reconcile(desired)
    assert sorted(observed.mount_targets_by_zone()) == ["us-east-1a", "us-east-1b"]
    (problem,) = observed.zone_problems
    assert (problem.zone, problem.subnet_id, problem.code) == ("us-east-1c", bad_subnet, code)
    assert problem.message == message and problem.retry_later is retry
    assert not observed.ready
    assert observed.progress == f"EFS {observed.file_system_id}: 2/3 mount targets available"

    world.proxy.clear_counts()
    again = manager.reconcile(desired)  # the healthy zones are done; only the bad one is tried
    attempts = 4 if status >= 500 else 1  # botocore's standard mode retries 5xx answers
    assert world.proxy.counts(mutating=True) == {"CreateMountTarget": attempts}
    assert again.zone_problems == observed.zone_problems


def test_an_unknown_aws_error_outside_the_zones_is_an_api_error_with_code_and_message(world):
    world.add_nodes("us-east-1a")
    message = "You have reached the maximum number of file systems."
    world.proxy.fail("CreateFileSystem", "FileSystemLimitExceeded", message, status=403)
    with pytest.raises(aws_api.AwsApiError) as err:
        world.manager().reconcile(world.desired())
    assert err.value.code == "FileSystemLimitExceeded"
    assert err.value.message == message
    assert err.value.retry_later is False


def test_persistent_throttling_gives_a_transient_error(world):
    world.proxy.inject("DescribeFileSystems", "throttle", times=5)
    with pytest.raises(AwsTransientError, match="DescribeFileSystems") as err:
        world.manager(max_attempts=2).reconcile(world.desired())
    assert "ThrottlingException" in str(err.value)
    assert world.proxy.count("DescribeFileSystems") == 2
    assert world.proxy.counts(mutating=True) == {}


# -- credentials ----------------------------------------------------------------------------
def test_rejected_access_key_names_the_key_problem_never_the_values(world):
    world.proxy.valid_access_keys = {"AKIASOMEONEELSE00000"}
    secret, token = "wrong/Secret+Value0123456789", "FwoGZXIvYXdzEXAMPLETOKEN"
    creds = Credentials("AKIAWRONGKEY00000000", secret, token)
    with pytest.raises(AwsAuthError) as err:
        world.manager(creds).reconcile(world.desired())
    message = str(err.value)
    assert "elasticfilesystem:DescribeFileSystems" in message
    assert "access key id is not a valid AWS access key" in message
    for value in (creds.access_key_id, secret, token):
        assert value not in message
        assert value not in repr(err.value)


@pytest.mark.parametrize(
    "action,iam",
    [
        ("CreateFileSystem", "elasticfilesystem:CreateFileSystem"),
        ("DescribeInstances", "ec2:DescribeInstances"),
        ("CreateSecurityGroup", "ec2:CreateSecurityGroup"),
        ("CreateMountTarget", "elasticfilesystem:CreateMountTarget"),
    ],
)
def test_denied_action_is_named_in_the_auth_error(world, action, iam):
    world.add_nodes("us-east-1a")
    world.proxy.inject(action, "deny")
    with pytest.raises(AwsAuthError, match=f"AWS denied {iam} ") as err:
        world.manager().reconcile(world.desired())
    assert "docs/how-to/aws-credentials.md" in str(err.value)
    assert SECRET_ACCESS_KEY not in str(err.value)
    assert ACCESS_KEY_ID not in str(err.value)


def test_the_action_iam_denied_inside_another_call_is_named_from_awss_message(world):
    world.add_nodes("us-east-1a")
    world.proxy.deny("CreateFileSystem", denied="elasticfilesystem:TagResource")
    with pytest.raises(AwsAuthError) as err:
        world.manager().reconcile(world.desired())
    assert str(err.value).startswith(
        "AWS denied elasticfilesystem:TagResource (calling elasticfilesystem:CreateFileSystem)"
    )
    assert "IAM policy" in str(err.value) and "docs/how-to/aws-credentials.md" in str(err.value)


@pytest.mark.parametrize(
    "action,needs",
    [
        (
            "CreateMountTarget",
            "elasticfilesystem:CreateMountTarget, ec2:DescribeSubnets, "
            "ec2:DescribeNetworkInterfaces, ec2:CreateNetworkInterface",
        ),
        ("DescribeInstances", "ec2:DescribeInstances"),
        ("CreateSecurityGroup", "ec2:CreateSecurityGroup, ec2:CreateTags"),
    ],
)
def test_a_denial_that_names_no_action_lists_what_the_call_needs(world, action, needs):
    world.add_nodes("us-east-1a")
    world.proxy.deny(action, "opaque")
    with pytest.raises(AwsAuthError) as err:
        world.manager().reconcile(world.desired())
    assert f"allow {needs} in the IAM policy" in str(err.value)
    assert "docs/how-to/aws-credentials.md" in str(err.value)


def test_an_encoded_ec2_denial_is_logged_for_decoding_and_kept_out_of_the_status(world, caplog):
    from fakes.aws import ENCODED_BLOB

    caplog.set_level(logging.WARNING)
    world.add_nodes("us-east-1a")
    world.proxy.deny("AuthorizeSecurityGroupIngress", "encoded")
    with pytest.raises(AwsAuthError) as err:
        world.manager().reconcile(world.desired())
    message = str(err.value)
    assert ENCODED_BLOB not in message
    assert "ec2:AuthorizeSecurityGroupIngress" in message
    assert "aws sts decode-authorization-message" in message
    assert ENCODED_BLOB in caplog.text


def test_no_credential_value_in_logs(world, caplog):
    caplog.set_level(logging.DEBUG)
    world.add_nodes("us-east-1a")
    token = "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKEN"
    creds = Credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY, token)
    manager = world.manager(creds)
    world.proxy.inject("DescribeInstances", "throttle")
    manager.reconcile(world.desired())
    world.proxy.inject("CreateMountTarget", "deny")
    world.add_nodes("us-east-1b")
    with pytest.raises(AwsAuthError):
        manager.reconcile(world.desired())
    manager.teardown(world.desired(), delete=True)

    assert "creating EFS file system" in caplog.text  # the module does log
    for value in (ACCESS_KEY_ID, SECRET_ACCESS_KEY, token):
        assert value not in caplog.text


# -- adopt mode -----------------------------------------------------------------------------
def test_adopt_uses_the_given_file_system_and_never_deletes_it(world):
    six_node_world(world)
    fs_id = world.efs.create_file_system(CreationToken=f"team-{uuid.uuid4()}")["FileSystemId"]
    manager, desired = world.manager(), world.desired(file_system_id=fs_id)

    observed = world.until_ready(manager, desired)[-1]
    assert observed.file_system_id == fs_id and not observed.owned
    assert world.file_systems() == []  # no file system of our own was created
    assert world.proxy.count("CreateFileSystem") == 0
    assert len(world.mount_targets(fs_id)) == 3

    world.proxy.clear_counts()
    for _ in range(3):
        progress = manager.teardown(desired, delete=True)
        assert progress.done and progress.deleted == ()
        assert fs_id in progress.message
    assert world.proxy.counts(mutating=True) == {"RevokeSecurityGroupIngress": 1}
    assert world.efs.describe_file_systems(FileSystemId=fs_id)["FileSystems"]
    assert len(world.mount_targets(fs_id)) == 3


def _adopted_with_a_mount_target(world: World, zone: str, groups: list[str]) -> tuple[str, str]:
    """A file system made by someone else, with a mount target already in ``zone``."""
    fs_id = world.efs.create_file_system(CreationToken=f"team-{uuid.uuid4()}")["FileSystemId"]
    kwargs: dict[str, Any] = {"SecurityGroups": groups} if groups else {}
    mt = world.efs.create_mount_target(
        FileSystemId=fs_id, SubnetId=world.net.subnets[zone][0], **kwargs
    )
    return fs_id, mt["MountTargetId"]


def _team_groups(world: World, count: int) -> list[str]:
    return [
        world.ec2.create_security_group(
            GroupName=f"team-efs-{n}", Description="team", VpcId=world.net.vpc_id
        )["GroupId"]
        for n in range(count)
    ]


@pytest.mark.parametrize("team_group", [True, False], ids=["its-own-group", "vpc-default"])
def test_adopted_mount_targets_get_the_charms_group_added_and_keep_theirs(world, team_group):
    world.add_nodes("us-east-1a")
    world.add_nodes("us-east-1b")
    theirs = _team_groups(world, 1) if team_group else []
    fs_id, mt_id = _adopted_with_a_mount_target(world, "us-east-1a", theirs)
    if not theirs:  # AWS puts it in the VPC's default group
        theirs = [
            world.ec2.describe_security_groups(
                Filters=[
                    {"Name": "vpc-id", "Values": [world.net.vpc_id]},
                    {"Name": "group-name", "Values": ["default"]},
                ]
            )["SecurityGroups"][0]["GroupId"]
        ]
    manager, desired = world.manager(), world.desired(file_system_id=fs_id)

    first = manager.reconcile(desired)
    [group] = world.our_groups()
    efs_api = world.aws.client("efs", through_proxy=True)  # moto lists no default group
    groups = efs_api.describe_mount_target_security_groups(MountTargetId=mt_id)
    assert groups["SecurityGroups"] == [*theirs, group["GroupId"]]
    assert world.proxy.count("ModifyMountTargetSecurityGroups") == 1
    assert first.ready and first.zone_problems == ()
    world.proxy.clear_counts()
    manager.reconcile(desired)
    assert world.proxy.counts(mutating=True) == {}


def test_an_adopted_mount_target_without_room_for_the_charms_group_is_never_ready(world):
    world.add_nodes("us-east-1a")
    theirs = _team_groups(world, 5)  # the default quota of groups per network interface
    fs_id, mt_id = _adopted_with_a_mount_target(world, "us-east-1a", theirs)
    manager, desired = world.manager(), world.desired(file_system_id=fs_id)
    for _ in range(2):
        observed = manager.reconcile(desired)
        assert not observed.ready
    [group] = world.our_groups()
    (problem,) = observed.zone_problems
    assert (problem.zone, problem.code, problem.retry_later) == (
        "us-east-1a",
        "SecurityGroupLimitExceeded",
        False,
    )
    assert str(problem).endswith(
        f"aws efs modify-mount-target-security-groups --region {REGION} --mount-target-id "
        f"{mt_id} --security-groups {' '.join([*theirs[:4], group['GroupId']])}"
    )
    assert (
        world.efs.describe_mount_target_security_groups(MountTargetId=mt_id)["SecurityGroups"]
        == theirs
    )


def test_adopting_a_missing_file_system_is_a_config_error_and_creates_nothing(world):
    world.add_nodes("us-east-1a")
    with pytest.raises(AwsConfigError, match="fs-0123456789abcdef0 does not exist in us-east-1"):
        world.manager().reconcile(world.desired(file_system_id="fs-0123456789abcdef0"))
    assert world.proxy.counts(mutating=True) == {}


# -- teardown -------------------------------------------------------------------------------
def juju_destroys_the_model(world: World) -> None:
    """What `juju destroy-model` does on AWS: terminate the machines, delete Juju's groups.

    Through the proxy, which refuses to delete a group that another group's rule or a
    network interface still uses (DependencyViolation), as AWS does; Juju then gives up
    with "cannot delete security group ... consider deleting it manually" (juju/juju
    provider/ec2/environ.go, deleteSecurityGroupInsistently).
    """
    ec2 = world.aws.client("ec2", through_proxy=True)
    ec2.terminate_instances(InstanceIds=[i.instance_id for i in world.nodes])
    machine_groups = [world.net.machine_group(world.ec2, n) for n in range(len(world.nodes))]
    for group_id in (*machine_groups, world.net.node_sg):
        ec2.delete_security_group(GroupId=group_id)


def test_the_fake_refuses_to_delete_a_group_a_rule_or_interface_uses_as_aws_does(world):
    from botocore.exceptions import ClientError

    world.add_nodes("us-east-1a")
    world.until_ready(world.manager(), world.desired())
    ec2 = world.aws.client("ec2", through_proxy=True)
    [group] = world.our_groups()
    for group_id in (world.net.node_sg, group["GroupId"]):  # a rule uses one, an ENI the other
        with pytest.raises(ClientError, match="DependencyViolation"):
            ec2.delete_security_group(GroupId=group_id)


def test_teardown_without_delete_on_remove_keeps_the_data_and_lets_juju_delete_its_groups(world):
    six_node_world(world)
    manager, desired = world.manager(), world.desired()
    observed = world.until_ready(manager, desired)[-1]
    [group] = world.our_groups()
    world.proxy.clear_counts()

    progress = manager.teardown(desired, delete=False)
    assert progress.done and progress.deleted == ()
    assert progress.message == (
        f"kept the EFS file system (delete-on-remove is false), and security group "
        f"{group['GroupId']} for its 3 mount targets (its NFS rules from Juju's groups revoked)"
    )
    assert world.proxy.counts(mutating=True) == {"RevokeSecurityGroupIngress": 1}
    assert len(world.file_systems()) == 1
    assert len(world.mount_targets(observed.file_system_id or "")) == 3
    [kept] = world.our_groups()
    assert kept["IpPermissions"] == []
    juju_destroys_the_model(world)  # no DependencyViolation

    world.proxy.clear_counts()
    again = manager.teardown(desired, delete=False)
    assert again.done and world.proxy.counts(mutating=True) == {}


def test_teardown_of_an_adopted_file_system_lets_juju_delete_its_groups(world):
    world.add_nodes("us-east-1a")
    fs_id = world.efs.create_file_system(CreationToken=f"team-{uuid.uuid4()}")["FileSystemId"]
    manager, desired = world.manager(), world.desired(file_system_id=fs_id)
    world.until_ready(manager, desired)
    progress = manager.teardown(desired, delete=True)
    assert progress.done and progress.message.startswith(f"kept adopted EFS {fs_id}, ")
    assert len(world.mount_targets(fs_id)) == 1
    juju_destroys_the_model(world)


def test_teardown_deletes_the_charms_own_group_when_nothing_uses_it(world):
    world.add_nodes("us-east-1a")
    manager, desired = world.manager(), world.desired()
    fs_id = world.until_ready(manager, desired)[-1].file_system_id or ""
    [group] = world.our_groups()
    for mt in world.mount_targets(fs_id):  # someone deleted the mount targets by hand
        world.efs.delete_mount_target(MountTargetId=mt["MountTargetId"])
    progress = manager.teardown(desired, delete=False)
    assert progress.deleted == (group["GroupId"],)
    assert "deleted unused security group" in progress.message
    assert world.our_groups() == [] and len(world.file_systems()) == 1
    juju_destroys_the_model(world)


def test_teardown_with_delete_on_remove_deletes_in_order_one_step_per_call(world):
    six_node_world(world)
    manager, desired = world.manager(), world.desired()
    fs_id = world.until_ready(manager, desired)[-1].file_system_id
    [group] = world.our_groups()
    # AWS keeps deleted mount targets and file systems listed as "deleting" for a while.
    world.proxy.deleting_describes.update({"mount-target": 2, "file-system": 1})
    world.proxy.clear_counts()

    steps = []
    for _ in range(10):
        steps.append(manager.teardown(desired, delete=True))
        if steps[-1].done:
            break
    assert [s.message for s in steps] == [
        f"deleting 3 mount targets of EFS {fs_id}",
        f"waiting for 3 mount targets of EFS {fs_id} to be deleted",
        f"waiting for 3 mount targets of EFS {fs_id} to be deleted",
        f"deleting EFS {fs_id}",
        f"waiting for EFS {fs_id} to be deleted",
        "EFS file system and security group deleted",
    ]
    mutating = [c.action for c in world.proxy.calls if c.mutating]
    assert mutating == ["RevokeSecurityGroupIngress"] + ["DeleteMountTarget"] * 3 + [
        "DeleteFileSystem",
        "DeleteSecurityGroup",
    ]
    juju_destroys_the_model(world)
    assert steps[-1].deleted == (group["GroupId"],)
    assert world.file_systems() == [] and world.our_groups() == []

    world.proxy.clear_counts()
    again = manager.teardown(desired, delete=True)
    assert again.done and world.proxy.counts(mutating=True) == {}


def test_teardown_keeps_a_group_someone_elses_rule_references_and_finishes(world):
    world.add_nodes("us-east-1a")
    manager, desired = world.manager(), world.desired()
    world.until_ready(manager, desired)
    [group] = world.our_groups()
    # someone lets our group reach their database: a reference nothing here will remove
    theirs = world.ec2.create_security_group(
        GroupName="their-db", Description="db", VpcId=world.net.vpc_id
    )["GroupId"]
    world.ec2.authorize_security_group_ingress(
        GroupId=theirs,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 5432,
                "ToPort": 5432,
                "UserIdGroupPairs": [{"GroupId": group["GroupId"]}],
            }
        ],
    )

    steps = []
    for _ in range(10):
        steps.append(manager.teardown(desired, delete=True))
        if steps[-1].done:
            break

    assert steps[-1].done
    assert steps[-1].message == (
        f"EFS file system deleted; kept security group {group['GroupId']}: another security "
        "group's rule references it"
    )
    assert world.file_systems() == [] and len(world.our_groups()) == 1


def test_teardown_retries_a_lost_delete_response(world):
    world.add_nodes("us-east-1a")
    manager, desired = world.manager(), world.desired()
    world.until_ready(manager, desired)
    world.proxy.inject("DeleteMountTarget", "reset-after")
    world.proxy.inject("DeleteFileSystem", "reset-after")
    world.proxy.inject("DeleteSecurityGroup", "reset-after")

    for _ in range(6):
        if manager.teardown(desired, delete=True).done:
            break
    assert world.proxy.pending_faults() == 0
    assert world.file_systems() == [] and world.our_groups() == []


def test_teardown_waits_while_aws_still_holds_the_security_group_or_file_system(world):
    world.add_nodes("us-east-1a")
    manager, desired = world.manager(), world.desired()
    fs_id = world.until_ready(manager, desired)[-1].file_system_id
    [group] = world.our_groups()
    assert manager.teardown(desired, delete=True).message.startswith("deleting 1 mount")
    world.proxy.inject("DeleteFileSystem", "dependency")
    assert (
        manager.teardown(desired, delete=True).message == f"waiting for EFS {fs_id} to be released"
    )
    assert manager.teardown(desired, delete=True).message == f"deleting EFS {fs_id}"
    # AWS keeps a deleted mount target's network interface for a while (moto drops it at
    # once): the group stays in use, and DeleteSecurityGroup says DependencyViolation
    subnet = world.net.subnets["us-east-1a"][0]
    eni = world.ec2.create_network_interface(SubnetId=subnet, Groups=[group["GroupId"]])
    waiting = manager.teardown(desired, delete=True)
    assert not waiting.done
    assert waiting.message == f"waiting for AWS to release security group {group['GroupId']}"
    assert len(world.our_groups()) == 1
    world.ec2.delete_network_interface(
        NetworkInterfaceId=eni["NetworkInterface"]["NetworkInterfaceId"]
    )
    assert manager.teardown(desired, delete=True).done
    assert world.our_groups() == []


def test_teardown_leaves_a_file_system_whose_tags_name_another_application(world):
    token = creation_token(world.model_uuid, APP)
    world.efs.create_file_system(
        CreationToken=token, Tags=[{"Key": TAG_APP, "Value": "someone-else"}]
    )
    progress = world.manager().teardown(world.desired(), delete=True)
    assert progress.done and "tags do not name this application" in progress.message
    assert world.proxy.counts(mutating=True) == {}
    assert len(world.file_systems()) == 1


# -- show-filesystem ------------------------------------------------------------------------
def test_describe_reports_ownership_state_and_mount_targets_per_zone(world):
    six_node_world(world)
    manager, desired = world.manager(), world.desired()
    assert manager.describe(desired).action_result()["file-system-id"] == "none"
    fs_id = world.until_ready(manager, desired)[-1].file_system_id
    world.proxy.clear_counts()

    result = manager.describe(desired).action_result()
    assert world.proxy.counts(mutating=True) == {}
    assert result["file-system-id"] == fs_id
    assert result["ownership"] == "owned"
    assert result["state"] == "available"
    assert result["throughput-mode"] == "elastic"
    assert result["size-bytes"] == "0"
    assert result["dns-name"] == f"{fs_id}.efs.us-east-1.amazonaws.com"
    assert sorted(result["mount-targets"]) == list(ZONES)
    assert all(v.endswith(" available") for v in result["mount-targets"].values())

    adopted = manager.describe(world.desired(file_system_id=fs_id)).action_result()
    assert adopted["ownership"] == "adopted"
