"""Fixtures for the efs-storage charm: moto (behind the fault proxy) and a fake API server.

The charm reaches AWS and Kubernetes through real clients: boto3 points at the proxy in
front of one moto server per module (`fakes.aws`; `EfsStorageCharm.aws_endpoint_url`), and
the kubeconfig handed over on `kube-api` points at a `FakeKubeApiServer` started per test.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from efs_env import APP, KUBE_TOKEN, Env, Scan, cloud_spec, efs_grant
from ops import testing

import charm
from fakes.aws import ACCESS_KEY_ID, SECRET_ACCESS_KEY, LocalAws, build_network, local_aws
from fakes.kube_apiserver import FakeKubeApiServer
from fakes.kube_grants import store_grant
from fakes.machine import FakeMachine


@pytest.fixture(scope="session", autouse=True)
def one_client_class_per_service() -> Iterator[None]:
    """Each botocore client class is made once per service model, not once per client.

    `ClientCreator._create_client_class` (botocore/client.py) makes a new class with one
    method and docstring per operation (EC2 has about 700) every time a client is made,
    and the charm makes its EC2 and EFS clients in every hook (aws.make_clients: 32 ms of
    CPU, 19 ms with this, measured 2026-11-27); this suite runs hundreds of hooks. The
    class depends only on the service model and on the
    `creating-client-class` handlers, which every session registers alike (botocore
    handlers.py BUILTIN_HANDLERS, boto3 session.py for s3), so the first class made for a
    model is the one every later call would make. A hook is a process of its own in Juju:
    this changes nothing the charm sees; clients (credentials, endpoint, retries, events)
    stay per client.
    """
    from botocore.client import ClientCreator

    original = ClientCreator._create_client_class
    made: dict[tuple[str, int], tuple[object, type]] = {}

    def create_client_class(self: ClientCreator, service_name: str, service_model) -> type:
        description = service_model._service_description
        key = (service_name, id(description))
        if key not in made or made[key][0] is not description:
            made[key] = (description, original(self, service_name, service_model))
        return made[key][1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ClientCreator, "_create_client_class", create_client_class)
        yield


@pytest.fixture(scope="module")
def local() -> Iterator[LocalAws]:
    with local_aws() as aws:
        yield aws


@pytest.fixture
def aws(local: LocalAws, monkeypatch: pytest.MonkeyPatch) -> LocalAws:
    local.reset()
    monkeypatch.setattr(charm.EfsStorageCharm, "aws_endpoint_url", local.url)
    monkeypatch.setattr(charm.EfsStorageCharm, "aws_max_attempts", 2)
    monkeypatch.setattr(charm.EfsStorageCharm, "kube_retries", 1)
    monkeypatch.setattr(charm.EfsStorageCharm, "kube_backoff", 0.01)
    return local


@pytest.fixture
def kube_api() -> Iterator[FakeKubeApiServer]:
    """The cluster; the charm's kubeconfig holds the token of the grant it asked for."""
    with FakeKubeApiServer() as api:
        store_grant(api, efs_grant(), KUBE_TOKEN)
        yield api


@pytest.fixture
def ctx() -> testing.Context:
    """A context for an application deployed with --trust."""
    return testing.Context(charm.EfsStorageCharm, app_name=APP, app_trusted=True)


@pytest.fixture
def untrusted_ctx() -> testing.Context:
    """A context for an application deployed without --trust."""
    return testing.Context(charm.EfsStorageCharm, app_name=APP, app_trusted=False)


@pytest.fixture
def env(aws: LocalAws, kube_api: FakeKubeApiServer) -> Env:
    ec2 = aws.client("ec2")
    model = testing.Model(name="gpu", cloud_spec=cloud_spec(ACCESS_KEY_ID, SECRET_ACCESS_KEY))
    net = build_network(ec2, subnets_per_zone=1, model_uuid=model.uuid)
    e = Env(aws, kube_api, net, ec2, aws.client("efs"), model=model)
    e.add_namespace("training", "tensorflow")  # granted to tensorflow by the control plane
    return e


@pytest.fixture
def scan(caplog: pytest.LogCaptureFixture) -> Scan:
    caplog.set_level(logging.DEBUG)
    return Scan(caplog)


@pytest.fixture(autouse=True)
def unit_machine(tmp_path, monkeypatch) -> FakeMachine:
    """The unit's machine: where its state is served to a related COS agent (unit_state)."""
    machine = FakeMachine(tmp_path / "machine")
    monkeypatch.setattr(charm.EfsStorageCharm, "host_factory", staticmethod(machine.host))
    return machine
