"""Release manifests of JobSet and Kueue, served from 127.0.0.1 as GitHub serves the assets.

`release_manifest(name, version)` builds a multi-document manifest with the shape of the
release asset (`kustomize build config/default` at the tag, kubernetes-sigs/jobset v0.12.0
and kubernetes-sigs/kueue v0.19.2): the namespace, the CRDs (JobSet's `jobsets` served at
v1alpha2; Kueue's kinds served at v1beta1 and v1beta2, v1beta2 stored), the controller's
ServiceAccount and RBAC, its manager ConfigMap, webhook Service and Secret, the Deployment
`<name>-controller-manager` running `registry.k8s.io/<name>/<name>:<version>`, the
mutating and validating webhook configurations, and for Kueue the visibility APIService.
Kueue's manager configuration is the shipped one in substance (Configuration
`config.kueue.x-k8s.io/v1beta2`, `waitForPodsReady` absent, which v0.19 defaults to on
with a 30m timeout, the JobSet integration listed).
It is smaller than the real asset (fewer RBAC rules, no conversion webhook): the charm treats
the objects generically, so their kinds, names and nesting are what matters. The CRDs of
the kinds the control plane writes (Cohort, ResourceFlavor, WorkloadPriorityClass) are the
real ones at the tags (`fakes.crds`, tests/fixtures/crds/), so the fake API server validates
what the control plane writes as the cluster would; JobSet's, Workload's, ClusterQueue's and
LocalQueue's, which it never writes, are stand-ins that keep every field in the manifest it
parses on each hook (the real ones are 0.75 MB, ~1 s of libyaml per parse).
`install_kueue`, which puts into a test's API server what the control plane leaves, puts
all seven real CRDs: a test's JobSet or queue is validated against its real schema.

`calico_objects()` is Calico's `calico.yaml` (projectcalico/calico manifests/ at v3.32.1):
its ConfigMap, calico-node DaemonSet and kube-controllers Deployment as upstream wrote them
(tests/fixtures/calico/), the ServiceAccounts, its ClusterRoles and bindings as
upstream wrote them (calico-v3.32.1-rbac.yaml) and 15 of its 23 `crd.projectcalico.org`
CRDs: those whose writes the control plane's ValidatingAdmissionPolicies fence
(admission_policies.py), scope Cluster, and the 4 namespaced policy kinds a team's grant
may no longer write, which the control plane's sweep deletes from a consumer's namespace
(tenant_sweep.py; the same kinds team_quota.py counts at 0), with calico.yaml's names,
scope and version (v1) and a schema that keeps every field; all in kube-system as
upstream has them.

`ManifestServer` serves `/<name>/<version>/<file>` (the `addons-mirror` layout) over
https, as GitHub does, with a certificate for 127.0.0.1 from a CA of its own (`opener()` is a
urlopen that trusts it, where the charm's trusts the system's CAs), and records the paths
asked for; `tamper` changes what it serves, `missing` answers 404.

The EFS CSI driver's base files are served as upstream wrote them
(`/aws-efs-csi-driver/v3.4.1/<file>`, from tests/fixtures/efs-csi-driver: the real bytes,
whose sha256 the control plane pins).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.server
import threading
import urllib.request
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import yaml

from charms.gpu_k8s.v0.kubeclient import Kube
from fakes import crds, kueue_visibility, serving
from fakes.tls import make_server_cert

EFS_CSI_VERSION = "v3.4.1"
EFS_CSI_DIR = Path(__file__).parent.parent / "fixtures" / "efs-csi-driver" / EFS_CSI_VERSION
EFS_CSI_PATH = f"/aws-efs-csi-driver/{EFS_CSI_VERSION}"
EFS_CSI_FILES = ("csidriver.yaml", "node-serviceaccount.yaml", "node-daemonset.yaml")


def efs_csi_file(name: str) -> bytes:
    """A base file of aws-efs-csi-driver at v3.4.1, byte for byte (the fixture)."""
    return (EFS_CSI_DIR / name).read_bytes()


JOBSET_VERSION = crds.JOBSET_VERSION
KUEUE_VERSION = crds.KUEUE_VERSION
CALICO_VERSION = "v3.32.1"
CALICO_FIXTURE = Path(__file__).parent.parent / "fixtures" / "calico"
# name -> (version, the file's name)
RELEASES = {
    "jobset": (JOBSET_VERSION, "manifests.yaml"),
    "kueue": (KUEUE_VERSION, "manifests.yaml"),
    "calico": (CALICO_VERSION, "calico.yaml"),
}
# the kinds whose real CRD the served manifest carries: those the control plane writes
_WRITTEN_BY_CONTROL_PLANE = ("ResourceFlavor", "Cohort", "WorkloadPriorityClass")
_KUEUE_KINDS = (
    ("ResourceFlavor", "resourceflavors", "Cluster"),
    ("Cohort", "cohorts", "Cluster"),
    ("WorkloadPriorityClass", "workloadpriorityclasses", "Cluster"),
    ("ClusterQueue", "clusterqueues", "Cluster"),
    ("LocalQueue", "localqueues", "Namespaced"),
    ("Workload", "workloads", "Namespaced"),
)

# kueue v0.19.2 config/components/manager/controller_manager_config.yaml, abridged; its
# integrations.frameworks as the release ships them (commented-out ones left out)
KUEUE_CONFIG = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :8081
webhook:
  port: 9443
leaderElection:
  leaderElect: true
#waitForPodsReady:
#  timeout: 5m
#manageJobsWithoutQueueName: true
integrations:
  frameworks:
  - "batch/job"
  - "kubeflow.org/mpijob"
  - "ray.io/rayjob"
  - "ray.io/raycluster"
  - "ray.io/rayservice"
  - "jobset.x-k8s.io/jobset"
  - "workload.codeflare.dev/appwrapper"
  - "trainer.kubeflow.org/trainjob"
  - "pod"
  - "deployment"
  - "statefulset"
  - "leaderworkerset.x-k8s.io/leaderworkerset"
"""


def crd(group: str, kind: str, plural: str, scope: str, versions: list[str]) -> dict:
    """A CustomResourceDefinition serving `versions` (the last one stored).

    Its schema declares no field and keeps them all (`x-kubernetes-preserve-unknown-fields`
    at the root): `{type: object}` alone would have the API server prune every field but
    apiVersion, kind and metadata (apiextensions-apiserver pkg/apiserver/schema/pruning).
    """
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural},
            "scope": scope,
            "versions": [
                {
                    "name": v,
                    "served": True,
                    "storage": v == versions[-1],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                    "subresources": {"status": {}},
                }
                for v in versions
            ],
        },
    }


def _deployment(name: str, version: str, namespace: str) -> dict:
    labels = {"control-plane": "controller-manager", "app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": f"{name}-controller-manager",
            "namespace": namespace,
            "labels": labels,
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": f"{name}-controller-manager",
                    "containers": [
                        {
                            "name": "manager",
                            "image": f"registry.k8s.io/{name}/{name}:{version}",
                            "args": ["--config=/controller_manager_config.yaml"],
                            "volumeMounts": [
                                {
                                    "name": "manager-config",
                                    "mountPath": "/controller_manager_config.yaml",
                                    "subPath": "controller_manager_config.yaml",
                                }
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "manager-config", "configMap": {"name": f"{name}-manager-config"}}
                    ],
                },
            },
        },
    }


def _webhooks(name: str, namespace: str, group: str) -> list[dict]:
    client = {"service": {"name": f"{name}-webhook-service", "namespace": namespace}}
    hook = {
        "admissionReviewVersions": ["v1"],
        "clientConfig": client,
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [{"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE"]}],
    }
    hooks = [hook]
    if name == "kueue":  # its job and pod webhooks: every namespace but two (kueue#5244)
        everywhere = {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system", namespace],
                }
            ]
        }
        pods = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"]}
        hooks.append({**hook, "rules": [{**pods}], "namespaceSelector": everywhere})
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": f"{name}-{short}-webhook-configuration"},
            "webhooks": [{**h, "name": f"{short[0]}{name}{i}.kb.io"} for i, h in enumerate(hooks)],
        }
        for kind, short in (
            ("MutatingWebhookConfiguration", "mutating"),
            ("ValidatingWebhookConfiguration", "validating"),
        )
    ]


def release_objects(name: str, version: str) -> list[dict[str, Any]]:
    """The objects of one release manifest (see the module docstring)."""
    namespace = f"{name}-system"
    sa = f"{name}-controller-manager"
    if name == "jobset":
        definitions = [crd("jobset.x-k8s.io", "JobSet", "jobsets", "Namespaced", ["v1alpha2"])]
        config = "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n"
        group = "jobset.x-k8s.io"
    else:
        definitions = [
            crds.crd(f"{plural}.kueue.x-k8s.io")
            if kind in _WRITTEN_BY_CONTROL_PLANE
            else crd("kueue.x-k8s.io", kind, plural, scope, ["v1beta1", "v1beta2"])
            for kind, plural, scope in _KUEUE_KINDS
        ]
        config = KUEUE_CONFIG
        group = "kueue.x-k8s.io"
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        *definitions,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": sa, "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{name}-manager-role"},
            "rules": [{"apiGroups": [group], "resources": ["*"], "verbs": ["*"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{name}-manager-rolebinding"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"{name}-manager-role",
            },
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-manager-config", "namespace": namespace},
            "data": {"controller_manager_config.yaml": config},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-webhook-server-cert", "namespace": namespace},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"{name}-webhook-service", "namespace": namespace},
            "spec": {
                "ports": [{"port": 443, "targetPort": 9443}],
                "selector": {"control-plane": "controller-manager"},
            },
        },
        _deployment(name, version, namespace),
        *_webhooks(name, namespace, group),
    ]
    if name == "kueue":  # config/components/visibility/apiservice_v1beta1.yaml, _v1beta2.yaml
        objects += [
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.visibility.kueue.x-k8s.io"},
                "spec": {
                    "group": "visibility.kueue.x-k8s.io",
                    "version": version,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                    "service": {"name": "kueue-visibility-server", "namespace": namespace},
                },
            }
            for version in ("v1beta1", "v1beta2")
        ]
    return objects


def calico_objects() -> list[dict[str, Any]]:
    """Calico v3.32.1's `calico.yaml` (see the module docstring), in upstream's order."""
    ns = "kube-system"
    accounts = ("calico-kube-controllers", "calico-node", "calico-cni-plugin")
    fixture = (CALICO_FIXTURE / f"calico-{CALICO_VERSION}-workloads.yaml").read_text()
    config, node, controllers = (d for d in yaml.safe_load_all(fixture) if d)
    group = "crd.projectcalico.org"
    # (scope Namespaced: the policy kinds a team's grant may no longer write)
    cluster, namespaced = "Cluster", "Namespaced"
    calico_crds = [
        crd(group, kind, plural, scope, ["v1"])
        for kind, plural, scope in (
            ("BGPConfiguration", "bgpconfigurations", cluster),
            ("BGPPeer", "bgppeers", cluster),
            ("BlockAffinity", "blockaffinities", cluster),
            ("CalicoNodeStatus", "caliconodestatuses", cluster),
            ("ClusterInformation", "clusterinformations", cluster),
            ("FelixConfiguration", "felixconfigurations", cluster),
            ("IPAMBlock", "ipamblocks", cluster),
            ("IPAMConfig", "ipamconfigs", cluster),
            ("IPPool", "ippools", cluster),
            ("IPReservation", "ipreservations", cluster),
            ("NetworkPolicy", "networkpolicies", namespaced),
            ("NetworkSet", "networksets", namespaced),
            ("StagedKubernetesNetworkPolicy", "stagedkubernetesnetworkpolicies", namespaced),
            ("StagedNetworkPolicy", "stagednetworkpolicies", namespaced),
            ("Tier", "tiers", cluster),
        )
    ]
    # upstream's ClusterRoles and bindings, byte for byte (the fixture's README)
    rbac_file = CALICO_FIXTURE / f"calico-{CALICO_VERSION}-rbac.yaml"
    rbac = [d for d in yaml.safe_load_all(rbac_file.read_text()) if d]
    return [
        *(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": sa, "namespace": ns},
            }
            for sa in accounts
        ),
        config,
        *calico_crds,
        *rbac,
        node,
        controllers,
    ]


@functools.cache
def release_manifest(name: str, version: str) -> bytes:
    """The release asset's bytes: the objects as `---`-separated YAML documents."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's, as the charm parses
    objects = calico_objects() if name == "calico" else release_objects(name, version)
    return yaml.dump_all(objects, Dumper=dumper, sort_keys=False).encode()


class ManifestServer:
    """Serves `/<name>/<version>/manifests.yaml` on 127.0.0.1 (see the module docstring)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {
            **{
                self.path(name): release_manifest(name, version)
                for name, (version, _file) in RELEASES.items()
            },
            **{f"{EFS_CSI_PATH}/{f}": efs_csi_file(f) for f in EFS_CSI_FILES},
        }
        self.requests: list[str] = []
        # path -> the Location a 302 answers instead of the file (`redirect`)
        self.redirects: dict[str, str] = {}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # no 40 ms Nagle stall: tests/fakes/__init__.py

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.requests.append(self.path)
                if (location := server.redirects.get(self.path)) is not None:
                    self.send_response(302)
                    self.send_header("Location", location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        self._cert = make_server_cert("manifests")
        self._httpd = serving.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.socket = self._cert.server_context().wrap_socket(
            self._httpd.socket, server_side=True
        )
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), daemon=True
        )

    @property
    def url(self) -> str:
        """The mirror prefix: `https://127.0.0.1:<port>`."""
        return f"https://127.0.0.1:{self._httpd.server_address[1]}"

    def opener(self, open_url: Callable[..., Any] = urllib.request.urlopen) -> Callable[..., Any]:
        """`open_url` (urlopen, or the charm's own `url_opener`) trusting this server's CA."""
        return functools.partial(open_url, context=self._cert.client_context())

    def local(self, release: Any) -> Any:
        """`release` (a batch_engines.Release) served from here.

        Its URL, and where the charm pins the upstream file's sha256, that of the file
        served in its place.
        """
        served = self.files[self.path(release.name)]
        digest = hashlib.sha256(served).hexdigest() if release.sha256 else ""
        url = f"{self.url}{self.path(release.name)}"
        return dataclasses.replace(release, upstream_url=url, sha256=digest)

    def path(self, name: str) -> str:
        """The path of a release's manifest."""
        version, file = RELEASES[name]
        return f"/{name}/{version}/{file}"

    def tamper(self, name: str) -> None:
        """Serve something else than the release for `name` (a changed asset)."""
        self.files[self.path(name)] += (
            b"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: default}\n"
        )

    def redirect(self, name: str, location: str) -> None:
        """Answer `name`'s manifest with a 302 to `location`."""
        self.redirects[self.path(name)] = location

    def missing(self, name: str) -> None:
        """Answer 404 for `name`'s manifest."""
        self.files.pop(self.path(name), None)

    def __enter__(self) -> ManifestServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@functools.cache
def kueue_manager_config() -> str:
    """Kueue's manager configuration as the control plane writes it (its kueue.configure)."""
    from charm_modules import load

    kueue = load("kubernetes-control-plane", "kueue")
    return kueue.configure(KUEUE_CONFIG, kueue.batch_engines.Settings())


def install_kueue(api: Any, gpu_products: dict[str, str] | None = None) -> None:
    """Put into a fake API server what the control plane leaves once JobSet and Kueue run.

    Kueue's manager configuration (`kueue_manager_config`), their CRDs (the real ones,
    `fakes.crds`), and the cluster-wide objects the control plane
    applies (kubernetes-control-plane kueue.cluster_objects): the cohort `gpu-k8s`, the
    priorities, the `cpu` flavor and one flavor per GPU model, `gpu_products` mapping
    flavor name to the `nvidia.com/gpu.product` value it selects.
    """
    kueue_api = "/apis/kueue.x-k8s.io/v1beta2"
    owner = {"app.kubernetes.io/managed-by": "kubernetes-control-plane"}
    api.put_object(  # what kueue-controller-manager runs with (fakes.batch reads it)
        "/api/v1/namespaces/kueue-system/configmaps/kueue-manager-config",
        {"data": {"controller_manager_config.yaml": kueue_manager_config()}},
    )
    kueue_visibility.serve(api)  # kueue-controller-manager serves it (VisibilityOnDemand)
    for name in (*crds.KUEUE, crds.JOBSET):  # the real CRDs at the tags (see the docstring)
        api.put_shared(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", crds.shared(name)
        )
    api.put_object(f"{kueue_api}/cohorts/gpu-k8s", {"metadata": {"labels": owner}, "spec": {}})
    for name, value in (("low", 100), ("normal", 1000), ("high", 10000)):
        api.put_object(
            f"{kueue_api}/workloadpriorityclasses/{name}",
            {"metadata": {"labels": owner}, "value": value},
        )
    api.put_object(f"{kueue_api}/resourceflavors/cpu", {"metadata": {"labels": owner}, "spec": {}})
    put_gpu_flavors(api, gpu_products or {})


def put_gpu_flavors(api: Any, gpu_products: dict[str, str]) -> None:
    """The control plane's ResourceFlavor of each GPU model: flavor name -> its product."""
    owner = {"app.kubernetes.io/managed-by": "kubernetes-control-plane"}
    for name, product in gpu_products.items():
        spec = {
            "nodeLabels": {"nvidia.com/gpu.product": product},
            "nodeTaints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        }
        api.put_object(
            f"/apis/kueue.x-k8s.io/v1beta2/resourceflavors/{name}",
            {"metadata": {"labels": owner}, "spec": spec},
        )


def team_requests(api: Any) -> dict[str, dict[str, str]]:
    """The Kueue teams the control plane has granted: namespace -> their kube-api request.

    What its access.py keeps of each request asking for LocalQueues (the quota fields
    `gpu-quota`, `cpu-quota`, `memory-quota` are what its kueue.py reads).
    """
    return api.__dict__.setdefault("kueue_teams", {})


def team_quotas(api: Any) -> dict[str, str]:
    """The control plane's `team-quotas` option, as a test sets it: {"text": "..."}."""
    return api.__dict__.setdefault("kueue_team_quotas", {"text": ""})


def join_team(
    api: Any, namespace: str, request: dict[str, str] | None = None, *, sized: bool = True
) -> dict:
    """A team's request reaches the control plane: it writes the team's queue (size_cohort).

    `sized=False`: the queues only, the cohort left as it is (no node has joined yet).
    """
    team_requests(api)[namespace] = dict(request or {})
    return size_cohort(api, cohort=sized)


def leader_bag(api: Any) -> dict[str, str]:
    """The control plane's peer application databag, for the keys these helpers keep."""
    if not hasattr(api, "control_plane_bag"):
        api.control_plane_bag = {}
    return api.control_plane_bag


def leader_hook(api: Any) -> None:
    """What every later leader hook does for Kueue: activate again what Kueue evicted.

    Runs the control plane's gang_release.reactivate on `leader_bag`.
    """
    from charm_modules import load

    gang_release = load("kubernetes-control-plane", "gang_release")
    with Kube.from_kubeconfig(api.kubeconfig(), retries=0) as kube:
        gang_release.reactivate(kube, leader_bag(api))


def size_cohort(api: Any, *, cohort: bool = True, released: Collection[str] = ()) -> dict:
    """What the control plane's leader does on update-status: size the cohort `gpu-k8s`.

    `released`: the Nodes the hook just quarantined; the control plane's gang_release
    records the move on each team JobSet there and deactivates the team Workloads there
    that no longer fit (issue 32 item 2).

    Runs the control plane's own code (kubernetes-control-plane kueue.py: capacity,
    guarantees from the teams' requests (`team_requests`) within the operator's allowances
    (`team_quotas`: the option's text), cohort_quota, cluster_objects,
    team_queue) over the fake's Nodes, running Pods and the GPU flavors `install_kueue`
    made, and stores the Cohort and each team's ClusterQueue it applies (a queue's status,
    Kueue's, is kept); returns the Blocked message it would show (or None) under
    "overcommitted".
    """
    from charm_modules import load

    kueue = load("kubernetes-control-plane", "kueue")
    kueue_api = "/apis/kueue.x-k8s.io/v1beta2"
    models, flavors = [], []
    for flavor in api.objects(f"{kueue_api}/resourceflavors/"):
        product = ((flavor.get("spec") or {}).get("nodeLabels") or {}).get(kueue.LABEL_PRODUCT)
        model = (flavor["metadata"].get("annotations") or {}).get("gpu-k8s.io/gpu-model")
        if product:
            models.append(model or product.replace("-", " "))
            flavors.append(flavor["metadata"]["name"])
    pods = [
        p for p in api.objects("/api/v1/", kind="Pod") if p["status"].get("phase") == "Running"
    ]
    keys = {"gpu-quota": "gpus", "cpu-quota": "cpu", "memory-quota": "memory"}
    teams = [  # in the order they joined (the relation ids' order, kueue.clamp)
        kueue.Team(ns, **{keys[k]: v for k, v in request.items() if k in keys})
        for ns, request in team_requests(api).items()
    ]
    managed = {
        n["metadata"]["name"]
        for n in api.objects("/api/v1/", kind="Namespace")
        if (n["metadata"].get("labels") or {}).get(kueue.KUEUE_NAMESPACE_LABEL)
        == kueue.KUEUE_NAMESPACE_VALUE
    }
    nodes = api.objects("/api/v1/nodes/")
    sizing = kueue.size(
        nodes,
        pods,
        models,
        teams,
        flavors,
        shared=False,
        managed=lambda: managed,
        configured=kueue.parse_allowances(team_quotas(api)["text"]),
    )
    if released:  # the leader's quarantine hook: the gangs that no longer fit (issue 32)
        gang_release = load("kubernetes-control-plane", "gang_release")
        with Kube.from_kubeconfig(api.kubeconfig(), retries=0) as kube:
            gang_release.release(kube, released, sizing.have, managed, leader_bag(api), nodes)
    given = sizing.given
    objects = kueue.cluster_objects(models, quota=sizing.quota)
    sized = next(o for o in objects if o["kind"] == "Cohort")
    if cohort:
        api.put_object(f"{kueue_api}/cohorts/{kueue.COHORT}", sized)
    for team in teams:
        path = f"{kueue_api}/clusterqueues/{team.queue}"
        queue = kueue.team_queue(team, flavors, given)
        live = api.get_object(path) or {}
        if live.get("spec") != queue["spec"]:
            status = live.get("status")
            api.put_object(path, {**queue, **({"status": status} if status else {})})
    return {"overcommitted": sizing.overcommitted, "cohort": sized}
