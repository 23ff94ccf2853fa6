"""Reaching the API from the operator's machine: the open port, certificate SANs, kubeconfig."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from ops import testing

from fakes.control_plane import SERVICE_NAMES, leader_member_state, peer, peers

KUBEADM_CONFIG = "/api/v1/namespaces/kube-system/configmaps/kubeadm-config"


def bootstrapped(ctx, **config) -> testing.State:
    return ctx.run(
        ctx.on.install(), testing.State(leader=True, relations=[peers()], config=config)
    )


def test_the_api_port_is_opened_for_juju_expose(ctx, machine):
    out = bootstrapped(ctx)
    assert out.opened_ports == {testing.TCPPort(6443)}


def test_a_unit_still_joining_opens_nothing(ctx, machine):
    machine.join_error = "preflight failed"
    state = leader_member_state(leader=False)
    out = ctx.run(ctx.on.update_status(), state)
    assert out.opened_ports == frozenset()


def renewals_run(machine) -> list[str]:
    """`kubeadm init phase certs apiserver` command lines run so far."""
    return [line for line in machine.lines("kubeadm") if " init phase certs apiserver " in line]


def test_the_public_address_and_extra_names_are_in_the_api_server_certificate(ctx, machine, api):
    bootstrapped(ctx, **{"api-extra-sans": "k8s.example.com, 198.51.100.4"})

    sans = machine.apiserver_sans()
    assert {"203.0.113.7", "k8s.example.com", "198.51.100.4", "127.0.0.1"} <= set(sans)
    assert {"10.96.0.1", "192.0.2.0", "ip-10-0-1-17", *SERVICE_NAMES} <= set(sans)
    # the cluster's own configuration carries the extra names, so joining nodes get them
    cluster = machine.cluster_configuration()
    assert cluster["apiServer"]["certSANs"] == ["127.0.0.1", "198.51.100.4", "k8s.example.com"]
    assert renewals_run(machine) == []  # init made it right at once


def test_extra_names_reach_a_running_cluster_without_stopping_the_api_server(ctx, machine, api):
    out = bootstrapped(ctx, **{"service-cidr": "10.100.0.0/16"})
    before = set(machine.apiserver_sans())

    config = {"service-cidr": "10.100.0.0/16", "api-extra-sans": "k8s.example.com"}
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config=config))

    sans = set(machine.apiserver_sans())
    assert sans == before | {"k8s.example.com"}
    assert "10.100.0.1" in sans  # regenerated from the cluster's configuration, not defaults
    assert machine.lines("crictl") == []  # kube-apiserver reloads the new pair from disk
    assert machine.cluster_configuration()["apiServer"]["certSANs"] == [
        "127.0.0.1",
        "k8s.example.com",
    ]
    assert not machine.path("/etc/kubernetes/pki/apiserver.crt.old").exists()
    assert out.unit_status.name == "active"

    renewals = len(renewals_run(machine))
    assert renewals == 1
    ctx.run(ctx.on.update_status(), out)
    assert len(renewals_run(machine)) == renewals  # nothing missing now


def test_a_new_public_address_renews_the_certificate(ctx, machine, public_address):
    out = bootstrapped(ctx)
    public_address["value"] = "203.0.113.99"  # the instance was stopped and started

    ctx.run(ctx.on.update_status(), out)

    assert "203.0.113.99" in machine.apiserver_sans()
    assert machine.lines("crictl") == []


def test_a_failed_regeneration_puts_the_old_certificate_back(ctx, machine):
    out = bootstrapped(ctx)
    before = machine.read("/etc/kubernetes/pki/apiserver.crt")
    machine.fail("/usr/bin/kubeadm init phase certs", stderr="error: unable to write cert")

    out = ctx.run(
        ctx.on.config_changed(),
        dataclasses.replace(out, config={"api-extra-sans": "k8s.example.com"}),
    )

    assert out.unit_status == testing.WaitingStatus(
        "renewing the API server certificate: error: unable to write cert; "
        "retrying on the next event"
    )
    assert machine.read("/etc/kubernetes/pki/apiserver.crt") == before
    out = ctx.run(ctx.on.update_status(), out)
    assert "k8s.example.com" in machine.apiserver_sans()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("bad_name!", "Invalid config: api-extra-sans: 'bad_name!' is not a DNS name or IP"),
        (
            "https://k8s.example.com",
            "Invalid config: api-extra-sans: 'https://k8s.example.com' is not a DNS name",
        ),
    ],
)
def test_invalid_extra_names_block_naming_them(ctx, machine, value, message):
    out = ctx.run(
        ctx.on.config_changed(),
        testing.State(leader=True, relations=[peers()], config={"api-extra-sans": value}),
    )
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(message)
    assert machine.calls == []


def test_get_kubeconfig_names_the_public_address_by_default(ctx, machine):
    out = bootstrapped(ctx)
    out = ctx.run(ctx.on.action("get-kubeconfig"), out)

    results = ctx.action_results
    assert results["server"] == "https://203.0.113.7:6443"
    secret = next(s for s in out.secrets if s.label == "admin-kubeconfig")
    config = yaml.safe_load(secret.latest_content["kubeconfig"])
    assert config["clusters"][0]["cluster"]["server"] == "https://203.0.113.7:6443"
    assert "juju expose kubernetes-control-plane --to-cidrs" in results["note"]


def test_get_kubeconfig_takes_the_server_the_operator_names(ctx, machine):
    out = bootstrapped(ctx, **{"api-extra-sans": "k8s.example.com"})
    out = ctx.run(ctx.on.action("get-kubeconfig", params={"server": "k8s.example.com"}), out)

    assert ctx.action_results["server"] == "https://k8s.example.com:6443"
    secret = next(s for s in out.secrets if s.label == "admin-kubeconfig")
    config = yaml.safe_load(secret.latest_content["kubeconfig"])
    assert config["clusters"][0]["cluster"]["server"] == "https://k8s.example.com:6443"


def test_get_kubeconfig_without_a_public_address_names_the_private_one(
    ctx, machine, public_address
):
    public_address["value"] = None
    out = bootstrapped(ctx)
    ctx.run(ctx.on.action("get-kubeconfig"), out)
    assert ctx.action_results["server"] == "https://192.0.2.0:6443"


@pytest.mark.parametrize("server", ["ftp://k8s.example.com", "https://", "k8s example"])
def test_get_kubeconfig_refuses_a_malformed_server(ctx, machine, server):
    out = bootstrapped(ctx)
    with pytest.raises(testing.ActionFailed, match="server"):
        ctx.run(ctx.on.action("get-kubeconfig", params={"server": server}), out)
    assert not [s for s in out.secrets if s.label == "admin-kubeconfig"]


def test_the_leader_keeps_the_cluster_configuration_in_step_with_the_option(ctx, machine, api):
    out = bootstrapped(ctx, **{"api-extra-sans": "a.example.com"})
    config = {"api-extra-sans": "b.example.com"}
    ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config=config))
    assert machine.cluster_configuration()["apiServer"]["certSANs"] == [
        "127.0.0.1",
        "b.example.com",
    ]
    assert peer(out).local_app_data["cluster-version"] == "1.36"


def test_a_name_taken_out_of_the_option_leaves_the_certificate(ctx, machine, public_address):
    """deploy.md N18: renewal followed additions only, so a removed name stayed for ever."""
    out = bootstrapped(ctx, **{"api-extra-sans": "old.example.com, new.example.com"})
    assert {"old.example.com", "new.example.com"} <= set(machine.apiserver_sans())
    renewals = len(renewals_run(machine))

    config = {"api-extra-sans": "new.example.com"}
    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(out, config=config))

    sans = set(machine.apiserver_sans())
    assert "old.example.com" not in sans
    assert {"new.example.com", "127.0.0.1", "203.0.113.7"} <= sans
    assert len(renewals_run(machine)) == renewals + 1
    ctx.run(ctx.on.update_status(), out)
    assert len(renewals_run(machine)) == renewals + 1  # nothing more to do

    # a public address released by a stop/start leaves it too
    public_address["value"] = "203.0.113.99"
    ctx.run(ctx.on.update_status(), out)
    sans = set(machine.apiserver_sans())
    assert "203.0.113.99" in sans and "203.0.113.7" not in sans
