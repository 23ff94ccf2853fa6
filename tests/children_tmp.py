"""A TMPDIR of the test session's own for the processes its tests start, removed at the end.

TensorFlow's autograph writes each converted function's source to a file in the temporary
directory and deletes it only in an `atexit` handler (tensorflow/python/autograph/pyct/
loader.py `load_source`, TensorFlow 2.x): a trainer a test kills (SIGKILL, or SIGTERM
before its handler is in place) leaves its files behind, a few hundred in /tmp per `tox`.
The processes a test starts inherit os.environ, so they write under this directory, which
goes when the session ends. The test process's own temporary directory stays where it was
(`tempfile.gettempdir` is read first and kept by the tempfile module), so pytest's
`tmp_path` and the sockets tests make there are unchanged. The fake kubelet gives each
container a TMPDIR of its own anyway (fakes.kubelet), as a container's file system would.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def children_tmpdir() -> Iterator[str]:
    """Where the processes this session's tests start keep their temporary files."""
    tempfile.gettempdir()  # this process's own, fixed before TMPDIR changes below
    scratch = tempfile.mkdtemp(prefix="gpu-k8s-children-")
    with pytest.MonkeyPatch.context() as m:
        m.setenv("TMPDIR", scratch)
        yield scratch
    shutil.rmtree(scratch, ignore_errors=True)
