# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The cluster's batch engines, JobSet and Kueue, from their upstream release manifests.

No ops here. The leader downloads each pinned release's `manifests.yaml` over https only
(from GitHub, or `addons-mirror` on air-gapped sites), logs its sha256 and refuses anything
but the one config pins or, with none pinned, the one it first applied from that URL; then
it makes the objects this cluster's and applies them with server-side apply, as both
projects' install guides do (`kubectl apply --server-side -f .../manifests.yaml`; their
CRDs are too large for client-side apply's annotation).

What is changed in the upstream objects, and nothing else:
- container images move below `image-registry` (images.mirrored), in Deployments and
  DaemonSets (Calico's calico-node, which shares this path);
- the controllers tolerate the control-plane taint and select kubeadm's control-plane
  label (`CONTROL_PLANE_SELECTOR`), so they run before any worker joins, never compete
  with training pods for a GPU node, and never run where root on a worker could take
  their ServiceAccount's near-cluster-admin rights;
- Kueue's manager configuration gets `waitForPodsReady` (a job whose pods do not all run
  within the timeout is evicted and requeued, releasing its quota), the JobSet
  integration, and manages only the namespaces labelled for it, whose job and pod webhooks
  are scoped the same way (kueue.narrow_webhooks); its Deployment's pod template carries a
  digest of that configuration, so a change rolls the controller (Kueue reads its
  configuration only when it starts).

Nothing is downloaded or applied while the pinned version, the source, the expected
sha256, the registry and the settings stay what was applied last (`Applied.key`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import yaml

from charms.gpu_k8s.v0.images import mirrored

logger = logging.getLogger(__name__)

MAX_MANIFEST_BYTES = 32 * 1024 * 1024
DOWNLOAD_TIMEOUT_SECONDS = 60
CONFIG_DIGEST_ANNOTATION = "gpu-k8s.io/config-sha256"
# kubeadm labels (and taints) each control-plane node `node-role.kubernetes.io/control-plane`
# (kubernetes cmd/kubeadm/app/constants LabelNodeRoleControlPlane, phase mark-control-plane).
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
CONTROL_PLANE_TOLERATION = {
    "key": CONTROL_PLANE_LABEL,
    "operator": "Exists",
    "effect": "NoSchedule",
}
# The toleration alone only allows a controller there: "Tolerations allow scheduling but
# don't guarantee scheduling" (kubernetes.io/docs/concepts/scheduling-eviction/
# taint-and-toleration); this selector requires it. Controllers with cluster-wide write
# rights (Kueue's, JobSet's, Calico's kube-controllers) then never run on a worker, whose
# root reads every token its kubelet mounts.
CONTROL_PLANE_SELECTOR = {CONTROL_PLANE_LABEL: ""}
# Applied first so that what follows finds its namespace and its kinds; webhooks last, so
# that nothing else is refused while their service is not up yet.
_FIRST = ("Namespace", "CustomResourceDefinition")
_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "APIService")


@dataclasses.dataclass(frozen=True)
class Release:
    """One pinned upstream release and where its controller runs."""

    name: str
    version: str
    upstream_url: str
    namespace: str
    deployment: str
    config_map: str | None = None
    config_key: str | None = None
    asset: str = "manifests.yaml"  # the file's name upstream, kept on a mirror
    # The asset's sha256 where it is known when pinning (read from the tag's file); empty
    # where it is not (a release asset built by the project's release job): then the
    # leader trusts the first one it applies from a URL (`verify`).
    sha256: str = ""

    def url(self, mirror: str) -> str:
        """The manifest's URL: upstream, or `<mirror>/<name>/<version>/<asset>`."""
        if not mirror:
            return self.upstream_url
        return f"{mirror.rstrip('/')}/{self.name}/{self.version}/{self.asset}"


class AddonError(Exception):
    """The release cannot be applied as asked (the operator fixes it); nothing was applied."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """What this cluster asks of the engines beyond their defaults."""

    registry: str = ""
    pods_ready_timeout_minutes: int = 10


# What `customise` changes, numbered: a new number re-applies every release once, so that
# a running cluster gets the change (2: the controllers' control-plane node selector; 3:
# Kueue's waitForPodsReady.recoveryTimeout, kueue.RECOVERY_TIMEOUT_MINUTES; 4: its
# requeuingStrategy.backoffMaxSeconds, kueue.BACKOFF_MAX_SECONDS).
CUSTOMISATION = 4


def want_key(release: Release, mirror: str, sha256: str, settings: Settings) -> str:
    """What decides whether `release` must be (re)applied; stored once it was."""
    fields: list[Any] = [release.version, release.url(mirror), sha256]
    fields += [dataclasses.asdict(settings), CUSTOMISATION]
    return json.dumps(fields, sort_keys=True)


class _HttpsRedirectsOnly(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to another https URL.

    urllib's own handler follows any redirect to http, https or ftp (CPython
    Lib/urllib/request.py HTTPRedirectHandler.http_error_302: only other schemes raise
    "redirection to url ... is not allowed"), so an https URL answered with a 302 to
    plain http would be fetched in clear. Raising HTTPError here stops it before that
    request is sent (http_error_302 calls redirect_request with the absolute new URL).
    """

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102 (urllib's)
        if not newurl.lower().startswith("https://"):
            raise urllib.error.HTTPError(
                req.full_url, code, f"redirected to {newurl}, not https", headers, fp
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def https_open(url: str, *, timeout: float, context: ssl.SSLContext | None = None) -> Any:
    """`urllib.request.urlopen(url)` that follows redirects only to https (the charm's opener).

    `context`: the TLS context (None: the system's trusted CAs, as urlopen's default).
    """
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context), _HttpsRedirectsOnly()
    )
    return opener.open(url, timeout=timeout)


def download(
    url: str,
    *,
    opener: Callable[..., Any] = https_open,
    timeout: float = DOWNLOAD_TIMEOUT_SECONDS,
) -> bytes:
    """The bytes at `url` (at most MAX_MANIFEST_BYTES); AddonError saying why not.

    Only https: what comes back is applied with cluster-admin rights, so a manifest that
    anyone on the path could change (plain http) is refused before it is asked for, and
    so is one a redirect took to plain http (`https_open` does not follow it; with any
    other opener the answer's final URL is checked before its bytes are used).
    """
    if not url.lower().startswith("https://"):
        raise AddonError(
            f"refusing {url}: add-on manifests are applied with cluster-admin rights and "
            "are downloaded over https only"
        )
    try:
        with opener(url, timeout=timeout) as answer:
            final = answer.geturl()
            if not final.lower().startswith("https://"):
                raise AddonError(
                    f"refusing {url}: it was redirected to {final}, and add-on manifests "
                    "are downloaded over https only"
                )
            data = answer.read(MAX_MANIFEST_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise AddonError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise AddonError(f"cannot download {url}: {reason}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise AddonError(f"{url} is larger than {MAX_MANIFEST_BYTES // (1024 * 1024)} MiB")
    return data


def verify(release: Release, data: bytes, expected: str, first: str = "") -> str:
    """The sha256 of `data`; AddonError when it is not the one it must be.

    `expected`: the `<name>-sha256` config, which wins when set. Otherwise the release's
    own pinned `sha256` where known (on GitHub and on a mirror alike: the same file).
    Otherwise `first`: the sha256 this URL's manifest had when the leader first applied it
    (trust on first use: a release asset never changes, so a different one at the same
    pinned URL is refused).
    """
    digest = hashlib.sha256(data).hexdigest()
    if expected:
        if digest != expected.lower():
            raise AddonError(
                f"{release.name} {release.version} manifest has sha256 {digest}, not the "
                f"{release.name}-sha256 {expected}; nothing applied"
            )
        return digest
    if release.sha256:
        if digest != release.sha256:
            raise AddonError(
                f"{release.name} {release.version} manifest has sha256 {digest}, not the "
                f"{release.sha256} of the pinned release; nothing applied (set "
                f"{release.name}-sha256 to accept another)"
            )
        return digest
    if first and digest != first:
        raise AddonError(
            f"{release.name} {release.version} manifest has sha256 {digest}, not the {first} "
            f"it had when first applied from the same URL; nothing applied (set "
            f"{release.name}-sha256 to accept the new one)"
        )
    return digest


def parse(release: Release, data: bytes) -> list[dict[str, Any]]:
    """The objects of a multi-document manifest; AddonError when it is not one."""
    try:
        # libyaml's parser (in PyYAML's wheels): the same objects, ~7x faster than PyYAML's own
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        docs = [d for d in yaml.load_all(data.decode(), Loader=loader) if d is not None]
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise AddonError(f"{release.name} manifest is not YAML: {e}") from None
    for doc in docs:
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        if not (isinstance(meta, dict) and doc.get("apiVersion") and doc.get("kind")):
            raise AddonError(
                f"{release.name} manifest holds something that is not a Kubernetes object"
            )
        if not meta.get("name"):
            raise AddonError(f"{release.name} manifest has a {doc['kind']} without a name")
    if not any(
        d["kind"] == "Deployment" and d["metadata"]["name"] == release.deployment for d in docs
    ):
        raise AddonError(
            f"{release.name} manifest has no Deployment {release.deployment}: "
            "is it the release's manifests.yaml?"
        )
    return docs


def _containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]


def customise(
    release: Release,
    objects: list[dict[str, Any]],
    settings: Settings,
    configure: Callable[[str, Settings], str] | None = None,
    transform: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """The objects made this cluster's (see the module docstring), in the order to apply.

    `configure` rewrites the text of the release's manager configuration (Kueue's);
    `transform` changes the objects further (Kueue's webhook scope).
    """
    out = json.loads(json.dumps(objects))  # a copy: the parsed list stays as downloaded
    config_digest = ""
    if configure is not None:
        config_digest = _configure(release, out, settings, configure)
    for obj in out:
        if obj["kind"] in ("Deployment", "DaemonSet"):  # a DaemonSet: Calico's calico-node
            _place(release, obj, settings, config_digest)
    if transform is not None:
        out = transform(out)
    return ordered(out)


def _configure(
    release: Release,
    objects: list[dict[str, Any]],
    settings: Settings,
    configure: Callable[[str, Settings], str],
) -> str:
    """Rewrite the manager configuration in place; returns the digest of the new text."""
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == release.config_map:
            data = obj.setdefault("data", {})
            if release.config_key not in data:
                raise AddonError(
                    f"{release.name} ConfigMap {release.config_map} has no {release.config_key}"
                )
            data[release.config_key] = configure(data[release.config_key], settings)
            return hashlib.sha256(data[release.config_key].encode()).hexdigest()
    raise AddonError(f"{release.name} manifest has no ConfigMap {release.config_map}")


def _place(release: Release, deployment: dict[str, Any], settings: Settings, digest: str) -> None:
    """Images from the registry; the controller on control-plane nodes, rolled by `digest`."""
    template = deployment["spec"]["template"]
    pod = template["spec"]
    for container in _containers(pod):
        container["image"] = mirrored(container["image"], settings.registry)
    if deployment["metadata"]["name"] != release.deployment:
        return
    tolerations = pod.setdefault("tolerations", [])
    if CONTROL_PLANE_TOLERATION not in tolerations:
        tolerations.append(dict(CONTROL_PLANE_TOLERATION))
    pod.setdefault("nodeSelector", {}).update(CONTROL_PLANE_SELECTOR)
    if digest:
        annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[CONFIG_DIGEST_ANNOTATION] = digest


def ordered(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Namespaces and CRDs first, webhook configurations and APIServices last."""

    def rank(obj: dict[str, Any]) -> int:
        if obj["kind"] in _FIRST:
            return _FIRST.index(obj["kind"])
        if obj["kind"] in _LAST:
            return len(_FIRST) + 1
        return len(_FIRST)

    return sorted(objects, key=rank)


def images(objects: list[dict[str, Any]]) -> list[str]:
    """Every container image the objects run (what an air-gapped mirror must hold)."""
    found = []
    for obj in objects:
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
            found += [c["image"] for c in _containers(obj["spec"]["template"]["spec"])]
    return sorted(set(found))


def readiness(deployment: dict[str, Any] | None) -> str | None:
    """None when the controller Deployment has every replica available; else what it lacks."""
    if deployment is None:
        return "its Deployment is missing"
    want = (deployment.get("spec") or {}).get("replicas", 1)
    status = deployment.get("status") or {}
    available = status.get("availableReplicas") or 0
    generation = (deployment.get("metadata") or {}).get("generation")
    observed = status.get("observedGeneration")
    if available >= want and (observed is None or generation is None or observed >= generation):
        return None
    return f"{available}/{want} controller pods available"
