# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Snapshots of this node's etcd member, kept on the machine (no ops).

What is real on a kubeadm node, and what this module does with it:
- kubeadm runs etcd as a static pod from registry.k8s.io/etcd (kubeadm 1.36:
  cmd/kubeadm/app/constants DefaultEtcdVersion 3.6.x-0). That image holds etcdctl and
  etcdutl next to etcd (kubernetes/kubernetes cluster/images/etcd/Dockerfile:
  `COPY etcd* etcdctl* /usr/local/bin/`), matching the server's version; Ubuntu's
  `etcd-client` is etcd 3.4 and has no etcdutl. So both run inside the running etcd
  container with `crictl exec` (cri-tools, installed with kubeadm).
- The pod mounts the data directory (ClusterConfiguration etcd.local.dataDir, default
  /var/lib/etcd) and /etc/kubernetes/pki/etcd from the host at the same paths
  (cmd/kubeadm/app/phases/etcd/local.go GetEtcdPodSpec: etcd-data and etcd-certs
  hostPath volumes). etcdctl therefore writes the snapshot into the data directory,
  where the host sees it, and this module moves it to the backup directory.
- etcd.io "Disaster recovery" (docs/v3.6/op-guide/recovery): `etcdctl --endpoints
  $ENDPOINT snapshot save snapshot.db` against ONE member (clientv3/snapshot: "Make
  sure to specify only one endpoint"), with the member's TLS files; `etcdutl snapshot
  status` reports the snapshot's hash, revision, keys and size. etcdctl writes
  `<file>.part` and renames it when the stream is complete and its sha256 checked
  (etcdctl/ctlv3 snapshot save, client/v3/snapshot/v3_snapshot.go), and on failure
  leaves the `.part` behind, which is removed here.
- The snapshot holds every Secret of the cluster: the directory is 0700, each file 0600,
  both root's.
- A snapshot is only good on a machine with its cluster's keys: the restored
  kube-public/cluster-info ConfigMap carries the old cluster CA, so a worker's `kubeadm
  join` pinned to this machine's CA fails ("cluster CA found in cluster-info ConfigMap is
  invalid: none of the public keys ... are pinned", cmd/kubeadm/app/discovery/token
  validateClusterCA, util/pubkeypin CheckAny), and every ServiceAccount token in it was
  signed with the old sa.key. So each snapshot has a sidecar `<file>.pki.json` (0600) with
  the fingerprints of the cluster CA and of sa.pub (`identity`), and `restore` refuses a
  snapshot whose fingerprints are not this machine's, or that has none.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Callable

import certificates  # the static pods' stop and start: kubelet's manifest directory

from charms.gpu_k8s.v0.system import CommandError, Host

logger = logging.getLogger(__name__)

CRICTL = "/usr/bin/crictl"
# crictl's endpoint named, not guessed: without /etc/crictl.yaml crictl tries a list
# of sockets and warns (cri-tools cmd/crictl/main.go defaultRuntimeEndpoints); kubeadm's
# nodes here run containerd (lib containerd.py).
RUNTIME_ENDPOINT = "unix:///run/containerd/containerd.sock"
DATA_DIR = "/var/lib/etcd"  # kubeadm's default etcd.local.dataDir
BACKUP_DIR = "/var/lib/gpu-k8s/etcd-backups"
PREFIX = "etcd-snapshot-"
SUFFIX = ".db"
# Inside the container, in the data directory the host shares (see above).
IN_PROGRESS = f"{DATA_DIR}/gpu-k8s-snapshot.db"
ENDPOINT = "https://127.0.0.1:2379"
CA_CERT = "/etc/kubernetes/pki/etcd/ca.crt"
CLIENT_CERT = "/etc/kubernetes/pki/etcd/healthcheck-client.crt"
CLIENT_KEY = "/etc/kubernetes/pki/etcd/healthcheck-client.key"
# etcdctl applies --command-timeout to the whole snapshot stream (default 5 s, too short
# for a large database); an unreachable member fails after it with "context deadline
# exceeded". etcd's default backend quota is 2 GiB: two minutes is ample on local disk.
COMMAND_TIMEOUT = "120s"
RUN_TIMEOUT = 180.0
# The keys whose fingerprints a snapshot records (kubeadm's certificatesDir, default
# /etc/kubernetes/pki: ca.crt and the ServiceAccount signing key's public half sa.pub,
# cmd/kubeadm/app/constants CACertName, ServiceAccountPublicKeyName).
CLUSTER_CA = "/etc/kubernetes/pki/ca.crt"
SA_PUB = "/etc/kubernetes/pki/sa.pub"
# The sidecar next to each snapshot and the names of its fields (also the S3 object's
# user metadata keys, x-amz-meta-cluster-ca and x-amz-meta-service-account-key).
IDENTITY_SUFFIX = ".pki.json"
IDENTITY_KEYS = ("cluster-ca", "service-account-key")
# The peer application data key the leader keeps its last scheduled backup's time in
# (ISO 8601, UTC): a new leader goes on with the same schedule.
LAST = "etcd-backup-last"


class BackupError(Exception):
    """The snapshot could not be taken or verified; the message says what etcd's tools said."""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One verified snapshot file and what `etcdutl snapshot status` read in it."""

    path: str
    size: int
    revision: int
    hash: int
    keys: int
    taken: str  # UTC, as in the file name
    identity: dict[str, str] = dataclasses.field(default_factory=dict)  # see `identity`


def _pin(der: bytes) -> str:
    """A public key's pin as kubeadm makes it: `sha256:` and its DER SPKI's sha256.

    cmd/kubeadm/app/util/pubkeypin Hash: sha256 of RawSubjectPublicKeyInfo, hex.
    """
    import hashlib

    return f"sha256:{hashlib.sha256(der).hexdigest()}"


def identity(host: Host) -> dict[str, str]:
    """This machine's cluster keys: the pins of the cluster CA and of sa.pub.

    Raises:
        BackupError: a file is missing or unreadable (not a kubeadm control plane).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    try:
        ca = x509.load_pem_x509_certificate((host.read(CLUSTER_CA) or "").encode())
        sa = serialization.load_pem_public_key((host.read(SA_PUB) or "").encode())
    except ValueError:
        raise BackupError(
            f"cannot read this cluster's CA ({CLUSTER_CA}) and ServiceAccount key ({SA_PUB})"
        ) from None
    return dict(
        zip(
            IDENTITY_KEYS,
            (_pin(ca.public_key().public_bytes(*spki)), _pin(sa.public_bytes(*spki))),
        )
    )


def recorded_identity(host: Host, path: str) -> dict[str, str] | None:
    """The fingerprints recorded next to snapshot `path`, or None (none, or unreadable)."""
    text = host.read(path + IDENTITY_SUFFIX)
    try:
        recorded = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(recorded, dict) or any(
        not isinstance(recorded.get(k), str) for k in IDENTITY_KEYS
    ):
        return None
    return {k: recorded[k] for k in IDENTITY_KEYS}


def record_identity(host: Host, path: str, recorded: dict[str, str]) -> None:
    """Write the sidecar of snapshot `path` (0600, as the snapshot)."""
    host.write(path + IDENTITY_SUFFIX, json.dumps(recorded, sort_keys=True) + "\n", mode=0o600)


def check_identity(host: Host, recorded: dict[str, str] | None, what: str) -> None:
    """Refuse a snapshot whose cluster keys are not this machine's (or are not recorded).

    Raises:
        BackupError: what differs or is missing, and that nothing was restored.
    """
    if recorded is None:
        raise BackupError(
            f"{what} records no fingerprints of its cluster's CA and ServiceAccount key "
            f"(taken by an earlier charm revision, or copied without its {IDENTITY_SUFFIX}), "
            "so whether this machine can serve it is unknown"
        )
    mine = identity(host)
    names = {"cluster-ca": "cluster CA", "service-account-key": "ServiceAccount signing key"}
    differ = [
        f"{names[k]} ({recorded[k]}; this machine's is {mine[k]})"
        for k in IDENTITY_KEYS
        if recorded[k] != mine[k]
    ]
    if differ:
        raise BackupError(
            f"{what} is of a cluster with another {' and another '.join(differ)}: restored "
            "here, workers could not join (kubeadm: none of the public keys are pinned) and "
            "every ServiceAccount token would be refused. Restore it on a machine given that "
            "cluster's /etc/kubernetes/pki before kubeadm init"
        )


def etcd_container(host: Host) -> str:
    """The ID of this node's running etcd container.

    Raises:
        BackupError: crictl failed, or no etcd container runs here.
    """
    try:
        out = host.run(
            CRICTL,
            f"--runtime-endpoint={RUNTIME_ENDPOINT}",
            "ps",
            "--name=^etcd$",
            "--state=Running",
            "--quiet",
            timeout=30,
        )
    except CommandError as e:
        raise BackupError(f"crictl cannot list the etcd container: {e.last_line}") from None
    ids = out.split()
    if not ids:
        raise BackupError("no etcd container runs on this node (is it a control-plane node?)")
    return ids[0]


def _exec(host: Host, container: str, *argv: str) -> str:
    return host.run(
        CRICTL,
        f"--runtime-endpoint={RUNTIME_ENDPOINT}",
        "exec",
        container,
        *argv,
        timeout=RUN_TIMEOUT,
    )


def status(host: Host, container: str, path: str) -> dict:
    """`etcdutl snapshot status -w json` of `path` (a path inside the etcd container)."""
    try:
        out = _exec(host, container, "etcdutl", "snapshot", "status", path, "--write-out=json")
    except CommandError as e:
        raise BackupError(f"etcdutl snapshot status failed: {e.last_line}") from None
    try:
        return json.loads(out)
    except ValueError:
        raise BackupError(f"etcdutl snapshot status printed no JSON: {out[:200]!r}") from None


def backups(host: Host, directory: str = BACKUP_DIR) -> list[str]:
    """The snapshot files kept in `directory`, oldest first (by time, then `-<n>`)."""
    where = host.path(directory)
    if not where.is_dir():
        return []
    names = sorted((p.name for p in where.glob(f"{PREFIX}*{SUFFIX}")), key=_taken_order)
    return [f"{directory}/{name}" for name in names]


def _taken_order(name: str) -> tuple[str, int]:
    """`etcd-snapshot-<time>[-<n>].db` -> (time, n): the n-th backup of that second."""
    stamp, _, n = name[len(PREFIX) : -len(SUFFIX)].partition("-")
    return stamp, int(n) if n.isdigit() else 1


def take(
    host: Host,
    now: datetime.datetime,
    *,
    keep: int,
    directory: str = BACKUP_DIR,
    command_timeout: str = COMMAND_TIMEOUT,
) -> Snapshot:
    """Snapshot this node's member, verify it, keep it and the newest `keep` - 1 others.

    Raises:
        BackupError: etcdctl or etcdutl failed (their words); the older backups stay.
    """
    container = etcd_container(host)
    keys = identity(host)  # before anything is written: a snapshot always has its sidecar
    part = host.path(IN_PROGRESS)
    for leftover in (part, part.with_name(part.name + ".part")):
        leftover.unlink(missing_ok=True)
    try:
        _exec(
            host,
            container,
            "etcdctl",
            f"--endpoints={ENDPOINT}",
            f"--cacert={CA_CERT}",
            f"--cert={CLIENT_CERT}",
            f"--key={CLIENT_KEY}",
            "--dial-timeout=10s",
            f"--command-timeout={command_timeout}",
            "snapshot",
            "save",
            IN_PROGRESS,
        )
        if not part.is_file():
            raise BackupError(f"etcdctl said it saved the snapshot, but {IN_PROGRESS} is absent")
        part.chmod(0o600)
        info = status(host, container, IN_PROGRESS)
    except CommandError as e:
        part.unlink(missing_ok=True)
        raise BackupError(f"etcdctl snapshot save failed: {e.last_line}") from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    finally:
        part.with_name(part.name + ".part").unlink(missing_ok=True)
    taken = now.astimezone(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = f"{directory}/{PREFIX}{taken}{SUFFIX}"
    n = 1
    while host.path(target).exists():  # a backup never replaces another
        n += 1
        target = f"{directory}/{PREFIX}{taken}-{n}{SUFFIX}"
    where = host.path(directory)
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    where.chmod(0o700)
    import shutil  # the data directory may be another file system than /var/lib/gpu-k8s

    shutil.move(part, host.path(target))
    host.path(target).chmod(0o600)
    record_identity(host, target, keys)
    for old in backups(host, directory)[: -max(keep, 1)]:
        host.path(old).unlink(missing_ok=True)
        host.path(old + IDENTITY_SUFFIX).unlink(missing_ok=True)
        logger.info("removed the old etcd backup %s", old)
    snapshot = Snapshot(
        path=target,
        size=host.path(target).stat().st_size,
        revision=int(info.get("revision", 0)),
        hash=int(info.get("hash", 0)),
        keys=int(info.get("totalKey", 0)),
        taken=taken,
        identity=keys,
    )
    logger.info("etcd snapshot %s: revision %d", target, snapshot.revision)
    return snapshot


def due(last: str | None, now: datetime.datetime, hours: int) -> bool:
    """Whether a scheduled backup is due: `hours` > 0 and none in the last `hours`."""
    if hours <= 0:
        return False
    if not last:
        return True
    try:
        then = datetime.datetime.fromisoformat(last)
    except ValueError:
        return True
    return now - then >= datetime.timedelta(hours=hours) or now < then


def copy_command(unit: str, path: str) -> str:
    """How the operator copies `path` off the machine.

    The file is root's and 0600, which `juju scp` (the ubuntu user) cannot read; `juju ssh`
    runs `sudo cat` instead, without a pseudo-terminal so the bytes arrive unchanged
    (juju/juju cmd/juju/ssh: `--pty`, "Enable pseudo-tty allocation").
    """
    name = path.rsplit("/", 1)[-1]
    return f"juju ssh --pty=false {unit} -- sudo cat {path} > {name}"


# -- restore (one control-plane node) ------------------------------------------------------

ETCD_MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
RESTORE_SOURCE = f"{DATA_DIR}/gpu-k8s-restore.db"
RESTORED = f"{DATA_DIR}/gpu-k8s-restored"


@dataclasses.dataclass(frozen=True)
class Restored:
    """What a restore did: the snapshot, its revision, where the replaced data went."""

    source: str
    revision: int
    previous: str


def member_flags(host: Host) -> tuple[str, str]:
    """This member's --name and --initial-advertise-peer-urls, from kubeadm's etcd.yaml.

    kubeadm writes both into the static pod's command (phases/etcd/local.go
    getEtcdCommand); a restore must give etcdutl the same, so that the restored member
    is this one.
    """
    import yaml

    text = host.read(ETCD_MANIFEST)
    flags: dict[str, str] = {}
    try:
        pod = yaml.safe_load(text or "") or {}
        for arg in pod["spec"]["containers"][0]["command"]:
            key, _, value = str(arg).partition("=")
            flags[key] = value
    except (KeyError, IndexError, TypeError, yaml.YAMLError):
        pass
    name, peer = flags.get("--name"), flags.get("--initial-advertise-peer-urls")
    if not name or not peer:
        raise BackupError(f"cannot read this member's --name and peer URL from {ETCD_MANIFEST}")
    return name, peer


def restore_command(source: str, name: str, peer: str, data_dir: str) -> list[str]:
    """`etcdutl snapshot restore` of `source` into a new `data_dir` for ONE member `name`."""
    return [
        "etcdutl",
        "snapshot",
        "restore",
        source,
        f"--name={name}",
        f"--initial-cluster={name}={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--data-dir={data_dir}",
    ]


def restore(
    host: Host,
    path: str,
    now: datetime.datetime,
    *,
    sleep: Callable[[float], None],
    wait_ready: Callable[[], None],
) -> Restored:
    """Replace this single member's data with snapshot `path`, as etcd and kubeadm document.

    etcd.io "Disaster recovery" (restoring a cluster): `etcdutl snapshot restore` makes a
    NEW data directory with --name, --initial-cluster and --initial-advertise-peer-urls
    of the member; kubernetes.io "Operating etcd clusters for Kubernetes" (restoring):
    stop every API server, restore, start them again. Here: the restore is made inside
    the running etcd container (etcdutl of the server's version), then every static pod
    stops (their manifests leave kubelet's directory), the old `member` directory moves
    aside to /var/lib/etcd-before-restore-<time>, the restored one takes its place, and
    the pods start again; `wait_ready()` waits for this node's API server. Whatever
    fails after the pods stopped, they are started again (with the old data when the
    swap did not happen). A snapshot of another cluster's keys (`check_identity`) is
    refused before anything changes.

    Raises:
        BackupError: the snapshot is missing, invalid or of another cluster's keys, or a
            step failed (its words).
    """
    import shutil

    source = host.path(path)
    if not source.is_file():
        raise BackupError(f"no snapshot at {path}")
    check_identity(host, recorded_identity(host, path), path)
    name, peer = member_flags(host)
    container = etcd_container(host)
    staged, restored = host.path(RESTORE_SOURCE), host.path(RESTORED)
    shutil.rmtree(restored, ignore_errors=True)
    shutil.copyfile(source, staged)
    staged.chmod(0o600)
    try:
        info = status(host, container, RESTORE_SOURCE)
        _exec(host, container, *restore_command(RESTORE_SOURCE, name, peer, RESTORED))
    except CommandError as e:
        shutil.rmtree(restored, ignore_errors=True)
        raise BackupError(f"etcdutl snapshot restore failed: {e.last_line}") from None
    finally:
        staged.unlink(missing_ok=True)
    stamp = now.astimezone(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    previous = f"{DATA_DIR}-before-restore-{stamp}"
    manifests, parked = host.path(certificates.MANIFESTS), host.path(certificates.PARKED)
    parked.mkdir(mode=0o700, parents=True, exist_ok=True)
    for manifest in sorted(manifests.glob("*.yaml")):
        manifest.rename(parked / manifest.name)
    try:
        sleep(certificates.RESTART_WAIT_SECONDS)  # kubelet stops etcd and the API server
        aside, member = host.path(previous), host.path(DATA_DIR) / "member"
        aside.mkdir(mode=0o700, parents=True, exist_ok=True)
        member.rename(aside / "member")
        try:
            (restored / "member").rename(member)
        except OSError:
            (aside / "member").rename(member)  # etcd starts on its own data again
            raise
        restored.rmdir()
    except OSError as e:
        raise BackupError(f"the data directories could not be swapped: {e}") from None
    finally:
        for manifest in sorted(parked.glob("*.yaml")):
            manifest.rename(manifests / manifest.name)
    sleep(certificates.RESTART_WAIT_SECONDS)
    try:
        wait_ready()
    except certificates.CertificateError as e:
        raise BackupError(str(e)) from None
    logger.warning("etcd restored from %s; the data it replaced is in %s", path, previous)
    return Restored(source=path, revision=int(info.get("revision", 0)), previous=previous)
