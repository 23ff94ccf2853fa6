# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""How the charm reaches AWS: the credentials and region of a hook, and AWS errors as statuses.

The credentials are the `credentials` config secret's, or the model's cloud credential
(`juju trust`); the region is config's or the model's. `aws_call` runs one AWS pass and
turns every AWS error into a `StatusError` (Blocked or Waiting), never a hook error.

An ops component: it reads the model's cloud spec and a secret, and stops the reconcile
with a status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import aws
import ops
from charm_config import Config

from charms.gpu_k8s.v0.config import UnreadableSecretError, secret_content
from charms.gpu_k8s.v0.status import StatusError

_T = TypeVar("_T")


class AwsAccess:
    """The AWS credentials and region `config` and the model give."""

    def __init__(self, model: ops.Model):
        self.model = model
        self.app = model.app

    def resolve(self, config: Config) -> tuple[aws.Credentials, str]:
        """The credentials and region to use, or a Blocked problem saying what to set."""
        try:
            spec: ops.CloudSpec | None = self.model.get_cloud_spec()
        except ops.ModelError:
            spec = None
        try:
            if config.credentials is not None:
                credentials = aws.Credentials.from_secret(self._secret_content(config.credentials))
            elif spec is None:
                raise StatusError.blocked(
                    f"no AWS credentials: run `juju trust {self.app.name}` or set config "
                    "credentials to a Juju secret"
                )
            elif spec.type != "ec2" or spec.credential is None:
                raise StatusError.blocked(
                    f"the model's cloud is {spec.type}, not AWS; set config credentials and region"
                )
            elif spec.credential.auth_type == "instance-role":
                # Juju's EC2 `instance-role` credential carries only `instance-profile-name`:
                # the controller's machines assume that role; this charm gets no keys.
                raise StatusError.blocked(
                    "the model's AWS credential is an instance role, which gives charms "
                    "no keys; set config credentials to a Juju secret with access-key-id "
                    "and secret-access-key"
                )
            else:
                credentials = aws.Credentials.from_cloud_credential(
                    dict(spec.credential.attributes)
                )
        except aws.AwsConfigError as e:
            raise StatusError.blocked(str(e)) from None
        region = config.region or (spec.region if spec is not None else None) or ""
        if not region:
            raise StatusError.blocked("no AWS region: set config region (e.g. us-east-1)")
        return credentials, region

    def _secret_content(self, secret: ops.Secret) -> dict[str, str]:
        try:
            return secret_content(secret, "credentials", self.app.name)
        except UnreadableSecretError as e:
            raise StatusError.blocked(str(e)) from None


def aws_call(fn: Callable[[], _T]) -> _T:
    """Run one AWS pass; every AWS error becomes a status, never a hook error.

    Credentials, permissions and configuration the operator must fix are Blocked; what AWS
    says clears by itself (throttling, 5xx after retries, codes AWS documents as "try again")
    is Waiting; any other AWS error code is Blocked with AWS's code and message.
    """
    try:
        return fn()
    except (aws.AwsAuthError, aws.AwsConfigError) as e:
        raise StatusError.blocked(str(e)) from None
    except aws.AwsTransientError as e:
        raise StatusError.waiting(f"AWS unavailable, retrying on the next event: {e}") from None
    except aws.AwsApiError as e:
        if e.retry_later:
            raise StatusError.waiting(f"{e}; retrying on the next event") from None
        raise StatusError.blocked(
            f"{e}; fix it in AWS, the charm retries on every event"
        ) from None
