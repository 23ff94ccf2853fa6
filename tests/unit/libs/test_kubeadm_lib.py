import datetime
import hashlib
import os
import re
import subprocess

import pytest

from charms.gpu_k8s.v0 import apt, kubeadm
from charms.gpu_k8s.v0.kubeadm import JoinMaterial

TOKEN = "abcdef.0123456789abcdef"
CERT_KEY = "f" * 64
CA_HASH = "sha256:" + "a" * 64


def material(**overrides):
    fields = {"endpoint": "10.0.0.10:6443", "ca_cert_hash": CA_HASH, "token": TOKEN}
    fields.update(overrides)
    return JoinMaterial(**fields)


def installed(machine, minor="1.36"):
    kubeadm.install(machine.host(), minor, mirror=None, with_kubectl=False)
    return machine


# -- packages -------------------------------------------------------------------------


VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


def semver(version):
    match = VERSION.match(version)
    assert match, f"{version!r} is not an X.Y.Z upstream version"
    return tuple(int(part) for part in match.groups())


def test_release_table_pins_every_supported_minor_by_upstream_version():
    assert kubeadm.DEFAULT_MINOR in kubeadm.RELEASES
    assert list(kubeadm.RELEASES) == ["1.35", "1.36", "1.37"]  # 1.32-1.34 are end of life
    for minor, release in kubeadm.RELEASES.items():
        major_minor = tuple(int(part) for part in minor.split("."))
        assert semver(release.kubernetes)[:2] == major_minor
        assert release.version == release.kubernetes
        # cri-tools is released once per Kubernetes minor, with the same major.minor.
        assert semver(release.cri_tools)[:2] == major_minor
        # The Depends of the pinned debs (kubelet: kubernetes-cni >= 1.2.0; kubeadm built
        # before 2026-04-24: cri-tools >= 1.30.0): apt refuses a pin below them.
        assert semver(release.cni) >= (1, 2, 0)
        assert semver(release.cri_tools) >= (1, 30, 0)
        # any package revision of the pinned version: pkgs.k8s.io republishes as -2.1
        assert set(release.packages(with_kubectl=True).values()) == {
            f"{release.kubernetes}-*",
            f"{release.cri_tools}-*",
            f"{release.cni}-*",
        }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kubernetes": "1.36.4-1.1"}, "kubernetes version '1.36.4-1.1' must look like 1.36.5"),
        ({"cri_tools": "v1.36.0"}, "cri_tools version 'v1.36.0'"),
        ({"cni": "1.9.1 "}, "cni version '1.9.1 '"),
        ({"cni": ""}, "cni version ''"),
        ({"cni": "1.9.1\n"}, "cni version '1.9.1\\n'"),
    ],
)
def test_a_malformed_pin_is_refused(fields, message):
    pins = {"kubernetes": "1.36.4", "cri_tools": "1.36.0", "cni": "1.9.1"}

    with pytest.raises(ValueError, match=re.escape(message)):
        kubeadm.Release(**{**pins, **fields})


def test_a_patch_republished_under_another_revision_installs(machine):
    """pkgs.k8s.io published 1.36.2 only as 1.36.2-2.1 (kubernetes/release#4156)."""
    uri = f"{kubeadm.UPSTREAM}/core:/stable:/v1.36/deb/"
    machine.remote[uri]["kubeadm"] = {"1.36.4-1.1", "1.36.5-2.1"}
    machine.remote[uri]["kubelet"] = {"1.36.4-1.1", "1.36.5-2.1"}

    kubeadm.install(machine.host(), "1.36", mirror=None, with_kubectl=False)

    assert machine.dpkg["kubeadm"] == machine.dpkg["kubelet"] == "1.36.5-2.1"


def test_package_source_upstream_and_mirror():
    assert kubeadm.package_source("1.36", None) == (
        "https://pkgs.k8s.io/core:/stable:/v1.36/deb/",
        "https://pkgs.k8s.io/core:/stable:/v1.36/deb/Release.key",
    )
    uri, key = kubeadm.package_source("1.37", "http://mirror.internal/k8s/")
    assert uri == "http://mirror.internal/k8s/core:/stable:/v1.37/deb/"
    assert key == uri + "Release.key"


@pytest.mark.parametrize(
    ("minor", "mirror", "message"),
    [
        ("1.20", None, "not supported; use one of 1.35, 1.36, 1.37"),
        ("1.34", None, "not supported"),  # end of life
        ("v1.36", None, "not supported"),
        ("1.36", "ftp://mirror", "must be an http:// or https:// URL"),
        ("1.36", "mirror.example", "must be an http:// or https:// URL"),
    ],
)
def test_bad_version_or_mirror_is_refused(minor, mirror, message):
    with pytest.raises(ValueError, match=message):
        kubeadm.package_source(minor, mirror)


def test_install_pins_holds_and_enables_kubelet(machine):
    machine.kubelet_enabled_on_install = False

    assert kubeadm.install(machine.host(), "1.36", mirror=None, with_kubectl=False)

    assert machine.dpkg == {
        "kubeadm": "1.36.5-1.1",
        "kubelet": "1.36.5-1.1",
        "cri-tools": "1.36.0-1.1",
        "kubernetes-cni": "1.9.1-1.1",
    }
    assert machine.held == {"kubeadm", "kubelet", "cri-tools", "kubernetes-cni"}
    assert machine.services["kubelet"].enabled
    assert kubeadm.installed_minor(machine.host()) == "1.36"


def apt_installs(machine):
    return [
        line.split(" install ", 1)[1] for line in machine.lines("apt-get") if " install " in line
    ]


def hold_lines(machine):
    return [line.split(" hold ", 1)[1] for line in machine.lines("apt-mark") if " hold " in line]


@pytest.mark.parametrize(
    ("minor", "kubernetes", "cri_tools", "cni"),
    [
        ("1.35", "1.35.9", "1.35.0", "1.8.0"),
        ("1.36", "1.36.5", "1.36.0", "1.9.1"),
        ("1.37", "1.37.1", "1.37.0", "1.9.1"),
    ],
)
def test_all_five_packages_go_in_one_pinned_install_and_are_held(
    machine, minor, kubernetes, cri_tools, cni
):
    kubeadm.install(machine.host(), minor, mirror=None, with_kubectl=True)

    assert apt_installs(machine) == [
        "-y --allow-change-held-packages --allow-downgrades --no-install-recommends "
        f"kubeadm={kubernetes}-* kubelet={kubernetes}-* kubectl={kubernetes}-* "
        f"cri-tools={cri_tools}-* kubernetes-cni={cni}-*"
    ]
    assert hold_lines(machine) == ["cri-tools kubeadm kubectl kubelet kubernetes-cni"]
    assert machine.dpkg == {
        "kubeadm": f"{kubernetes}-1.1",  # not the patch before it, which the repo has too
        "kubelet": f"{kubernetes}-1.1",
        "kubectl": f"{kubernetes}-1.1",
        "cri-tools": f"{cri_tools}-1.1",
        "kubernetes-cni": f"{cni}-1.1",
    }
    assert machine.held == set(machine.dpkg)


def test_a_node_with_the_dependencies_unheld_only_gets_them_held(machine):
    """A node set up before cri-tools and kubernetes-cni were pinned has them as plain deps."""
    installed(machine, "1.36")
    machine.held -= {"cri-tools", "kubernetes-cni"}
    before = len(machine.mutations())

    assert kubeadm.install(machine.host(), "1.36", mirror=None, with_kubectl=False)

    assert machine.mutations()[before:] == ["apt-mark hold cri-tools kubernetes-cni"]
    assert machine.dpkg["kubernetes-cni"] == "1.9.1-1.1"


def test_a_dependency_at_another_version_is_moved_to_its_pin(machine):
    installed(machine, "1.36")
    machine.dpkg["kubernetes-cni"] = "1.9.0-1.1"

    assert kubeadm.install(machine.host(), "1.36", mirror=None, with_kubectl=False)

    assert apt_installs(machine)[-1].endswith(" kubernetes-cni=1.9.1-*")
    assert machine.dpkg["kubernetes-cni"] == "1.9.1-1.1"


def test_a_pin_missing_from_the_repository_installs_nothing(machine):
    uri = "https://pkgs.k8s.io/core:/stable:/v1.35/deb/"
    machine.remote[uri]["cri-tools"] = {"1.35.1-1.1"}

    with pytest.raises(apt.AptError) as err:
        kubeadm.install(machine.host(), "1.35", mirror=None, with_kubectl=False)

    assert err.value.package == "cri-tools"
    assert "Version '1.35.0-*' for 'cri-tools' was not found" in str(err.value)
    assert machine.dpkg == {} and machine.held == set()


def test_install_twice_runs_no_mutation_the_second_time(machine):
    installed(machine)
    before = len(machine.mutations())

    assert not kubeadm.install(machine.host(), "1.36", mirror=None, with_kubectl=False)
    assert machine.mutations()[before:] == []


def test_install_from_a_mirror(machine):
    machine.add_repository("https://mirror.internal/k8s")

    kubeadm.install(
        machine.host(), "1.36", mirror="https://mirror.internal/k8s", with_kubectl=False
    )

    source = machine.read("/etc/apt/sources.list.d/kubernetes.sources")
    assert "URIs: https://mirror.internal/k8s/core:/stable:/v1.36/deb/" in source
    assert machine.lines("curl") == [
        "/usr/bin/curl -fsSL --max-time 60 --retry 3 "
        "https://mirror.internal/k8s/core:/stable:/v1.36/deb/Release.key"
    ]
    assert machine.dpkg["kubeadm"] == "1.36.5-1.1"


def test_changing_minor_moves_the_source_and_the_pins(machine):
    installed(machine, "1.36")

    kubeadm.install(machine.host(), "1.37", mirror=None, with_kubectl=False)

    assert machine.dpkg["kubelet"] == "1.37.1-1.1"
    assert machine.dpkg["cri-tools"] == "1.37.0-1.1"
    assert machine.dpkg["kubernetes-cni"] == "1.9.1-1.1"
    assert {"kubelet", "cri-tools", "kubernetes-cni"} <= machine.held
    assert kubeadm.installed_minor(machine.host()) == "1.37"


def test_unreachable_mirror_raises_apt_error(machine):
    with pytest.raises(apt.AptError) as err:
        kubeadm.install(machine.host(), "1.36", mirror="https://down.example", with_kubectl=False)

    assert err.value.package == "kubernetes"
    assert "kubeadm" not in machine.dpkg


def test_installed_minor_none_before_install(machine):
    assert kubeadm.installed_minor(machine.host()) is None


# -- join material --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"endpoint": "https://10.0.0.10:6443"}, "must be host:port"),
        ({"endpoint": "10.0.0.10"}, "must be host:port"),
        ({"endpoint": "10.0.0.10:70000"}, "invalid port"),
        ({"ca_cert_hash": "a" * 64}, "CA cert hash"),
        ({"token": "ABCDEF.0123456789ABCDEF"}, "bootstrap token is malformed"),
        ({"token": "abcdef0123456789abcdef"}, "bootstrap token is malformed"),
        ({"certificate_key": "xyz"}, "certificate key is malformed"),
    ],
)
def test_malformed_join_material_is_refused_without_echoing_secrets(overrides, message):
    with pytest.raises(ValueError, match=message) as err:
        material(**overrides)

    for secret in (overrides.get("token"), overrides.get("certificate_key")):
        if secret:
            assert secret not in str(err.value)


def test_join_material_repr_hides_secrets():
    text = repr(material(certificate_key=CERT_KEY))

    assert TOKEN not in text
    assert CERT_KEY not in text
    assert "10.0.0.10:6443" in text


def test_ipv6_endpoint_is_accepted():
    assert material(endpoint="[fd00::1]:6443").endpoint == "[fd00::1]:6443"


# -- join / reset ---------------------------------------------------------------------


def test_join_renders_config_runs_kubeadm_and_removes_the_file(machine):
    installed(machine)

    joined = kubeadm.join(
        machine.host(),
        material(),
        node_name="ip-10-0-1-17",
        labels={"pool": "cpu", "example.com/team": "ml"},
        control_plane=False,
    )

    assert joined
    assert kubeadm.is_joined(machine.host())
    assert machine.lines("kubeadm") == [f"/usr/bin/kubeadm join --config {kubeadm.JOIN_CONFIG}"]
    assert not machine.path(kubeadm.JOIN_CONFIG).exists()
    [config] = machine.joins
    assert config["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert config["kind"] == "JoinConfiguration"
    assert config["discovery"]["bootstrapToken"] == {
        "apiServerEndpoint": "10.0.0.10:6443",
        "token": TOKEN,
        "caCertHashes": [CA_HASH],
    }
    assert config["nodeRegistration"]["name"] == "ip-10-0-1-17"
    assert config["nodeRegistration"]["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert config["nodeRegistration"]["kubeletExtraArgs"] == [
        {"name": "node-labels", "value": "example.com/team=ml,pool=cpu"}
    ]
    assert "controlPlane" not in config


def test_join_never_puts_secrets_on_a_command_line(machine):
    installed(machine)

    kubeadm.join(
        machine.host(),
        material(certificate_key=CERT_KEY),
        node_name="n",
        labels={},
        control_plane=True,
    )

    for call in machine.calls:
        text = call.line + (call.input or "")
        assert TOKEN not in text and "0123456789abcdef" not in text and CERT_KEY not in text


def test_control_plane_join_carries_the_certificate_key(machine):
    installed(machine)

    kubeadm.join(
        machine.host(),
        material(certificate_key=CERT_KEY),
        node_name="cp-2",
        labels={},
        control_plane=True,
        advertise_address="10.0.0.12",
    )

    [config] = machine.joins
    assert config["controlPlane"] == {
        "certificateKey": CERT_KEY,
        "localAPIEndpoint": {"advertiseAddress": "10.0.0.12"},
    }
    assert "kubeletExtraArgs" not in config["nodeRegistration"]


def test_control_plane_join_without_certificate_key_is_refused(machine):
    installed(machine)

    with pytest.raises(ValueError, match="certificate key"):
        kubeadm.join(machine.host(), material(), node_name="n", labels={}, control_plane=True)

    assert machine.lines("kubeadm") == []


def test_join_twice_joins_once(machine):
    installed(machine)
    kubeadm.join(machine.host(), material(), node_name="n", labels={}, control_plane=False)

    assert not kubeadm.join(
        machine.host(), material(), node_name="n", labels={}, control_plane=False
    )
    assert len(machine.lines("kubeadm")) == 1


def test_failed_join_raises_without_secrets_and_removes_the_file(machine):
    installed(machine)
    machine.join_error = f"couldn't validate the identity of the API Server with token {TOKEN}"

    with pytest.raises(kubeadm.KubeadmError) as err:
        kubeadm.join(machine.host(), material(), node_name="n", labels={}, control_plane=False)

    assert "couldn't validate the identity" in str(err.value)
    assert TOKEN not in str(err.value)
    assert not machine.path(kubeadm.JOIN_CONFIG).exists()
    assert not kubeadm.is_joined(machine.host())


def test_join_after_a_half_done_join_resets_first(machine):
    installed(machine)
    machine.write("/etc/kubernetes/bootstrap-kubelet.conf", "left over")

    kubeadm.join(machine.host(), material(), node_name="n", labels={}, control_plane=False)

    assert [line.split()[1] for line in machine.lines("kubeadm")] == ["reset", "join"]
    assert kubeadm.is_joined(machine.host())


def test_reset_undoes_the_join_and_clears_cni_config(machine):
    installed(machine)
    kubeadm.join(machine.host(), material(), node_name="n", labels={}, control_plane=False)
    machine.write("/etc/cni/net.d/10-flannel.conflist", "{}")

    assert kubeadm.reset(machine.host())

    assert not kubeadm.is_joined(machine.host())
    assert list(machine.path("/etc/cni/net.d").iterdir()) == []
    assert machine.lines("kubeadm")[-1] == (
        "/usr/bin/kubeadm reset --force --cri-socket unix:///run/containerd/containerd.sock"
    )


def test_reset_twice_runs_kubeadm_once(machine):
    installed(machine)
    kubeadm.join(machine.host(), material(), node_name="n", labels={}, control_plane=False)
    kubeadm.reset(machine.host())

    assert not kubeadm.reset(machine.host())
    assert len([line for line in machine.lines("kubeadm") if " reset " in line]) == 1


def test_reset_failure_raises_kubeadm_error(machine):
    installed(machine)
    kubeadm.join(machine.host(), material(), node_name="n", labels={}, control_plane=False)
    machine.fail("/usr/bin/kubeadm reset", stderr="unmount failed: device busy")

    with pytest.raises(kubeadm.KubeadmError, match="device busy"):
        kubeadm.reset(machine.host())


# -- identity -------------------------------------------------------------------------


def test_node_name_is_the_lowercased_hostname(machine):
    machine.write("/etc/hostname", "IP-10-0-1-17\n")

    assert kubeadm.node_name(machine.host()) == "ip-10-0-1-17"
    assert machine.lines("hostname") == []


def test_node_name_falls_back_to_the_hostname_program(machine):
    machine.write("/etc/hostname", "")
    machine.hostname = "Worker-3"

    assert kubeadm.node_name(machine.host()) == "worker-3"


def _certificate():
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    spki = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode(), spki


def test_ca_cert_hash_is_sha256_of_the_public_key_info():
    pem, spki = _certificate()

    assert kubeadm.ca_cert_hash(pem) == "sha256:" + hashlib.sha256(spki).hexdigest()


@pytest.mark.skipif(not os.path.exists("/usr/bin/openssl"), reason="needs openssl")
def test_ca_cert_hash_matches_openssl():
    pem, _ = _certificate()
    pubkey = subprocess.run(
        ["/usr/bin/openssl", "x509", "-pubkey", "-noout"],
        input=pem.encode(),
        capture_output=True,
        check=True,
    ).stdout
    der = subprocess.run(
        ["/usr/bin/openssl", "pkey", "-pubin", "-outform", "der"],
        input=pubkey,
        capture_output=True,
        check=True,
    ).stdout

    assert kubeadm.ca_cert_hash(pem) == "sha256:" + hashlib.sha256(der).hexdigest()


def test_ca_cert_hash_of_garbage_raises():
    with pytest.raises(ValueError):
        kubeadm.ca_cert_hash("not a certificate")


# -- upgrades -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("running", "wanted", "message"),
    [
        ("1.36", "1.36", None),
        ("1.36", "1.37", None),
        ("1.36", "1.35", "downgrades are not supported; set it back to 1.36"),
        ("1.35", "1.37", "skips a minor: clusters upgrade one minor at a time; set 1.36 first"),
    ],
)
def test_check_upgrade_allows_the_same_or_the_next_minor(running, wanted, message):
    if message is None:
        kubeadm.check_upgrade(running, wanted)
    else:
        with pytest.raises(ValueError, match=message):
            kubeadm.check_upgrade(running, wanted)


def test_install_kubeadm_moves_only_kubeadm_to_the_new_minor(machine):
    installed(machine, "1.36")

    assert kubeadm.install_kubeadm(machine.host(), "1.37")

    assert machine.dpkg["kubeadm"] == "1.37.1-1.1"
    assert machine.dpkg["kubelet"] == "1.36.5-1.1"
    assert "kubeadm" in machine.held
    assert "v1.37/deb/" in machine.read("/etc/apt/sources.list.d/kubernetes.sources")
    assert not kubeadm.install_kubeadm(machine.host(), "1.37")


def test_upgrade_node_reports_kubeadms_last_error_line(machine):
    installed(machine, "1.36")
    with pytest.raises(kubeadm.KubeadmError, match="not joined"):
        kubeadm.upgrade_node(machine.host())


def test_a_control_plane_join_that_fails_late_is_reset_at_once(machine):
    installed(machine)
    machine.join_error = "timed out waiting for etcd to be in sync"
    machine.join_fails_in = "etcd-join"
    cp = material(certificate_key="ab" * 32)

    with pytest.raises(kubeadm.KubeadmError, match="phase etcd-join"):
        kubeadm.join(machine.host(), cp, node_name="n", labels={}, control_plane=True)

    assert [line.split()[1] for line in machine.lines("kubeadm")] == ["join", "reset"]
    assert not machine.path("/etc/kubernetes/admin.conf").exists()
    assert not kubeadm.is_joined(machine.host())


def test_reset_keeps_the_files_packages_own_in_the_cni_directory(machine):
    """kubernetes-cni ships /etc/cni/net.d/.kubernetes-cni-keep (kubernetes/release specs)."""
    installed(machine)
    kubeadm.join(machine.host(), material(), node_name="n", labels={}, control_plane=False)
    machine.write("/etc/cni/net.d/.kubernetes-cni-keep", "")
    machine.write("/etc/cni/net.d/10-flannel.conflist", "{}")

    assert kubeadm.reset(machine.host())

    assert [p.name for p in machine.path("/etc/cni/net.d").iterdir()] == [".kubernetes-cni-keep"]
    assert not kubeadm.reset(machine.host())  # the kept file is no reason to reset again


# -- kubelet's serving certificate ----------------------------------------------------

DAY0 = datetime.datetime(2026, 11, 24, 10, tzinfo=datetime.timezone.utc)


def joined(machine, when=DAY0):
    """A worker that joined at `when`: its kubelet wrote its serving certificate then."""
    machine.clock = lambda: when
    installed(machine)
    kubeadm.join(
        machine.host(), material(), node_name="ip-10-0-1-17", labels={}, control_plane=False
    )
    return machine


def test_a_joined_kubelet_serves_a_self_signed_certificate_valid_a_year(machine):
    joined(machine)

    expires = kubeadm.kubelet_serving_expiry(machine.host())

    # client-go GenerateSelfSignedCertKeyWithFixtures: valid from an hour ago for 365 days
    assert expires == DAY0 - datetime.timedelta(hours=1) + datetime.timedelta(days=365)


def test_a_serving_certificate_within_30_days_of_expiry_is_rotated_once(machine):
    """A new pair of kubelet's shape, which the running kubelet loads: no restart."""
    joined(machine)
    old = machine.read(kubeadm.KUBELET_SERVING_CERT)
    old_key = machine.read(kubeadm.KUBELET_SERVING_KEY)
    first = machine.kubelet_serves()
    day340 = DAY0 + datetime.timedelta(days=340)
    restarts = machine.services["kubelet"].restarts
    calls = len(machine.lines("systemctl"))

    rotated = kubeadm.rotate_kubelet_serving_certificate(machine.host(), day340)
    again = kubeadm.rotate_kubelet_serving_certificate(machine.host(), day340)

    assert rotated == DAY0 - datetime.timedelta(hours=1) + datetime.timedelta(days=365)
    assert again is None
    assert machine.services["kubelet"].restarts == restarts
    assert len(machine.lines("systemctl")) == calls  # kubelet keeps running, GPU pods too
    assert machine.read(kubeadm.KUBELET_SERVING_CERT) != old
    assert machine.read(kubeadm.KUBELET_SERVING_KEY) != old_key
    assert (machine.path(kubeadm.KUBELET_SERVING_KEY).stat().st_mode & 0o777) == 0o600
    assert kubeadm.kubelet_serving_expiry(machine.host()) == (
        day340 - datetime.timedelta(hours=1) + datetime.timedelta(days=365)
    )  # of kubelet's shape: the charms renew it again next year
    assert machine.kubelet_serves() == f"ip-10-0-1-17@{int(day340.timestamp())}" != first


def test_the_new_serving_pair_is_the_one_kubelet_makes_itself():
    """client-go GenerateSelfSignedCertKeyWithFixtures: RSA 2048, CA then serving cert."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID

    cert_pem, key_pem = kubeadm.self_signed_serving_pair("ip-10-0-1-17", DAY0)

    leaf, ca = x509.load_pem_x509_certificates(cert_pem.encode())
    key = serialization.load_pem_private_key(key_pem.encode(), None)
    assert key_pem.startswith("-----BEGIN RSA PRIVATE KEY-----")  # PKCS#1, as keyutil
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 2048
    assert leaf.public_key() == key.public_key()
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["ip-10-0-1-17"]
    assert leaf.not_valid_before_utc == DAY0 - datetime.timedelta(hours=1)
    assert leaf.not_valid_after_utc == DAY0 + datetime.timedelta(days=365, hours=-1)


def test_a_serving_certificate_far_from_expiry_is_left_alone(machine):
    joined(machine)
    old = machine.read(kubeadm.KUBELET_SERVING_CERT)
    calls = len(machine.lines("systemctl"))
    day300 = DAY0 + datetime.timedelta(days=300)  # 65 days left

    assert kubeadm.rotate_kubelet_serving_certificate(machine.host(), day300) is None
    assert machine.read(kubeadm.KUBELET_SERVING_CERT) == old
    assert len(machine.lines("systemctl")) == calls


def _cert(subject, issuer, key, signer, *, ca=False):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    return (
        x509.CertificateBuilder()
        .subject_name(name(subject))
        .issuer_name(name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(DAY0 - datetime.timedelta(days=1))
        .not_valid_after(DAY0 + datetime.timedelta(days=10))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(signer, hashes.SHA256())
    )


def _operator_pem(kind):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_key, key, other = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    if kind == "signed by the operator's CA":
        certs = [
            _cert("ip-10-0-1-17", "corp-ca", key, ca_key),
            _cert("corp-ca", "corp-ca", ca_key, ca_key, ca=True),
        ]
    elif kind == "one self-signed certificate":
        certs = [_cert("ip-10-0-1-17@1764000000", "ip-10-0-1-17@1764000000", key, key)]
    else:  # named as kubelet names its pair, but not signed by that CA's key
        ca_name = "ip-10-0-1-17-ca@1764000000"
        certs = [
            _cert("ip-10-0-1-17@1764000000", ca_name, key, other),
            _cert(ca_name, ca_name, ca_key, ca_key, ca=True),
        ]
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


@pytest.mark.parametrize(
    "kind",
    [
        "signed by the operator's CA",
        "one self-signed certificate",
        "named like kubelet's pair, signed by another key",
    ],
)
def test_a_serving_certificate_kubelet_did_not_make_is_never_touched(machine, kind):
    joined(machine)
    pem = _operator_pem(kind)
    machine.write(kubeadm.KUBELET_SERVING_CERT, pem)  # expires on day 10
    key = machine.read(kubeadm.KUBELET_SERVING_KEY)
    calls = len(machine.lines("systemctl"))
    day5 = DAY0 + datetime.timedelta(days=5)

    assert kubeadm.kubelet_serving_expiry(machine.host()) is None
    assert kubeadm.rotate_kubelet_serving_certificate(machine.host(), day5) is None
    assert machine.read(kubeadm.KUBELET_SERVING_CERT) == pem
    assert machine.read(kubeadm.KUBELET_SERVING_KEY) == key
    assert len(machine.lines("systemctl")) == calls


def test_a_serving_certificate_is_renewed_even_when_kubelet_could_not_be_restarted(machine):
    """Renewal no longer restarts kubelet, so a unit systemd cannot start is no obstacle."""
    joined(machine)
    day340 = DAY0 + datetime.timedelta(days=340)
    machine.fail_start("kubelet", "Job for kubelet.service failed.")

    assert kubeadm.rotate_kubelet_serving_certificate(machine.host(), day340) is not None

    assert machine.services["kubelet"].active  # never stopped or restarted
    assert kubeadm.kubelet_serving_expiry(machine.host()) == (
        day340 - datetime.timedelta(hours=1) + datetime.timedelta(days=365)
    )
