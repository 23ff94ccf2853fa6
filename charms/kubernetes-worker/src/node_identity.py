# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""This node's own identity at the Kubernetes API: its kubelet's client certificate.

A worker acts on its own Node as its kubelet does (issue 29 item 2, review efs-security.md
S2), not with a ServiceAccount every worker shares: kube-apiserver's Node authorizer and
the NodeRestriction admission plugin then confine it to its own Node object and the pods
bound to it (kubernetes plugin/pkg/auth/authorizer/node/node_authorizer.go,
plugin/pkg/admission/noderestriction/admission.go).

What kubeadm leaves on a joined machine: `/etc/kubernetes/kubelet.conf`, written by kubelet
after its TLS bootstrap (kubernetes pkg/kubelet/certificate/bootstrap/bootstrap.go
writeKubeconfigFromBootstrapping): cluster `default-cluster` (the control-plane endpoint,
the cluster CA as `certificate-authority-data` or a `certificate-authority` file), user
`default-auth` whose `client-certificate` and `client-key` both name
`/var/lib/kubelet/pki/kubelet-client-current.pem`, an absolute link to the dated PEM the
certificate store wrote last (k8s.io/client-go util/certificate/certificate_store.go;
kubelet rotates it, so it is read anew for each client). `kubeconfig(host)` reads those
files through the `Host` and returns the same kubeconfig with the files inlined as
`*-data`, which `Kube.from_kubeconfig` takes. Its errors never echo the files (they hold
the node's private key).
"""

from __future__ import annotations

import base64
import os
from pathlib import PurePosixPath

import yaml

from charms.gpu_k8s.v0 import kubeadm
from charms.gpu_k8s.v0.kubeconfig import load_kubeconfig
from charms.gpu_k8s.v0.system import Host

KUBELET_CONF = kubeadm.KUBELET_CONF
# libyaml's emitter where PyYAML has it (its wheels do): the same document, ~13x less CPU
# than the pure-Python one, which spends ~4 ms on the inlined certificates of every hook
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
# kubeconfig file references and the inline keys that replace them
_USER_FILES = (
    ("client-certificate", "client-certificate-data"),
    ("client-key", "client-key-data"),
)
_CLUSTER_FILES = (("certificate-authority", "certificate-authority-data"),)


class NodeIdentityError(Exception):
    """This machine holds no usable kubelet identity (not joined, or its files are gone)."""


def _read(host: Host, absolute: str) -> str | None:
    """A file's text, following a link the way the machine would (absolute or relative)."""
    path = host.path(absolute)
    if path.is_symlink():
        absolute = str(PurePosixPath(absolute).parent / os.readlink(path))
    return host.read(absolute)


def _inline(host: Host, entry: dict, files: tuple[tuple[str, str], ...], what: str) -> None:
    for file_key, data_key in files:
        named = entry.pop(file_key, None)
        if not named:
            continue
        text = _read(host, str(named))
        if not text:
            raise NodeIdentityError(f"kubelet.conf names {what} {named}, which is missing")
        entry[data_key] = base64.b64encode(text.encode()).decode()


def kubeconfig(host: Host) -> str:
    """The kubelet's kubeconfig with its certificate files inlined (YAML text).

    Raises:
        NodeIdentityError: no kubelet.conf (not joined), a file it names is missing, or
            it authenticates with something other than a client certificate.
    """
    text = host.read(KUBELET_CONF)
    if not text:
        raise NodeIdentityError(f"no {KUBELET_CONF}: this machine has not joined")
    try:
        config = load_kubeconfig(text)
    except ValueError as e:
        raise NodeIdentityError(f"{KUBELET_CONF} is unusable: {e}") from None
    context = next(
        c["context"] for c in config["contexts"] if c["name"] == config["current-context"]
    )
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    _inline(host, user, _USER_FILES, "the client certificate")
    _inline(host, cluster, _CLUSTER_FILES, "the cluster CA")
    if not user.get("client-certificate-data") or not user.get("client-key-data"):
        raise NodeIdentityError(f"{KUBELET_CONF} holds no client certificate and key")
    return yaml.dump(config, Dumper=_DUMPER)
