# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Pinned Debian packages and signed package sources, through a `Host`.

Every change is conditional: a source file is written (and `apt-get update` run) only
when its content differs; a package is installed only when it is missing or at a version
its pin does not match; a hold is set only when not already set. Running the same call
twice therefore runs no mutating command the second time.

Pins are apt version globs, so that they survive the archives they come from:
- the Ubuntu archive keeps one version of a package per pocket and replaces it at every
  update, so Ubuntu packages are pinned by series (`containerd: 2.*`), with an apt
  preferences file (`pin()`) and the same glob at install time;
- pkgs.k8s.io keeps every version but may publish a patch under another package revision
  (1.36.2 exists only as 1.36.2-2.1, kubernetes/release#4156), so Kubernetes packages
  are pinned by upstream version (`kubeadm: 1.36.5-*`).
apt-get takes `pkg=<glob>` and installs the highest matching version (the kubeadm
upgrade docs install `kubeadm='1.xx.x-*'`). The package lists are refreshed before any
install, since a lists file older than the archive names versions that are gone.

```python
apt.add_source(host, "kubernetes", uri="https://pkgs.k8s.io/core:/stable:/v1.36/deb/",
               suite="/", components=[], key_url=".../Release.key",
               key_path="/etc/apt/keyrings/kubernetes.gpg")
apt.install(host, {"kubeadm": "1.36.5-*", "kubelet": "1.36.5-*"}, hold=True)
```
No ops imports here: libraries never set status; callers turn `AptError` into one.

Why not charmlibs-apt (1.0.0, read 2026-11-22): it has no holds, apt preferences or
version globs, takes one version for every package of a call, its `import_key` puts keys
in /etc/apt/trusted.gpg.d (trusted for every source, where `Signed-By` trusts a key for
one), and it runs apt through `subprocess` itself, so the fake machine the tests use
cannot stand in for it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence

from charms.gpu_k8s.v0.system import CommandError, Host

LIBID = "0aba5560c24f4e9cb2f07b0c5cfeba01"
LIBAPI = 0
LIBPATCH = 6

APT_GET = "/usr/bin/apt-get"
APT_MARK = "/usr/bin/apt-mark"
DPKG_QUERY = "/usr/bin/dpkg-query"
CURL = "/usr/bin/curl"
GPG = "/usr/bin/gpg"
SOURCES_DIR = "/etc/apt/sources.list.d"
PREFERENCES_DIR = "/etc/apt/preferences.d"
# apt_preferences(5): above 1000 a pinned version is installed even when that is a
# downgrade, so the series wins over anything newer the archive may offer.
PIN_PRIORITY = 1001
KEYRINGS_DIR = "/etc/apt/keyrings"
# Wait for a dpkg lock held by unattended-upgrades instead of failing at once.
LOCK_TIMEOUT = ("-o", "DPkg::Lock::Timeout=300")
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}

_NOT_FOUND = re.compile(
    r"E: (?:Version '[^']*' for '(?P<ver_pkg>[^']+)' was not found"
    r"|Unable to locate package (?P<loc_pkg>\S+))"
)
_SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


class AptError(Exception):
    """A package or package source could not be set up.

    Attributes:
        package: the package (or, for a source, the source name) that failed.
        detail: the last line of apt's error output.
    """

    def __init__(self, package: str, detail: str, *, source: bool = False):
        self.package = package
        self.detail = detail
        if source:
            what = f"cannot use package source {package}"
            hint = "check that its URL and signing key are reachable from this machine"
        else:
            what = f"cannot install {package}"
            hint = (
                "check that the package source is reachable and that "
                f"{package} exists at the requested version"
            )
        super().__init__(f"{what}: {detail}; {hint}")


def render_source(*, uri: str, suite: str, components: Sequence[str], key_path: str) -> str:
    """Return a deb822 `.sources` stanza for one repository.

    A flat repository (such as pkgs.k8s.io) has suite `/` and no components.
    """
    lines = ["Types: deb", f"URIs: {uri}", f"Suites: {suite}"]
    if components:
        lines.append(f"Components: {' '.join(components)}")
    lines.append(f"Signed-By: {key_path}")
    return "\n".join(lines) + "\n"


def add_source(
    host: Host,
    name: str,
    *,
    uri: str,
    suite: str,
    components: Sequence[str],
    key_url: str | None,
    key_path: str,
) -> bool:
    """Configure a signed package source; return True when it changed.

    The keyring is fetched (`curl`, then `gpg --dearmor`) when it is missing or when the
    source itself changed (a different mirror may sign with a different key); with
    `key_url=None` the keyring must already be at `key_path`. After a change,
    `apt-get update` refreshes the package lists.

    Raises:
        ValueError: the name is not a valid file name stem or the keyring is missing.
        AptError: the key could not be fetched or the lists could not be refreshed.
    """
    if not _SOURCE_NAME.match(name):
        raise ValueError(f"package source name {name!r} must be lowercase letters, digits, .-")
    content = render_source(uri=uri, suite=suite, components=components, key_path=key_path)
    source_path = f"{SOURCES_DIR}/{name}.sources"
    unchanged = host.read(source_path) == content
    have_key = host.path(key_path).exists()
    if unchanged and have_key:
        return False
    if key_url is not None:
        _fetch_key(host, name, key_url, key_path)
    elif not have_key:
        raise ValueError(f"keyring {key_path} for package source {name} does not exist")
    host.write(source_path, content)
    update(host, name)
    return True


def _fetch_key(host: Host, name: str, key_url: str, key_path: str) -> None:
    try:
        # curl(1) has no total time limit unless --max-time (review deploy.md N16)
        armored = host.run(CURL, "-fsSL", "--max-time", "60", "--retry", "3", key_url)
        host.path(key_path).parent.mkdir(parents=True, exist_ok=True)
        host.run(
            GPG, "--batch", "--yes", "--dearmor", "-o", str(host.path(key_path)), input=armored
        )
    except CommandError as e:
        raise AptError(name, e.last_line, source=True) from None


def update(host: Host, source: str = "package lists") -> None:
    """Run `apt-get update`; a failure raises `AptError` naming `source`."""
    try:
        host.runner.run([APT_GET, *LOCK_TIMEOUT, "update"], env=APT_ENV)
    except CommandError as e:
        raise AptError(source, e.last_line, source=True) from None


def render_preferences(pins: Mapping[str, str]) -> str:
    """An apt preferences file pinning each package to a version glob ({package: glob})."""
    stanzas = [
        f"Package: {package}\nPin: version {glob}\nPin-Priority: {PIN_PRIORITY}\n"
        for package, glob in sorted(pins.items())
    ]
    return "\n".join(stanzas)


def pin(host: Host, name: str, pins: Mapping[str, str]) -> bool:
    """Pin packages to version series in `/etc/apt/preferences.d/gpu-k8s-<name>.pref`.

    Without it, `apt-get upgrade` (or unattended-upgrades once a hold is lifted) would
    move a package to any newer series the archive offers. True when the file changed.

    Raises:
        ValueError: the name is not a valid file name stem.
    """
    if not _SOURCE_NAME.match(name):
        raise ValueError(f"preferences name {name!r} must be lowercase letters, digits, .-")
    return host.write(f"{PREFERENCES_DIR}/gpu-k8s-{name}.pref", render_preferences(pins))


def matches(version: str, wanted: str | None) -> bool:
    """Whether `version` satisfies a pin: an exact version, an apt glob, or None (any)."""
    return wanted is None or fnmatch.fnmatchcase(version, wanted)


def installed_version(host: Host, package: str) -> str | None:
    """Return the installed version of `package`, or None when it is not installed."""
    try:
        out = host.run(DPKG_QUERY, "-W", "-f", "${Status} ${Version}", package)
    except CommandError:
        return None
    parts = out.split()
    # "install ok installed 1.36.5-1.1"; "deinstall ok config-files 1.2" is not installed.
    if len(parts) >= 4 and parts[2] == "installed":
        return parts[3]
    return None


def held(host: Host) -> set[str]:
    """Return the names of the packages on hold."""
    return set(host.run(APT_MARK, "showhold").split())


def install(
    host: Host,
    packages: Mapping[str, str | None],
    *,
    hold: bool,
    refresh: bool = True,
    upgrade: bool = False,
) -> bool:
    """Install `packages` ({name: version, glob or None for any}); True when it changed.

    Only packages missing or at a version their pin does not match are passed to one
    `apt-get install`, which moves them to the highest version matching, older or newer
    (a cancelled upgrade puts the previous pin back); with `upgrade`, every package is
    passed, so installed ones move to their candidate too (held ones included). With
    `hold`, every listed package is put on hold afterwards (those already held are left
    alone). The package lists are refreshed first unless `refresh` is False (the caller
    just did).

    Raises:
        AptError: apt failed; `package` names the failing package when apt says which.
    """
    wanted = []
    for name, version in packages.items():
        current = None if upgrade else installed_version(host, name)
        if current is None or not matches(current, version):
            wanted.append(f"{name}={version}" if version else name)
    if wanted:
        if refresh:
            update(host)
        argv = [
            APT_GET,
            *LOCK_TIMEOUT,
            "install",
            "-y",
            "--allow-change-held-packages",
            "--allow-downgrades",
            "--no-install-recommends",
            *wanted,
        ]
        try:
            host.runner.run(argv, env=APT_ENV)
        except CommandError as e:
            raise AptError(_failing_package(e, wanted), e.last_line) from None
    changed = bool(wanted)
    if hold:
        to_hold = sorted(set(packages) - held(host))
        if to_hold:
            host.run(APT_MARK, "hold", *to_hold)
            changed = True
    return changed


def _failing_package(error: CommandError, wanted: list[str]) -> str:
    match = _NOT_FOUND.search(error.stderr)
    if match:
        return match.group("ver_pkg") or match.group("loc_pkg")
    names = [spec.split("=", 1)[0] for spec in wanted]
    return names[0] if len(names) == 1 else ", ".join(names)
