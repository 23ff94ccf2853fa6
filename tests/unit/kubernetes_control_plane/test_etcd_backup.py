"""etcd backups: the backup-etcd action and the leader's schedule, against the fake etcd."""

from __future__ import annotations

import dataclasses
import functools
import json
import signal
import stat
import time
from pathlib import Path

import pytest
import readme_examples
import yaml
from ops import testing

import charm
from fakes.control_plane import peers
from fakes.etcd import snapshot_content

DIR = "/var/lib/gpu-k8s/etcd-backups"


def bootstrapped(ctx, **config) -> testing.State:
    out = ctx.run(ctx.on.install(), testing.State(leader=True, relations=[peers()]))
    return dataclasses.replace(out, config={"etcd-backup-hours": 0, **config})


def kept(machine) -> list[str]:
    """The snapshots kept; each has its sidecar of fingerprints, and nothing else is there."""
    where = machine.path(DIR)
    names = sorted(p.name for p in where.iterdir()) if where.is_dir() else []
    snapshots = [n for n in names if not n.endswith(PKI_JSON)]
    assert names == sorted([*snapshots, *(n + PKI_JSON for n in snapshots)])
    return snapshots


PKI_JSON = ".pki.json"


def identity_of(machine) -> dict[str, str]:
    """The kubeadm pins (sha256 of the DER SubjectPublicKeyInfo) of ca.crt and sa.pub."""
    import hashlib

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ca = x509.load_pem_x509_certificate(machine.read("/etc/kubernetes/pki/ca.crt").encode())
    sa = serialization.load_pem_public_key(machine.read("/etc/kubernetes/pki/sa.pub").encode())
    return {
        "cluster-ca": "sha256:" + hashlib.sha256(ca.public_key().public_bytes(*spki)).hexdigest(),
        "service-account-key": "sha256:" + hashlib.sha256(sa.public_bytes(*spki)).hexdigest(),
    }


@functools.cache
def other_cluster_keys() -> tuple[str, str, str, str]:
    """Another cluster's CA, CA key, sa.key and sa.pub (made once: RSA-2048 takes ~0.1 s)."""
    from fakes.control_plane import _ca, sa_keys

    return *_ca(), *sa_keys()


def new_cluster_keys(machine) -> None:
    """What a fresh `kubeadm init` on a new machine makes: a new cluster CA and sa key pair."""
    ca, ca_key, sa_key, sa_pub = other_cluster_keys()
    machine.write("/etc/kubernetes/pki/ca.crt", ca, 0o644)
    machine.write("/etc/kubernetes/pki/ca.key", ca_key, 0o600)
    machine.write("/etc/kubernetes/pki/sa.key", sa_key, 0o600)
    machine.write("/etc/kubernetes/pki/sa.pub", sa_pub, 0o644)


def test_a_backup_is_a_verified_private_snapshot_with_the_way_to_copy_it(ctx, machine, etcd):
    out = bootstrapped(ctx)
    etcd.put("/registry/secrets/default/db-password", "s3cret")

    ctx.run(ctx.on.action("backup-etcd"), out)

    results = ctx.action_results
    assert results is not None
    path = f"{DIR}/etcd-snapshot-20261121T090000Z.db"
    assert results["path"] == path
    file = machine.path(path)
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(machine.path(DIR).stat().st_mode) == 0o700
    assert results["size"] == file.stat().st_size
    assert results["revision"] == etcd.revision
    assert results["keys"] == 1
    assert len(results["hash"]) == 8
    assert results["command"] == (
        f"juju ssh --pty=false kubernetes-control-plane/0 -- sudo cat {path} "
        "> etcd-snapshot-20261121T090000Z.db"
    )
    # what etcd held is in the file, and nothing is left in etcd's data directory
    assert snapshot_content(file.read_bytes())["kv"] == {
        "/registry/secrets/default/db-password": "s3cret"
    }
    assert [p.name for p in machine.path("/var/lib/etcd").iterdir()] == ["member"]
    exec_lines = [line for line in machine.lines("crictl") if " exec " in line]
    assert [line.split()[4] for line in exec_lines] == ["etcdctl", "etcdutl"]
    assert "s3cret" not in json.dumps(results)
    # the cluster's keys it belongs to, next to it (a restore elsewhere is refused)
    assert json.loads(machine.read(path + PKI_JSON)) == identity_of(machine)
    assert stat.S_IMODE(machine.path(path + PKI_JSON).stat().st_mode) == 0o600
    readme_examples.show("backup-etcd", readme_examples.juju_results(results))


def test_backup_etcd_runs_without_the_machine_lock_and_only_reads_etcd(ctx, machine, etcd):
    """Issue 30 item 9: the S3 upload may take minutes, so the action is `parallel`.

    Juju takes the machine lock for an action unless it is parallel and names no
    execution group (juju/juju internal/worker/uniter/operation/runaction.go
    NeedsGlobalMachineLock). What may run without it: crictl only, each with its timeout
    (no apt, no systemctl, nothing the other charms on machine 0 share); the actions that
    restart the control plane keep the lock (design-choices.md).
    """
    actions = yaml.safe_load((Path(charm.__file__).parents[1] / "charmcraft.yaml").read_text())[
        "actions"
    ]
    assert actions["backup-etcd"].get("parallel") is True
    assert "execution-group" not in actions["backup-etcd"]
    for restarts in ("renew-certificates", "restore-etcd"):
        assert not actions[restarts].get("parallel"), restarts
    out = bootstrapped(ctx)
    before = len(machine.calls)

    ctx.run(ctx.on.action("backup-etcd"), out)

    ran = machine.calls[before:]
    assert ran and {Path(c.argv[0]).name for c in ran} == {"crictl"}
    assert all(c.timeout for c in ran), [c.line for c in ran if not c.timeout]


def test_only_the_newest_backups_are_kept(ctx, machine, etcd, clock):
    out = bootstrapped(ctx, **{"etcd-backups-kept": 2})
    for _ in range(3):
        etcd.put("k", str(clock.now))
        ctx.run(ctx.on.action("backup-etcd"), out)
        clock.advance(hours=1)

    assert kept(machine) == [
        "etcd-snapshot-20261121T100000Z.db",
        "etcd-snapshot-20261121T110000Z.db",
    ]
    assert ctx.action_results is not None and ctx.action_results["kept"] == 2


def test_two_backups_in_one_second_are_both_kept_newest_last(ctx, machine, etcd, clock):
    """A backup never overwrites another (data is never lost): same second, a new name."""
    out = bootstrapped(ctx, **{"etcd-backups-kept": 2})
    for value in ("first", "second", "third"):
        etcd.put("k", value)
        ctx.run(ctx.on.action("backup-etcd"), out)
    assert kept(machine) == [
        "etcd-snapshot-20261121T090000Z-2.db",
        "etcd-snapshot-20261121T090000Z-3.db",
    ]
    assert ctx.action_results is not None
    assert ctx.action_results["path"].endswith("etcd-snapshot-20261121T090000Z-3.db")


def test_a_failed_backup_says_etcdctls_words_and_keeps_the_older_ones(ctx, machine, etcd, clock):
    out = bootstrapped(ctx, **{"etcd-backups-kept": 1})
    ctx.run(ctx.on.action("backup-etcd"), out)
    before = kept(machine)
    clock.advance(hours=1)
    etcd.reachable = False

    with pytest.raises(
        testing.ActionFailed,
        match="older backups are kept: etcdctl snapshot save failed: "
        "Error: context deadline exceeded$",
    ):
        ctx.run(ctx.on.action("backup-etcd"), out)

    assert kept(machine) == before
    assert [p.name for p in machine.path("/var/lib/etcd").iterdir()] == [
        "member"
    ]  # no .part left behind


def test_no_backup_without_an_etcd_member_here(ctx, machine):
    with pytest.raises(testing.ActionFailed, match="has not joined the cluster yet"):
        ctx.run(ctx.on.action("backup-etcd"), testing.State(relations=[peers()]))
    assert machine.lines("crictl") == []


def test_the_leader_backs_up_on_schedule(ctx, machine, etcd, clock):
    out = bootstrapped(ctx, **{"etcd-backup-hours": 24})

    out = ctx.run(ctx.on.update_status(), out)  # the schedule starts
    assert kept(machine) == []
    clock.advance(hours=23)
    out = ctx.run(ctx.on.update_status(), out)
    assert kept(machine) == []  # not due yet
    clock.advance(hours=1)
    out = ctx.run(ctx.on.update_status(), out)
    assert kept(machine) == ["etcd-snapshot-20261122T090000Z.db"]
    assert out.unit_status.name == "active"
    clock.advance(hours=24)
    ctx.run(ctx.on.update_status(), out)
    assert kept(machine)[-1] == "etcd-snapshot-20261123T090000Z.db"


def test_a_new_leader_keeps_the_schedule(ctx, machine, etcd, clock):
    out = bootstrapped(ctx, **{"etcd-backup-hours": 24})
    out = ctx.run(ctx.on.update_status(), out)
    clock.advance(hours=24)
    out = ctx.run(ctx.on.update_status(), out)
    assert len(kept(machine)) == 1
    clock.advance(hours=1)
    # the last backup's time is in the peer application data any leader reads
    out = ctx.run(ctx.on.leader_elected(), out)
    ctx.run(ctx.on.update_status(), out)
    assert len(kept(machine)) == 1


def test_a_failed_scheduled_backup_is_in_the_status_and_retried(ctx, machine, etcd, clock):
    out = bootstrapped(ctx, **{"etcd-backup-hours": 24})
    out = ctx.run(ctx.on.update_status(), out)
    clock.advance(hours=24)
    etcd.reachable = False

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status.name == "active"
    assert out.unit_status.message.endswith(
        "; etcd backup failed: etcdctl snapshot save failed: Error: context deadline "
        "exceeded; retrying"
    )
    etcd.reachable = True
    out = ctx.run(ctx.on.update_status(), out)
    assert len(kept(machine)) == 1
    assert "etcd backup" not in out.unit_status.message


def test_no_scheduled_backup_when_off_or_on_other_events(ctx, machine, etcd, clock):
    out = bootstrapped(ctx, **{"etcd-backup-hours": 0})
    out = ctx.run(ctx.on.update_status(), out)
    clock.advance(hours=48)
    out = ctx.run(ctx.on.update_status(), out)
    assert kept(machine) == []
    on = dataclasses.replace(out, config={"etcd-backup-hours": 1})
    out = ctx.run(ctx.on.update_status(), on)
    clock.advance(hours=2)
    ctx.run(ctx.on.config_changed(), out)
    assert kept(machine) == []


@pytest.mark.parametrize(
    ("option", "value"), [("etcd-backups-kept", 0), ("etcd-backup-hours", -1)]
)
def test_backup_options_out_of_range_block(ctx, machine, option, value):
    state = testing.State(leader=True, relations=[peers()], config={option: value})
    out = ctx.run(ctx.on.config_changed(), state)
    assert out.unit_status.name == "blocked"
    assert option in out.unit_status.message


# -- restore ---------------------------------------------------------------------------


def test_a_restore_brings_the_snapshots_state_back_and_keeps_the_old_data(
    ctx, machine, etcd, clock
):
    out = bootstrapped(ctx)
    etcd.put("/registry/configmaps/default/before", "1")
    ctx.run(ctx.on.action("backup-etcd"), out)
    etcd.put("/registry/configmaps/default/after", "2")
    clock.advance(hours=1)
    machine.kubelet.events.clear()

    ctx.run(ctx.on.action("restore-etcd", params={"confirm": "yes"}), out)

    assert etcd.kv == {"/registry/configmaps/default/before": "1"}
    results = ctx.action_results
    assert results is not None
    assert results["restored-from"] == f"{DIR}/etcd-snapshot-20261121T090000Z.db"
    assert results["previous-data"] == "/var/lib/etcd-before-restore-20261121T100000Z"
    assert machine.path(f"{results['previous-data']}/member/wal").is_dir()
    assert machine.crictl.restores == [
        {
            "--name": "ip-10-0-1-17",
            "--initial-cluster": "ip-10-0-1-17=https://192.0.2.0:2380",
            "--initial-advertise-peer-urls": "https://192.0.2.0:2380",
            "--data-dir": "/var/lib/etcd/gpu-k8s-restored",
        }
    ]
    # every control-plane pod stopped before the swap and started after it
    stops = [pod for verb, pod in machine.kubelet.events if verb == "stop"]
    starts = [pod for verb, pod in machine.kubelet.events if verb == "start"]
    assert "etcd" in stops and "kube-apiserver" in stops
    assert sorted(starts) == sorted(stops)
    assert sorted(p.name for p in machine.path("/var/lib/etcd").iterdir()) == ["member"]
    readme_examples.show("restore-etcd", readme_examples.juju_results(results))


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({}, "run it again with confirm=yes"),
        ({"confirm": "yes", "path": "/nowhere.db"}, "no snapshot at /nowhere.db"),
    ],
)
def test_a_restore_is_refused_without_yes_or_a_snapshot(ctx, machine, etcd, params, why):
    out = bootstrapped(ctx)
    with pytest.raises(testing.ActionFailed, match=why):
        ctx.run(ctx.on.action("restore-etcd", params=params), out)
    assert machine.kubelet.running.keys() >= {"etcd", "kube-apiserver"}


def test_a_restore_is_refused_with_more_than_one_control_plane_member(ctx, machine, etcd):
    out = bootstrapped(ctx)
    ctx.run(ctx.on.action("backup-etcd"), out)
    etcd.add("cp-1")

    with pytest.raises(testing.ActionFailed, match="restore a multi-member cluster by hand"):
        ctx.run(ctx.on.action("restore-etcd", params={"confirm": "yes"}), out)
    assert machine.crictl.restores == []


def test_a_snapshot_etcdutl_refuses_restores_nothing_and_stops_nothing(ctx, machine, etcd):
    out = bootstrapped(ctx)
    etcd.put("k", "now")
    machine.write(f"{DIR}/etcd-snapshot-20261120T090000Z.db", "not a database", 0o600)
    machine.write(  # of this cluster, so only etcdutl can refuse it
        f"{DIR}/etcd-snapshot-20261120T090000Z.db{PKI_JSON}", json.dumps(identity_of(machine))
    )
    machine.kubelet.events.clear()

    with pytest.raises(
        testing.ActionFailed,
        match="restore failed: etcdutl snapshot status failed: Error: invalid database$",
    ):
        ctx.run(ctx.on.action("restore-etcd", params={"confirm": "yes"}), out)

    assert machine.kubelet.events == []
    assert etcd.kv == {"k": "now"}
    assert sorted(p.name for p in machine.path("/var/lib/etcd").iterdir()) == ["member"]


# -- off the machine: S3 (etcd-backup-s3) ------------------------------------------------------
# moto's S3 (tests/fakes/aws.py, as efs-storage's tests run it); the refusal IAM gives
# (403 AccessDenied, against moto's SigV4+IAM server) is in tests/functional/test_etcd_backup.py.
BUCKET = "cluster-backups"


@pytest.fixture(scope="module")
def aws():
    from fakes.aws import local_aws

    with local_aws() as local:
        yield local


@pytest.fixture
def s3(aws):
    aws.reset()
    client = aws.client("s3")
    client.create_bucket(Bucket=BUCKET)
    return client


def with_s3(
    aws, state: testing.State, url: str = f"s3://{BUCKET}/etcd", *, proxy: bool = False, **config
):
    """S3 at moto, or through the fault proxy (`proxy`)."""
    from fakes.aws import ACCESS_KEY_ID, SECRET_ACCESS_KEY

    secret = testing.Secret(
        tracked_content={
            "access-key-id": ACCESS_KEY_ID,
            "secret-access-key": SECRET_ACCESS_KEY,
            "endpoint": aws.url if proxy else aws.moto_url,
        }
    )
    return dataclasses.replace(
        state,
        secrets=[*state.secrets, secret],
        config={
            **state.config,
            "etcd-backup-s3": url,
            "etcd-backup-credentials": secret.id,
            **config,
        },
    )


def objects(s3, prefix: str = "") -> list[str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return [item["Key"] for item in listed]


@pytest.mark.reads_logs  # scans ctx.juju_log for the secret key
def test_a_backup_is_uploaded_to_s3_and_only_the_newest_kept_there(
    ctx, machine, etcd, clock, aws, s3
):
    from fakes.aws import SECRET_ACCESS_KEY

    out = with_s3(aws, bootstrapped(ctx, **{"etcd-backups-kept": 2}))
    etcd.put("/registry/secrets/default/db-password", "s3cret")

    for _ in range(3):
        ctx.run(ctx.on.action("backup-etcd"), out)
        clock.advance(hours=1)

    results = ctx.action_results
    assert results is not None
    name = "etcd-snapshot-20261121T110000Z.db"
    assert results["s3-url"] == f"s3://{BUCKET}/etcd/{name}"
    assert results["s3-kept"] == 2
    assert objects(s3) == [
        "etcd/etcd-snapshot-20261121T100000Z.db",
        f"etcd/{name}",
    ]
    head = s3.head_object(Bucket=BUCKET, Key=f"etcd/{name}")
    assert head["ServerSideEncryption"] == "AES256"
    body = s3.get_object(Bucket=BUCKET, Key=f"etcd/{name}")["Body"].read()
    assert body == machine.path(f"{DIR}/{name}").read_bytes()
    logs = " ".join(log.message for log in ctx.juju_log)
    for text in (json.dumps(results), logs):
        assert SECRET_ACCESS_KEY not in text and "s3cret" not in text


def test_a_refused_upload_fails_the_action_and_keeps_the_snapshot(ctx, machine, etcd, aws, s3):
    out = with_s3(aws, bootstrapped(ctx), url="s3://no-such-bucket/etcd")

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("backup-etcd"), out)

    path = f"{DIR}/etcd-snapshot-20261121T090000Z.db"
    assert failed.value.message == (
        f"the snapshot is kept on the machine ({path}); upload to "
        "s3://no-such-bucket/etcd/etcd-snapshot-20261121T090000Z.db failed: NoSuchBucket "
        "(HTTP 404): The specified bucket does not exist"
    )
    assert kept(machine) == ["etcd-snapshot-20261121T090000Z.db"]


@pytest.mark.parametrize(
    ("secret", "why"),
    [
        (None, "etcd-backup-s3 needs etcd-backup-credentials"),
        ({"access-key-id": "AKIA"}, "needs the keys access-key-id, secret-access-key"),
    ],
)
def test_an_upload_without_usable_credentials_says_which(ctx, machine, etcd, aws, s3, secret, why):
    out = with_s3(aws, bootstrapped(ctx))
    if secret is None:
        out = dataclasses.replace(
            out, config={k: v for k, v in out.config.items() if k != "etcd-backup-credentials"}
        )
    else:
        given = testing.Secret(tracked_content=secret)
        out = dataclasses.replace(
            out,
            secrets=[*out.secrets, given],
            config={**out.config, "etcd-backup-credentials": given.id},
        )
    with pytest.raises(testing.ActionFailed, match=why):
        ctx.run(ctx.on.action("backup-etcd"), out)
    assert len(kept(machine)) == 1
    assert objects(s3) == []


def test_an_upload_with_a_secret_not_granted_says_how_to_grant_it(ctx, machine, etcd, aws, s3):
    missing = "secret:d0g9o5mhe5rgvn8lfa8g"  # not granted: not in the unit's state
    out = with_s3(aws, bootstrapped(ctx), **{"etcd-backup-credentials": missing})
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("backup-etcd"), out)
    assert (
        f"cannot read the secret in config etcd-backup-credentials ({missing}); grant it: "
        f"juju grant-secret {missing} kubernetes-control-plane"
    ) in failed.value.message
    assert len(kept(machine)) == 1
    assert objects(s3) == []


def test_a_scheduled_upload_that_fails_is_in_the_status_and_retried(
    ctx, machine, etcd, clock, aws, s3
):
    out = with_s3(aws, bootstrapped(ctx, **{"etcd-backup-hours": 24}), url="s3://later/etcd")
    out = ctx.run(ctx.on.update_status(), out)
    clock.advance(hours=24)

    out = ctx.run(ctx.on.update_status(), out)

    assert kept(machine) == ["etcd-snapshot-20261122T090000Z.db"]
    assert out.unit_status.message.endswith(
        "; etcd snapshot kept on the machine, its upload failed: upload to "
        "s3://later/etcd/etcd-snapshot-20261122T090000Z.db failed: NoSuchBucket (HTTP 404): "
        "The specified bucket does not exist; retrying"
    )
    s3.create_bucket(Bucket="later")
    clock.advance(minutes=5)
    out = ctx.run(ctx.on.update_status(), out)
    assert "etcd snapshot" not in out.unit_status.message
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="later")["Contents"]] == [
        "etcd/etcd-snapshot-20261122T090000Z.db"
    ]
    assert kept(machine) == ["etcd-snapshot-20261122T090000Z.db"]  # no new snapshot


def test_a_stalled_scheduled_upload_stops_at_its_deadline_and_goes_at_the_next_hook(
    ctx, machine, etcd, clock, aws, s3, monkeypatch
):
    """update-status holds machine 0's lock: the upload in it ends by its deadline."""
    import backups

    # 2 s, not less: under load a shorter deadline ran out before the PUT reached the proxy,
    # so no stall was seen at all (IndexError below, three helpers on 2026-11-28)
    monkeypatch.setattr(backups, "UPLOAD_DEADLINE", 2.0)
    out = with_s3(aws, bootstrapped(ctx, **{"etcd-backup-hours": 24}), proxy=True)
    out = ctx.run(ctx.on.update_status(), out)
    clock.advance(hours=24)
    name = "etcd-snapshot-20261122T090000Z.db"
    put = f"PUT /{BUCKET}/etcd/{name}"
    aws.proxy.inject(put, "stall")  # S3 receives the snapshot and never answers
    alarm = signal.getsignal(signal.SIGALRM)

    started = time.monotonic()
    out = ctx.run(ctx.on.update_status(), out)
    took = time.monotonic() - started

    assert out.unit_status.message.endswith(
        f"; etcd snapshot kept on the machine, its upload failed: upload to "
        f"s3://{BUCKET}/etcd/{name} stopped at its 2 s deadline; retrying"
    )
    # the connection was closed at the deadline (not botocore's 120 s read timeout), and
    # not retried: S3 keeps no part of a PutObject it did not finish
    assert aws.proxy.stalls[0] is not None and aws.proxy.stalls[0] <= 2.0 + 0.5
    assert took < 10
    assert aws.proxy.count(put) == 1
    assert objects(s3) == []
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
    assert kept(machine) == [name]
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is alarm

    clock.advance(minutes=5)
    # S3 answers again: the retry, under a deadline long enough for a loaded machine
    monkeypatch.setattr(backups, "UPLOAD_DEADLINE", 10.0)
    out = ctx.run(ctx.on.update_status(), out)

    assert "etcd snapshot" not in out.unit_status.message
    assert objects(s3) == [f"etcd/{name}"]
    body = s3.get_object(Bucket=BUCKET, Key=f"etcd/{name}")["Body"].read()
    assert body == machine.path(f"{DIR}/{name}").read_bytes()
    assert kept(machine) == [name]  # no new snapshot
    assert aws.proxy.count(put) == 2
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_restore_fetches_a_snapshot_from_s3(ctx, machine, etcd, clock, aws, s3):
    out = with_s3(aws, bootstrapped(ctx))
    etcd.put("/registry/configmaps/default/before", "1")
    ctx.run(ctx.on.action("backup-etcd"), out)
    name = "etcd-snapshot-20261121T090000Z.db"
    for local in (name, name + PKI_JSON):  # the local copy lost (same machine, same keys)
        machine.path(f"{DIR}/{local}").unlink()
    etcd.put("/registry/configmaps/default/after", "2")
    clock.advance(hours=1)

    ctx.run(ctx.on.action("restore-etcd", params={"confirm": "yes", "s3-key": name}), out)

    assert etcd.kv == {"/registry/configmaps/default/before": "1"}
    results = ctx.action_results
    assert results is not None
    assert results["restored-from"] == f"{DIR}/s3-{name}"
    assert stat.S_IMODE(machine.path(f"{DIR}/s3-{name}").stat().st_mode) == 0o600
    assert json.loads(machine.read(f"{DIR}/s3-{name}{PKI_JSON}")) == identity_of(machine)


def test_another_clusters_snapshot_from_s3_is_refused_and_changes_nothing(
    ctx, machine, etcd, clock, aws, s3
):
    """A fresh deploy's kubeadm init made new keys: its snapshot cannot serve this cluster."""
    out = with_s3(aws, bootstrapped(ctx))
    etcd.put("/registry/configmaps/default/before", "1")
    ctx.run(ctx.on.action("backup-etcd"), out)
    name = "etcd-snapshot-20261121T090000Z.db"
    old = identity_of(machine)
    for local in (name, name + PKI_JSON):
        machine.path(f"{DIR}/{local}").unlink()
    new_cluster_keys(machine)
    new = identity_of(machine)
    etcd.put("/registry/configmaps/default/after", "2")
    machine.kubelet.events.clear()

    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("restore-etcd", params={"confirm": "yes", "s3-key": name}), out)

    assert failed.value.message == (
        f"nothing was restored: s3://{BUCKET}/etcd/{name} is of a cluster with another "
        f"cluster CA ({old['cluster-ca']}; this machine's is {new['cluster-ca']}) and "
        f"another ServiceAccount signing key ({old['service-account-key']}; this machine's "
        f"is {new['service-account-key']}): restored here, workers could not join (kubeadm: "
        "none of the public keys are pinned) and every ServiceAccount token would be "
        "refused. Restore it on a machine given that cluster's /etc/kubernetes/pki before "
        "kubeadm init"
    )
    assert etcd.kv == {
        "/registry/configmaps/default/before": "1",
        "/registry/configmaps/default/after": "2",
    }
    assert machine.crictl.restores == []
    assert machine.kubelet.events == []
    assert kept(machine) == []  # the refused download is not kept
    assert sorted(p.name for p in machine.path("/var/lib/etcd").iterdir()) == ["member"]


@pytest.mark.parametrize("sidecar", ["another sa.key", "none"])
def test_a_local_snapshot_not_of_this_clusters_keys_is_refused(ctx, machine, etcd, sidecar):
    out = bootstrapped(ctx)
    etcd.put("k", "now")
    ctx.run(ctx.on.action("backup-etcd"), out)
    path = f"{DIR}/etcd-snapshot-20261121T090000Z.db"
    if sidecar == "none":  # taken by an earlier revision, or copied without it
        machine.path(path + PKI_JSON).unlink()
        why = "records no fingerprints of its cluster's CA and ServiceAccount key"
    else:
        machine.write("/etc/kubernetes/pki/sa.pub", other_cluster_keys()[3])
        why = r"is of a cluster with another ServiceAccount signing key \(sha256:"
    etcd.put("k", "later")
    machine.kubelet.events.clear()

    with pytest.raises(testing.ActionFailed, match=f"^nothing was restored: {path} {why}"):
        ctx.run(ctx.on.action("restore-etcd", params={"confirm": "yes", "path": path}), out)

    assert etcd.kv == {"k": "later"}
    assert machine.crictl.restores == []
    assert machine.kubelet.events == []


def test_the_pages_restore_on_a_new_machine_in_its_order(
    ctx, machine, etcd, etcd_pki, api, clock, aws, s3, tmp_path, monkeypatch
):
    """docs/how-to/etcd-backup.md: keep the keys, new machine, keys placed, deploy, restore."""
    import re
    from pathlib import Path

    import charm
    from charms.gpu_k8s.v0.kubeadm import ca_cert_hash
    from fakes.control_plane import CA_PEM, ControlPlaneMachine
    from fakes.etcd import FakeEtcd

    page = (Path(__file__).parents[3] / "docs/how-to/etcd-backup.md").read_text()
    tar = re.search(r"sudo tar -C /etc/kubernetes/pki -czf - ([^>]+) >", page)
    assert tar is not None
    files = tar.group(1).split()
    assert "juju deploy ./bundles/gpu-k8s.yaml --trust --map-machines=existing" in page
    # the old cluster, its own keys (kubeadm init made them; any fresh init makes others)
    new_cluster_keys(machine)
    out = with_s3(aws, bootstrapped(ctx))
    assert identity_of(machine)["cluster-ca"] != ca_cert_hash(CA_PEM)
    etcd.put("/registry/configmaps/default/before", "1")
    ctx.run(ctx.on.action("backup-etcd"), out)
    keys = {f: machine.read(f"/etc/kubernetes/pki/{f}") for f in files}  # "Keep the keys"
    old = identity_of(machine)

    # machine 0 is gone: a new machine with its own etcd; the keys go in before the deploy
    with FakeEtcd(etcd_pki) as new_etcd:
        monkeypatch.setattr(charm.KubernetesControlPlaneCharm, "etcd_url", new_etcd.url)
        new = ControlPlaneMachine(tmp_path / "new", api, etcd=new_etcd, clock=clock)
        monkeypatch.setattr(
            charm.KubernetesControlPlaneCharm,
            "host_factory",
            staticmethod(lambda: new.machine.host()),
        )
        monkeypatch.setattr(
            charm.KubernetesControlPlaneCharm, "restart_sleep", staticmethod(new.kubelet.sync)
        )
        for name, text in keys.items():
            assert text is not None
            new.machine.write(f"/etc/kubernetes/pki/{name}", text, 0o600)
        out = with_s3(aws, bootstrapped(ctx))  # deploy: kubeadm init uses them
        assert identity_of(new.machine) == old
        new_etcd.put("/registry/configmaps/default/fresh", "x")

        ctx.run(
            ctx.on.action(
                "restore-etcd",
                params={"s3-key": "etcd-snapshot-20261121T090000Z.db", "confirm": "yes"},
            ),
            out,
        )

        assert new_etcd.kv == {"/registry/configmaps/default/before": "1"}


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"s3-key": "etcd/notes.txt"}, "is not a snapshot under s3://cluster-backups/etcd/"),
        ({"s3-key": "etcd-snapshot-20200101T000000Z.db"}, "nothing was restored: fetching "),
        ({"s3-key": "etcd-snapshot-20200101T000000Z.db", "path": f"{DIR}/x.db"}, "not both"),
    ],
)
def test_a_restore_from_s3_is_refused_for_what_is_not_ours(
    ctx, machine, etcd, aws, s3, params, why
):
    out = with_s3(aws, bootstrapped(ctx))
    with pytest.raises(testing.ActionFailed, match=why):
        ctx.run(ctx.on.action("restore-etcd", params={"confirm": "yes", **params}), out)
    assert machine.crictl.restores == []


def test_an_s3_url_that_is_not_one_blocks(ctx, machine):
    state = testing.State(
        leader=True, relations=[peers()], config={"etcd-backup-s3": "https://bucket/x"}
    )
    out = ctx.run(ctx.on.config_changed(), state)
    assert out.unit_status.name == "blocked"
    assert "etcd-backup-s3" in out.unit_status.message
