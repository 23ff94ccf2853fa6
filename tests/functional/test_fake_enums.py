"""The fake API server refuses invalid enum values as kube-apiserver 1.36 does (issue 31 item 3).

kubernetes-validate's 1.36 schemas carry no enums; tests/fakes/kube_enums.py adds the checks
of pkg/apis/batch/validation (validateJobSpec, validatePodFailurePolicyRule...) and
pkg/apis/core/validation (ValidatePodSpec...), each answered with field.NotSupported's
message: `<path>: Unsupported value: "<v>": supported values: "<a>", "<b>"`. Each write here
is one the server accepts with one value wrong, sent through the real client (`Kube`).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from charm_modules import load

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes import crds
from fakes.batch import JOBSET, BatchControllers
from fakes.kube_apiserver import FakeKubeApiServer

CONTAINER = {"name": "c", "image": "busybox"}
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@pytest.fixture
def ns(kube: Kube, kube_api: FakeKubeApiServer) -> Kube:
    kube_api.put_object("/api/v1/namespaces/work", {"metadata": {"name": "work"}})
    return kube


def job(**spec: Any) -> dict:
    """A Job the server accepts, `spec` fields added (a pod failure policy needs Never)."""
    template = {"restartPolicy": "Never", "containers": [dict(CONTAINER)]}
    body = {
        "selector": {"matchLabels": {"app": "j"}},
        "manualSelector": True,
        "template": {"metadata": {"labels": {"app": "j"}}, "spec": template},
        **spec,
    }
    meta = {"name": "j", "namespace": "work"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": body}


def pod(**spec: Any) -> dict:
    body = {"containers": [dict(CONTAINER)], **spec}
    meta = {"name": "p", "namespace": "work"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def refused(kube: Kube, obj: dict) -> str:
    with pytest.raises(KubeError) as info:
        kube.create(obj)
    assert (info.value.status, info.value.reason) == (422, "Invalid"), info.value.message
    return info.value.message


def rule(action: str = "FailJob", operator: str = "In") -> dict:
    return {"action": action, "onExitCodes": {"operator": operator, "values": [42]}}


def with_template(obj: dict, **fields: Any) -> dict:
    out = copy.deepcopy(obj)
    out["spec"]["template"]["spec"].update(fields)
    return out


JOB_CASES = [
    (
        job(completionMode="Indexd"),
        'spec.completionMode: Unsupported value: "Indexd": '
        'supported values: "NonIndexed", "Indexed"',
    ),
    (
        job(podFailurePolicy={"rules": [rule(action="FailJobs")]}),
        'spec.podFailurePolicy.rules[0].action: Unsupported value: "FailJobs": '
        'supported values: "Count", "FailIndex", "FailJob", "Ignore"',
    ),
    (
        job(podFailurePolicy={"rules": [rule(operator="Inn")]}),
        'spec.podFailurePolicy.rules[0].onExitCodes.operator: Unsupported value: "Inn": '
        'supported values: "In", "NotIn"',
    ),
    (
        job(
            podFailurePolicy={
                "rules": [
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "Yes"}],
                    }
                ]
            }
        ),
        'spec.podFailurePolicy.rules[0].onPodConditions[0].status: Unsupported value: "Yes": '
        'supported values: "False", "True", "Unknown"',
    ),
    (
        job(podReplacementPolicy="Terminating"),
        'spec.podReplacementPolicy: Unsupported value: "Terminating": '
        'supported values: "Failed", "TerminatingOrFailed"',
    ),
    (
        job(podFailurePolicy={"rules": [rule()]}, podReplacementPolicy="TerminatingOrFailed"),
        'spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": '
        'supported values: "Failed"',
    ),
    (
        with_template(job(), dnsPolicy="ClusterLast"),
        'spec.template.spec.dnsPolicy: Unsupported value: "ClusterLast": supported values: '
        '"ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"',
    ),
    (
        with_template(job(), restartPolicy="Always"),
        'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"',
    ),
    # on a Pod the Priority admission plugin answers first (test_a_pods_preemption_policy_
    # is_the_priority_plugins): ValidatePreemptionPolicy is reached through templates
    (
        with_template(job(), preemptionPolicy="Always"),
        'spec.template.spec.preemptionPolicy: Unsupported value: "Always": '
        'supported values: "PreemptLowerPriority", "Never"',
    ),
]


@pytest.mark.parametrize(("obj", "error"), JOB_CASES)
def test_a_job_with_an_unsupported_value_is_refused(ns: Kube, obj: dict, error: str):
    assert refused(ns, obj) == f'Job.batch "j" is invalid: {error}'


def test_a_job_template_restart_policy_sometimes_is_refused_twice(ns: Kube):
    """The pod spec's check (three values), then validateJobSpec's (two)."""
    message = refused(ns, with_template(job(), restartPolicy="Sometimes"))
    path = "spec.template.spec.restartPolicy"
    assert message == (
        f'Job.batch "j" is invalid: [{path}: Unsupported value: "Sometimes": supported values: '
        f'"Always", "OnFailure", "Never", {path}: Unsupported value: "Sometimes": '
        'supported values: "OnFailure", "Never"]'
    )


VOLUME_POD = pod(
    volumes=[{"name": "v", "hostPath": {"path": "/", "type": "Directory"}}],
    containers=[{**CONTAINER, "volumeMounts": [{"name": "v", "mountPath": "/host"}]}],
)


def mounted(**mount: Any) -> dict:
    out = copy.deepcopy(VOLUME_POD)
    out["spec"]["containers"][0]["volumeMounts"][0].update(mount)
    return out


def host_path(kind: str) -> dict:
    out = copy.deepcopy(VOLUME_POD)
    out["spec"]["volumes"][0]["hostPath"]["type"] = kind
    return out


def node_affinity(operator: str, preferred: str | None = None) -> dict:
    """A required node selector term with `operator` (and a preferred one with `preferred`)."""
    expression: dict[str, Any] = {"key": "k", "operator": operator, "values": ["v"]}
    if operator in ("Exists", "DoesNotExist"):  # ValidateNodeSelectorRequirement: no values
        del expression["values"]
    required = {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
    node: dict[str, Any] = {"requiredDuringSchedulingIgnoredDuringExecution": required}
    if preferred:
        term = {"matchExpressions": [{"key": "k", "operator": preferred, "values": ["v"]}]}
        node["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 1, "preference": term}
        ]
    return {"nodeAffinity": node}


POD_CASES = [
    (
        pod(containers=[{**CONTAINER, "imagePullPolicy": "Sometimes"}]),
        'spec.containers[0].imagePullPolicy: Unsupported value: "Sometimes": '
        'supported values: "Always", "IfNotPresent", "Never"',
    ),
    (
        pod(containers=[{**CONTAINER, "ports": [{"containerPort": 80, "protocol": "tcp"}]}]),
        'spec.containers[0].ports[0].protocol: Unsupported value: "tcp": '
        'supported values: "SCTP", "TCP", "UDP"',
    ),
    (
        pod(securityContext={"seccompProfile": {"type": "Default"}}),
        'spec.securityContext.seccompProfile.type: Unsupported value: "Default": '
        'supported values: "Localhost", "RuntimeDefault", "Unconfined"',
    ),
    (
        pod(tolerations=[{"key": "k", "operator": "Exist", "effect": "NoSchedule"}]),
        'spec.tolerations[0].operator: Unsupported value: "Exist": '
        'supported values: "Equal", "Exists"',
    ),
    (
        pod(restartPolicy="Sometimes"),
        'spec.restartPolicy: Unsupported value: "Sometimes": '
        'supported values: "Always", "OnFailure", "Never"',
    ),
    (
        host_path("Dir"),
        'spec.volumes[0].hostPath.type: Unsupported value: "Dir": supported values: "", '
        '"BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", '
        '"FileOrCreate", "Socket"',
    ),
    (
        mounted(mountPropagation="HostToContainers"),
        "spec.containers[0].volumeMounts[0].mountPropagation: Unsupported value: "
        '"HostToContainers": supported values: "Bidirectional", "HostToContainer", "None"',
    ),
    (
        mounted(mountPropagation="Bidirectional"),
        "spec.containers[0].volumeMounts[0].mountPropagation: Forbidden: "
        "Bidirectional mount propagation is available only to privileged containers",
    ),
    (
        pod(affinity=node_affinity("Exist")),
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
        'nodeSelectorTerms[0].matchExpressions[0].operator: Invalid value: "Exist": '
        "not a valid selector operator",
    ),
    (
        pod(affinity=node_affinity("NotIn", preferred="Equals")),
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]."
        'preference.matchExpressions[0].operator: Invalid value: "Equals": '
        "not a valid selector operator",
    ),
    (
        pod(affinity=node_affinity("In", preferred="Exists")),
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]."
        "preference.matchExpressions[0].values: Forbidden: may not be specified when "
        "`operator` is 'Exists' or 'DoesNotExist'",
    ),
]


@pytest.mark.parametrize(("obj", "error"), POD_CASES)
def test_a_pod_with_an_unsupported_value_is_refused(ns: Kube, obj: dict, error: str):
    assert refused(ns, obj) == f'Pod "p" is invalid: {error}'


def test_a_pods_preemption_policy_is_the_priority_plugins(ns: Kube):
    """A Pod's bad preemptionPolicy is the Priority plugin's 403, not validation's 422.

    kube-apiserver runs mutating admission before validation: the Priority plugin
    (plugin/pkg/admission/priority/admission.go admitPod) computes the pod's policy from
    its class and refuses one that differs.
    """
    with pytest.raises(KubeError) as info:
        ns.create(pod(preemptionPolicy="Always"))
    assert info.value.status == 403, info.value.message
    assert "the string value of PreemptionPolicy (Always) must not be provided in pod spec" in (
        info.value.message
    )


def test_supported_values_are_accepted(ns: Kube):
    ns.create(job(completionMode="Indexed", completions=1, podFailurePolicy={"rules": [rule()]}))
    ns.create(
        pod(
            dnsPolicy="ClusterFirst",
            securityContext={"seccompProfile": {"type": "RuntimeDefault"}},
        )
    )


def test_a_jobset_whose_job_template_has_an_unsupported_value_gets_no_job(kube_api):
    """JobSet's webhook does not validate the Job template; the Job's create is refused.

    Before, the fake controllers stored the Job as built (`BatchControllers._put`).

    jobset v0.12.0 pkg/webhooks/jobset_webhook.go ValidateCreate checks names, targets and
    in-place restart settings only, so the JobSet is stored; its controller's create of
    the Job is answered 422 and recorded as a JobCreationFailed event (createJobs).
    """
    kube_api.put_object("/api/v1/namespaces/work", {"metadata": {"name": "work"}})
    kube_api.put_shared(f"{CRDS}/{crds.JOBSET}", crds.shared(crds.JOBSET))
    controllers = BatchControllers(kube_api, "work")
    controllers.managed = False  # not Kueue's: the JobSet runs at once
    template = {"restartPolicy": "Never", "containers": [dict(CONTAINER)]}
    job_spec = {"completionMode": "Indexd", "completions": 1, "parallelism": 1}
    job_spec["template"] = {"metadata": {}, "spec": template}
    spec = {
        "network": {"subdomain": "js"},
        "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": job_spec}}],
    }
    kube_api.put_object(f"{JOBSET}/namespaces/work/jobsets/js", {"spec": spec})
    for _ in range(3):
        controllers.tick()
    assert kube_api.objects("/apis/batch/v1/namespaces/work/jobs/") == []
    message = (
        'job "js-w-0" creation failed with error: Job.batch "js-w-0" is invalid: '
        'spec.completionMode: Unsupported value: "Indexd": '
        'supported values: "NonIndexed", "Indexed"'
    )
    assert set(controllers.refused) == {message}  # each reconcile tries again
    events = kube_api.objects("/api/v1/namespaces/work/events/")
    assert {(e["reason"], e["message"]) for e in events} == {("JobCreationFailed", message)}
    # written through events.k8s.io/v1 (GetEventRecorder), the same Event in both groups
    (event,) = kube_api.objects("/apis/events.k8s.io/v1/namespaces/work/events/")
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert (event["reportingController"], event["action"]) == ("jobset", "Reconciling")
    assert (event["type"], event["reason"], event["note"]) == (
        "Warning",
        "JobCreationFailed",
        message,
    )
    assert event["regarding"]["kind"] == "JobSet" and event["regarding"]["name"] == "js"
    assert event["series"]["count"] == 2  # the broadcaster's cache: later ones in memory
    assert events[0]["metadata"]["name"] == event["metadata"]["name"]
    assert events[0]["reportingComponent"] == "jobset"
    assert events[0]["involvedObject"] == event["regarding"]


def test_validate_jobset_checks_each_job_as_the_server_will():
    """`fakes.crds.validate_jobset` refuses what the JobSet's Jobs would be refused for."""
    job_spec = {"completions": 1, "parallelism": 1, "podReplacementPolicy": "Whenever"}
    job_spec["template"] = {"spec": {"containers": [dict(CONTAINER)]}}
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "work"},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": job_spec}}]},
    }
    with pytest.raises(
        ValueError, match=r'spec.podReplacementPolicy: Unsupported value: "Whenever"'
    ):
        crds.validate_jobset(js)
    job_spec["podReplacementPolicy"] = "Failed"
    crds.validate_jobset(js)  # restartPolicy and completionMode: the webhook's defaults


def _obj(api_version: str, kind: str, spec: dict, name: str = "x") -> dict:
    meta = {"name": name, "namespace": "work"}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


def service(**spec: Any) -> dict:
    return _obj("v1", "Service", {"ports": [{"port": 80}], "selector": {"app": "a"}, **spec})


def daemonset(**spec: Any) -> dict:
    template = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [dict(CONTAINER)]}}
    body = {"selector": {"matchLabels": {"app": "a"}}, "template": template, **spec}
    return _obj("apps/v1", "DaemonSet", body)


def deployment(**spec: Any) -> dict:
    obj = daemonset(**spec)
    obj["kind"] = "Deployment"
    return obj


SERVICE_CASES = [
    (
        service(type="Headless"),
        'spec.type: Unsupported value: "Headless": '
        'supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"',
    ),
    (
        service(ports=[{"port": 80, "protocol": "HTTP"}]),
        'spec.ports[0].protocol: Unsupported value: "HTTP": '
        'supported values: "SCTP", "TCP", "UDP"',
    ),
    (
        service(sessionAffinity="Sticky"),
        'spec.sessionAffinity: Unsupported value: "Sticky": supported values: "ClientIP", "None"',
    ),
    (
        service(type="NodePort", externalTrafficPolicy="Nearest"),
        'spec.externalTrafficPolicy: Unsupported value: "Nearest": '
        'supported values: "Cluster", "Local"',
    ),
    (
        service(externalTrafficPolicy="Local"),
        'spec.externalTrafficPolicy: Invalid value: "Local": '
        "may only be set for externally-accessible services",
    ),
    (
        service(internalTrafficPolicy="Node"),
        'spec.internalTrafficPolicy: Unsupported value: "Node": '
        'supported values: "Cluster", "Local"',
    ),
    (
        service(ipFamilyPolicy="DualStack"),
        'spec.ipFamilyPolicy: Unsupported value: "DualStack": '
        'supported values: "PreferDualStack", "RequireDualStack", "SingleStack"',
    ),
    (
        service(ipFamilies=["IPv5"]),
        'spec.ipFamilies[0]: Unsupported value: "IPv5": supported values: "IPv4", "IPv6"',
    ),
]


@pytest.mark.parametrize(("obj", "error"), SERVICE_CASES)
def test_a_service_with_an_unsupported_value_is_refused(ns: Kube, obj: dict, error: str):
    assert refused(ns, obj) == f'Service "x" is invalid: {error}'


def test_a_priority_class_preemption_policy_is_checked(kube: Kube):
    """ValidatePriorityClass checks preemptionPolicy at the top level (no `spec.`)."""
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": 10}
    pc["metadata"] = {"name": "pc"}
    message = refused(kube, {**pc, "preemptionPolicy": "Sometimes"})
    assert message == (
        'PriorityClass.scheduling.k8s.io "pc" is invalid: preemptionPolicy: Unsupported '
        'value: "Sometimes": supported values: "PreemptLowerPriority", "Never"'
    )
    kube.create({**pc, "preemptionPolicy": "Never"})


def test_a_workload_strategy_type_is_refused_with_the_whole_strategy(ns: Kube):
    """The apps validators pass the internal struct: encoding/json prints its Go field names."""
    message = refused(ns, daemonset(updateStrategy={"type": "Rolling"}))
    assert message == (
        'DaemonSet.apps "x" is invalid: spec.updateStrategy: Unsupported value: '
        '{"Type":"Rolling","RollingUpdate":null}: supported values: "RollingUpdate", "OnDelete"'
    )
    strategy = {"type": "Rolling", "rollingUpdate": {"maxUnavailable": "25%"}}
    message = refused(ns, deployment(strategy=strategy))
    assert message == (
        'Deployment.apps "x" is invalid: spec.strategy: Unsupported value: {"Type":"Rolling",'
        '"RollingUpdate":{"MaxUnavailable":"25%","MaxSurge":0}}: '
        'supported values: "Recreate", "RollingUpdate"'
    )


def test_a_network_policy_type_and_a_claim_volume_mode_are_checked(ns: Kube):
    policy = _obj("networking.k8s.io/v1", "NetworkPolicy", {"podSelector": {}})
    policy["spec"]["policyTypes"] = ["Ingress", "ingress"]
    assert refused(ns, policy) == (
        'NetworkPolicy.networking.k8s.io "x" is invalid: spec.policyTypes[1]: '
        'Unsupported value: "ingress": supported values: "Ingress", "Egress"'
    )
    policy["spec"]["policyTypes"] = ["Ingress"]
    policy["spec"]["ingress"] = [{"ports": [{"port": 80, "protocol": "tcp"}]}]
    assert refused(ns, policy) == (
        'NetworkPolicy.networking.k8s.io "x" is invalid: spec.ingress[0].ports[0].protocol: '
        'Unsupported value: "tcp": supported values: "TCP", "UDP", "SCTP"'
    )
    claim_spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}
    claim = _obj("v1", "PersistentVolumeClaim", {**claim_spec, "volumeMode": "Files"})
    assert refused(ns, claim) == (
        'PersistentVolumeClaim "x" is invalid: spec.volumeMode: Unsupported value: "Files": '
        'supported values: "Block", "Filesystem"'
    )
    claim["spec"] |= {"volumeMode": "Filesystem", "accessModes": ["ReadWriteAll"]}
    assert refused(ns, claim) == (
        'PersistentVolumeClaim "x" is invalid: spec.accessModes: Unsupported value: '
        '"ReadWriteAll": supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", '
        '"ReadWriteOncePod"'
    )


def volume(**spec: Any) -> dict:
    """A PersistentVolume as efs-storage writes one (an NFS source), `spec` fields added."""
    body = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteMany"],
        "nfs": {"server": "fs-1.efs.example.com", "path": "/"},
        **spec,
    }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv"},
        "spec": body,
    }


def test_a_volume_access_mode_and_reclaim_policy_are_checked(kube: Kube):
    """ValidatePersistentVolumeSpec: accessModes (no index in the path), then the policy."""
    assert refused(kube, volume(accessModes=["ReadWriteMany", "RWX"])) == (
        'PersistentVolume "pv" is invalid: spec.accessModes: Unsupported value: "RWX": '
        'supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"'
    )
    assert refused(kube, volume(persistentVolumeReclaimPolicy="Keep")) == (
        'PersistentVolume "pv" is invalid: spec.persistentVolumeReclaimPolicy: Unsupported '
        'value: "Keep": supported values: "Delete", "Recycle", "Retain"'
    )
    kube.create(volume(persistentVolumeReclaimPolicy="Retain", volumeMode="Filesystem"))


def named(obj: dict, name: str) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"]["name"] = name
    return out


def test_the_new_enums_supported_values_are_accepted(ns: Kube):
    """The values the charms write (hostPath types, HostToContainer, Service fields...)."""
    for i, kind in enumerate(("Directory", "DirectoryOrCreate", "")):
        ns.create(named(host_path(kind), f"h{i}"))
    ns.create(named(mounted(mountPropagation="HostToContainer"), "m"))
    privileged = mounted(mountPropagation="Bidirectional")
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    ns.create(named(privileged, "b"))
    ns.create(named(pod(preemptionPolicy="PreemptLowerPriority"), "pp"))
    fields = {"sessionAffinity": "None", "internalTrafficPolicy": "Cluster"}
    fields |= {"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4"]}
    ns.create(named(service(type="ClusterIP", **fields), "s1"))
    ns.create(named(service(type="NodePort", externalTrafficPolicy="Local"), "s2"))
    ns.create(daemonset(updateStrategy={"type": "RollingUpdate"}))
    ns.create(deployment(strategy={"type": "Recreate"}))
    ns.create(named(pod(affinity=node_affinity("DoesNotExist", preferred="In")), "na"))
    policy = _obj("networking.k8s.io/v1", "NetworkPolicy", {"podSelector": {}})
    policy["spec"]["policyTypes"] = ["Ingress", "Egress"]
    policy["spec"]["egress"] = [{"ports": [{"port": 53, "protocol": "UDP"}]}]
    ns.create(policy)


def test_a_network_policy_peer_is_checked_as_validate_ip_block_does(ns: Kube):
    """ValidateNetworkPolicyPeer and ValidateIPBlock (pkg/apis/networking/validation).

    An `except` must be a strict subset of its `cidr` (inside it and a longer prefix); an
    ipBlock stands alone in its peer; a peer names something. The control plane's own
    egress allow-list passes, its pod CIDR excepted too.
    """
    policy = _obj("networking.k8s.io/v1", "NetworkPolicy", {"podSelector": {}})
    bad = (
        (
            {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]}},
            "spec.egress[0].to[0].ipBlock.except[0]: Invalid value: "
            '"10.0.0.0/8": must be a strict subset of `cidr`',
        ),
        (
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["fd00:ec2::254/128"]}},
            "spec.egress[0].to[0].ipBlock.except[0]: Invalid value: "
            '"fd00:ec2::254/128": must be a strict subset of `cidr`',
        ),
        (
            {"ipBlock": {"cidr": "10.0.0.0/33"}},
            'spec.egress[0].to[0].ipBlock.cidr: Invalid value: "10.0.0.0/33": '
            "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
        ),
        (
            {"ipBlock": {"cidr": "10.0.0.0/8"}, "namespaceSelector": {}},
            "spec.egress[0].to[0]: Forbidden: may not specify both ipBlock and another peer",
        ),
        ({}, "spec.egress[0].to[0]: Required value: must specify a peer"),
    )
    for peer, message in bad:
        policy["spec"]["egress"] = [{"to": [peer]}]
        assert refused(ns, policy) == f'NetworkPolicy.networking.k8s.io "x" is invalid: {message}'
    netpol = load("kubernetes-control-plane", "network_policies")
    for obj in netpol.manifests(["work"], "198.18.0.0/16"):
        ns.create(obj)


def test_a_claim_without_a_storage_request_is_refused(ns: Kube):
    """ValidatePersistentVolumeClaimSpec: the storage request is required, after accessModes."""
    claim = _obj("v1", "PersistentVolumeClaim", {"accessModes": ["ReadWriteMany"]})
    assert refused(ns, claim) == (
        'PersistentVolumeClaim "x" is invalid: spec.resources[storage]: Required value'
    )
    del claim["spec"]
    assert refused(ns, claim) == (
        'PersistentVolumeClaim "x" is invalid: [spec.accessModes: Required value: at least 1 '
        "access mode is required, spec.resources[storage]: Required value]"
    )
    claim["spec"] = {"accessModes": ["RWX"], "resources": {"requests": {"cpu": "1"}}}
    assert refused(ns, claim) == (
        'PersistentVolumeClaim "x" is invalid: [spec.accessModes: Unsupported value: "RWX": '
        'supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", '
        '"ReadWriteOncePod", spec.resources[storage]: Required value]'
    )


def test_a_seeded_pod_phase_is_one_a_kubelet_writes(kube_api: FakeKubeApiServer):
    """core/v1 PodPhase: a seed (or a fake controller) writing another phase is refused.

    kube-apiserver itself stores any phase (ValidatePodStatusUpdate reads none), so the
    refusal is the fake's ValueError, not a 422: no kubelet writes such a phase.
    """
    path = "/api/v1/namespaces/work/pods/p"
    kube_api.put_object("/api/v1/namespaces/work", {"metadata": {"name": "work"}})
    with pytest.raises(ValueError, match='status.phase "running"'):
        kube_api.put_object(path, {**pod(), "status": {"phase": "running"}})
    assert kube_api.get_object(path) is None
    for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        kube_api.put_object(path, {**pod(), "status": {"phase": phase}})
