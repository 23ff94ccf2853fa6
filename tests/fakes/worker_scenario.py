"""Builders of ops.testing states for the kubernetes-worker tests."""

import json

from ops import testing

TOKEN = "abcdef.0123456789abcdef"
SA_TOKEN = "worker-sa-token-5c1d9e"
CA_HASH = "sha256:" + "ab" * 32
NODE = "ip-10-0-1-17"
CP_APP = "kubernetes-control-plane"
API_SERVERS = ["10.0.0.10:6443", "10.0.0.11:6443", "10.0.0.12:6443"]


def join_secret(api, *, token=TOKEN, kubeconfig=None):
    return testing.Secret(
        {"token": token, "kubeconfig": kubeconfig or api.kubeconfig(token=SA_TOKEN)}
    )


def cluster_relation(secret, **overrides):
    data = {
        "endpoint": "https://127.0.0.1:6444",
        "api-servers": json.dumps(API_SERVERS),
        "ca-cert-hash": CA_HASH,
        "join-secret-id": secret.id if secret else "secret:missing",
        "kubernetes-version": "1.35",
    }
    data.update(overrides)
    data = {k: v for k, v in data.items() if v is not None}
    return testing.Relation(
        "cluster", remote_app_name=CP_APP, remote_app_data=data, remote_units_data={0: {}}
    )


def joined_state(api, *, config=None, **overrides):
    secret = join_secret(api)
    relation = cluster_relation(secret, **overrides)
    return testing.State(leader=False, config=config or {}, relations={relation}, secrets={secret})


def register_node(api, name=NODE, labels=None):
    api.put_object(
        f"/api/v1/nodes/{name}",
        {"metadata": {"labels": {"kubernetes.io/hostname": name, **(labels or {})}}},
    )


def node(api, name=NODE):
    return api.get_object(f"/api/v1/nodes/{name}")
