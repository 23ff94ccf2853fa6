# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""What the leader runs in the cluster beyond kubeadm: CNI, NVIDIA add-ons, batch engines.

Each add-on is applied when what decides it (pin, config, the workers' GPUs) differs from
what the peer application databag says was applied last, so an event with nothing new
sends no request. The manifests and decisions live in `flannel.py`, `device_plugin.py`,
`dcgm_exporter.py`, `mig_manager.py`, `kube_state_metrics.py`, `batch_engines.py` and
`network_policies.py` (each kube-api consumer's namespace isolated for ingress); this
module applies them, with the hook's API client and a downloader (never the charm), and
records each in the peer application databag under a key of its own (below).

Batch engines (JobSet, Kueue) come last in the leader's reconcile: a download that fails or
a manifest whose sha256 is not the pinned one makes the unit Blocked naming the add-on, and
everything before (workers, kube-api consumers) is already served.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, MutableMapping
from typing import Any

import batch_engines
import dcgm_exporter
import device_plugin
import flannel
import kube_state_metrics
import kueue
import mig_manager
import network_policies
import rbac
import registry
from access import KUBE_API_KEY
from charm_config import Config
from literals import FIELD_MANAGER, JOBSET, KUBE_STATE_METRICS_NODE_KEY, KUEUE

from charms.gpu_k8s.v0 import kube_objects
from charms.gpu_k8s.v0.kubeclient import Kube
from charms.gpu_k8s.v0.status import StatusError

logger = logging.getLogger(__name__)

# The peer application databag (`bag` below): what was applied last, under these keys.
CNI_KEY = "cni"
DEVICE_PLUGIN_KEY = "device-plugin"
DCGM_EXPORTER_KEY = "dcgm-exporter"
KUBE_STATE_METRICS_KEY = "kube-state-metrics"
NODE_METRICS_KEY = "node-metrics-rbac"
MIG_MANAGER_KEY = "mig-manager"
KUEUE_OBJECTS_KEY = "kueue-objects"
TEAM_NETWORK_KEY = "team-network-policies"  # what network_policies last applied
KUEUE_COHORT_KEY = "kueue-cohort"  # the cohort's quota last computed, and an overcommit
# and per batch engine: `addon-<name>` (what was applied), `addon-<name>-ready` (its
# controller was seen ready) and `addon-<name>-sha256` (URL -> the sha256 first applied)

Bag = MutableMapping[str, str]


class Addons:
    """Applies the cluster's add-ons from the leader.

    `kube`: the hook's API client, asked for only when something is applied;
    `opener`: what downloads the batch engines' releases (`urllib.request.urlopen`).
    """

    def __init__(self, kube: Callable[[], Kube], opener: Callable[..., Any]):
        self._kube = kube
        self._opener = opener

    def apply_cni(self, config: Config, bag: Bag) -> None:
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

    def apply_node_metrics_access(self, bag: Bag) -> None:
        """Let every node read its kubelet's and API server's metrics as itself."""
        objects = rbac.node_metrics_manifests()
        want = fingerprint(objects)
        if self._apply_once(NODE_METRICS_KEY, objects, want, bag):
            logger.info("nodes may read their metrics (%s)", rbac.NODE_METRICS)

    def apply_team_network_policies(self, bag: Bag) -> list[str]:
        """Default-deny ingress in every namespace granted to a kube-api consumer.

        Run after the grants (access.serve_kube_api), in the same hook, so a namespace is
        isolated in the hook that made it; applied again only when the namespaces granted
        change (a namespace whose consumer left keeps its policy, as it keeps its data).
        Returns a note for the status while consumers share a CNI that enforces none of it.
        """
        granted = json.loads(bag.get(KUBE_API_KEY) or "{}")
        objects = network_policies.manifests(g["namespace"] for g in granted.values())
        if self._apply_once(TEAM_NETWORK_KEY, objects, fingerprint(objects), bag):
            logger.info(
                "namespaces isolated for ingress: %s",
                ", ".join(o["metadata"]["namespace"] for o in objects) or "none",
            )
        if objects and not network_policies.enforced(bag.get(CNI_KEY, "")):
            return [network_policies.NOT_ENFORCED]
        return []

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

    def apply_mig_manager(self, config: Config, bag: Bag) -> None:
        """Run NVIDIA's MIG manager once a worker reports MIG-capable GPUs; keep it after.

        Applied again when the config generated from the workers' models changes (or the
        pin, or `image-registry`); nothing is removed when those workers go.
        """
        gpus = [mig_manager.MigGpu(*g) for g in registry.Registry.load(bag).mig_gpus()]
        if not gpus:
            return
        objects = mig_manager.manifests(gpus, config.image_registry)
        want = fingerprint(objects, mig_manager.VERSION)
        if bag.get(MIG_MANAGER_KEY) != want and self._moving(
            self._kube(), "the NVIDIA MIG manager", objects
        ):
            return
        if self._apply_once(MIG_MANAGER_KEY, objects, want, bag):
            logger.info("applied the NVIDIA MIG manager %s for %d GPU models", want, len(gpus))

    # -- batch engines --------------------------------------------------------------------

    def apply_batch_engines(self, config: Config, bag: Bag, resize: bool = False) -> list[str]:
        """JobSet, Kueue and the cluster-wide Kueue objects; returns what is not ready yet.

        `resize`: read what the cohort's quota is made of again (update-status).

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
            self._apply_kueue_objects(config, bag, resize)
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

    def _apply_kueue_objects(self, config: Config, bag: Bag, resize: bool) -> None:
        """The cohort, priorities and ResourceFlavors (one per GPU model, one for CPUs).

        The cohort holds what the cluster has less the teams' guarantees (kueue.py). Its
        inputs (Nodes, running Pods, ClusterQueues) change without an event reaching this
        charm, so they are read when `resize` (update-status, the periodic hook) or when
        the workers registered are not those it was last sized for (a node joined or
        left); other hooks apply the quota last computed (KUEUE_COHORT_KEY), sending
        nothing while nothing changed.

        Raises:
            StatusError: Blocked when the teams' guarantees sum past the cluster.
        """
        workers = registry.Registry.load(bag)
        models = workers.gpu_models()
        shared = config.gpu_time_slicing_replicas > 1
        sized_for = json.loads(bag.get(KUEUE_COHORT_KEY) or "{}").get("workers")
        if resize or sized_for != sorted(workers.nodes):
            kube = self._kube()
            have = kueue.capacity(
                kube.list("v1", "Node"),
                kube.list("v1", "Pod", field_selector="status.phase=Running"),
                models,
                shared=shared,
            )
            held = kueue.guarantees(kube.list(kueue.API, "ClusterQueue"))
            quota = kueue.cohort_quota(have, held)
            sized: dict[str, Any] = {
                "quota": [[f, r, v] for (f, r), v in sorted(quota.items())],
                "overcommitted": kueue.overcommitted(have, held) or "",
                "workers": sorted(workers.nodes),
            }
            text = json.dumps(sized, sort_keys=True)
            if bag.get(KUEUE_COHORT_KEY) != text:
                bag[KUEUE_COHORT_KEY] = text
        cohort = json.loads(bag[KUEUE_COHORT_KEY])
        quota = {(f, r): v for f, r, v in cohort["quota"]}
        objects = kueue.cluster_objects(models, shared=shared, quota=quota)
        want = kube_objects.fingerprint(objects)
        if bag.get(KUEUE_OBJECTS_KEY) != want:
            kube = self._kube()
            for obj in objects:
                kube.apply(obj, field_manager=FIELD_MANAGER)
            bag[KUEUE_OBJECTS_KEY] = want
            logger.info(
                "applied Kueue's cohort and ResourceFlavors for %s", ", ".join(models) or "CPUs"
            )
        if cohort["overcommitted"]:
            raise StatusError.blocked(cohort["overcommitted"])


def fingerprint(objects: list[dict[str, Any]], version: str = "") -> str:
    """What was applied, for the peer data: the version and a digest of the manifests.

    Any change of the manifests (a new pin, the MIG strategy, the registry, a generated
    config) changes it, so the charm applies them again.
    """
    digest = kube_objects.fingerprint(objects)
    return f"{version} {digest}" if version else digest
