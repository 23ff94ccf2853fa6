"""kubeadm's certificates: expiry read hourly, renewed in turn within the window, the action."""

from __future__ import annotations

import base64
import copy
import dataclasses
import datetime
import json
from pathlib import Path

import certificates
import pytest
import yaml
from ops import testing

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes.control_plane import (
    CA_KEY_PEM,
    KUBEADM_CERTS,
    NOW,
    STATIC_PODS,
    leader_member_state,
    member,
    peer,
    peers,
)
from fakes.kube_apiserver import FakeKubeApiServer

CHECK = " ".join(certificates.CHECK)
RENEW = " ".join(certificates.RENEW)
YEAR = NOW + datetime.timedelta(days=365)  # what kubeadm init signed the certificates for
ME = "kubernetes-control-plane/0"
OTHER = "kubernetes-control-plane/1"


def bootstrapped(ctx) -> testing.State:
    return ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))


def kubeadm_certs(machine) -> list[str]:
    return [line for line in machine.lines() if " certs " in line]


def with_peer(state: testing.State, units: dict[int, dict]) -> testing.State:
    return dataclasses.replace(
        state, relations=[dataclasses.replace(peer(state), peers_data=units)]
    )


def test_the_fake_prints_kubeadm_certs_check_expiration_json(machine, ctx):
    bootstrapped(ctx)
    info = json.loads(machine.host().run(*certificates.CHECK))

    assert list(info)[:2] == ["kind", "apiVersion"]
    assert info["apiVersion"] == "output.kubeadm.k8s.io/v1alpha3"
    names = [c["name"] for c in info["certificates"]]
    assert names == sorted(KUBEADM_CERTS)
    admin = info["certificates"][0]
    assert admin == {
        "name": "admin.conf",
        "expirationDate": YEAR.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "residualTime": 365 * 86400,
        "externallyManaged": False,
        "caName": "ca",
        "missing": False,
    }
    assert [a["name"] for a in info["certificateAuthorities"]] == [
        "ca",
        "etcd-ca",
        "front-proxy-ca",
    ]
    assert all("caName" not in a for a in info["certificateAuthorities"])
    parsed = certificates.parse(json.dumps(info))
    assert parsed.earliest().expires == YEAR.replace(microsecond=0)


def test_far_from_expiry_kubeadm_is_asked_at_most_hourly_and_nothing_renews(ctx, machine, clock):
    out = bootstrapped(ctx)
    assert kubeadm_certs(machine) == [CHECK]  # read once the node runs
    out = ctx.run(ctx.on.update_status(), out)
    clock.advance(minutes=59)
    out = ctx.run(ctx.on.update_status(), out)
    assert kubeadm_certs(machine) == [CHECK]

    clock.advance(minutes=2)
    out = ctx.run(ctx.on.update_status(), out)

    assert kubeadm_certs(machine) == [CHECK, CHECK]
    assert peer(out).local_unit_data["certificates-renewal"] == "false"
    assert "certificate-renewal-turn" not in peer(out).local_app_data
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")


def test_cluster_info_shows_each_units_earliest_expiry(ctx, machine, api):
    out = bootstrapped(ctx)
    ctx.run(ctx.on.action("cluster-info"), out)
    # admin.conf sorts first among the certificates signed at init
    # admin.conf sorts first among the certificates signed at init; the CAs are reported
    # (the fake etcd's CA is its own, valid 30 days)
    line = ctx.action_results["certificates"]
    assert line.startswith(f"{ME}: admin.conf expires {YEAR:%Y-%m-%d %H:%M} UTC; CA ")


def test_the_leader_serves_each_units_earliest_expiry_to_cos(ctx, machine, clock):
    """The gauges the certificate alerts read (charm-state.rules), in seconds since epoch."""
    agent = testing.Relation("cos-agent", remote_app_name="opentelemetry-collector")
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers(), agent]))
    soon = NOW + datetime.timedelta(days=20)
    other = {"certificates-expiry": json.dumps({"name": "apiserver", "expires": soon.isoformat()})}
    out = with_peer(out, {1: other})
    out = dataclasses.replace(out, relations=[*out.relations, agent])

    ctx.run(ctx.on.update_status(), out)

    served = machine.read("/var/lib/gpu-k8s/unit-state/kubernetes-control-plane-0.prom")
    lines = set(served.splitlines())
    year = int(YEAR.timestamp())
    assert (
        "gpu_k8s_certificate_expiry_timestamp_seconds"
        f'{{certificate="admin.conf",unit="{ME}"}} {year}'
    ) in lines
    assert (
        "gpu_k8s_certificate_expiry_timestamp_seconds"
        f'{{certificate="apiserver",unit="{OTHER}"}} {int(soon.timestamp())}'
    ) in lines
    # the fake etcd's CA (its own, valid 30 days) is the earliest CA
    assert any(
        line.startswith(
            "gpu_k8s_certificate_authority_expiry_timestamp_seconds"
            f'{{authority="etcd-ca",unit="{ME}"}} '
        )
        for line in lines
    )


def test_within_the_window_the_leader_renews_restarts_its_pods_and_waits(ctx, machine, api, clock):
    out = bootstrapped(ctx)
    machine.kubelet.events.clear()
    clock.advance(days=340)  # 25 days left: inside the default 30
    api.inject(503, times=2, path_prefix="/readyz")  # the restarted API server warms up

    out = ctx.run(ctx.on.update_status(), out)

    assert kubeadm_certs(machine)[1:] == [CHECK, CHECK, RENEW, CHECK]  # hourly, before, after
    renewed = clock.now + datetime.timedelta(days=365)
    assert machine.pki.expires("apiserver") == renewed.replace(microsecond=0)
    assert machine.pki.expires("etcd-peer") == renewed.replace(microsecond=0)
    # every static pod stopped, then started on the new certificate
    assert sorted(e for e in machine.kubelet.events if e[0] == "stop") == [
        ("stop", p) for p in STATIC_PODS
    ]
    assert sorted(machine.kubelet.running) == sorted(STATIC_PODS)
    assert machine.kubelet.running["kube-apiserver"] == renewed.replace(microsecond=0)
    assert [r.path for r in api.requests].count("/readyz") == 3  # two 503s, then ok
    assert "certificate-renewal-turn" not in peer(out).local_app_data
    assert peer(out).local_unit_data["certificates-renewal"] == "false"
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")

    before = len(kubeadm_certs(machine))
    ctx.run(ctx.on.update_status(), out)
    assert len(kubeadm_certs(machine)) == before  # renewed and checked: quiet for an hour


def _given_kubeconfig(state: testing.State) -> dict:
    (secret,) = [s for s in state.secrets if s.label == "admin-kubeconfig"]
    return yaml.safe_load(secret.latest_content["kubeconfig"])


@pytest.mark.parametrize("how", ["in turn", "action"])
def test_a_renewal_refreshes_the_get_kubeconfig_secret(ctx, machine, clock, how):
    """Its client certificate is admin.conf's: the old one would die on the old date."""
    out = bootstrapped(ctx)
    server = {"server": "https://k8s.example:6443"}
    out = ctx.run(ctx.on.action("get-kubeconfig", params=server), out)
    old = _given_kubeconfig(out)["users"]
    clock.advance(days=340)

    if how == "in turn":
        out = ctx.run(ctx.on.update_status(), out)
    else:
        out = ctx.run(ctx.on.action("renew-certificates"), out)

    assert machine.pki.renewals == 1
    given = _given_kubeconfig(out)
    admin = yaml.safe_load(machine.read("/etc/kubernetes/admin.conf"))
    assert given["users"] == admin["users"] != old  # the new client certificate
    assert given["clusters"][0]["cluster"]["server"] == "https://k8s.example:6443"  # kept


def test_an_upgrade_refreshes_the_get_kubeconfig_secret(ctx, machine, clock):
    """`kubeadm upgrade apply` renews admin.conf's client certificate: the copy follows."""
    out = bootstrapped(ctx)
    out = ctx.run(ctx.on.action("get-kubeconfig"), out)
    old = _given_kubeconfig(out)["users"]
    clock.advance(days=100)

    out = ctx.run(
        ctx.on.config_changed(), dataclasses.replace(out, config={"kubernetes-version": "1.37"})
    )

    assert [verb for verb, _version in machine.upgrades] == ["apply"]
    assert machine.pki.renewals == 0  # not by `certs renew all`: by the upgrade itself
    admin = yaml.safe_load(machine.read("/etc/kubernetes/admin.conf"))
    assert _given_kubeconfig(out)["users"] == admin["users"] != old


def test_past_a_year_the_renewed_kubeconfig_still_answers_and_the_old_one_is_refused(
    ctx, machine, clock
):
    """kube-apiserver's x509 authenticator verifies the client certificate's validity.

    An API server with kubeadm's --client-ca-file (the machine's ca.crt), over TLS that
    asks for a client certificate (fakes/kube_auth.py x509_user, as k8s.io/apiserver
    pkg/authentication/request/x509/x509.go AuthenticateRequest), at the tests' clock.
    The operator's kubeconfig authenticates with its client certificate only.
    """
    out = bootstrapped(ctx)
    out = ctx.run(ctx.on.action("get-kubeconfig"), out)
    first = _given_kubeconfig(out)
    clock.advance(days=340)
    out = ctx.run(ctx.on.update_status(), out)  # 25 days left: renewed in turn
    renewed = _given_kubeconfig(out)
    clock.advance(days=30)  # day 370: the first year's certificates have expired

    with FakeKubeApiServer(tls=True, admin_token=None) as server:
        server.auth.client_ca_pem = machine.read("/etc/kubernetes/pki/ca.crt")
        server.clock = lambda: clock.now.timestamp()

        def answer(config: dict) -> int:
            config = copy.deepcopy(config)
            config["clusters"][0]["cluster"]["server"] = server.url
            ca = base64.b64encode(server.tls.ca_pem.encode()).decode()  # the fake's own
            config["clusters"][0]["cluster"]["certificate-authority-data"] = ca
            config["users"][0]["user"].pop("token", None)  # the certificate alone
            with Kube.from_kubeconfig(yaml.safe_dump(config), retries=0) as kube:
                try:
                    kube.request("GET", "/api/v1/namespaces/default")
                except KubeError as e:
                    return e.status
            return 200

        assert answer(renewed) == 200
        assert answer(first) == 401  # without the renewal: refused
        clock.now = NOW + datetime.timedelta(days=364)
        assert answer(first) == 200  # it did answer within its year


def _answers(machine) -> int:
    """What GET /readyz as admin.conf gets: 200, or 0 when no answer came."""
    with Kube.from_kubeconfig(machine.read("/etc/kubernetes/admin.conf"), retries=0) as kube:
        try:
            kube.request("GET", "/readyz", accept="text/plain")
        except KubeError as e:
            return e.status
    return 200


def test_past_a_year_the_renewed_and_restarted_api_server_still_answers(ctx, machine, clock):
    """The fake API server serves the certificate its pod loaded; clients refuse it expired."""
    out = bootstrapped(ctx)
    clock.advance(days=340)
    out = ctx.run(ctx.on.update_status(), out)  # renewed in turn, the pods restarted
    clock.advance(days=30)  # day 370

    assert _answers(machine) == 200
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")


def test_past_a_year_without_renewal_no_client_gets_an_answer(ctx, machine, clock):
    bootstrapped(ctx)
    clock.advance(days=364)
    assert _answers(machine) == 200

    clock.advance(days=2)  # day 366: the apiserver certificate kubeadm init signed expired

    assert _answers(machine) == 0


def test_the_leader_renews_first_then_passes_the_turn(ctx, machine, clock, api):
    out = bootstrapped(ctx)
    clock.advance(days=340)
    other = member(api, 1, **{"certificates-renewal": "true", "kubernetes-version": "1.36"})
    out = with_peer(out, {1: other})

    out = ctx.run(ctx.on.update_status(), out)

    assert RENEW in kubeadm_certs(machine)  # the leader's own node first
    assert peer(out).local_app_data["certificate-renewal-turn"] == OTHER

    # the other unit still renews: the turn stays with it
    machine.runner.calls.clear()
    out = ctx.run(ctx.on.update_status(), out)
    assert RENEW not in kubeadm_certs(machine)
    assert peer(out).local_app_data["certificate-renewal-turn"] == OTHER

    # once it says it is done, the turn is returned
    done = {**other, "certificates-renewal": "false"}
    out = ctx.run(ctx.on.update_status(), with_peer(out, {1: done}))
    assert "certificate-renewal-turn" not in peer(out).local_app_data


def test_no_renewal_turn_while_an_upgrade_turn_is_out(ctx, machine, clock, api):
    out = bootstrapped(ctx)
    clock.advance(days=340)
    behind = member(api, 1, **{"kubernetes-version": "1.35"})  # its upgrade turn comes first
    out = ctx.run(ctx.on.update_status(), with_peer(out, {1: behind}))
    assert peer(out).local_app_data["upgrade-turn"] == OTHER
    assert RENEW not in kubeadm_certs(machine)
    assert "certificate-renewal-turn" not in peer(out).local_app_data


def joined_member(ctx) -> testing.State:
    """A non-leader unit that joined the cluster another unit bootstrapped."""
    return ctx.run(ctx.on.install(), leader_member_state())


def test_a_member_waits_for_its_turn_then_renews(ctx, machine, clock):
    out = joined_member(ctx)
    clock.advance(days=340)

    out = ctx.run(ctx.on.update_status(), out)  # due, but the leader holds no turn for it
    assert RENEW not in kubeadm_certs(machine)
    assert peer(out).local_unit_data["certificates-renewal"] == "true"
    assert "renewing in turn" in out.unit_status.message

    relation = peer(out)
    app = {**relation.local_app_data, "certificate-renewal-turn": ME}
    out = dataclasses.replace(out, relations=[dataclasses.replace(relation, local_app_data=app)])
    out = ctx.run(ctx.on.relation_changed(peer(out)), out)
    assert RENEW in kubeadm_certs(machine)
    assert peer(out).local_unit_data["certificates-renewal"] == "false"
    assert "renewing in turn" not in out.unit_status.message


def test_a_missing_ca_key_blocks_with_kubeadms_words_and_is_retried(ctx, machine, clock):
    out = bootstrapped(ctx)
    clock.advance(days=340)
    machine.path("/etc/kubernetes/pki/ca.key").unlink()  # kubeadm takes the CA as external

    out = ctx.run(ctx.on.update_status(), out)

    # the date stays on the line while the renewal fails (issue 30 item 1)
    assert out.unit_status == testing.BlockedStatus(
        f"certificate renewal failed (admin.conf expires {YEAR:%Y-%m-%d}): "
        "kubeadm did not renew admin.conf, apiserver, "
        "apiserver-kubelet-client, controller-manager.conf, scheduler.conf, super-admin.conf: "
        "Detected external ca, certificate embedded in the kubeconfig file for the admin to "
        "use and for kubeadm itself can't be renewed; retrying on the next hook (fix the "
        "cause, or run renew-certificates)"
    )
    assert peer(out).local_app_data["certificate-renewal-turn"] == ME  # kept: retried
    renews = kubeadm_certs(machine).count(RENEW)

    out = ctx.run(ctx.on.update_status(), out)
    assert kubeadm_certs(machine).count(RENEW) == renews + 1
    assert out.unit_status.name == "blocked"

    machine.write("/etc/kubernetes/pki/ca.key", CA_KEY_PEM, 0o600)
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")
    assert "certificate-renewal-turn" not in peer(out).local_app_data


def test_an_expiry_under_30_days_is_shown_with_a_shorter_renewal_window(ctx, machine, clock):
    # issue 30 item 1: the status line shows the nearest expiry when under 30 days, even
    # when the renewal window (certificate-renewal-days) has not opened yet
    state = bootstrapped(ctx)
    state = dataclasses.replace(state, config={"certificate-renewal-days": 14})
    clock.advance(days=365 - 20)

    out = ctx.run(ctx.on.update_status(), state)

    assert RENEW not in kubeadm_certs(machine)
    assert out.unit_status.name == "active"
    assert out.unit_status.message.endswith(
        f"certificate admin.conf expires {YEAR:%Y-%m-%d}, renewed 14 days before"
    )
    clock.advance(days=7)  # in the window: the leader renews at once, the note goes
    out = ctx.run(ctx.on.update_status(), out)
    assert RENEW in kubeadm_certs(machine)
    assert "expires" not in out.unit_status.message


def test_a_failed_check_names_the_last_expiry_read(ctx, machine, clock):
    out = bootstrapped(ctx)
    clock.advance(days=100)
    machine.fail(CHECK, stderr="error: unable to read kubeadm config")

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == testing.BlockedStatus(
        f"cannot read certificate expiry (admin.conf expires {YEAR:%Y-%m-%d}): "
        "kubeadm certs check-expiration failed: error: unable to read kubeadm config; "
        "retrying hourly"
    )


def test_a_broken_ca_key_fails_kubeadm_and_leaves_the_old_certificates(ctx, machine, clock):
    out = bootstrapped(ctx)
    clock.advance(days=340)
    machine.write("/etc/kubernetes/pki/front-proxy-ca.key", "not a key\n", 0o600)

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(
        f"certificate renewal failed (admin.conf expires {YEAR:%Y-%m-%d}): "
        "kubeadm certs renew all failed: failure loading "
        "front-proxy-ca certificate authority: couldn't load the private key file "
        "/etc/kubernetes/pki/front-proxy-ca.key"
    )
    assert machine.pki.expires("front-proxy-client") == YEAR.replace(microsecond=0)
    assert not machine.kubelet.events or machine.kubelet.events[-1][0] == "start"
    assert sorted(machine.kubelet.running) == sorted(STATIC_PODS)  # nothing restarted


def test_the_renew_certificates_action_on_the_leader(ctx, machine, clock):
    out = bootstrapped(ctx)
    clock.advance(days=100)  # far from the window: the operator asks anyway

    ctx.run(ctx.on.action("renew-certificates"), out)

    renewed = (clock.now + datetime.timedelta(days=365)).replace(microsecond=0)
    assert ctx.action_results == {
        "renewed": ", ".join(sorted(KUBEADM_CERTS)),
        "restarted": ", ".join(sorted(STATIC_PODS)),
        "earliest-expiry": f"admin.conf {renewed:%Y-%m-%d %H:%M} UTC",
    }
    assert machine.pki.expires("apiserver") == renewed


def test_the_action_holds_machine_0_at_most_renewal_max_seconds(ctx, machine, api, monkeypatch):
    """renew-certificates keeps the machine lock (issue 30 item 9): its bound, pinned.

    Each command counted at its timeout (system.DEFAULT_TIMEOUT without one), the restart
    and /readyz waits as slept, here with an API server that never comes back.
    """
    import charm
    from charms.gpu_k8s.v0.system import DEFAULT_TIMEOUT

    out = bootstrapped(ctx)
    elapsed = [0.0]

    def sleep(seconds: float) -> None:
        elapsed[0] += seconds
        machine.kubelet.sync(seconds)

    monkeypatch.setattr(charm.KubernetesControlPlaneCharm, "restart_sleep", staticmethod(sleep))
    monkeypatch.setattr(
        charm.KubernetesControlPlaneCharm, "drain_clock", staticmethod(lambda: elapsed[0])
    )
    api.inject(503, times=1000, path_prefix="/readyz")
    before = len(machine.calls)

    with pytest.raises(testing.ActionFailed, match="not ready 300 s after the restart"):
        ctx.run(ctx.on.action("renew-certificates"), out)

    ran = machine.calls[before:]
    probes = [r.path for r in api.requests].count("/readyz")
    commands = sum(c.timeout or DEFAULT_TIMEOUT for c in ran)
    assert commands + elapsed[0] + certificates.READY_PROBE_SECONDS <= (
        certificates.RENEWAL_MAX_SECONDS
    ), [(c.line, c.timeout) for c in ran]
    assert elapsed[0] >= certificates.READY_TIMEOUT_SECONDS and probes > 1
    design = Path(__file__).parents[3] / "docs/explanation/design-choices.md"
    assert f"{certificates.RENEWAL_MAX_SECONDS:.0f} s" in design.read_text()


def test_the_action_fails_with_kubeadms_words(ctx, machine):
    out = bootstrapped(ctx)
    machine.write("/etc/kubernetes/pki/etcd/ca.key", "broken\n", 0o600)
    with pytest.raises(testing.ActionFailed, match="the old certificates stay in use: kubeadm"):
        ctx.run(ctx.on.action("renew-certificates"), out)


def test_the_action_on_a_member_waits_for_the_turn(ctx, machine):
    out = joined_member(ctx)
    out = ctx.run(ctx.on.action("renew-certificates"), out)
    assert ctx.action_results["result"].startswith("queued")
    assert RENEW not in kubeadm_certs(machine)
    assert peer(out).local_unit_data["certificates-renewal"] == "true"


def test_a_bad_renewal_window_is_blocked(ctx, machine):
    state = testing.State(leader=True, relations=[peers()], config={"certificate-renewal-days": 0})
    out = ctx.run(ctx.on.config_changed(), state)
    assert out.unit_status == testing.BlockedStatus(
        "Invalid config: certificate-renewal-days: must be between 1 and 180 (days before expiry)"
    )


# -- one node turn at a time (peers.NODE_TURNS) ------------------------------------------

RUNC = json.dumps({"runc": "1.3.4-0ubuntu1~24.04.2"})


def with_app(state: testing.State, **app: str) -> testing.State:
    relation = peer(state)
    relation = dataclasses.replace(relation, local_app_data={**relation.local_app_data, **app})
    return dataclasses.replace(state, relations=[relation])


def test_the_action_on_the_leader_is_refused_while_a_containerd_turn_is_out(ctx, machine, api):
    out = bootstrapped(ctx)
    out = with_peer(out, {1: member(api, 1, **{"runtime-updates": RUNC})})
    out = with_app(out, **{"runtime-turn": OTHER})

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("renew-certificates"), out)

    assert failed.value.message == (
        f"{OTHER} holds the containerd/runc update turn and restarts its control plane; "
        "run this again after it"
    )
    assert RENEW not in kubeadm_certs(machine)


@pytest.mark.parametrize(
    "key, what",
    [("upgrade-turn", "Kubernetes upgrade"), ("runtime-turn", "containerd/runc update")],
)
def test_the_action_on_a_member_is_refused_while_another_turn_is_out(ctx, machine, key, what):
    out = joined_member(ctx)
    holder = "kubernetes-control-plane/2"
    out = with_app(out, **{key: holder})

    with pytest.raises(testing.ActionFailed, match=f"{holder} holds the {what} turn"):
        ctx.run(ctx.on.action("renew-certificates"), out)

    assert RENEW not in kubeadm_certs(machine)
    assert peer(out).local_unit_data.get("certificates-renewal") != "true"


def test_upgrade_then_renewal_then_containerd_one_node_at_a_time(ctx, machine, clock, api):
    """The normal sequence: each turn waits for the one before; never two out at once."""
    turns = ("upgrade-turn", "certificate-renewal-turn", "runtime-turn")
    out = bootstrapped(ctx)
    clock.advance(days=340)  # every certificate is within the renewal window
    behind = member(
        api,
        1,
        **{
            "kubernetes-version": "1.35",
            "certificates-renewal": "true",
            "runtime-updates": RUNC,
        },
    )
    out = with_peer(out, {1: behind})
    seen = []

    def run(state: testing.State) -> testing.State:
        state = ctx.run(ctx.on.update_status(), state)
        bag = peer(state).local_app_data
        out_now = [k for k in turns if k in bag]
        assert len(out_now) <= 1, bag
        seen.append(tuple((k, bag[k]) for k in out_now))
        return state

    out = run(out)  # unit 1 is behind: its upgrade comes first; the leader does not renew
    assert seen[-1] == (("upgrade-turn", OTHER),)
    assert RENEW not in kubeadm_certs(machine)

    upgraded = {**behind, "kubernetes-version": "1.36"}
    out = run(with_peer(out, {1: upgraded}))  # the leader renews its own, then unit 1's turn
    assert RENEW in kubeadm_certs(machine)
    assert seen[-1] == (("certificate-renewal-turn", OTHER),)

    renewed = {**upgraded, "certificates-renewal": "false"}
    out = run(with_peer(out, {1: renewed}))  # then unit 1's containerd update
    assert seen[-1] == (("runtime-turn", OTHER),)

    out = run(with_peer(out, {1: {k: v for k, v in renewed.items() if k != "runtime-updates"}}))
    assert seen[-1] == ()


def test_kubelets_serving_certificate_is_renewed_with_the_hourly_check_without_a_restart(
    ctx, machine, clock
):
    """Issue 30 item 1: kubeadm's renewal leaves kubelet's self-signed one alone.

    Within 30 days of its expiry the hourly check writes a new pair of kubelet's shape,
    which the running kubelet loads: no restart.
    """
    from charms.gpu_k8s.v0 import kubeadm

    out = bootstrapped(ctx)
    host = machine.machine.host()
    year = datetime.timedelta(days=365) - datetime.timedelta(hours=1)
    assert kubeadm.kubelet_serving_expiry(host) == NOW + year
    kubelet = machine.machine.services["kubelet"]
    restarts = kubelet.restarts
    clock.advance(days=334)  # 31 days left
    out = ctx.run(ctx.on.update_status(), out)
    assert kubelet.restarts == restarts

    clock.advance(days=6)
    out = ctx.run(ctx.on.update_status(), out)
    clock.advance(hours=2)  # the next hourly check finds the new one
    out = ctx.run(ctx.on.update_status(), out)

    assert kubelet.restarts == restarts
    renewed = clock.now - datetime.timedelta(hours=2)
    assert kubeadm.kubelet_serving_expiry(host) == renewed + year
    served = machine.machine.kubelet_serves()
    assert served == f"{machine.machine.hostname}@{int(renewed.timestamp())}"
    assert out.unit_status == testing.ActiveStatus("Ready: v1.36, 1 control-plane, 0 workers")
