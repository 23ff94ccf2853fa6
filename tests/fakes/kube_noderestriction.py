"""The fake Kubernetes API server's NodeRestriction admission plugin, as kube-apiserver 1.36's.

kubeadm turns it on: its kube-apiserver static pod carries
`--enable-admission-plugins=NodeRestriction` (kubernetes cmd/kubeadm/app/phases/controlplane/
manifests.go getAPIServerCommand, whose defaultArguments hold `{Name:
"enable-admission-plugins", Value: "NodeRestriction"}`).

Source: kubernetes/kubernetes plugin/pkg/admission/noderestriction/admission.go (the 1.34
version, plus the ownerReferences check of PR #133467, CVE-2025-5187, merged for 1.34 and
backported), its admission_test.go, pkg/api/pod/util.go `HasAPIObjectReference`,
k8s.io/kubelet pkg/apis/well_known_labels.go (the kubelet's labels), pkg/auth/nodeidentifier/
default.go (who is a node) and k8s.io/apiserver pkg/admission/errors.go `NewForbidden`.
The messages are upstream's words; our code.

Who: a request whose user is `system:node:<name>` in the group `system:nodes`; a user in that
group named just `system:node:` is refused ("could not determine node from user"). Anyone
else passes untouched. It handles create, update (patch and apply are updates, or a create
when apply makes the object) and delete, including the subresources, and runs before the
object's validation and PodSecurity, as mutating admission does (k8s.io/apiserver
pkg/endpoints/handlers/create.go, update.go, delete.go).

A refusal is `admission.NewForbidden`: 403 `Forbidden`, `<resource>[.<group>] "<name>" is
forbidden: <reason>`, the name the URL's, else the object's (or its generateName), else
`Unknown`. A pod or node the plugin looks up in its informer and misses is the lister's 404,
`pod "<name>" not found` / `node "<name>" not found` (client-go listers name the resource in
the singular).

Emulated, for the resources the fake serves:
- pods: create only a mirror pod (annotation `kubernetes.io/config.mirror`) with
  `spec.nodeName` itself, exactly one ownerReference, to its own Node (apiVersion v1, kind
  Node, its name and uid, `controller: true`, `blockOwnerDeletion` not true), referencing no
  other API object (HasAPIObjectReference: serviceAccountName, secrets, configmaps,
  resourceClaims, and volumes other than the node-local kinds); delete only pods bound to
  itself; no update or patch of the pod; `pods/status` only of pods bound to itself, without
  changing their labels, `status.resourceClaimStatuses` or
  `status.extendedResourceClaimStatus`; `pods/eviction` only of pods bound to itself (the
  URL's name, else the Eviction's); any other pod subresource refused.
- nodes: a node writes only its own Node; on create no `spec.configSource` and no forbidden
  label; on update no new non-nil `spec.configSource`, no change to `spec.taints`, to
  `metadata.ownerReferences` or to a forbidden label. Forbidden labels: the
  `node-restriction.kubernetes.io/` prefix (and its subdomains), and any `kubernetes.io` or
  `k8s.io` label (or subdomain) that is not the kubelet's: kubernetes.io/hostname,
  kubernetes.io/os, kubernetes.io/arch, beta.kubernetes.io/os, beta.kubernetes.io/arch,
  node.kubernetes.io/instance-type, beta.kubernetes.io/instance-type,
  topology.kubernetes.io/zone and /region, failure-domain.beta.kubernetes.io/zone and
  /region, and the `kubelet.kubernetes.io/` and `node.kubernetes.io/` prefixes.
- persistentvolumeclaims: only `status`, and only `status.capacity`, `status.conditions`,
  `status.allocatedResources` and `status.allocatedResourceStatuses` may change
  (RecoverVolumeExpansionFailure is GA); the refusal ends with a diff whose text is ours
  (upstream prints go-cmp's, which is unstable on purpose).
- serviceaccounts/token: a node's TokenRequest must be bound to a pod (`boundObjectRef` v1
  Pod with a name and uid), that pod must exist with that uid and be bound to the node; and
  (ServiceAccountNodeAudienceRestriction, beta and on since 1.33) it asks for at most one
  audience, one a projected serviceAccountToken volume of the pod names, unless the
  authorizers allow the node the verb `request-serviceaccounts-token-audience` on that
  audience as resource.
- leases: only in `kube-node-lease`, only the one named after the node.

Not emulated: CSINodes, ResourceSlices, CertificateSigningRequests and PodCertificateRequests
(the fake does not serve them), the CSI driver paths of the audience check (CSIDrivers are
not served either), and the RecoverVolumeExpansionFailure and
AllowInsecureKubeletCertificateSigningRequests gates being off.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from fakes.kube_auth import NODE_PREFIX, NODES, Attributes, AuthError, UserInfo, forbidden

MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"  # pkg/apis/core MirrorPodAnnotationKey
NODE_LEASE_NAMESPACE = "kube-node-lease"  # pkg/apis/core NamespaceNodeLease
NODE_RESTRICTION_NAMESPACE = "node-restriction.kubernetes.io"  # LabelNamespaceNodeRestriction
KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    }
)
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
# pkg/api/pod/util.go HasAPIObjectReference: volume kinds that need no API object
_LOCAL_VOLUMES = (
    "awsElasticBlockStore azureDisk cephfs cinder downwardAPI emptyDir fc flexVolume flocker "
    "gcePersistentDisk gitRepo hostPath image iscsi nfs photonPersistentDisk portworxVolume "
    "quobyte rbd scaleIO storageos vsphereVolume"
).split()
_REFERENCING_VOLUMES = {
    "configMap": "configmaps (via configmap volumes)",
    "secret": "secrets (via secret volumes)",
    "csi": "csidrivers (via CSI volumes)",
    "glusterfs": "endpoints (via glusterFS volumes)",
    "persistentVolumeClaim": "persistentvolumeclaims",
    "ephemeral": "persistentvolumeclaims (via ephemeral volumes)",
    "azureFile": "secrets (via azureFile volumes)",
}
_REFERENCING_PROJECTIONS = {
    "configMap": "configmaps (via projected volumes)",
    "secret": "secrets (via projected volumes)",
    "serviceAccountToken": "serviceaccounts (via projected volumes)",
    "clusterTrustBundle": "clustertrustbundles",
    "podCertificate": "podcertificates",
}
# volume sources whose secretRef names a Secret (pkg/api/pod/util.go VisitPodSecretNames)
_SECRET_REF_VOLUMES = ("cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "storageos")


def node_identity(user: UserInfo) -> tuple[str, bool]:
    """pkg/auth/nodeidentifier/default.go NodeIdentity: (node name, whether a node)."""
    if not user.name.startswith(NODE_PREFIX) or NODES not in user.groups:
        return "", False
    return user.name[len(NODE_PREFIX) :], True


def _q(value: str) -> str:
    """Go's %q."""
    return json.dumps(value, ensure_ascii=False)


def _empty(value: Any) -> Any:
    """apiequality.Semantic treats a nil and an empty slice or map alike."""
    return value if value else None


def _not_found(resource: str, name: str) -> AuthError:
    """A lister's NotFound (client-go listers: `v1.Resource("pod")`, singular)."""
    return AuthError(
        404, "NotFound", f"{resource} {_q(name)} not found", {"name": name, "kind": resource}
    )


class NodeRestriction:
    """The plugin: `admit` raises the refusal (AuthError) or returns.

    `store` maps storage paths to objects (the informers' view); `authorize` is the server's
    authorizer chain, for the token audience check.
    """

    def __init__(
        self, store: Mapping[str, dict], authorize: Callable[[Attributes], tuple[bool, str]]
    ) -> None:
        self._store = store
        self._authorize = authorize

    def admit(
        self,
        user: UserInfo,
        operation: str,
        *,
        group: str,
        resource: str,
        subresource: str,
        namespace: str,
        name: str,
        obj: dict | None,
        old: dict | None,
    ) -> None:
        """Admit one create, update or delete (`operation` CREATE, UPDATE or DELETE)."""
        node, is_node = node_identity(user)
        if not is_node:
            return
        request = _Request(
            user, operation, group, resource, subresource, namespace, name, obj, old
        )
        if not node:
            request.forbid(f"could not determine node from user {_q(user.name)}")
        check = {
            ("", "pods"): self._pod,
            ("", "nodes"): self._node,
            ("", "persistentvolumeclaims"): self._pvc,
            ("", "serviceaccounts"): self._service_account,
            ("coordination.k8s.io", "leases"): self._lease,
        }.get((group, resource))
        if check is not None:
            check(node, request)

    # -- pods

    def _existing_pod(self, namespace: str, name: str) -> dict:
        pod = self._store.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        if pod is None:
            raise _not_found("pod", name)
        return pod

    def _pod(self, node: str, a: _Request) -> None:
        if a.subresource == "":
            if a.operation == "CREATE":
                return self._pod_create(node, a)
            if a.operation == "DELETE":
                pod = self._existing_pod(a.namespace, a.name)
                if _node_name(pod) != node:
                    a.forbid(
                        f"node {_q(node)} can only delete pods with spec.nodeName set to itself"
                    )
                return None
            a.forbid(
                f"unexpected operation {_q(a.operation)}, node {_q(node)} can only create and "
                "delete mirror pods"
            )
        if a.subresource == "status":
            return self._pod_status(node, a)
        if a.subresource == "eviction":
            return self._pod_eviction(node, a)
        a.forbid(
            f"unexpected pod subresource {_q(a.subresource)}, only 'status' and 'eviction' are "
            "allowed"
        )
        return None

    def _pod_create(self, node: str, a: _Request) -> None:
        pod = a.obj or {}
        meta = pod.get("metadata") or {}
        if MIRROR_POD_ANNOTATION not in (meta.get("annotations") or {}):
            a.forbid(
                f"pod does not have {_q(MIRROR_POD_ANNOTATION)} annotation, node {_q(node)} can "
                "only create mirror pods"
            )
        if _node_name(pod) != node:
            a.forbid(f"node {_q(node)} can only create pods with spec.nodeName set to itself")
        self._mirror_pod_owner(node, a, meta.get("ownerReferences") or [])
        referenced = api_object_reference(pod)
        if referenced:
            a.forbid(f"node {_q(node)} can not create pods that reference {referenced}")

    def _mirror_pod_owner(self, node: str, a: _Request, owners: list[dict]) -> None:
        """A mirror pod's one ownerReference: a controller reference to its own Node."""
        if len(owners) > 1:
            a.forbid(
                f"node {_q(node)} can only create pods with a single owner reference set to itself"
            )
        if not owners:
            a.forbid(f"node {_q(node)} can only create pods with an owner reference set to itself")
        owner = owners[0]
        if (owner.get("apiVersion"), owner.get("kind"), owner.get("name")) != ("v1", "Node", node):
            a.forbid(f"node {_q(node)} can only create pods with an owner reference set to itself")
        if not owner.get("controller"):
            a.forbid(
                f"node {_q(node)} can only create pods with a controller owner reference set to "
                "itself"
            )
        if owner.get("blockOwnerDeletion"):
            a.forbid(f"node {_q(node)} must not set blockOwnerDeletion on an owner reference")
        node_obj = self._store.get(f"/api/v1/nodes/{node}")
        if node_obj is None:
            raise _not_found("node", node)
        node_uid = node_obj["metadata"].get("uid", "")
        if owner.get("uid", "") != node_uid:
            a.forbid(f"node {node} UID mismatch: expected {owner.get('uid', '')} got {node_uid}")

    def _pod_status(self, node: str, a: _Request) -> None:
        if a.operation != "UPDATE":
            a.forbid(f"unexpected operation {_q(a.operation)}")
        old, new = a.old or {}, a.obj or {}
        if _node_name(old) != node:
            a.forbid(
                f"node {_q(node)} can only update pod status for pods with spec.nodeName set to "
                "itself"
            )
        if _empty(old["metadata"].get("labels")) != _empty(new["metadata"].get("labels")):
            a.forbid(f"node {_q(node)} cannot update labels through pod status")
        old_status, new_status = old.get("status") or {}, new.get("status") or {}
        if _claim_statuses(old_status) != _claim_statuses(new_status):
            a.forbid(f"node {_q(node)} cannot update resource claim statues")
        extended = "extendedResourceClaimStatus"
        if old_status.get(extended) != new_status.get(extended):
            a.forbid(f"node {_q(node)} cannot update extended resource claim status")

    def _pod_eviction(self, node: str, a: _Request) -> None:
        if a.operation != "CREATE":
            a.forbid(f"unexpected operation {a.operation}")
        name = a.name or ((a.obj or {}).get("metadata") or {}).get("name", "")
        if not name:
            a.forbid("could not determine pod from request data")
        pod = self._existing_pod(a.namespace, name)
        if _node_name(pod) != node:
            a.forbid(f"node {node} can only evict pods with spec.nodeName set to itself")

    # -- nodes

    def _node(self, node: str, a: _Request) -> None:
        if a.name != node:
            a.forbid(f"node {_q(node)} is not allowed to modify node {_q(a.name)}")
        new = a.obj or {}
        spec = new.get("spec") or {}
        labels = (new.get("metadata") or {}).get("labels") or {}
        if a.operation == "CREATE":
            if spec.get("configSource") is not None:
                a.forbid(
                    f"node {_q(node)} is not allowed to create pods with a non-nil configSource"
                )
            bad = forbidden_labels(modified_labels(labels, {}))
            if bad:
                a.forbid(
                    f"node {_q(node)} is not allowed to set the following labels: "
                    + ", ".join(bad)
                )
        if a.operation == "UPDATE":
            old = a.old or {}
            old_spec = old.get("spec") or {}
            source = spec.get("configSource")
            if source is not None and source != old_spec.get("configSource"):
                a.forbid(
                    f"node {_q(node)} is not allowed to update configSource to a new non-nil "
                    "configSource"
                )
            if _empty(spec.get("taints")) != _empty(old_spec.get("taints")):
                a.forbid(f"node {_q(node)} is not allowed to modify taints")
            old_meta = old.get("metadata") or {}
            if _empty(new["metadata"].get("ownerReferences")) != _empty(
                old_meta.get("ownerReferences")
            ):
                a.forbid(f"node {_q(node)} is not allowed to modify ownerReferences")
            bad = forbidden_labels(modified_labels(labels, old_meta.get("labels") or {}))
            if bad:
                a.forbid("is not allowed to modify labels: " + ", ".join(bad))

    # -- persistentvolumeclaims

    def _pvc(self, node: str, a: _Request) -> None:
        if a.subresource != "status":
            a.forbid("may only update PVC status")
        if a.operation != "UPDATE":
            a.forbid(f"unexpected operation {_q(a.operation)}")
        old, new = _pvc_fixed(a.old or {}), _pvc_fixed(a.obj or {})
        if old != new:
            diff = _diff(old, new)
            a.forbid(
                f"node {_q(node)} is not allowed to update fields other than status.quantity "
                f"and status.conditions: {diff}"
            )

    # -- serviceaccounts/token

    def _service_account(self, node: str, a: _Request) -> None:
        if a.operation != "CREATE" or a.subresource != "token":
            return
        spec = (a.obj or {}).get("spec") or {}
        ref = spec.get("boundObjectRef")
        if (
            not ref
            or ref.get("apiVersion") != "v1"
            or ref.get("kind") != "Pod"
            or not ref.get("name")
        ):
            a.forbid("node requested token not bound to a pod")
        if not ref.get("uid"):
            a.forbid("node requested token with a pod binding without a uid")
        pod = self._existing_pod(a.namespace, ref["name"])
        if ref["uid"] != pod["metadata"].get("uid"):
            a.forbid(
                f"the UID in the bound object reference ({ref['uid']}) does not match the UID in "
                "record. The object might have been deleted and then recreated"
            )
        if _node_name(pod) != node:
            a.forbid("node requested token bound to a pod scheduled on a different node")
        audiences = spec.get("audiences") or []
        if len(audiences) > 1:
            a.forbid("node may only request 0 or 1 audiences")
        audience = audiences[0] if audiences else ""
        if _pod_projects_audience(pod, audience):
            return
        attrs = Attributes(
            a.user,
            "request-serviceaccounts-token-audience",
            True,
            api_version="v1",
            namespace=a.namespace,
            resource=audience,
            name=a.name,
        )
        allowed, _reason = self._authorize(attrs)
        if not allowed:
            a.forbid(
                f"audience {_q(audience)} not found in pod spec volume, {a.user.name} is not "
                "authorized to request tokens for this audience"
            )

    # -- leases

    def _lease(self, node: str, a: _Request) -> None:
        if a.namespace != NODE_LEASE_NAMESPACE:
            a.forbid(f"can only access leases in the {_q(NODE_LEASE_NAMESPACE)} system namespace")
        if a.name != node:
            a.forbid("can only access node lease with the same name as the requesting node")


class _Request:
    """admission.Attributes, as far as the plugin reads them."""

    def __init__(
        self,
        user: UserInfo,
        operation: str,
        group: str,
        resource: str,
        subresource: str,
        namespace: str,
        name: str,
        obj: dict | None,
        old: dict | None,
    ) -> None:
        self.user, self.operation = user, operation
        self.group, self.resource, self.subresource = group, resource, subresource
        self.namespace, self.name, self.obj, self.old = namespace, name, obj, old

    def forbid(self, reason: str) -> NoReturn:
        """admission.NewForbidden: the URL's name, else the object's (errors.go)."""
        name = self.name
        if not name:
            meta = (self.obj or {}).get("metadata") or {}
            name = meta.get("name") or meta.get("generateName") or "Unknown"
        raise forbidden(self.group, self.resource, name, reason)


def _node_name(pod: Mapping) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


def _claim_statuses(status: Mapping) -> list[tuple[Any, Any]]:
    return [
        (s.get("name"), s.get("resourceClaimName"))
        for s in status.get("resourceClaimStatuses") or []
    ]


def _get_label_namespace(key: str) -> str:
    prefix, slash, _ = key.partition("/")
    return prefix if slash else ""


def _in_namespace(namespace: str, domain: str) -> bool:
    return namespace == domain or namespace.endswith("." + domain)


def is_kubelet_label(key: str) -> bool:
    """k8s.io/kubelet pkg/apis/well_known_labels.go IsKubeletLabel."""
    namespace = _get_label_namespace(key)
    return key in KUBELET_LABELS or any(
        _in_namespace(namespace, d) for d in KUBELET_LABEL_NAMESPACES
    )


def modified_labels(new: Mapping[str, str], old: Mapping[str, str]) -> set[str]:
    """getModifiedLabels: keys added, removed or changed."""
    return {k for k in set(new) | set(old) if new.get(k) != old.get(k) or (k in new) != (k in old)}


def forbidden_labels(keys: set[str]) -> list[str]:
    """getForbiddenLabels, sorted as sets.String.List() returns them."""
    bad = set()
    for key in keys:
        namespace = _get_label_namespace(key)
        if _in_namespace(namespace, NODE_RESTRICTION_NAMESPACE):
            bad.add(key)
        kubernetes = _in_namespace(namespace, "kubernetes.io") or _in_namespace(
            namespace, "k8s.io"
        )
        if kubernetes and not is_kubelet_label(key):
            bad.add(key)
    return sorted(bad)


def _containers(spec: Mapping) -> list[Mapping]:
    return [
        c
        for kind in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(kind) or []
    ]


def _references_secret(spec: Mapping) -> bool:
    """pkg/api/pod/util.go VisitPodSecretNames finds any name."""
    if any(ref.get("name") for ref in spec.get("imagePullSecrets") or []):
        return True
    for c in _containers(spec):
        if any((e.get("secretRef") or {}).get("name") for e in c.get("envFrom") or []):
            return True
        for env in c.get("env") or []:
            if ((env.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name"):
                return True
    return any(_volume_secret(volume) for volume in spec.get("volumes") or [])


def _volume_secret(volume: Mapping) -> bool:
    """Whether a volume names a Secret (VisitPodSecretNames' volume part)."""
    if (volume.get("secret") or {}).get("secretName"):
        return True
    if (volume.get("azureFile") or {}).get("secretName"):
        return True
    if ((volume.get("csi") or {}).get("nodePublishSecretRef") or {}).get("name"):
        return True
    refs = [(volume.get(kind) or {}).get("secretRef") or {} for kind in _SECRET_REF_VOLUMES]
    sources = (volume.get("projected") or {}).get("sources") or []
    return any(ref.get("name") for ref in refs) or any(
        (source.get("secret") or {}).get("name") for source in sources
    )


def _references_configmap(spec: Mapping) -> bool:
    """pkg/api/pod/util.go VisitPodConfigmapNames finds any name."""
    for c in _containers(spec):
        if any((e.get("configMapRef") or {}).get("name") for e in c.get("envFrom") or []):
            return True
        for env in c.get("env") or []:
            if ((env.get("valueFrom") or {}).get("configMapKeyRef") or {}).get("name"):
                return True
    for volume in spec.get("volumes") or []:
        if (volume.get("configMap") or {}).get("name"):
            return True
        for source in (volume.get("projected") or {}).get("sources") or []:
            if (source.get("configMap") or {}).get("name"):
                return True
    return False


def api_object_reference(pod: Mapping) -> str:
    """pkg/api/pod/util.go HasAPIObjectReference: the plural resource a pod references, or ''."""
    spec = pod.get("spec") or {}
    if spec.get("serviceAccountName"):
        return "serviceaccounts"
    if _references_secret(spec):
        return "secrets"
    if _references_configmap(spec):
        return "configmaps"
    if spec.get("resourceClaims"):
        return "resourceclaims"
    for volume in spec.get("volumes") or []:
        if any(volume.get(kind) is not None for kind in _LOCAL_VOLUMES):
            continue
        found = next((v for k, v in _REFERENCING_VOLUMES.items() if volume.get(k) is not None), "")
        if found:
            return found
        for source in (volume.get("projected") or {}).get("sources") or []:
            found = next(
                (v for k, v in _REFERENCING_PROJECTIONS.items() if source.get(k) is not None), ""
            )
            if found:
                return found
    return ""


def _pod_projects_audience(pod: Mapping, audience: str) -> bool:
    """podReferencesAudience, its projected-volume part."""
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        for source in (volume.get("projected") or {}).get("sources") or []:
            token = source.get("serviceAccountToken")
            if token is not None and (token.get("audience") or "") == audience:
                return True
    return False


def _pvc_fixed(pvc: Mapping) -> dict:
    """The PVC without what admitPVCStatus lets a node change."""
    out = json.loads(json.dumps(pvc))
    meta = out.setdefault("metadata", {})
    meta.pop("resourceVersion", None)
    meta.pop("managedFields", None)
    status = out.setdefault("status", {})
    for key in ("capacity", "conditions", "allocatedResources", "allocatedResourceStatuses"):
        status.pop(key, None)
    return out


def _diff(old: Any, new: Any, path: str = "") -> str:
    """The first paths that differ (ours: upstream prints go-cmp's unstable diff)."""
    if isinstance(old, dict) and isinstance(new, dict):
        parts = [_diff(old.get(k), new.get(k), f"{path}.{k}") for k in sorted(set(old) | set(new))]
        return "; ".join(p for p in parts if p)
    if old == new:
        return ""
    return f"{path.lstrip('.')}: {json.dumps(old)} -> {json.dumps(new)}"
