"""No token, certificate key or kubeconfig credential leaks outside Juju secrets."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging

import yaml
from ops import testing

from fakes.control_plane import (
    ADMIN_TOKEN,
    earlier_revision_cluster,
    kube_api_relation,
    leader_member_state,
    peer,
    peers,
    secret,
    token_secret,
    worker_bag,
    workers_relation,
)

JOBS = [{"api-groups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]


def _visible(state: testing.State) -> list[str]:
    out = [state.unit_status.message, state.app_status.message]
    for rel in state.relations:
        out.append(json.dumps([rel.local_app_data, rel.local_unit_data], sort_keys=True))
        if isinstance(rel, testing.PeerRelation):
            out.append(json.dumps(rel.peers_data, sort_keys=True))
    return out


def _kubeconfig_token(sec: testing.Secret) -> str:
    return yaml.safe_load(sec.latest_content["kubeconfig"])["users"][0]["user"]["token"]


def test_no_secret_value_in_logs_statuses_results_or_databags(ctx, machine, api, clock, caplog):
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []

    def run(event, state):
        out = ctx.run(event, state)
        seen.extend(_visible(out))
        return out

    out = run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    # a cluster an earlier revision made, w0 a worker of that revision: the shared worker
    # grant's token stands, and must not leak either
    out = earlier_revision_cluster(out)
    workers = workers_relation({0: worker_bag("w0", identity=False), 1: worker_bag("w1")})
    consumer = kube_api_relation("tensorflow", "training", JOBS)
    joining = dataclasses.replace(peer(out), peers_data={1: {"joined": "false"}})
    out = dataclasses.replace(out, relations=[joining, workers, consumer])
    out = run(ctx.on.relation_changed(workers, remote_unit=0), out)
    out = run(ctx.on.relation_changed(out.get_relation(consumer.id), remote_unit=0), out)
    consumer_label = f"kube-api-{consumer.id}"
    consumer_tokens = [_kubeconfig_token(secret(out, consumer_label))]
    clock.advance(hours=23, minutes=30)  # token rotation and certificate re-upload
    out = run(ctx.on.secret_expired(token_secret(out, "kubernetes-worker/1"), revision=1), out)
    out = run(ctx.on.secret_rotate(secret(out, consumer_label)), out)  # the consumer's token
    consumer_tokens.append(_kubeconfig_token(secret(out, consumer_label)))
    assert consumer_tokens[0] != consumer_tokens[1]
    out = run(ctx.on.action("get-kubeconfig"), out)
    out = run(ctx.on.action("cluster-info"), out)
    out = run(ctx.on.relation_broken(out.get_relation(consumer.id)), out)
    member = leader_member_state(leader=False)
    run(ctx.on.relation_changed(peer(member), remote_unit=1), member)
    member_key = secret(member, "control-plane-join").tracked_content

    # the scenario did rotate: init's token and the workers' (w1 had not registered in
    # the leader's registry yet), each replaced once
    assert len(machine.tokens) == 4 and len(machine.uploads) == 1
    sa_tokens = [
        base64.b64decode(o["data"]["token"]).decode()
        for o in api.objects("/api/v1/namespaces/")
        if o.get("type") == "kubernetes.io/service-account-token" and o.get("data")
    ]
    assert len(sa_tokens) == 1  # the worker's; tensorflow's went with its relation
    init = next(d for d in machine.inits[0] if d["kind"] == "InitConfiguration")
    values = [
        *machine.tokens,
        *(t.split(".")[1] for t in machine.tokens),
        init["certificateKey"],
        *machine.uploads,
        *sa_tokens,
        *consumer_tokens,
        *(t.split(".")[1] for t in consumer_tokens),  # a JWT's claims
        ADMIN_TOKEN,
        member_key["token"].split(".")[1],
        member_key["certificate-key"],
    ]
    seen.extend(line.message for line in ctx.juju_log)
    seen.extend(s.message for s in ctx.unit_status_history)
    seen.append(json.dumps(ctx.action_results))
    seen.extend(ctx.action_logs)
    seen.append(caplog.text)
    text = "\n".join(seen)
    for value in values:
        assert value not in text
    # nor on a command line, where any local user reads them in /proc/<pid>/cmdline
    command_lines = "\n".join(" ".join(call.argv) for call in machine.calls)
    for value in values:
        assert value not in command_lines
    # and the values are where they belong
    assert token_secret(out, "kubernetes-worker/1").latest_content["token"] == machine.tokens[-1]
