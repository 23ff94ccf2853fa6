"""What every unit suite's pytest process shares (each suite's own conftest adds its fixtures)."""

from __future__ import annotations

import functools
import sys

import pytest
from children_tmp import children_tmpdir  # noqa: F401 (autouse)


@pytest.fixture(scope="session", autouse=True)
def schemas_read_once():
    """kubernetes-validate's JSON schemas parsed once per process.

    `kubernetes_validate.validate` reads and parses the kind's schema and the version's
    `_definitions.json` (1.5 MB, ~12 ms of json.load) from its package on every call
    (kubernetes_validate/utils.py `validate` -> `schema_contents`, kubernetes-validate
    1.x); the files are the package's own and never change while a process runs, so the
    first parse of each (file, version) is kept and handed out again. jsonschema and
    referencing only read a schema (`Resource.from_contents`, the validator's lookups), so
    one parse serves every call. A file that is missing (an unknown kind or version) is
    never kept: it raises on every call, as before. A suite whose test modules do not
    import kubernetes-validate (collected before this runs) is left as it is.
    """
    utils = sys.modules.get("kubernetes_validate.utils")
    if utils is None:
        yield
        return
    with pytest.MonkeyPatch.context() as m:
        m.setattr(utils, "schema_contents", functools.cache(utils.schema_contents))
        yield


class _RsaKeys:
    """RSA-2048 keys for the charms' and fakes' key generation, made once per process.

    The charms make RSA-2048 keys where kubeadm and kubelet do (kubeadm's ServiceAccount
    key, the fake's sa_keys; the kubelet serving pair, lib kubeadm.py): ~56 ms of CPU each
    (cryptography 50, OpenSSL 3), three in every control plane bootstrap, and a unit suite
    bootstraps a few hundred times: over half of the control plane suite's CPU went to
    searching for primes. Each test is handed the keys of a list in order from its first,
    so every key within one test is distinct, as generated keys are; the list grows by a
    fresh key when a test asks for more than it holds. Keys are real RSA-2048 keys with
    the asked public exponent; any other size or exponent is generated as asked.
    """

    def __init__(self, generate):
        self.generate, self.keys, self.next = generate, [], 0

    def __call__(self, public_exponent: int, key_size: int, backend: object = None):
        if (public_exponent, key_size) != (65537, 2048):
            return self.generate(public_exponent=public_exponent, key_size=key_size)
        if self.next == len(self.keys):
            self.keys.append(self.generate(public_exponent=65537, key_size=2048))
        self.next += 1
        return self.keys[self.next - 1]


_rsa_keys: _RsaKeys | None = None


@pytest.fixture(autouse=True)
def rsa_keys_made_once(monkeypatch):
    """Each test's RSA-2048 keys come from `_RsaKeys`, first to last (see there)."""
    global _rsa_keys
    from cryptography.hazmat.primitives.asymmetric import rsa

    if _rsa_keys is None:
        _rsa_keys = _RsaKeys(rsa.generate_private_key)
    _rsa_keys.next = 0
    monkeypatch.setattr(rsa, "generate_private_key", _rsa_keys)
    yield _rsa_keys
