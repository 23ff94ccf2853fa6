"""What the file system policy lets an NFS client do, as EFS evaluates it (issue 29 item 5).

A tenant pod has open egress and can speak NFS over TLS to a mount target itself, as any
uid it likes: the policy must refuse a mount that does not go through an access point,
while the EFS CSI driver's mounts (`tls`, no `iam`: an anonymous client through the
consumer's access point) keep working. `fakes.efs_client_auth` evaluates the policy.
"""

from __future__ import annotations

import pytest
from access_points import policy

from fakes.efs_client_auth import Client, allowed

FS = "arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/fs-1"
AP = "arn:aws:elasticfilesystem:us-east-1:123456789012:access-point/fsap-team"
ROOT_AP = "arn:aws:elasticfilesystem:us-east-1:123456789012:access-point/fsap-root"
MOUNT, WRITE, ROOT = (
    "elasticfilesystem:ClientMount",
    "elasticfilesystem:ClientWrite",
    "elasticfilesystem:ClientRootAccess",
)


@pytest.mark.parametrize("action", [MOUNT, WRITE, ROOT])
def test_a_client_without_an_access_point_is_refused_even_over_tls(action):
    wanted = policy(FS, [ROOT_AP])
    assert not allowed(wanted, action, Client(tls=True), FS)


def test_the_csi_drivers_anonymous_tls_mount_through_an_access_point_reads_and_writes():
    wanted = policy(FS, [ROOT_AP])
    client = Client(tls=True, access_point_arn=AP)
    assert allowed(wanted, MOUNT, client, FS)
    assert allowed(wanted, WRITE, client, FS)
    assert not allowed(wanted, ROOT, client, FS)
    assert allowed(wanted, ROOT, Client(tls=True, access_point_arn=ROOT_AP), FS)


def test_plain_text_and_bypassing_the_mount_target_are_refused():
    wanted = policy(FS, [])
    assert not allowed(wanted, MOUNT, Client(tls=False, access_point_arn=AP), FS)
    assert not allowed(wanted, MOUNT, Client(access_point_arn=AP, via_mount_target=False), FS)
    assert not allowed(wanted, ROOT, Client(access_point_arn=AP), FS)


def test_the_default_policy_lets_any_client_in_which_is_why_ours_is_put():
    assert allowed(None, WRITE, Client(tls=False), FS)
