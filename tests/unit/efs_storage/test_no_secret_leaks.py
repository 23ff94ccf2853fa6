"""No credential value in logs, statuses, action results or databags, through a whole life."""

from __future__ import annotations

import dataclasses

import pytest
from efs_env import (
    SECRET_KEY_ID,
    SECRET_SECRET,
    SESSION_TOKEN,
    status_texts,
)
from ops import testing


def test_whole_life_with_a_secret_credential_leaks_nothing(ctx, env, scan):
    env.add_node("us-east-1a")
    env.add_node("us-east-1b")
    secret = testing.Secret(
        {
            "access-key-id": SECRET_KEY_ID,
            "secret-access-key": SECRET_SECRET,
            "session-token": SESSION_TOKEN,
        },
        owner=None,
    )
    config = {"credentials": secret.id, "delete-on-remove": True}
    scan.start()
    outputs: list[object] = []

    # rejected first (wrong key), then accepted
    env.proxy.valid_access_keys = {"AKIASOMEOTHERKEY0000"}
    state = env.state(config=config, secrets=[secret], consumers={"tensorflow": "training"})
    out = ctx.run(ctx.on.install(), state)
    assert out.unit_status.name == "blocked"
    outputs += status_texts(ctx, out)
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("show-filesystem"), out)
    outputs.append(failed.value.message)

    env.proxy.valid_access_keys = {SECRET_KEY_ID}
    out = ctx.run(ctx.on.secret_changed(secret), out)
    env.bind("training", "efs-storage-tensorflow")
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status.name == "active", out.unit_status.message
    outputs += status_texts(ctx, out)
    ctx.run(ctx.on.action("show-filesystem"), out)
    outputs.append(ctx.action_results)
    outputs += ctx.action_logs

    # removal, all the way
    rel = next(r for r in out.relations if r.endpoint == "shared-storage")
    out = ctx.run(ctx.on.relation_broken(rel), dataclasses.replace(out, planned_units=0))
    for _ in range(5):
        try:
            out = ctx.run(ctx.on.remove(), out)
            break
        except testing.errors.UncaughtCharmError as e:
            outputs.append(str(e.__cause__))
    assert env.file_systems() == []
    outputs += status_texts(ctx, out)
    assert scan.check(*outputs) > 20  # many lines were scanned
