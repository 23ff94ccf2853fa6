# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The EC2 side of efs-storage: where the nodes run, the NFS security group, the VPC's DNS.

No ops code here; every call goes through ``aws.Api``. :meth:`Network.locate_nodes`
finds the EC2 instances behind the cluster's nodes and chooses one subnet per zone for the
mount targets (``efs.py`` makes them). :meth:`Network.ensure_security_group` keeps this
application's group with one NFS rule per node group; a removal revokes those rules
first (:meth:`Network.release`): they reference Juju's groups, which Juju deletes with the
model. The VPC's DNS attributes are checked because the volumes mount the file system by
its DNS name.
"""

from __future__ import annotations

import collections
import logging
import re
from typing import Any

from aws import Api, AwsApiError, AwsAuthError, AwsConfigError, AwsTransientError
from efs_model import (
    TAG_APP,
    TAG_MODEL,
    Desired,
    Node,
    Placement,
    TeardownProgress,
    owner_tags,
    parse_provider_id,
    security_group_name,
)

logger = logging.getLogger(__name__)

# The tag Juju puts on every instance it starts (juju/juju provider/ec2: instances carry
# `juju-model-uuid` and `juju-controller-uuid`). Only read: Juju's `destroy-model` picks the
# instances it terminates by this tag, so nobody should be told to set it by hand.
JUJU_MODEL_TAG = "juju-model-uuid"
NFS_PORT = 2049
_NODE_NAME_IP_RE = re.compile(r"^ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})(?:\..*)?$")
# Juju's model security group is "juju-" + the model uuid, which every machine of the model
# is in; each machine also has "juju-<uuid>-<machine id>" (or "-global"), juju/juju
# provider/ec2/environ.go: jujuGroupName, machineGroupName, globalGroupName, setUpGroups.
_JUJU_MODEL_GROUP_RE = re.compile(
    r"^juju-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)
# The description of the ingress rules this charm adds; only rules with it are revoked.
RULE_DESCRIPTION = "cluster nodes (NFS)"
_RELEASED = "its NFS rules from Juju's groups revoked"


class Network:
    """This application's view of EC2: the nodes' instances, its security group, the VPC."""

    def __init__(self, api: Api, region: str):
        self._api = api
        self.region = region

    # -- nodes ------------------------------------------------------------------------------
    def locate_nodes(self, desired: Desired) -> Placement:
        """Find the EC2 instances behind the cluster's nodes.

        Provider ids name the instance; other nodes are looked up by private IP (from their
        InternalIP addresses or an ``ip-a-b-c-d`` name). Private IPs repeat across VPCs, so
        IP matches count only in the cluster's VPC: ``desired.vpc_id`` when given, else the
        VPC of the nodes found by instance id, else the VPC matching the most nodes. An IP
        that matches instances in several VPCs counts only for those Juju tagged with this
        model (`juju-model-uuid`, on every instance Juju starts), when any is.
        """
        by_id: dict[str, str] = {}
        by_ip: dict[str, str] = {}
        for node in desired.nodes:
            parsed = parse_provider_id(node.provider_id or "")
            if parsed:
                by_id[parsed[1]] = node.name
                continue
            for ip in _node_ips(node):
                by_ip[ip] = node.name
        extra = [{"Name": "vpc-id", "Values": [desired.vpc_id]}] if desired.vpc_id else []
        found = self._instances("instance-id", sorted(by_id), extra) if by_id else []
        candidates: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        if by_ip:
            for inst in self._instances("private-ip-address", sorted(by_ip), extra):
                candidates[by_ip.get(inst.get("PrivateIpAddress", ""), "")].append(inst)
            candidates = {
                name: _ours(insts, desired.model_uuid) for name, insts in candidates.items()
            }
        wanted = set(by_id.values()) | set(by_ip.values())
        if wanted and not found and not candidates:
            raise AwsConfigError(
                f"none of the cluster nodes ({', '.join(sorted(wanted)[:5])}) is an EC2 "
                f"instance in {self.region}; check the region and the AWS account"
            )
        vpc_id = desired.vpc_id or _cluster_vpc(found, candidates)
        unique = {i["InstanceId"]: i for i in found}
        for insts in candidates.values():
            unique.update((i["InstanceId"], i) for i in insts if i.get("VpcId") == vpc_id)
        names = {
            by_id.get(i) or by_ip.get(inst.get("PrivateIpAddress", ""))
            for i, inst in unique.items()
        }
        return _placement(list(unique.values()), tuple(sorted(wanted - names)))

    def _instances(
        self, filter_name: str, values: list[str], extra: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        filters = [
            {"Name": filter_name, "Values": values},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
            *extra,
        ]
        pages = self._api.pages(
            self._api.ec2, "DescribeInstances", "NextToken", "NextToken", Filters=filters
        )
        return [
            i for p in pages for r in p.get("Reservations", []) for i in r.get("Instances", [])
        ]

    # -- the VPC's DNS -----------------------------------------------------------------------
    def dns_off(self, vpc_id: str) -> tuple[str, ...]:
        """The VPC DNS attributes that are off (the PV mounts by the file system's DNS name).

        EFS's DNS name resolves only through the VPC's Amazon DNS server; AWS's EFS guide
        offers mounting by IP address for "VPCs with DNS hostnames disabled" (Mounting by
        IP address). DescribeVpcAttribute takes one attribute per call (botocore ec2
        model: "You can specify only one attribute at a time"; VpcAttributeName enum).
        """
        off = []
        for attribute in ("enableDnsSupport", "enableDnsHostnames"):
            try:
                answer = self._api.call(
                    self._api.ec2, "DescribeVpcAttribute", VpcId=vpc_id, Attribute=attribute
                )
            except AwsAuthError as e:  # a diagnostic read: a policy without it still serves
                logger.warning("cannot check VPC %s DNS attributes: %s", vpc_id, e)
                return ()
            key = attribute[0].upper() + attribute[1:]
            if not (answer.get(key) or {}).get("Value", False):
                off.append(attribute)
        return tuple(off)

    # -- security group ---------------------------------------------------------------------
    def _find_group(self, filters: list[dict[str, Any]]) -> dict[str, Any] | None:
        groups = self._api.call(self._api.ec2, "DescribeSecurityGroups", Filters=filters)
        return groups["SecurityGroups"][0] if groups["SecurityGroups"] else None

    def ensure_security_group(self, desired: Desired, placement: Placement) -> str:
        """This application's group in the nodes' VPC (made when missing); returns its id.

        It admits NFS from exactly the node groups: a missing rule is added, a rule this
        charm added for a group the nodes left is revoked.
        """
        name = security_group_name(desired.model_uuid, desired.app)
        filters = [
            {"Name": "group-name", "Values": [name]},
            {"Name": "vpc-id", "Values": [placement.vpc_id]},
        ]
        group = self._find_group(filters)
        if group is None:
            group = self._create_group(desired, name, placement.vpc_id or "", filters)
        pairs = _nfs_pairs(group)
        allowed = {pair.get("GroupId") for pair in pairs}
        for source in placement.node_groups:
            if source not in allowed:
                self._allow_nfs(group["GroupId"], source)
        ours = {p.get("GroupId", "") for p in pairs if p.get("Description") == RULE_DESCRIPTION}
        for source in sorted(ours - set(placement.node_groups)):
            self._revoke_nfs(group["GroupId"], source)
        return group["GroupId"]

    def _revoke_nfs(self, group_id: str, source_group: str) -> None:
        """Revoke the NFS rule from ``source_group`` (gone already counts as done).

        botocore ec2 RevokeSecurityGroupIngress: rule properties must match exactly, the
        description need not be given; InvalidPermission.NotFound when nothing matches.
        """
        logger.info("revoking TCP %d to %s from %s", NFS_PORT, group_id, source_group)
        self._api.delete_ignoring(
            self._api.ec2, "RevokeSecurityGroupIngress", "InvalidPermission.NotFound",
            GroupId=group_id,
            IpPermissions=[
                {
                    "IpProtocol": "tcp",
                    "FromPort": NFS_PORT,
                    "ToPort": NFS_PORT,
                    "UserIdGroupPairs": [{"GroupId": source_group}],
                }
            ],
        )  # fmt: skip

    def _create_group(
        self, desired: Desired, name: str, vpc_id: str, filters: list[dict[str, Any]]
    ) -> dict[str, Any]:
        logger.info("creating security group %s in %s", name, vpc_id)
        try:
            created = self._api.call(
                self._api.ec2,
                "CreateSecurityGroup",
                GroupName=name,
                Description=f"NFS to EFS of {desired.app} from the cluster nodes (gpu-k8s)",
                VpcId=vpc_id,
                TagSpecifications=[
                    {"ResourceType": "security-group", "Tags": owner_tags(desired)},
                ],
            )
            return {"GroupId": created["GroupId"], "IpPermissions": []}
        except AwsApiError as e:
            if e.code != "InvalidGroup.Duplicate":
                raise
        group = self._find_group(filters)
        if group is None:
            raise AwsTransientError(f"security group {name} exists but is not listed yet")
        return group

    def _allow_nfs(self, group_id: str, source_group: str) -> None:
        logger.info("allowing TCP %d to %s from %s", NFS_PORT, group_id, source_group)
        try:
            self._api.call(
                self._api.ec2,
                "AuthorizeSecurityGroupIngress",
                GroupId=group_id,
                IpPermissions=[
                    {
                        "IpProtocol": "tcp",
                        "FromPort": NFS_PORT,
                        "ToPort": NFS_PORT,
                        "UserIdGroupPairs": [
                            {"GroupId": source_group, "Description": RULE_DESCRIPTION}
                        ],
                    }
                ],
            )
        except AwsApiError as e:
            if e.code != "InvalidPermission.Duplicate":
                raise

    # -- removal ----------------------------------------------------------------------------
    def own_group(self, desired: Desired) -> dict[str, Any] | None:
        """This application's security group, by name and both tags (in any VPC)."""
        name = security_group_name(desired.model_uuid, desired.app)
        return self._find_group(
            [
                {"Name": "group-name", "Values": [name]},
                {"Name": f"tag:{TAG_MODEL}", "Values": [desired.model_uuid]},
                {"Name": f"tag:{TAG_APP}", "Values": [desired.app]},
            ]
        )

    def release(self, group: dict[str, Any]) -> None:
        """Revoke the NFS rules this charm added (they reference Juju's groups)."""
        sources = sorted(
            {
                p.get("GroupId", "")
                for p in _nfs_pairs(group)
                if p.get("Description") == RULE_DESCRIPTION
            }
        )
        for source in sources:
            self._revoke_nfs(group["GroupId"], source)

    def keep_group(self, kept: str, group: dict[str, Any] | None) -> TeardownProgress:
        """The file system stays; its security group goes unless a network interface uses it.

        EFS mount targets are network interfaces in the group (botocore efs
        CreateMountTarget: "Amazon EFS also creates a new network interface"); AWS refuses
        to delete a group a network interface is associated with (botocore ec2
        DeleteSecurityGroup: DependencyViolation).
        """
        if group is None:
            return TeardownProgress(True, kept)
        group_id = group["GroupId"]
        users = self._group_users(group_id)
        if users:
            return TeardownProgress(
                True,
                f"{kept}, and security group {group_id} for its {len(users)} mount targets "
                f"({_RELEASED})",
            )
        logger.info("deleting security group %s (nothing uses it)", group_id)
        try:
            self._api.delete_ignoring(
                self._api.ec2, "DeleteSecurityGroup", "InvalidGroup.NotFound", GroupId=group_id
            )
        except AwsApiError as e:
            if e.code != "DependencyViolation":
                raise
            return TeardownProgress(
                True, f"{kept}, and security group {group_id} (in use; {_RELEASED})"
            )
        return TeardownProgress(
            True, f"{kept}; deleted unused security group {group_id}", (group_id,)
        )

    def teardown_group(self, desired: Desired) -> TeardownProgress:
        """The last removal step, once the file system is gone: delete the group."""
        group = self.own_group(desired)
        if group is None:
            return TeardownProgress(True, "EFS file system and security group deleted")
        group_id = group["GroupId"]
        logger.info("deleting security group %s", group_id)
        try:
            self._api.delete_ignoring(
                self._api.ec2, "DeleteSecurityGroup", "InvalidGroup.NotFound", GroupId=group_id
            )
        except AwsApiError as e:
            if e.code != "DependencyViolation":
                raise
            users = self._group_users(group_id)
            if users:  # the deleted mount targets' interfaces are still going away
                return TeardownProgress(
                    False, f"waiting for AWS to release security group {group_id}"
                )
            # Only a reference from another group is left (botocore ec2 DeleteSecurityGroup:
            # DependencyViolation), which nothing here will remove: keep it, say so, finish.
            return TeardownProgress(
                True,
                f"EFS file system deleted; kept security group {group_id}: another security "
                "group's rule references it",
            )
        return TeardownProgress(True, "EFS file system and security group deleted", (group_id,))

    def _group_users(self, group_id: str) -> list[dict[str, Any]]:
        """The network interfaces in a security group (a mount target is one)."""
        return self._api.call(
            self._api.ec2,
            "DescribeNetworkInterfaces",
            Filters=[{"Name": "group-id", "Values": [group_id]}],
        ).get("NetworkInterfaces", [])


_DNS_ATTRIBUTES = {
    "enableDnsSupport": ("DNS resolution", "--enable-dns-support"),
    "enableDnsHostnames": ("DNS hostnames", "--enable-dns-hostnames"),
}


def dns_problem(vpc_id: str, off: tuple[str, ...], name: str | None, region: str) -> str:
    """What is off and the commands that turn it on (support first: hostnames need it).

    ModifyVpcAttribute changes one attribute per call; the AWS CLI takes the value as
    ``'{"Value":true}'`` (aws ec2 modify-vpc-attribute reference, examples).
    """
    what = " and ".join(_DNS_ATTRIBUTES[a][0] for a in off)
    fixes = " && ".join(
        f"aws ec2 modify-vpc-attribute --region {region} --vpc-id {vpc_id} "
        f"{_DNS_ATTRIBUTES[a][1]} '{{\"Value\":true}}'"
        for a in off
    )
    return f"VPC {vpc_id} has {what} off, so nodes cannot resolve {name}; run: {fixes}"


def _node_ips(node: Node) -> list[str]:
    ips = [a for a in node.addresses if a]
    match = _NODE_NAME_IP_RE.match(node.name)
    if match:
        ips.append(".".join(match.groups()))
    return sorted(set(ips))


def _ours(instances: list[dict[str, Any]], model_uuid: str) -> list[dict[str, Any]]:
    """The instances Juju tagged with this model, or all of them when none is."""
    tagged = [
        i
        for i in instances
        if any(
            t.get("Key") == JUJU_MODEL_TAG and t.get("Value") == model_uuid
            for t in i.get("Tags") or []
        )
    ]
    return tagged or instances


def _cluster_vpc(
    found: list[dict[str, Any]], candidates: dict[str, list[dict[str, Any]]]
) -> str | None:
    """The VPC of the nodes found by instance id, else the one most IP-matched nodes are in."""
    by_id = sorted({i.get("VpcId", "") for i in found})
    if len(by_id) > 1:
        raise AwsConfigError(
            f"cluster nodes run in several VPCs ({', '.join(by_id)}); "
            "the mount targets of one EFS file system must all be in one VPC"
        )
    if by_id:
        return by_id[0]
    votes = collections.Counter(
        vpc for insts in candidates.values() for vpc in {i.get("VpcId", "") for i in insts}
    )
    ranked = votes.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        tied = sorted(v for v, n in ranked if n == ranked[0][1])
        raise AwsConfigError(
            f"the cluster nodes' private IPs match instances in several VPCs "
            f"({', '.join(tied)}) and none is a Juju machine of this model (tag "
            f"{JUJU_MODEL_TAG}); register the nodes with their providerID "
            "(aws:///<zone>/<instance id>)"
        )
    return ranked[0][0] if ranked else None


def _placement(instances: list[dict[str, Any]], unresolved: tuple[str, ...]) -> Placement:
    """Choose one subnet per zone (the one most nodes of that zone use) and the node groups."""
    if not instances:
        return Placement(None, {}, (), unresolved)
    vpcs = sorted({i.get("VpcId", "") for i in instances})
    if len(vpcs) > 1:
        raise AwsConfigError(
            f"cluster nodes run in several VPCs ({', '.join(vpcs)}); "
            "the mount targets of one EFS file system must all be in one VPC"
        )
    per_zone: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for inst in instances:
        per_zone[inst["Placement"]["AvailabilityZone"]][inst["SubnetId"]] += 1
    subnets = {
        zone: min(counts, key=lambda s, c=counts: (-c[s], s)) for zone, counts in per_zone.items()
    }
    return Placement(vpcs[0], subnets, _node_groups(instances), unresolved)


def _node_groups(instances: list[dict[str, Any]]) -> tuple[str, ...]:
    """The groups NFS is allowed from: the one group all nodes share.

    On Juju that is the model group (``juju-<model uuid>``), never a machine's own group,
    which a single node would otherwise "share" with itself. Without a Juju model group,
    the groups all nodes share; with none shared, every node's groups.
    """
    group_sets = [
        {(g["GroupId"], g.get("GroupName", "")) for g in i.get("SecurityGroups") or []}
        for i in instances
    ]
    common = set.intersection(*group_sets)
    model = {gid for gid, name in common if _JUJU_MODEL_GROUP_RE.match(name)}
    groups = model or {gid for gid, _ in common} or {gid for s in group_sets for gid, _ in s}
    return tuple(sorted(groups))


def _nfs_pairs(group: dict[str, Any]) -> list[dict[str, Any]]:
    """The source groups of ``group``'s TCP 2049 ingress rules."""
    return [
        pair
        for perm in group.get("IpPermissions") or []
        if perm.get("IpProtocol") == "tcp"
        and perm.get("FromPort") == NFS_PORT
        and perm.get("ToPort") == NFS_PORT
        for pair in perm.get("UserIdGroupPairs") or []
    ]
