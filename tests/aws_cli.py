r"""The docs' `aws` commands, run as written by bash and the real AWS CLI against moto.

An example block whose lines start with `$ ` is a transcript: each command (with its `\`
continuation lines) and what it printed. `transcript(name, shell)` reads the commands
from the page holding it, runs each in bash with `aws` on the PATH being the AWS CLI v2 (Debian's
`awscli` package, 2.9.19 in bookworm; .ci/run installs it) with `--endpoint-url` set to
the local moto server's proxy, and shows the result as the example `name` (see
readme_examples.show). So the command text a newcomer copies is the one that ran: its
quoting, `$uuid`, `--query` and `--output`. What a command names as a placeholder
(`fs-...`) is replaced by the test's real id first; a command with a list of ids runs
once per id, as "each" in the page says.

Output is the CLI's own: stdout and stderr as one stream, as a terminal shows them (the
CLI's error is a blank line then `An error occurred (<Code>) when calling the <Action>
operation: <Message>`, exit status 254; awscli/clidriver.py). The AWS CLI v1 on PyPI
formats `--output text` differently in places, so only a v2 CLI is used.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import readme_examples

ACCESS_KEY_ID = "AKIAREADMEEXAMPLE001"
SECRET_ACCESS_KEY = "readme/example+secret0123456789abcdefXYZ"
REGION = "us-east-1"  # the region a newcomer's AWS CLI profile names (aws configure)
_COMMAND = re.compile(r"^\$ ((?:.*\\\n)*.*)$", re.M)


@functools.cache
def binary() -> str | None:
    """An AWS CLI v2: Debian's /usr/bin/aws first (a PATH may hold PyPI's v1 first)."""
    for candidate in ("/usr/bin/aws", shutil.which("aws")):
        if not candidate or not os.access(candidate, os.X_OK):
            continue
        try:
            version = subprocess.run(
                [candidate, "--version"], capture_output=True, text=True, timeout=60
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        if version.startswith("aws-cli/2."):
            return candidate
    return None


needs_aws_cli = pytest.mark.skipif(
    binary() is None and not os.environ.get("CI"),
    reason="the AWS CLI v2 is not installed: `sudo apt-get install awscli` (.ci/run does)",
)


@functools.cache
def _fork_server(cli: str) -> tuple[str, Path, Path]:
    """The AWS CLI `cli` loaded once, forking for each command (tests/aws_cli_fork.py).

    Returns the CLI's interpreter (its `#!` line), the client script and the server's
    socket. The server lives until this process exits and is then waited for, so the
    commands' CPU time is counted with the test run's.
    """
    first = Path(cli).read_text(errors="replace").splitlines()[0]
    assert first.startswith("#!"), f"{cli} is not a script: {first!r}"
    python = first[2:].strip()
    script = Path(__file__).with_name("aws_cli_fork.py")
    socket_path = Path(tempfile.mkdtemp(prefix="aws-cli-")) / "socket"
    server = subprocess.Popen(
        [python, str(script), "serve", str(socket_path)],
        stdin=subprocess.PIPE,
        # HOME: botocore reads `~/.aws/models` at import; an empty one, like the Shell's
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(socket_path.parent)},
    )

    def stop() -> None:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)
        shutil.rmtree(socket_path.parent, ignore_errors=True)

    atexit.register(stop)
    deadline = 600  # tenths of a second: the server imports awscli first
    while not socket_path.exists():
        assert server.poll() is None, f"the AWS CLI server exited ({server.returncode})"
        assert deadline > 0, "the AWS CLI server did not start in 60 s"
        deadline -= 1
        time.sleep(0.1)
    return python, script, socket_path


class Shell:
    """A bash with `aws` pointing at one local endpoint, in a scratch HOME.

    `endpoint_url` None: the real AWS, with the caller's own profile and credentials
    (HOME and every AWS_* variable passed on), for the integration tests.
    """

    def __init__(
        self, home: Path, endpoint_url: str | None, variables: Mapping[str, str] = ()
    ) -> None:
        cli = binary()
        assert cli, "no AWS CLI v2 (CI installs Debian's awscli)"
        bin_dir = home / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        wrapper = bin_dir / "aws"
        if endpoint_url is None:
            wrapper.write_text(f'#!/bin/sh\nexec {cli} "$@"\n')
        else:
            python, client, socket_path = _fork_server(cli)
            wrapper.write_text(
                f"#!/bin/sh\nexec {python} -I -S {client} {socket_path}"
                f' --endpoint-url {endpoint_url} "$@"\n'
            )
        wrapper.chmod(0o755)
        if endpoint_url is None:
            own = {k: v for k, v in os.environ.items() if k.startswith("AWS_") or k == "HOME"}
        else:
            own = {
                "HOME": str(home),
                "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
                "AWS_DEFAULT_REGION": REGION,
                "AWS_CONFIG_FILE": str(home / "no-config"),
                "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-credentials"),
            }
        self.env = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            **own,
            "AWS_PAGER": "",
            **dict(variables),
        }

    def run(self, command: str) -> tuple[int, str]:
        """Exit status and output (stdout and stderr as one stream) of one command."""
        done = subprocess.run(
            ["bash", "-c", command],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
        )
        return done.returncode, done.stdout


def commands(name: str) -> list[str]:
    """The commands of the transcript `name`, continuation lines included."""
    return _COMMAND.findall(readme_examples.block(name))


def transcript(
    name: str,
    shell: Shell,
    placeholders: Mapping[str, str | Sequence[str]] = (),
    *,
    volatile: Sequence[str] = (),
    expect_failure: Sequence[str] = (),
) -> list[str]:
    """Run the transcript `name` and check (or write) what it printed.

    `placeholders`: text in a command -> the id to use; a list runs the command once for
    each. `expect_failure`: text of the commands allowed to fail (the page shows their
    error); any other failure fails the test. Returns each command's output, in order.
    """
    placeholders = dict(placeholders)
    ran = commands(name)
    assert ran, f"the example {name!r} has no `$ ` command"
    outputs = []
    for command in ran:
        output = ""
        allowed = any(text in command for text in expect_failure)
        for concrete in _expand(command, placeholders):
            status, printed = shell.run(concrete)
            assert status == 0 or allowed, f"`{concrete}` failed ({status}):\n{printed}"
            assert status != 0 or not allowed, f"`{concrete}` was expected to fail"
            output += printed
        outputs.append(output)
    text = "".join(f"$ {command}\n{output}" for command, output in zip(ran, outputs))
    readme_examples.show(name, text, volatile=volatile)
    return outputs


def _expand(command: str, placeholders: Mapping[str, str | Sequence[str]]) -> list[str]:
    concrete = [command]
    for text, value in placeholders.items():
        if text not in command:
            continue
        values = [value] if isinstance(value, str) else list(value)
        concrete = [c.replace(text, v) for c in concrete for v in values]
    return concrete
