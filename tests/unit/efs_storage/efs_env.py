"""Shared builders for the efs-storage unit tests: the AWS + cluster world and State.

Imported by the tests as `efs_env` (pytest puts this directory on sys.path: it has no
`__init__.py`); the moto server and its fault proxy are `fakes.aws` (tests/fakes/aws.py).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import efs_model
import pytest
from literals import CLUSTER_RULES, NAMESPACED_RULES
from ops import testing

from fakes.aws import (
    ACCESS_KEY_ID,
    REGION,
    SECRET_ACCESS_KEY,
    Instance,
    LocalAws,
    Network,
    node_object,
)
from fakes.kube_apiserver import FakeKubeApiServer
from fakes.kube_grants import admit_served, consumer_grant, store_grant

APP = "efs-storage"
KUBE_TOKEN = "kube-token-efs-unit-0123456789abcdef"
SECRET_KEY_ID = "AKIACONFIGSECRET0042"
SECRET_SECRET = "cOnFiGsEcReT/value+0123456789abcdefghijk"
SESSION_TOKEN = "sessiontoken-value-0123456789"
ALL_SECRETS = (
    ACCESS_KEY_ID,
    SECRET_ACCESS_KEY,
    SECRET_KEY_ID,
    SECRET_SECRET,
    SESSION_TOKEN,
    KUBE_TOKEN,
)


def efs_grant() -> Any:
    """The kube-api grant the control plane makes for what this charm asks (literals).

    The operator names efs-storage a storage provisioner (the control plane's default), so
    its namespace enforces Pod Security baseline.
    """
    return consumer_grant(APP, APP, NAMESPACED_RULES, CLUSTER_RULES, provisioner=True)


@dataclasses.dataclass
class Env:
    """One test's AWS network and cluster, and a builder of the charm's State."""

    aws: LocalAws
    api: FakeKubeApiServer
    net: Network
    ec2: Any
    efs: Any
    model: testing.Model = dataclasses.field(
        default_factory=lambda: testing.Model(
            name="gpu", cloud_spec=cloud_spec(ACCESS_KEY_ID, SECRET_ACCESS_KEY)
        )
    )
    instances: list[Instance] = dataclasses.field(default_factory=list)
    # The control plane's word on whom this application serves (lib kube_api
    # storage-consumers): each consumer granted a namespace here is admitted as a plain NFS
    # volume's ("") unless a test admits what the charm published (`admit`); the exchange
    # itself is tested in test_served_consumers.py.
    granted: dict[str, str] = dataclasses.field(default_factory=dict)
    admitted: dict[str, str] = dataclasses.field(default_factory=dict)
    kubeconfig_secret: testing.Secret = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.kubeconfig_secret = testing.Secret(
            {"kubeconfig": self.api.kubeconfig(token=KUBE_TOKEN)}, owner=None
        )

    @property
    def proxy(self) -> Any:
        return self.aws.proxy

    def add_node(self, zone: str, subnet_index: int = 0, *, provider_id: bool = False) -> Instance:
        """Start an EC2 instance and register it as a Kubernetes Node.

        By default the Node looks as kubeadm registers it in this bundle: named after the
        Juju machine's hostname (``juju-<model uuid tail>-<machine>``, kubeadm.node_name),
        no ``spec.providerID`` (no cloud provider runs) and the InternalIP and Hostname
        addresses kubelet reports. ``provider_id=True`` gives the shape of a cluster with
        the AWS cloud provider: an ``ip-...`` name and ``aws:///zone/i-...``.
        """
        machine = len(self.instances)
        inst = self.net.run_machine(self.ec2, self.net.subnets[zone][subnet_index], machine)
        self.instances.append(inst)
        name, node = node_object(inst, len(self.instances) - 1, self.model.uuid, provider_id)
        self.api.put_object(f"/api/v1/nodes/{name}", node)
        return inst

    def add_namespace(self, name: str, consumer: str | None = None) -> None:
        """The namespace the control plane granted `consumer` on kube-api (its real objects).

        Without `consumer`, a namespace nobody was granted (made by hand).
        """
        if consumer is None:
            self.api.put_object(f"/api/v1/namespaces/{name}", {"metadata": {"name": name}})
            return
        store_grant(self.api, consumer_grant(consumer, name, [], []), f"kube-token-{consumer}")
        self.granted[consumer] = name
        self.admit({**self.admitted, consumer: ""})

    def admit(self, consumers: dict[str, str]) -> None:
        """The control plane admits `consumers` (app -> access point) of this application.

        As addons.apply_provisioner_claims_policy does: each granted consumer's namespace,
        in the policy the fake API server holds; `kube_api_relation` answers with them.
        """
        self.admitted = {app: p for app, p in consumers.items() if app in self.granted}
        served = {self.granted[app]: p for app, p in self.admitted.items()}
        admit_served(self.api, (APP, APP), served)

    def control_plane_answers(self, state: testing.State) -> testing.State:
        """`state` after the control plane admitted what this application published.

        Its next hook (kube-api relation-changed): the policy names the consumers the
        charm's `storage-consumers` lists, and the control plane answers with them.
        """
        (relation,) = [r for r in state.relations if r.endpoint == "kube-api"]
        published = json.loads(relation.local_app_data.get("storage-consumers") or "{}")
        self.admit(published)
        remote = {
            **relation.remote_app_data,
            "storage-consumers": json.dumps(self.admitted, sort_keys=True),
        }
        answered = dataclasses.replace(relation, remote_app_data=remote)
        others = [r for r in state.relations if r.endpoint != "kube-api"]
        return dataclasses.replace(state, relations=[answered, *others])

    def kube_api_relation(self, **data: str) -> testing.Relation:
        answer = {
            "endpoint": self.api.url,
            "namespace": APP,
            "service-account": APP,
            "kubeconfig-secret-id": self.kubeconfig_secret.id,
            "storage-consumers": json.dumps(self.admitted, sort_keys=True),
        }
        answer.update(data)
        return testing.Relation(
            "kube-api", remote_app_name="kubernetes-control-plane", remote_app_data=answer
        )

    def state(
        self,
        *,
        config: dict[str, Any] | None = None,
        consumers: dict[str, str] | None = None,
        relations: list[Any] | None = None,
        secrets: list[testing.Secret] = (),  # type: ignore[assignment]
        leader: bool = True,
        planned_units: int = 1,
        model: testing.Model | None = None,
    ) -> testing.State:
        """A State with kube-api and one shared-storage relation per consumer app."""
        if relations is None:
            relations = [self.kube_api_relation()]
            for app, namespace in (consumers if consumers is not None else {}).items():
                relations.append(storage_relation(app, namespace))
        if not any(r.endpoint == "peers" for r in relations):
            # Juju makes the peer relation when the application is deployed.
            relations = [*relations, testing.PeerRelation("peers")]
        return testing.State(
            leader=leader,
            config=config or {},
            relations=relations,
            secrets=[self.kubeconfig_secret, *secrets],
            planned_units=planned_units,
            model=model or self.model,
        )

    def our_group(self) -> dict:
        """The charm's security group (the one it names for this model and application)."""
        name = efs_model.security_group_name(self.model.uuid, APP)
        (group,) = self.ec2.describe_security_groups(
            Filters=[{"Name": "group-name", "Values": [name]}]
        )["SecurityGroups"]
        return group

    def juju_destroys_the_model(self) -> None:
        """Terminate the machines and delete Juju's groups, through the proxy.

        AWS refuses to delete a group another group's rule references (DependencyViolation).
        """
        ec2 = self.aws.client("ec2", through_proxy=True)
        ec2.terminate_instances(InstanceIds=[i.instance_id for i in self.instances])
        for machine in range(len(self.instances)):
            ec2.delete_security_group(GroupId=self.net.machine_group(self.ec2, machine))
        ec2.delete_security_group(GroupId=self.net.node_sg)

    def mutating_aws_calls(self) -> list[str]:
        return [c.action for c in self.proxy.calls if c.mutating]

    def kube_writes(self) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.api.requests if r.method != "GET"]

    def file_systems(self) -> list[dict]:
        return self.efs.describe_file_systems()["FileSystems"]

    def mount_targets(self, fs_id: str) -> list[dict]:
        return self.efs.describe_mount_targets(FileSystemId=fs_id)["MountTargets"]

    def pv(self, name: str) -> dict | None:
        return self.api.get_object(f"/api/v1/persistentvolumes/{name}")

    def pvc(self, namespace: str, name: str) -> dict | None:
        return self.api.get_object(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")

    def bind(self, namespace: str, name: str) -> None:
        """Do what the PV controller does: mark the claim Bound."""
        claim = self.pvc(namespace, name)
        assert claim is not None, f"no claim {namespace}/{name}"
        claim["status"] = {"phase": "Bound"}
        self.api.put_object(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}", claim)

    def add_pod(self, namespace: str, name: str, claim: str, phase: str = "Running") -> None:
        self.api.put_object(
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            {
                "spec": {
                    "containers": [{"name": "c", "image": "busybox"}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
                },
                "status": {"phase": phase},
            },
        )


def cloud_spec(key_id: str, secret: str, *, region: str = REGION, kind: str = "ec2") -> Any:
    return testing.CloudSpec(
        type=kind,
        name="aws",
        region=region,
        credential=testing.CloudCredential(
            auth_type="access-key", attributes={"access-key": key_id, "secret-key": secret}
        ),
    )


def storage_relation(app: str, namespace: str | None, **extra: str) -> testing.Relation:
    data = {"namespace": namespace} if namespace is not None else {}
    data.update(extra)
    return testing.Relation("shared-storage", remote_app_name=app, remote_app_data=data)


class Scan:
    """Collects log records from `start()` on; `check(*outputs)` asserts no secret in any."""

    def __init__(self, caplog: pytest.LogCaptureFixture):
        self.caplog = caplog
        self.lines = 0

    def start(self) -> None:
        """Forget the records so far (test setup signs its own boto3 calls at DEBUG)."""
        self.caplog.clear()

    def check(self, *outputs: Any) -> int:
        texts = [r.getMessage() for r in self.caplog.records]
        texts += [repr(o) for o in outputs]
        for text in texts:
            for value in ALL_SECRETS:
                assert value not in text, f"secret value leaked into: {text[:300]}"
        self.lines = len(texts)
        return len(texts)


def status_texts(ctx: testing.Context, state: testing.State) -> list[str]:
    """Every status message and juju-log line of a run, with the databags."""
    texts = [str(state.unit_status), str(state.app_status)]
    texts += [log.message for log in ctx.juju_log]
    for rel in state.relations:
        texts.append(repr(dict(rel.local_app_data)))
        texts.append(repr(dict(rel.local_unit_data)))
    return texts


def installed(ctx: testing.Context, env: Env, config: dict | None = None) -> testing.State:
    """A leader serving one consumer's bound claim from a file system in two zones."""
    env.add_node("us-east-1a")
    env.add_node("us-east-1b")
    out = ctx.run(ctx.on.install(), env.state(config=config, consumers={"tensorflow": "training"}))
    env.bind("training", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active", out.unit_status.message
    return out


def dying(state: testing.State, *, drop: str | None = None) -> testing.State:
    """The application being removed (planned units 0), without the `drop` endpoint."""
    relations = [r for r in state.relations if r.endpoint != drop]
    return dataclasses.replace(state, planned_units=0, relations=relations)


def relation_of(state: testing.State, endpoint: str) -> testing.Relation:
    """The state's relation on `endpoint`."""
    return next(r for r in state.relations if r.endpoint == endpoint)
