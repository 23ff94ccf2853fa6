"""Issue 29 item 7: a consumer's kubeconfig carries a short-lived TokenRequest token.

The control plane asks for 48-hour tokens, rotates each consumer's secret daily (Juju's
secret-rotate) and renews a token with under a third of its life left on any hook. The
fake API server issues TokenRequest tokens with their expiry and refuses them after it
(tests/fakes/kube_auth.py); its clock is the charm's (conftest `machine`).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json

import yaml
from ops import SecretRotate, testing

from fakes.control_plane import kube_api_relation, peer, peers

JOBS = [{"api-groups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get"]}]
TENSORFLOW_SA = "system:serviceaccount:training:tensorflow"
LEGACY_SECRET = "/api/v1/namespaces/training/secrets/tensorflow-token"


def _granted(ctx, machine):
    rel = kube_api_relation("tensorflow", "training", JOBS)
    state = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    state = dataclasses.replace(state, relations=[*state.relations, rel])
    return ctx.run(ctx.on.relation_changed(rel), state), rel


def _secret(state, rel) -> testing.Secret:
    return next(s for s in state.secrets if s.label == f"kube-api-{rel.id}")


def _token(state, rel) -> str:
    config = yaml.safe_load(_secret(state, rel).latest_content["kubeconfig"])
    return config["users"][0]["user"]["token"]


def _entry(state, rel) -> dict:
    return json.loads(peer(state).local_app_data["kube-api"])[str(rel.id)]


def test_a_consumer_gets_a_48_hour_token_request_token_and_no_token_secret(
    ctx, machine, api, clock, whoami
):
    out, rel = _granted(ctx, machine)

    assert whoami(_token(out, rel)) == TENSORFLOW_SA
    # no long-lived credential anywhere: no service-account-token Secret in its namespace
    assert api.get_object(LEGACY_SECRET) is None
    assert not [
        o
        for o in api.objects("/api/v1/namespaces/training/secrets/")
        if o.get("type") == "kubernetes.io/service-account-token"
    ]
    entry = _entry(out, rel)
    expires = datetime.datetime.fromisoformat(entry["expires"])
    assert expires == clock.now + datetime.timedelta(hours=48)
    assert datetime.datetime.fromisoformat(entry["renew"]) == clock.now + datetime.timedelta(
        hours=32
    )
    assert _secret(out, rel).rotate == SecretRotate.DAILY  # Juju fires secret-rotate daily


def test_secret_rotate_writes_a_new_revision_and_the_old_token_dies_at_its_expiry(
    ctx, machine, api, clock, whoami
):
    out, rel = _granted(ctx, machine)
    first = _token(out, rel)

    clock.advance(hours=24)  # the DAILY rotation is due
    out = ctx.run(ctx.on.secret_rotate(_secret(out, rel)), out)
    second = _token(out, rel)
    assert second != first
    assert whoami(first) == TENSORFLOW_SA  # both hold until the first expires

    clock.advance(hours=24, minutes=1)  # past the first token's 48 hours
    assert whoami(first) is None  # refused: 401 Unauthorized
    assert whoami(second) == TENSORFLOW_SA  # the consumer that read the new revision


def test_a_missed_rotation_is_made_up_by_any_hook_with_a_third_of_the_life_left(
    ctx, machine, api, clock, whoami
):
    out, rel = _granted(ctx, machine)
    first = _token(out, rel)

    clock.advance(hours=31)  # more than a third left (17 h): nothing to do
    out = ctx.run(ctx.on.update_status(), out)
    assert _token(out, rel) == first

    clock.advance(hours=2)  # 15 h left, and no secret-rotate came
    out = ctx.run(ctx.on.update_status(), out)
    renewed = _token(out, rel)
    assert renewed != first
    again = ctx.run(ctx.on.update_status(), out)
    assert _token(again, rel) == renewed  # idempotent: one renewal

    clock.advance(hours=16)  # the first token expired; the renewed one holds
    assert whoami(first) is None
    assert whoami(renewed) == TENSORFLOW_SA


def _granted_before_token_requests(ctx, machine, api, whoami):
    """A consumer as an earlier revision left it: a token Secret's token, no expiry."""
    out, rel = _granted(ctx, machine)
    legacy = "legacy-secret-token"
    secret_obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "name": "tensorflow-token",
            "namespace": "training",
            "annotations": {"kubernetes.io/service-account.name": "tensorflow"},
        },
        "data": {"token": base64.b64encode(legacy.encode()).decode()},
    }
    api.put_object(LEGACY_SECRET, secret_obj)
    sec = _secret(out, rel)
    config = yaml.safe_load(sec.latest_content["kubeconfig"])
    config["users"][0]["user"]["token"] = legacy
    old = testing.Secret(
        {"kubeconfig": yaml.safe_dump(config)},
        id=sec.id,
        label=sec.label,
        owner="app",
        remote_grants=sec.remote_grants,
        description=sec.description,
    )
    bag = peer(out).local_app_data
    granted = json.loads(bag["kube-api"])
    for key in ("expires", "renew"):
        del granted[str(rel.id)][key]
    earlier = dataclasses.replace(
        peer(out), local_app_data={**bag, "kube-api": json.dumps(granted)}
    )
    relations = [earlier, *[r for r in out.relations if r.id != earlier.id]]
    state = dataclasses.replace(
        out, relations=relations, secrets=[*[s for s in out.secrets if s.id != sec.id], old]
    )
    assert whoami(legacy) == TENSORFLOW_SA
    return state, rel, legacy


def test_upgrade_moves_a_consumer_to_token_request_and_deletes_its_token_secret_once_unread(
    ctx, machine, api, clock, whoami
):
    state, rel, legacy = _granted_before_token_requests(ctx, machine, api, whoami)

    out = ctx.run(ctx.on.upgrade_charm(), state)
    new = _token(out, rel)
    assert new != legacy and whoami(new) == TENSORFLOW_SA
    assert _secret(out, rel).rotate == SecretRotate.DAILY
    # the consumer may not have read the new revision yet: its old token still works
    assert whoami(legacy) == TENSORFLOW_SA
    assert _entry(out, rel)["legacy-token"] == 1

    # Juju: no unit of the consumer tracks revision 1 any more
    out = ctx.run(ctx.on.secret_remove(_secret(out, rel), revision=1), out)
    assert api.get_object(LEGACY_SECRET) is None
    assert whoami(legacy) is None  # revoked, 401
    assert whoami(new) == TENSORFLOW_SA
    assert "legacy-token" not in _entry(out, rel)
    assert ctx.removed_secret_revisions == [1]


def test_a_token_secret_no_secret_remove_reported_goes_at_the_next_renewal(
    ctx, machine, api, clock, whoami
):
    state, rel, legacy = _granted_before_token_requests(ctx, machine, api, whoami)
    out = ctx.run(ctx.on.upgrade_charm(), state)
    assert whoami(legacy) == TENSORFLOW_SA

    clock.advance(hours=24)
    out = ctx.run(ctx.on.secret_rotate(_secret(out, rel)), out)
    assert api.get_object(LEGACY_SECRET) is None
    assert whoami(legacy) is None
    assert whoami(_token(out, rel)) == TENSORFLOW_SA
    assert "legacy-token" not in _entry(out, rel)
