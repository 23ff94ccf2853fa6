import pytest

from fakes.machine import FakeMachine


@pytest.fixture
def machine(tmp_path):
    return FakeMachine(tmp_path / "root")
