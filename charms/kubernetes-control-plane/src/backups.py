# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The leader's scheduled etcd snapshots, and their upload to `etcd-backup-s3`.

Every `etcd-backup-hours` the leader snapshots its etcd member (`etcd_backup.py`); the
last one's time is in the peer application data, so a new leader keeps the schedule.
With `etcd-backup-s3` set, the snapshot goes to S3 (`etcd_s3.py`) with the credentials
of the `etcd-backup-credentials` secret; the backup-etcd and restore-etcd actions use
the same upload and credentials.

An ops component: it reads the credentials' secret and writes the peer data it is given.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, MutableMapping

import etcd_backup
import etcd_s3
from charm_config import Config

from charms.gpu_k8s.v0.config import secret_content
from charms.gpu_k8s.v0.system import Host

logger = logging.getLogger(__name__)

# The scheduled upload runs in update-status, a hook, so machine 0's Juju machine lock is
# held (no hook of efs-storage, tensorflow or this charm runs) until it ends: it stops at
# this deadline, the snapshot stays marked unsent and the next update-status sends it.
# A snapshot is at most etcd's storage quota, 2 GiB by default ("The default storage size
# limit is 2 GiB, configurable with --quota-backend-bytes": etcd.io/docs/v3.5/dev-guide/
# limit); kubeadm sets no other. 300 s carries 2 GiB at 7 MiB/s (about 60 Mbit/s; EC2 to
# S3 in a region is far faster), and is one update-status interval (Juju's default
# update-status-hook-interval is 5m: juju/juju environs/config/config.go
# DefaultUpdateStatusHookInterval), so other charms' hooks wait at most that much for it.
# backup-etcd (parallel, no machine lock) uploads with no deadline.
UPLOAD_DEADLINE = 300


class Backups:
    """etcd snapshots on this machine and in S3.

    `host`: this machine; `clock`: the time (UTC); `app`: this application's name (for
    the `juju grant-secret` a missing grant asks for).
    """

    def __init__(self, host: Host, clock: Callable[[], datetime.datetime], app: str):
        self.host = host
        self.clock = clock
        self.app = app

    def scheduled(self, config: Config, bag: MutableMapping[str, str]) -> list[str]:
        """The leader's etcd snapshot every `etcd-backup-hours`; a note when it failed.

        The last one's time is in the peer application data, so a new leader keeps the
        schedule.
        A failure is retried on the next update-status, and says so in the status line.
        """
        now = self.clock()
        if config.etcd_backup_hours and not bag.get(etcd_backup.LAST):
            # the schedule starts now: the first snapshot `etcd-backup-hours` later (a
            # new cluster has nothing to keep yet; backup-etcd takes one at once)
            bag[etcd_backup.LAST] = now.isoformat()
            return []
        if not etcd_backup.due(bag.get(etcd_backup.LAST), now, config.etcd_backup_hours):
            return self.send_unsent(config, bag)
        try:
            snapshot = etcd_backup.take(self.host, now, keep=config.etcd_backups_kept)
        except etcd_backup.BackupError as e:
            logger.warning("scheduled etcd backup failed: %s", e)
            return [f"etcd backup failed: {e}; retrying"]
        bag[etcd_backup.LAST] = now.isoformat()
        logger.info("scheduled etcd backup: %s", snapshot.path)
        if config.backup_target is not None:
            bag[etcd_s3.UNSENT] = snapshot.path
        return self.send_unsent(config, bag)

    def send_unsent(self, config: Config, bag: MutableMapping[str, str]) -> list[str]:
        """Upload the scheduled snapshot not in S3 yet; a note until it is (retried)."""
        path = bag.get(etcd_s3.UNSENT)
        if not path or config.backup_target is None or not self.host.path(path).is_file():
            bag.pop(etcd_s3.UNSENT, None)  # sent, S3 turned off, or another leader's file
            return []
        try:
            self.upload(config, path, deadline=UPLOAD_DEADLINE)
        except etcd_s3.S3BackupError as e:
            logger.warning("etcd backup upload failed: %s", e)
            return [f"etcd snapshot kept on the machine, its upload failed: {e}; retrying"]
        bag.pop(etcd_s3.UNSENT, None)
        return []

    def credentials(self, config: Config) -> etcd_s3.Credentials:
        """The S3 credentials of etcd-backup-credentials (S3BackupError: why not)."""
        secret = config.etcd_backup_credentials
        if secret is None:
            raise etcd_s3.S3BackupError(
                "etcd-backup-s3 needs etcd-backup-credentials: "
                "juju config kubernetes-control-plane "
                "etcd-backup-credentials=<the secret URI add-secret printed>"
            )
        try:
            content = secret_content(secret, "etcd-backup-credentials", self.app)
            return etcd_s3.Credentials.from_secret(content)
        except ValueError as e:
            raise etcd_s3.S3BackupError(str(e)) from None

    def upload(self, config: Config, path: str, deadline: float | None = None) -> etcd_s3.Uploaded:
        """Upload the snapshot at `path` to etcd-backup-s3 (see `etcd_s3.upload`).

        The object carries the fingerprints its sidecar records (`recorded_identity`);
        `deadline`: seconds after which the upload stops (S3BackupError).
        """
        assert config.backup_target is not None
        return etcd_s3.upload(
            self.host.path(path),
            path.rsplit("/", 1)[-1],
            config.backup_target,
            self.credentials(config),
            keep=config.etcd_backups_kept,
            identity=etcd_backup.recorded_identity(self.host, path),
            deadline=deadline,
        )
