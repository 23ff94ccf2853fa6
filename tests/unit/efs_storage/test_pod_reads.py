"""efs-storage reads pods only where it serves a consumer (review44a G8).

The control plane grants its ServiceAccount `pods list` in the namespace of each consumer it
admits (kubernetes-control-plane rbac.provisioner_pods_manifests; the fake's
kube_grants.admit_served stores the same Role), never cluster-wide. A claim whose pods it
cannot read is never deleted: nobody can say it is unused.
"""

from __future__ import annotations

import dataclasses
import json

from efs_env import KUBE_TOKEN, relation_of, status_texts, storage_relation

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes.kube_grants import rbac

CLAIM = "efs-storage-tensorflow"


def _served(ctx, env):
    """Tensorflow served in `training`; returns the state after its claim was made."""
    env.add_node("us-east-1a")
    out = ctx.run(ctx.on.install(), env.state(consumers={"tensorflow": "training"}))
    assert env.pvc("training", CLAIM) is not None
    return out


def _without_consumer(out):
    """`out` with tensorflow's shared-storage relation gone."""
    kept = [r for r in out.relations if r.endpoint != "shared-storage"]
    return dataclasses.replace(out, relations=kept)


def _kube(env) -> Kube:
    """A client with efs-storage's token (the grant the control plane made for it)."""
    return Kube.from_kubeconfig(env.api.kubeconfig(token=KUBE_TOKEN), retries=1, backoff=0.01)


def test_its_token_lists_pods_where_it_serves_and_nowhere_else(env):
    env.add_namespace("research", "notebook")  # granted to notebook, admitted too
    env.admit({"tensorflow": ""})  # notebook no longer served
    env.api.put_object("/api/v1/namespaces/other/pods/p", {"metadata": {"name": "p"}})
    kube = _kube(env)
    assert kube.list("v1", "Pod", "training") == []
    for namespace in ("research", "other", None):
        try:
            kube.list("v1", "Pod", namespace)
        except KubeError as e:
            assert e.status == 403
        else:
            raise AssertionError(f"efs-storage listed the pods of {namespace or 'the cluster'}")


def test_a_claim_is_kept_while_its_namespace_pods_cannot_be_read(ctx, env):
    out = _served(ctx, env)
    env.admit({})  # the control plane serves it nobody: its pod reads are gone
    out = ctx.run(ctx.on.update_status(), _without_consumer(out))
    assert env.pvc("training", CLAIM) is not None
    assert f"claim training/{CLAIM} is no longer wanted but may be in use" in (
        out.unit_status.message
    )
    env.admit({"tensorflow": ""})  # it may read them again: no pod mounts the claim
    out = ctx.run(ctx.on.update_status(), out)
    assert env.pvc("training", CLAIM) is None


def test_a_departed_consumer_with_a_claim_in_use_stays_published_until_it_goes(ctx, env):
    out = _served(ctx, env)
    env.add_pod("training", "trainer-0", CLAIM)
    out = ctx.run(ctx.on.update_status(), _without_consumer(out))
    published = json.loads(relation_of(out, "kube-api").local_app_data["storage-consumers"])
    assert published == {"tensorflow": ""}  # so its pod reads in training stay
    assert "pods trainer-0 use it" in out.unit_status.message
    env.api.delete_object("/api/v1/namespaces/training/pods/trainer-0")
    out = ctx.run(ctx.on.update_status(), out)
    assert env.pvc("training", CLAIM) is None
    out = ctx.run(ctx.on.update_status(), out)
    assert relation_of(out, "kube-api").local_app_data["storage-consumers"] == "{}"


def test_a_consumer_not_admitted_yet_waits_and_nothing_is_deleted(ctx, env):
    env.add_namespace("research", "notebook")
    env.admit({})  # nobody admitted yet: no pod reads anywhere
    notebook = storage_relation("notebook", "research")
    out = ctx.run(ctx.on.install(), env.state(relations=[env.kube_api_relation(), notebook]))
    assert out.unit_status.name == "waiting"
    assert not any("Traceback" in text for text in status_texts(ctx, out))
    assert env.kube_writes() and not [w for w in env.kube_writes() if w[0] == "DELETE"]


def test_the_role_names_cannot_be_a_consumers_own():
    name = rbac().provisioner_pods_name("efs-storage")
    assert ":" in name  # no application name holds one (consumers' are gpu-k8s-<app>)
