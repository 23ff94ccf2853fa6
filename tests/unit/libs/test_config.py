"""Config and action parameter models fail with one line that names the option."""

from __future__ import annotations

import pydantic
import pytest

from charms.gpu_k8s.v0.config import ActionParams, CharmConfig


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
