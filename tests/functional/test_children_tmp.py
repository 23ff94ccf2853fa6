"""The processes a test starts keep their temporary files in the session's own directory."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


def test_a_started_process_writes_under_the_session_s_tmpdir_which_the_test_s_tmp_path_is_not(
    children_tmpdir, tmp_path
):
    child = subprocess.run(
        [sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(child.stdout.strip()) == Path(children_tmpdir)
    assert Path(children_tmpdir).parent == Path(tempfile.gettempdir())
    assert not tmp_path.is_relative_to(children_tmpdir)
