# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Typed charm config and action parameters whose errors read well in a status line.

`ops.CharmBase.load_config(Model, errors="blocked")` puts `str(error)` into a Blocked
status; a raw pydantic `ValidationError` spans several lines and names Python fields.
Models here raise a one-line `ValueError` instead, naming the option as the operator
types it (`nvidia-driver`, not `nvidia_driver`) followed by the validator's message,
which should say how to fix it. `secret_content` reads a Juju secret an operator gave
in a config option, with the one message that says how to grant it.
"""

from __future__ import annotations

from typing import Annotated, Any

import ops
import pydantic

LIBID = "cf822d1c0c224ad4b0ae4c8e3ace221a"
LIBAPI = 0
LIBPATCH = 3


def describe(error: pydantic.ValidationError) -> str:
    """Return the first problem of a validation error as one line: `option: message`."""
    first = error.errors()[0]
    name = "-".join(str(part).replace("_", "-") for part in first["loc"]) or "value"
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "missing":
        message = "is required"
    elif first["type"] == "extra_forbidden":
        message = "is not a known parameter"
    return f"{name} {message}" if message.startswith("is ") else f"{name}: {message}"


class UnreadableSecretError(ValueError):
    """The application cannot read the Juju secret a config option names."""


def secret_content(secret: ops.Secret, option: str, app: str) -> dict[str, str]:
    """The newest content of `secret`, the Juju secret config `option` of `app` names.

    Raises:
        UnreadableSecretError: (a ValueError) the application cannot read it (not
            granted: secret-get answers "permission denied", an ops.ModelError; or no
            such secret, ops.SecretNotFoundError), saying "cannot read the secret in
            config <option> (<id>); grant it: juju grant-secret <id> <app>". Each caller
            maps it to its own error; the message holds no content.
    """
    try:
        return secret.get_content(refresh=True)
    except (ops.SecretNotFoundError, ops.ModelError):
        raise UnreadableSecretError(
            f"cannot read the secret in config {option} ({secret.id}); grant it: "
            f"juju grant-secret {secret.id} {app}"
        ) from None


class _Validated(pydantic.BaseModel):
    """A frozen model whose constructor raises a one-line `ValueError`."""

    model_config = pydantic.ConfigDict(
        frozen=True, extra="ignore", populate_by_name=True, defer_build=True
    )

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except pydantic.ValidationError as e:
            raise ValueError(describe(e)) from None


class CharmConfig(_Validated):
    """Base for a charm's config model (`self.load_config(Model, errors="blocked")`)."""


class ActionParams(_Validated):
    """Base for an action's parameters (`event.load_params(Model, errors="fail")`)."""

    model_config = pydantic.ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, defer_build=True
    )


def between(low: int, high: int, unit: str = "") -> Any:
    """An int type bounded to [low, high], for action parameters and config.

    Used as `timeout: between(1, 7200, "seconds") = 600`; a bad value reads
    `timeout: must be between 1 and 7200 seconds, got 0`.
    """

    def check(value: int) -> int:
        if not low <= value <= high:
            units = f" {unit}" if unit else ""
            raise ValueError(f"must be between {low} and {high}{units}, got {value}")
        return value

    return Annotated[int, pydantic.AfterValidator(check)]
