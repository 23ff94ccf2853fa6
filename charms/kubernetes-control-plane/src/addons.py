# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What the leader runs in the cluster beyond kubeadm: CNI, NVIDIA add-ons, batch engines.

Each add-on is applied when what decides it (pin, config, the workers' GPUs) differs from
what the peer application databag says was applied last, so an event with nothing new
sends no request. The manifests and decisions live in `calico.py` and `flannel.py` (the
CNI), `device_plugin.py`, `dcgm_exporter.py`, `mig_manager.py`, `kube_state_metrics.py`,
`batch_engines.py`, `network_policies.py` (each kube-api consumer's namespace isolated
for ingress), `team_quota.py` (its object counts bounded), `tenant_sweep.py` (what its
tenant made before this revision's refusals, once) and `efs_csi.py` (the EFS CSI
driver's node plugin, for efs-storage's access points); this module applies them, with
the hook's API client and a downloader (never the charm), and records each in the peer
application databag under a key of its own (below).

Batch engines (JobSet, Kueue) come last in the leader's reconcile: a download that fails or
a manifest whose sha256 is not the pinned one makes the unit Blocked naming the add-on, and
everything before (workers, kube-api consumers) is already served.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Callable, Collection, MutableMapping
from typing import Any

import admission_policies
import batch_engines
import calico
import dcgm_exporter
import device_plugin
import efs_csi
import flannel
import gang_release
import kube_state_metrics
import kueue
import mig_manager
import network_policies
import rbac
import registry
import team_quota
import tenant_sweep
from access import KUBE_API_KEY, STORAGE
from charm_config import Config
from literals import (
    CALICO,
    CALICO_RELEASE,
    FIELD_MANAGER,
    FLANNEL,
    JOBSET,
    KUBE_STATE_METRICS_NODE_KEY,
    KUEUE,
    KUEUE_NAMESPACE_LABEL,
    KUEUE_NAMESPACE_VALUE,
)

from charms.gpu_k8s.v0 import kube_objects
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.status import StatusError

logger = logging.getLogger(__name__)

# The peer application databag (`bag` below): what was applied last, under these keys.
CNI_KEY = "cni"
DEVICE_PLUGIN_KEY = "device-plugin"
DCGM_EXPORTER_KEY = "dcgm-exporter"
KUBE_STATE_METRICS_KEY = "kube-state-metrics"
NODE_METRICS_KEY = "node-metrics-rbac"
ADMISSION_POLICIES_KEY = "admission-policies"  # what admission_policies last applied
# what admission_policies.claims_manifests last applied (for the provisioners granted then)
ADMISSION_CLAIMS_KEY = "admission-claims"
# the provisioners' pod-read Roles applied: "<namespace> <provisioner ns> <provisioner>" ->
# the fingerprint of what was applied there (rbac.provisioner_pods_manifests)
PROVISIONER_PODS_KEY = "provisioner-pod-reads"
MIG_MANAGER_KEY = "mig-manager"
KUEUE_OBJECTS_KEY = "kueue-objects"
TEAM_NETWORK_KEY = "team-network-policies"  # what network_policies applied, per namespace
TEAM_QUOTA_KEY = "team-object-counts"  # what team_quota applied, per namespace
KUEUE_COHORT_KEY = "kueue-cohort"  # the cohort's quota last computed, and an overcommit
EFS_CSI_KEY = "addon-aws-efs-csi-driver"  # what efs_csi last applied (efs_csi.want_key)
EFS_CSI_SHA256_KEY = "addon-aws-efs-csi-driver-sha256"  # URL -> sha256 of each file applied
# and per batch engine: `addon-<name>` (what was applied), `addon-<name>-ready` (its
# controller was seen ready) and `addon-<name>-sha256` (URL -> the sha256 first applied).
# `<key>-charm` next to ADMISSION_POLICIES_KEY, KUEUE_OBJECTS_KEY and TEAM_NETWORK_KEY:
# "<charm URL> <bag[key]>[ <digest of the inputs>]", the charm that built what `key` says
# was applied, from those inputs (Addons._built: nothing is built while it holds)
BUILT_BY = "-charm"

Bag = MutableMapping[str, str]

# The status note of a cluster bootstrapped with flannel while `cni` asks for calico.
FLANNEL_KEPT = "flannel kept: cni calico applies to new clusters, the charm does not migrate"


def cluster_cni(bag: Bag) -> str:
    """The CNI the cluster was built with (`calico`, `flannel`), "" before any was applied.

    Read from what the leader recorded when it applied it (CNI_KEY: `flannel v0.27.4
    <pod-cidr>` since the first revision, `calico v3.32.1 <pod-cidr>`), so a new leader and
    an upgraded charm know it without asking the cluster.
    """
    return (bag.get(CNI_KEY) or "").split(" ", 1)[0]


def applied_pod_cidr(bag: Bag) -> str:
    """The pod CIDR the CNI was applied with (CNI_KEY's third word), "" before any was."""
    words = (bag.get(CNI_KEY) or "").split()
    return words[2] if len(words) > 2 else ""


class Addons:
    """Applies the cluster's add-ons from the leader.

    `kube`: the hook's API client, asked for only when something is applied;
    `opener`: what downloads the batch engines' releases (`urllib.request.urlopen`);
    `charm`: the charm URL Juju deployed this code as (literals.CHARM_URL_FILE; "" when
    Juju wrote none), which changes with the charm code (`_built`).
    """

    def __init__(self, kube: Callable[[], Kube], opener: Callable[..., Any], charm: str = ""):
        self._kube = kube
        self._opener = opener
        self._charm = charm
        self._policies_changed = False  # the admission policies were applied in this hook

    def apply_cni(self, config: Config, bag: Bag) -> list[str]:
        """The cluster's CNI, with its pod network and registry; notes for the status.

        `cni` chooses for a new cluster only: one that runs a CNI keeps it (cluster_cni),
        since the charm does not migrate a running cluster (docs/explanation/security.md).
        A flannel cluster with `cni` calico, which every cluster bootstrapped before the
        option has after the charm upgrade, keeps flannel and says so; a Calico cluster
        asked for flannel is Blocked (no charm revision ever bootstrapped it with flannel).

        Raises:
            StatusError: Blocked when `cni` asks a Calico cluster for flannel, or when
                Calico's manifest cannot be downloaded or is not the one it must be.
        """
        running = cluster_cni(bag)
        if running == CALICO and config.cni != CALICO:
            raise StatusError.blocked(
                f"cni {config.cni}: this cluster runs calico and the charm does not migrate "
                f"a running cluster's CNI; set cni back to calico"
            )
        notes = []
        if running == FLANNEL and config.cni != FLANNEL:
            notes.append(FLANNEL_KEPT)
        if (running or config.cni) == FLANNEL:
            self._apply_flannel(config, bag)
            return notes
        settings = batch_engines.Settings(registry=config.image_registry)
        problem = self._apply_release(
            CALICO_RELEASE,
            config,
            config.calico_sha256,
            settings,
            None,
            calico.transform(config.pod_cidr),
            bag,
        )
        want = calico.fingerprint(config.pod_cidr)
        if bag.get(CNI_KEY) != want:
            bag[CNI_KEY] = want
        if problem:
            notes.append(f"waiting for calico ({problem})")
        return notes

    @staticmethod
    def cni_scale(bag: Bag, planes: Collection[str]) -> list[str]:
        """A note while a Calico cluster has more nodes than its manifest is for.

        `planes`: the control-plane nodes; with the registered workers, every node that
        runs calico-node (calico.scale_note).
        """
        if cluster_cni(bag) != CALICO:
            return []
        note = calico.scale_note(len(planes) + len(registry.Registry.load(bag).nodes))
        return [note] if note else []

    def _apply_flannel(self, config: Config, bag: Bag) -> None:
        """flannel, with this cluster's pod network and registry."""
        want = flannel.fingerprint(config.pod_cidr, config.image_registry)
        if bag.get(CNI_KEY) == want:
            return
        kube = self._kube()
        for manifest in flannel.manifests(config.pod_cidr, config.image_registry):
            kube.apply(manifest, field_manager=FIELD_MANAGER)
        bag[CNI_KEY] = want
        logger.info("applied %s", want)

    def apply_device_plugin(self, config: Config, bag: Bag) -> None:
        """Run the NVIDIA device plugin while any worker reports GPUs; remove it after."""
        objects = device_plugin.manifests(
            config.mig_strategy, config.gpu_time_slicing_replicas, config.image_registry
        )
        want = fingerprint(objects, device_plugin.VERSION)
        self._apply_gpu_addon(DEVICE_PLUGIN_KEY, "the NVIDIA device plugin", objects, want, bag)

    def apply_dcgm_exporter(self, config: Config, bag: Bag) -> None:
        """Run NVIDIA's DCGM exporter while any worker reports GPUs; remove it after."""
        objects = dcgm_exporter.manifests(
            config.image_registry, shared_gpus=config.gpu_time_slicing_replicas > 1
        )
        want = fingerprint(objects, dcgm_exporter.VERSION)
        self._apply_gpu_addon(DCGM_EXPORTER_KEY, "NVIDIA's DCGM exporter", objects, want, bag)

    def apply_kube_state_metrics(self, config: Config, bag: Bag, node: str) -> None:
        """Run kube-state-metrics on `node` (the leader's), where its COS agent scrapes it."""
        objects = kube_state_metrics.manifests(node, config.image_registry)
        want = fingerprint(objects, kube_state_metrics.VERSION)
        if self._apply_once(KUBE_STATE_METRICS_KEY, objects, want, bag):  # they name the node
            bag[KUBE_STATE_METRICS_NODE_KEY] = node
            logger.info("applied kube-state-metrics %s on %s", want, node)

    def apply_admission_policies(self, bag: Bag) -> None:
        """Fence the DaemonSets' and provisioners' cluster-wide writes (admission_policies).

        Run before the CNI and the node add-ons, so no DaemonSet pod runs unfenced.

        The policies are the charm code's alone (no option, relation or Node names them),
        so they change only with the charm: nothing is built while this charm built the
        ones applied last (`_built`). Neither way reads the cluster: a policy deleted by
        hand comes back with the next charm whose policies differ.
        """
        if self._built(ADMISSION_POLICIES_KEY, bag):
            return
        objects = admission_policies.manifests()
        if self._apply_once(ADMISSION_POLICIES_KEY, objects, fingerprint(objects), bag):
            self._policies_changed = True
            logger.info(
                "admission policies: %s",
                ", ".join(o["metadata"]["name"] for o in objects if o["kind"].endswith("Policy")),
            )
        self._record_built(ADMISSION_POLICIES_KEY, bag)

    def _built(self, key: str, bag: Bag, inputs: str = "") -> bool:
        """Whether this charm built what `bag[key]` says was applied last, from `inputs`.

        For objects built from the charm's code and `inputs` (a digest of every other
        value they are built from) alone: a hook where neither changed builds nothing
        (issue 29's cost rule). The record (`<key>-charm`, `_record_built`) names the
        charm URL, which Juju changes with the code, what was applied and the inputs.
        Without a charm URL everything is built each hook. An older revision, refreshed
        back to, knows no record: it applies its own objects and leaves the record, which
        then names another value than `bag[key]`, so the next charm builds them again.
        """
        mark = self._mark(key, bag, inputs)
        return mark is not None and bag.get(key + BUILT_BY) == mark

    def _mark(self, key: str, bag: Bag, inputs: str) -> str | None:
        if not self._charm or key not in bag:
            return None
        return f"{self._charm} {bag[key]} {inputs}" if inputs else f"{self._charm} {bag[key]}"

    def _record_built(self, key: str, bag: Bag, inputs: str = "") -> None:
        """Record that this charm built `bag[key]` from `inputs` (`_built`); none without a URL."""
        mark = self._mark(key, bag, inputs)
        if bag.get(key + BUILT_BY) != mark:
            if mark is None:
                del bag[key + BUILT_BY]
            else:
                bag[key + BUILT_BY] = mark

    def apply_provisioner_claims_policy(
        self, bag: Bag, provisioners: frozenset[str]
    ) -> dict[str, dict[str, str]]:
        """Keep the granted storage provisioners to their own claims and consumers.

        Run after the grants (access.serve_kube_api), in the same hook: the policies name
        each granted provisioner's ServiceAccount and the consumers it serves (its
        `storage-consumers`, each mapped to the namespace granted to that consumer), so
        they are applied again when that changes (a provisioner granted, revoked, named or
        no longer named in `kube-api-storage-provisioners`, a consumer served or no
        longer), before the hook hands out a new one's token. A consumer not granted a
        namespace, or an access point published for two consumers, is admitted to none.
        Returns, per provisioner's relation id, the consumers admitted (access.admit_storage
        answers with them).
        """
        granted: dict[str, dict] = json.loads(bag.get(KUBE_API_KEY) or "{}")
        # rbac.consumer_grant: a consumer's ServiceAccount is named after its application,
        # in the namespace granted to it
        ours = {k: g for k, g in granted.items() if g["app"] in provisioners}
        accounts = sorted((g["namespace"], g["app"]) for g in ours.values())
        if not accounts and ADMISSION_CLAIMS_KEY not in bag:
            return {}  # applied with the first provisioner granted; until then none to fence
        namespaces = {g["app"]: g["namespace"] for g in granted.values()}
        points = Counter(p for g in ours.values() for p in (g.get(STORAGE) or {}).values() if p)
        admitted = {
            key: {
                app: point
                for app, point in (g.get(STORAGE) or {}).items()
                if app in namespaces and app not in provisioners and points[point] < 2
            }
            for key, g in ours.items()
        }
        for point in sorted(p for p, n in points.items() if n > 1):
            logger.warning(
                "access point %s is published for two consumers: admitted to none", point
            )
        served = {
            (g["namespace"], g["app"]): {namespaces[a]: p for a, p in admitted[k].items()}
            for k, g in ours.items()
        }
        self._provisioner_pod_reads(bag, served)
        objects = admission_policies.claims_manifests(accounts, served)
        if self._apply_once(ADMISSION_CLAIMS_KEY, objects, fingerprint(objects), bag):
            logger.info(
                "storage provisioners fenced to their own claims and consumers: %s",
                "; ".join(
                    f"{ns}/{name} serves {', '.join(sorted(consumers)) or 'none'}"
                    for (ns, name), consumers in sorted(served.items())
                )
                or "none",
            )
        return admitted

    def _provisioner_pod_reads(
        self, bag: Bag, served: dict[tuple[str, str], dict[str, str]]
    ) -> None:
        """Let each provisioner list pods in the namespaces it serves, and nowhere else.

        `served`: each provisioner's ServiceAccount (namespace, name) -> the namespaces of
        the consumers admitted for it. A Role and RoleBinding is applied in each namespace
        newly served (rbac.provisioner_pods_manifests) and deleted from each no longer
        served, or whose provisioner is no longer granted; PROVISIONER_PODS_KEY records
        them, so a hook where nothing changed sends no request.
        """
        try:
            applied = json.loads(bag.get(PROVISIONER_PODS_KEY) or "{}")
        except ValueError:
            applied = {}
        applied = applied if isinstance(applied, dict) else {}
        wanted = {
            f"{ns} {account[0]} {account[1]}": rbac.provisioner_pods_manifests(account, ns)
            for account, consumers in served.items()
            for ns in consumers
        }
        for key in sorted(set(applied) - set(wanted)):
            ns, _, name = key.split(" ")
            role = rbac.provisioner_pods_name(name)
            kube = self._kube()
            kube.delete(rbac.RBAC, "RoleBinding", role, ns)
            kube.delete(rbac.RBAC, "Role", role, ns)
            del applied[key]
            logger.info("%s may no longer list the pods of namespace %s", name, ns)
        for key, objects in sorted(wanted.items()):
            if self._apply_once(key, objects, fingerprint(objects), applied):
                ns, _, name = key.split(" ")
                logger.info("%s may list the pods of namespace %s", name, ns)
        if bag.get(PROVISIONER_PODS_KEY, "{}") != (value := json.dumps(applied, sort_keys=True)):
            bag[PROVISIONER_PODS_KEY] = value

    def apply_node_metrics_access(self, bag: Bag) -> None:
        """Let every node read its kubelet's and API server's metrics as itself."""
        objects = rbac.node_metrics_manifests()
        want = fingerprint(objects)
        if self._apply_once(NODE_METRICS_KEY, objects, want, bag):
            logger.info("nodes may read their metrics (%s)", rbac.NODE_METRICS)

    def apply_team_network_policies(
        self, config: Config, bag: Bag, api_servers: list[str]
    ) -> list[str]:
        """Default-deny ingress and the egress allow-list in every consumer's namespace.

        Run after the grants (access.serve_kube_api), in the same hook, so a namespace is
        isolated in the hook that made it; built again only when the namespaces granted,
        the pod CIDR, `team-egress`, the API servers (`api_servers`, host:port, from the
        peer data) or the charm change (`_built`), and applied when that
        changes what was applied (a namespace whose consumer left keeps its policy, as it
        keeps its data). Neither way reads the cluster: a policy deleted by hand comes
        back with the next charm whose policies differ. Returns a note for the status
        while consumers share a CNI that enforces none of it.
        """
        namespaces = self._granted_namespaces(bag)
        pod_cidr = applied_pod_cidr(bag)
        extra = config.egress
        api = network_policies.api_blocks(api_servers)
        inputs = kube_objects.fingerprint([namespaces, pod_cidr, [e.rule() for e in extra], api])
        if not self._built(TEAM_NETWORK_KEY, bag, inputs):
            isolated = self._apply_per_namespace(
                bag,
                TEAM_NETWORK_KEY,
                namespaces,
                lambda ns: network_policies.manifests([ns], pod_cidr, extra, api),
            )
            if isolated:
                logger.info("namespaces isolated for ingress: %s", ", ".join(isolated))
            self._record_built(TEAM_NETWORK_KEY, bag, inputs)
        if namespaces and not network_policies.enforced(bag.get(CNI_KEY, "")):
            return [network_policies.NOT_ENFORCED]
        return []

    def sweep_consumer_namespaces(self, bag: Bag, *, retry: bool) -> list[str]:
        """Once per charm revision, what tenants made before its refusals (tenant_sweep).

        Run after the grants and before the quotas, which it names the consumers'
        namespaces for. A hook after the sweep finished sends no request for it; what a
        try left is tried again where `retry` (update-status; tenant_sweep.MAX_TRIES).
        Not in the hook that changed the admission policies: kube-apiserver enforces a
        changed ValidatingAdmissionPolicy from its policy source's next refresh (a 1 s
        tick, each API server apart: k8s.io/apiserver pkg/admission/plugin/policy/generic
        policy_source.go), and a controller replacing a swept pod before that is admitted
        under the old rules. Returns the status note of the hook that swept.
        """
        if tenant_sweep.done(bag, self._charm):
            return []
        if self._policies_changed:  # said in the log only: a new cluster's first hook too
            logger.info("consumer namespaces swept next hook: the admission policies changed")
            return []
        try:
            swept = tenant_sweep.sweep(self._kube(), bag, self._charm, retry=retry)
        except KubeError as e:
            logger.warning("consumer namespaces not swept (tried again at update-status): %s", e)
            return ["consumer namespaces not swept yet (tried again at update-status)"]
        note = swept.note() if swept else None
        return [note] if note else []

    def apply_team_quotas(self, config: Config, bag: Bag) -> None:
        """The object-count quota in every consumer's namespace.

        team_quota.py; run after the grants like the network policies, in each namespace
        granted and each the sweep found labelled as a consumer's (tenant_sweep: a
        consumer whose request this revision refuses keeps its counts), built again only
        when those namespaces, `team-object-counts` or the charm change (`_built`), and
        applied in every namespace whose quota that changes. A namespace whose consumer
        left keeps its quota, as it keeps its data.
        """
        labelled = tenant_sweep.recorded_namespaces(bag)
        namespaces = sorted({*self._granted_namespaces(bag), *labelled})
        hard = team_quota.counts(config.object_counts)
        inputs = kube_objects.fingerprint([namespaces, hard])
        if self._built(TEAM_QUOTA_KEY, bag, inputs):
            return
        fenced = self._apply_per_namespace(
            bag, TEAM_QUOTA_KEY, namespaces, lambda ns: [team_quota.manifest(ns, hard)]
        )
        if fenced:
            logger.info("object counts of team namespaces bounded: %s", ", ".join(fenced))
        self._record_built(TEAM_QUOTA_KEY, bag, inputs)

    @staticmethod
    def _granted_namespaces(bag: Bag) -> list[str]:
        """The namespaces granted to kube-api consumers, sorted."""
        granted = json.loads(bag.get(KUBE_API_KEY) or "{}")
        return sorted({g["namespace"] for g in granted.values()})

    def _apply_per_namespace(
        self,
        bag: Bag,
        key: str,
        namespaces: list[str],
        objects_of: Callable[[str], list[dict[str, Any]]],
    ) -> list[str]:
        """Apply `objects_of(ns)` in each namespace whose record under `key` differs.

        `bag[key]` maps each namespace granted to the fingerprint of what was applied
        there: relating one more team applies its namespace's objects only, not every
        team's again (a value of an older revision that is no map, one fingerprint of
        them all, applies everything once more). Returns the namespaces applied to.
        """
        try:
            applied = json.loads(bag.get(key) or "{}")
        except ValueError:
            applied = {}
        applied = applied if isinstance(applied, dict) else {}
        done = []
        for ns in namespaces:
            objects = objects_of(ns)
            if self._apply_once(ns, objects, fingerprint(objects), applied):
                done.append(ns)
        now = {ns: applied[ns] for ns in namespaces}
        if bag.get(key) != (value := json.dumps(now, sort_keys=True)):
            bag[key] = value
        return done

    def _apply_once(self, key: str, objects: list[dict[str, Any]], want: str, bag: Bag) -> bool:
        """Apply `objects` unless `bag[key]` says `want` was applied; True when it applied."""
        if bag.get(key) == want:
            return False
        kube = self._kube()
        for manifest in objects:
            kube.apply(manifest, field_manager=FIELD_MANAGER)
        bag[key] = want
        return True

    def _apply_gpu_addon(
        self,
        key: str,
        what: str,
        objects: list[dict[str, Any]],
        fingerprint: str,
        bag: Bag,
    ) -> None:
        """Apply `objects` while a worker reports GPUs (once per `fingerprint`), else delete them.

        `key`: where the peer application data keeps what was applied.
        """
        want = fingerprint if registry.Registry.load(bag).gpu_workers else ""
        if bag.get(key, "") == want:
            return
        kube = self._kube()
        if want:
            if self._moving(kube, what, objects):
                return
            for manifest in objects:
                kube.apply(manifest, field_manager=FIELD_MANAGER)
            bag[key] = want
            logger.info("applied %s %s", what, want)
            return
        for manifest in reversed(objects):
            if manifest["kind"] == "Namespace":  # shared with the MIG manager, which stays
                continue
            meta = manifest["metadata"]
            kube.delete(
                manifest["apiVersion"], manifest["kind"], meta["name"], meta.get("namespace")
            )
        del bag[key]
        logger.info("removed %s: no worker reports GPUs any more", what)

    @staticmethod
    def _moving(kube: Kube, what: str, objects: list[dict[str, Any]]) -> bool:
        """Whether `what` is still leaving kube-system (device_plugin.retire_legacy).

        The new objects are applied, and the fingerprint recorded, only once no pod of the
        old DaemonSet is left; until then each hook looks again.
        """
        left = device_plugin.retire_legacy(kube, objects)
        if left:
            logger.info(
                "moving %s to %s: waiting for %s to stop",
                what,
                device_plugin.NAMESPACE,
                ", ".join(left),
            )
        return bool(left)

    def apply_mig_manager(self, config: Config, bag: Bag) -> list[str]:
        """Run NVIDIA's MIG manager once a worker reports MIG-capable GPUs; keep it after.

        Applied again when the config generated from the workers' models changes (or the
        pin, or `image-registry`); nothing is removed when those workers go. Returns
        notes for the status: the units whose MIG reports NVIDIA's table refutes.
        """
        workers = registry.Registry.load(bag)
        gpus = [mig_manager.MigGpu(*g) for g in workers.mig_gpus()]
        if not gpus:
            return []
        notes = mig_manager.report_notes(
            (unit, mig_manager.MigGpu(model, pci, profiles))
            for unit, w in workers.workers.items()
            for model, (pci, profiles) in w.mig.items()
        )
        objects = mig_manager.manifests(gpus, config.image_registry)
        want = fingerprint(objects, mig_manager.VERSION)
        if bag.get(MIG_MANAGER_KEY) != want and self._moving(
            self._kube(), "the NVIDIA MIG manager", objects
        ):
            return notes
        if self._apply_once(MIG_MANAGER_KEY, objects, want, bag):
            logger.info("applied the NVIDIA MIG manager %s for %d GPU models", want, len(gpus))
        return notes

    def apply_efs_csi_driver(self, config: Config, bag: Bag) -> None:
        """The EFS CSI driver's node plugin (efs_csi.py), while `efs-csi-driver` is true.

        Downloaded and applied when the pin, `addons-mirror` or `image-registry` changed;
        each file's sha256 is the one pinned for it, and recorded per URL. Setting the
        option to false later stops updating it; nothing is removed (pods mounting EFS
        volumes would lose them).

        Raises:
            StatusError: Blocked when a file cannot be downloaded or is not the pinned one
                (nothing of the driver is applied).
        """
        if not config.efs_csi_driver:
            return
        want = efs_csi.want_key(config.addons_mirror, config.image_registry)
        if bag.get(EFS_CSI_KEY) == want:
            return
        files, digests = {}, {}
        try:
            for file, pinned in efs_csi.FILES:
                url = efs_csi.url(file, config.addons_mirror)
                files[file] = batch_engines.download(url, opener=self._opener)
                digests[url] = efs_csi.verify(file, files[file], pinned)
            objects = efs_csi.manifests(files, config.image_registry)
        except (batch_engines.AddonError, efs_csi.DriverError) as e:
            raise StatusError.blocked(f"{efs_csi.NAME}: {e}") from None
        kube = self._kube()
        for obj in objects:
            kube.apply(obj, field_manager=FIELD_MANAGER)
        seen = json.loads(bag.get(EFS_CSI_SHA256_KEY) or "{}")
        bag[EFS_CSI_SHA256_KEY] = json.dumps({**seen, **digests}, sort_keys=True)
        bag[EFS_CSI_KEY] = want
        logger.info(
            "applied %s %s node plugin in %s (%s)",
            efs_csi.NAME,
            efs_csi.VERSION,
            efs_csi.NAMESPACE,
            ", ".join(f"{u} sha256 {d}" for u, d in digests.items()),
        )

    # -- batch engines --------------------------------------------------------------------

    def apply_batch_engines(
        self,
        config: Config,
        bag: Bag,
        resize: bool = False,
        nodes: list[dict[str, Any]] | None = None,
    ) -> list[str]:
        """JobSet, Kueue and the cluster-wide Kueue objects; returns what is not ready yet.

        `resize`: read what the cohort's quota is made of again (update-status).
        `nodes`: every whole Node, when the caller listed them in this hook, after its
        last write to a Node (a taint it set); None: the cohort lists them when it resizes.

        Raises:
            StatusError: Blocked when a release cannot be downloaded or is not the pinned
                one (nothing of it is applied).
        """
        if not config.batch_engines:
            return []
        settings = batch_engines.Settings(
            registry=config.image_registry,
            pods_ready_timeout_minutes=config.pods_ready_timeout,
        )
        pending = []
        releases = (
            (JOBSET, config.jobset_sha256, None, None),
            (KUEUE, config.kueue_sha256, kueue.configure, kueue.narrow_webhooks),
        )
        for release, sha256, configure, transform in releases:
            problem = self._apply_release(
                release, config, sha256, settings, configure, transform, bag
            )
            if problem:
                pending.append(f"{release.name} ({problem})")
        if not pending:
            self._apply_kueue_objects(config, bag, resize, nodes)
        return pending

    def _apply_release(
        self,
        release: batch_engines.Release,
        config: Config,
        sha256: str,
        settings: batch_engines.Settings,
        configure: Callable[[str, batch_engines.Settings], str] | None,
        transform: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None,
        bag: Bag,
    ) -> str | None:
        """Apply `release` when what decides it changed; None once its controller is ready."""
        key = batch_engines.want_key(release, config.addons_mirror, sha256, settings)
        field = f"addon-{release.name}"
        if bag.get(field) != key:
            url = release.url(config.addons_mirror)
            seen = json.loads(bag.get(f"{field}-sha256") or "{}")  # URL -> first sha256
            try:
                data = batch_engines.download(url, opener=self._opener)
                digest = batch_engines.verify(release, data, sha256, seen.get(url, ""))
                objects = batch_engines.customise(
                    release, batch_engines.parse(release, data), settings, configure, transform
                )
            except batch_engines.AddonError as e:
                raise StatusError.blocked(f"{release.name}: {e}") from None
            kube = self._kube()
            for obj in objects:
                kube.apply(obj, field_manager=FIELD_MANAGER)
            bag[field] = key
            bag[f"{field}-sha256"] = json.dumps({**seen, url: digest}, sort_keys=True)
            bag.pop(f"{field}-ready", None)
            logger.info(
                "applied %s %s from %s (sha256 %s, %d objects)",
                release.name,
                release.version,
                url,
                digest,
                len(objects),
            )
        if bag.get(f"{field}-ready") == key:
            return None
        deployment = self._kube().get(
            "apps/v1", "Deployment", release.deployment, release.namespace
        )
        problem = batch_engines.readiness(deployment)
        if problem is None:
            bag[f"{field}-ready"] = key
            logger.info("%s %s is ready", release.name, release.version)
        return problem

    def _apply_kueue_objects(
        self, config: Config, bag: Bag, resize: bool, nodes: list[dict[str, Any]] | None
    ) -> None:
        """The cohort, priorities and ResourceFlavors (one per GPU model, one for CPUs).

        The cohort holds what the cluster has less the teams' guarantees (kueue.py). Its
        inputs (Nodes, running Pods, ClusterQueues) change without an event reaching this
        charm, so they are read when `resize` (update-status, the periodic hook) or when
        the workers registered or the Nodes held quarantined are not those it was last
        sized for (a node joined or left; the hook that set or lifted a quarantine taint,
        fleet.py, so a quarantined node's quota leaves the cohort at once: issue 32);
        other hooks apply the quota last computed (KUEUE_COHORT_KEY), sending nothing
        while nothing changed.

        A quarantined node is not schedulable (`kueue.capacity`: its NoExecute taint),
        so all it offers leaves the cohort, not only the failed GPU: nothing that does
        not tolerate the taint lands there. A Workload Kueue already admitted keeps its
        admission when its pods are evicted and its JobSet restarts the gang: the quota
        moves with the job to healthy nodes (Kueue v0.19.2, cited at `kueue.capacity`).
        In the hook that quarantines a node, a team's Workload with pods there that the
        smaller cluster can no longer hold is deactivated, and activated again once
        Kueue evicted it (`gang_release`): its quota is free at once, not after
        recoveryTimeout. Each team's JobSet with pods there has the move recorded on it
        (`gang_release.mark_moves`), for its `job-status`.

        The objects are built from the GPU models, `gpu-time-slicing-replicas`, the teams'
        asks, the cohort's record and the charm code alone: nothing is built while this
        charm built what was applied last from the same (`_built`; issue 29's cost rule).
        Neither way reads the objects back: one changed or deleted by hand is applied
        again with the next change of what they are built from.

        Raises:
            StatusError: Blocked when the teams' guarantees sum past the cluster.
        """
        workers = registry.Registry.load(bag)
        models = workers.gpu_models()
        shared = config.gpu_time_slicing_replicas > 1
        teams = _teams(bag)
        cohort = sized_for = json.loads(bag.get(KUEUE_COHORT_KEY) or "{}")
        asked = [[getattr(t, f.name) for f in dataclasses.fields(t)] for t in teams]
        quarantined = registry.quarantined(bag)
        if (
            resize
            or "given" not in sized_for  # sized by a revision that did not clamp
            or "capped" not in sized_for  # nor told the teams what capped their asks
            or sized_for.get("workers") != sorted(workers.nodes)
            or sized_for.get("quarantined", []) != quarantined
            or sized_for.get("teams") != asked
            or sized_for.get("allowances", {}) != config.allowances
        ):
            flavors = sorted({kueue.flavor_name(m) for m in models})
            kube = self._kube()
            selector = f"{KUEUE_NAMESPACE_LABEL}={KUEUE_NAMESPACE_VALUE}"
            listed = kube.list("v1", "Node") if nodes is None else nodes
            sizing = kueue.size(
                listed,
                kube.list("v1", "Pod", field_selector="status.phase=Running"),
                models,
                teams,
                flavors,
                shared=shared,
                managed=lambda: {  # listed only if a GPU pod Kueue would hold runs
                    n["metadata"]["name"]
                    for n in kube.list("v1", "Namespace", label_selector=selector)
                },
                configured=config.allowances,
            )
            released = set(quarantined) - set(sized_for.get("quarantined", []))
            if released:  # a gang that no longer fits gives its quota back (gang_release)
                teams_ns = {
                    n["metadata"]["name"]
                    for n in kube.list("v1", "Namespace", label_selector=selector)
                }
                gang_release.release(kube, released, sizing.have, teams_ns, bag, listed)
            for line in sizing.beyond:  # the team's own status shows it (its queue's numbers)
                logger.warning("team quota past its allowance (team-quotas): %s", line)
            sized: dict[str, Any] = {
                "quota": [[f, r, v] for (f, r), v in sorted(sizing.quota.items())],
                "given": [
                    [f, r, q, v]
                    for (f, r), qs in sorted(sizing.given.items())
                    for q, v in qs.items()
                ],
                "overcommitted": sizing.overcommitted or "",
                "workers": sorted(workers.nodes),
                "quarantined": quarantined,
                "teams": asked,
                "allowances": config.allowances,
                "capped": sizing.capped,  # team_caps: each team's own status says so
            }
            text = json.dumps(sized, sort_keys=True)
            if bag.get(KUEUE_COHORT_KEY) != text:
                bag[KUEUE_COHORT_KEY] = text
            cohort = sized
        if gang_release.DEACTIVATED_KEY in bag:  # activated again once Kueue evicted them
            gang_release.reactivate(self._kube(), bag)
        # what the objects are built from, besides the charm: the cohort's record (its
        # quota and the teams' guarantees), the models (their flavors) and the teams' asks
        inputs = kube_objects.fingerprint([models, shared, asked], bag[KUEUE_COHORT_KEY])
        if not self._built(KUEUE_OBJECTS_KEY, bag, inputs):
            self._apply_cohort_and_queues(models, shared, teams, cohort, bag)
            self._record_built(KUEUE_OBJECTS_KEY, bag, inputs)
        if cohort["overcommitted"]:
            raise StatusError.blocked(cohort["overcommitted"])

    def _apply_cohort_and_queues(
        self,
        models: list[str],
        shared: bool,
        teams: list[kueue.Team],
        cohort: dict[str, Any],
        bag: Bag,
    ) -> None:
        """Build Kueue's objects from the cohort's record; apply them where they changed."""
        quota = {(f, r): v for f, r, v in cohort["quota"]}
        given: kueue.Guarantees = {}
        for f, r, q, v in cohort.get("given") or []:
            given.setdefault((f, r), {})[q] = v
        flavors = sorted({kueue.flavor_name(m) for m in models})
        objects = kueue.cluster_objects(models, shared=shared, quota=quota)
        queues = [kueue.team_queue(t, flavors, given) for t in teams]
        want = kube_objects.fingerprint([*objects, *queues])
        if bag.get(KUEUE_OBJECTS_KEY) != want:
            kube = self._kube()
            for obj in objects:
                kube.apply(obj, field_manager=FIELD_MANAGER)
            for queue in queues:  # forced: takes over the queues teams wrote before
                live = kube.apply(queue, field_manager=FIELD_MANAGER, force=True)
                patch = kueue.takeover(live, queue)
                if patch:
                    kube.patch(kueue.API, "ClusterQueue", queue["metadata"]["name"], patch)
                    logger.info("took over ClusterQueue %s", queue["metadata"]["name"])
            self._delete_departed_queues(kube, {q["metadata"]["name"] for q in queues})
            bag[KUEUE_OBJECTS_KEY] = want
            logger.info(
                "applied Kueue's cohort, ResourceFlavors for %s and the queues of %s",
                ", ".join(models) or "CPUs",
                ", ".join(t.namespace for t in teams) or "no team",
            )

    @staticmethod
    def _delete_departed_queues(kube: Any, keep: set[str]) -> None:
        """Delete the team ClusterQueues this charm wrote whose team is gone (kueue.py)."""
        mine = f"{kueue.LABEL_MANAGED_BY}={kueue.MANAGED_BY}"
        for queue in kube.list(kueue.API, "ClusterQueue", label_selector=mine):
            name = queue["metadata"]["name"]
            if name.startswith(kueue.TEAM_PREFIX) and name not in keep:
                if kube.delete(kueue.API, "ClusterQueue", name):
                    logger.info("deleted ClusterQueue %s: its team is no longer related", name)


def _teams(bag: Bag) -> list[kueue.Team]:
    """The granted kube-api consumers that queue through Kueue, with the quota they asked.

    In the order they were related (the relation's id, kueue.clamp's first come).
    """
    granted = json.loads(bag.get(KUBE_API_KEY) or "{}")
    return [
        kueue.Team(g["namespace"], **g["queue"])
        for _, g in sorted(granted.items(), key=lambda item: int(item[0]))
        if isinstance(g.get("queue"), dict)
    ]


def team_caps(bag: Bag) -> dict[str, list[dict[str, str]]]:
    """Per team namespace, the asks the last sizing gave it less of (kueue.caps).

    Empty before Kueue's objects were first sized; access.announce_quotas publishes them.
    """
    return json.loads(bag.get(KUEUE_COHORT_KEY) or "{}").get("capped") or {}


def fingerprint(objects: list[dict[str, Any]], version: str = "") -> str:
    """What was applied, for the peer data: the version and a digest of the manifests.

    Any change of the manifests (a new pin, the MIG strategy, the registry, a generated
    config) changes it, so the charm applies them again.
    """
    digest = kube_objects.fingerprint(objects)
    return f"{version} {digest}" if version else digest
