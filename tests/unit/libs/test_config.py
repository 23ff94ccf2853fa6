"""Config and action parameter models fail with one line that names the option."""

from __future__ import annotations

import dataclasses

import ops
import pydantic
import pytest
from ops import testing

from charms.gpu_k8s.v0.config import ActionParams, CharmConfig, secret_content


class Config(CharmConfig):
    kubernetes_version: str = "1.33"
    drain_timeout: int = 300

    @pydantic.field_validator("kubernetes_version")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in ("1.33", "1.34"):
            raise ValueError("must be one of 1.33, 1.34")
        return value


class Params(ActionParams):
    job: str
    workers: int = pydantic.Field(default=1, ge=1)


def test_valid_config_loads_with_defaults():
    assert Config(kubernetes_version="1.34").drain_timeout == 300


def test_validator_message_names_the_dashed_option():
    with pytest.raises(ValueError) as error:
        Config(kubernetes_version="1.2")
    assert str(error.value) == "kubernetes-version: must be one of 1.33, 1.34"


def test_type_error_is_one_line():
    with pytest.raises(ValueError) as error:
        Config(drain_timeout="soon")
    assert "\n" not in str(error.value)
    assert str(error.value).startswith("drain-timeout: ")


def test_config_ignores_options_it_does_not_model():
    assert Config(unrelated="x").kubernetes_version == "1.33"


def test_missing_action_parameter_is_named():
    with pytest.raises(ValueError, match="^job is required$"):
        Params()


def test_action_rejects_unknown_parameters_and_bad_values():
    with pytest.raises(ValueError, match="^workers: Input should be greater than or equal to 1"):
        Params(job="mnist", workers=0)
    with pytest.raises(ValueError, match="^typo is not a known parameter$"):
        Params(job="mnist", typo=1)


def test_between_bounds_an_int_with_a_message_that_names_the_range():
    from charms.gpu_k8s.v0.config import ActionParams, between

    class Params(ActionParams):
        timeout: between(1, 7200, "seconds") = 600  # type: ignore[valid-type]
        replicas: between(0, 8) = 1  # type: ignore[valid-type]

    assert Params().timeout == 600
    assert Params(timeout=7200, replicas=0).replicas == 0
    with pytest.raises(ValueError, match=r"^timeout: must be between 1 and 7200 seconds, got 0$"):
        Params(timeout=0)
    with pytest.raises(ValueError, match=r"^replicas: must be between 0 and 8, got 9$"):
        Params(replicas=9)


# ------------------------------------------------------ a Juju secret named in config


@dataclasses.dataclass(frozen=True)
class _SecretConfig:
    credentials: ops.Secret  # load_config makes it lazily, as in the charms


class _ReadsItsSecret(ops.CharmBase):
    """Reads the secret its `credentials` option names; the outcome is its status."""

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        framework.observe(self.on.config_changed, self._on_config_changed)

    def _on_config_changed(self, _: ops.EventBase) -> None:
        secret = self.load_config(_SecretConfig).credentials
        try:
            content = secret_content(secret, "credentials", self.app.name)
        except ValueError as e:
            self.unit.status = ops.BlockedStatus(str(e))
            return
        self.unit.status = ops.ActiveStatus(",".join(sorted(content)))


_SECRET_META = {"name": "reader"}
_SECRET_CONFIG = {"options": {"credentials": {"type": "secret"}}}


def test_a_granted_secret_s_newest_content_is_read():
    ctx = testing.Context(_ReadsItsSecret, meta=_SECRET_META, config=_SECRET_CONFIG)
    secret = testing.Secret(
        {"access-key-id": "old"}, latest_content={"access-key-id": "a", "secret-access-key": "s"}
    )
    state = testing.State(config={"credentials": secret.id}, secrets={secret})

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status == testing.ActiveStatus("access-key-id,secret-access-key")


def test_a_secret_the_app_cannot_read_says_how_to_grant_it_and_shows_no_content():
    ctx = testing.Context(_ReadsItsSecret, meta=_SECRET_META, config=_SECRET_CONFIG)
    secret_id = "secret:d0g9o5mhe5rgvn8lfa8g"  # not granted: not in the unit's state

    out = ctx.run(ctx.on.config_changed(), testing.State(config={"credentials": secret_id}))

    assert out.unit_status == testing.BlockedStatus(
        f"cannot read the secret in config credentials ({secret_id}); grant it: "
        f"juju grant-secret {secret_id} reader"
    )
