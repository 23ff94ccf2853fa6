"""What the unit reports when the Kubernetes API refuses or fails a reconcile's request."""

from __future__ import annotations

import pytest
from ops import testing

from fakes.control_plane import peers


def test_refused_admin_credentials_block_naming_what_to_check(ctx, machine, api):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    api.inject(status=401, times=1)  # what an expired admin.conf certificate gets

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "blocked"
    message = out.unit_status.message
    assert message.startswith("Kubernetes refused a request (401 ")  # the fake's reason after
    assert message.endswith(
        "; check /etc/kubernetes/admin.conf on this machine (sudo kubeadm certs check-expiration)"
    )
    # it clears once the API accepts the credentials again
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active"


def test_an_api_error_the_charm_does_not_expect_fails_the_hook(ctx, machine, api):
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    api.inject(status=400, times=1, method="GET", path_prefix="/api/v1/nodes")

    with pytest.raises(testing.errors.UncaughtCharmError, match="400"):
        ctx.run(ctx.on.update_status(), out)
