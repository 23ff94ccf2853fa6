"""fetch-model's upload program against moto's S3 server, signatures and IAM policy enforced.

The server (tests/signed_s3.py) recomputes every signature with botocore and evaluates
the user's policy, which here refuses `saved_model.pb` under one prefix: the way to make
an upload fail half way through as AWS would (403 AccessDenied).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import dataset_import
import model_upload
import pytest
from signed_s3 import signed_s3

MiB = 1 << 20
BUCKET = "models"
VARIABLES = os.urandom(2 * MiB + MiB // 2)  # three parts when parts are 1 MiB


@pytest.fixture(scope="module")
def s3():
    statements = [
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
        {
            "Effect": "Deny",
            "Action": "s3:PutObject",
            "Resource": f"arn:aws:s3:::{BUCKET}/refused/*/saved_model.pb",
        },
    ]
    with signed_s3(statements, min_part_size=MiB) as server:
        server.bucket(BUCKET)
        yield server


@pytest.fixture(autouse=True)
def no_waits(monkeypatch):
    monkeypatch.setattr(model_upload.time, "sleep", lambda _: None)


@pytest.fixture
def export(tmp_path) -> Path:
    """An export directory with versions 40 and 1000 (a SavedModel's files, made up)."""
    root = tmp_path / "export"
    for version in ("40", "1000"):
        model = root / version
        (model / "variables").mkdir(parents=True)
        (model / "assets").mkdir()
        (model / "saved_model.pb").write_bytes(f"graph {version}".encode())
        (model / "fingerprint.pb").write_bytes(b"fp")
        (model / "variables" / "variables.index").write_bytes(b"index")
        (model / "variables" / "variables.data-00000-of-00001").write_bytes(VARIABLES)
    (root / ".1200.tmp").mkdir()  # an export being written
    return root


def _sent(monkeypatch) -> list[tuple[str, str]]:
    """(method, path and query) of every request the program sends, in order."""
    sent: list[tuple[str, str]] = []
    real = urllib.request.urlopen

    def recording(request, *args, **kwargs):
        sent.append((request.get_method(), request.full_url.split("/", 3)[3]))
        return real(request, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", recording)
    return sent


def test_the_highest_version_lands_file_by_file_with_saved_model_pb_last(s3, export, monkeypatch):
    sent = _sent(monkeypatch)

    answer = model_upload.run(export, 0, f"s3://{BUCKET}/mnist", s3.env)

    assert answer == {
        "version": 1000,
        "destination": f"s3://{BUCKET}/mnist/1000/",
        "files": 4,
        "size": len(VARIABLES) + len("graph 1000") + len("index") + len("fp"),
    }
    assert sorted(s3.keys(BUCKET, "mnist/")) == [
        "mnist/1000/fingerprint.pb",
        "mnist/1000/saved_model.pb",
        "mnist/1000/variables/variables.data-00000-of-00001",
        "mnist/1000/variables/variables.index",
    ]
    body = s3.client.get_object(
        Bucket=BUCKET, Key="mnist/1000/variables/variables.data-00000-of-00001"
    )
    assert body["Body"].read() == VARIABLES
    puts = [path for method, path in sent if method == "PUT"]
    assert len(puts) == 4
    assert puts[-1] == f"{BUCKET}/mnist/1000/saved_model.pb"  # what makes it a SavedModel
    first = f"{BUCKET}/?encoding-type=url&list-type=2&max-keys=1&prefix=mnist%2F1000%2F"
    assert sent[0] == ("GET", first)  # the destination is checked before anything is written


def test_a_large_file_goes_in_parts(s3, export, monkeypatch):
    monkeypatch.setattr(model_upload, "MULTIPART_THRESHOLD", MiB)
    monkeypatch.setattr(model_upload, "PART_SIZE", MiB)
    sent = _sent(monkeypatch)

    model_upload.run(export, 40, f"s3://{BUCKET}/parts/", s3.env)

    key = "parts/40/variables/variables.data-00000-of-00001"
    head = s3.client.head_object(Bucket=BUCKET, Key=key)
    assert head["ETag"].strip('"').endswith("-3")  # S3's ETag of a 3-part object
    assert s3.client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == VARIABLES
    parts = [path for method, path in sent if "partNumber=" in path]
    assert len(parts) == 3
    assert not s3.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads")


def test_nothing_is_overwritten(s3, export, monkeypatch):
    model_upload.run(export, 40, f"s3://{BUCKET}/once", s3.env)
    before = s3.client.get_object(Bucket=BUCKET, Key="once/40/saved_model.pb")["ETag"]
    (export / "40" / "saved_model.pb").write_bytes(b"changed")

    with pytest.raises(model_upload.UploadError, match="already holds objects"):
        model_upload.run(export, 40, f"s3://{BUCKET}/once", s3.env)
    assert s3.client.get_object(Bucket=BUCKET, Key="once/40/saved_model.pb")["ETag"] == before
    # and a writer that comes between the check and the write gets S3's 412
    s3.client.put_object(Bucket=BUCKET, Key="race/40/saved_model.pb", Body=b"theirs")
    monkeypatch.setattr(model_upload.S3, "keys", lambda *_, **__: [])  # the check saw nothing
    with pytest.raises(model_upload.UploadError, match="412 PreconditionFailed"):
        model_upload.run(export, 40, f"s3://{BUCKET}/race", s3.env)
    theirs = s3.client.get_object(Bucket=BUCKET, Key="race/40/saved_model.pb")
    assert theirs["Body"].read() == b"theirs"
    assert s3.keys(BUCKET, "race/") == ["race/40/saved_model.pb"]  # ours taken back


def test_a_refused_upload_takes_back_what_it_wrote(s3, export, monkeypatch):
    sent = _sent(monkeypatch)
    with pytest.raises(model_upload.UploadError, match="403 AccessDenied"):
        model_upload.run(export, 1000, f"s3://{BUCKET}/refused", s3.env)
    assert s3.keys(BUCKET, "refused/") == []
    deleted = sorted(path.split("/", 3)[3] for method, path in sent if method == "DELETE")
    assert deleted == [
        "fingerprint.pb",
        "variables/variables.data-00000-of-00001",
        "variables/variables.index",
    ]


def test_a_network_failure_in_a_part_aborts_the_multipart_upload(s3, export, monkeypatch):
    monkeypatch.setattr(model_upload, "MULTIPART_THRESHOLD", MiB)
    monkeypatch.setattr(model_upload, "PART_SIZE", MiB)
    real = urllib.request.urlopen
    cut = []

    def flaky(request, *args, **kwargs):
        if "partNumber=2" in request.full_url:
            cut.append(request.full_url)
            raise urllib.error.URLError(ConnectionResetError(104, "Connection reset by peer"))
        return real(request, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", flaky)
    with pytest.raises(model_upload.UploadError, match="Connection reset by peer"):
        model_upload.run(export, 1000, f"s3://{BUCKET}/cut", s3.env)
    assert len(cut) == dataset_import.ATTEMPTS
    assert s3.keys(BUCKET, "cut/") == []
    assert not s3.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads")


def test_a_write_whose_answer_was_lost_is_known_for_ours(s3, export, monkeypatch):
    """S3 stored the PUT, the answer never came: the retry's 412 is our own object."""
    real = urllib.request.urlopen
    lost = []

    def answer_lost(request, *args, **kwargs):
        response = real(request, *args, **kwargs)
        if request.get_method() == "PUT" and request.full_url.endswith("/saved_model.pb"):
            if not lost:
                lost.append(request.full_url)
                response.close()
                raise urllib.error.URLError(ConnectionResetError(104, "Connection reset"))
        return response

    monkeypatch.setattr(urllib.request, "urlopen", answer_lost)
    answer = model_upload.run(export, 1000, f"s3://{BUCKET}/lost", s3.env)

    assert lost and answer["files"] == 4
    assert len(s3.keys(BUCKET, "lost/")) == 4
    head = s3.client.head_object(Bucket=BUCKET, Key="lost/1000/saved_model.pb")
    assert head["Metadata"]["gpu-k8s-upload"]  # the upload's mark, signed with the PUT


def test_a_wrong_secret_is_said_and_writes_nothing(s3, export):
    wrong = {**s3.env, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    with pytest.raises(model_upload.UploadError, match="403 SignatureDoesNotMatch"):
        model_upload.run(export, 0, f"s3://{BUCKET}/wrong", wrong)
    assert s3.keys(BUCKET, "wrong/") == []


@pytest.mark.parametrize(
    ("version", "destination", "env", "message"),
    [
        (
            7,
            "s3://b/p",
            {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"},
            r"no export version 7 in \S+ \(versions: 40, 1000\)",
        ),
        (0, "https://b/p", {}, "the destination must be an s3:// URL"),
        (0, "s3://b/p", {}, "s3 destinations need credentials"),
        (0, "s3:///p", {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"}, "no bucket"),
    ],
)
def test_bad_requests_fail_clearly(export, version, destination, env, message):
    with pytest.raises(model_upload.UploadError, match=message):
        model_upload.run(export, version, destination, env)


def test_a_directory_without_saved_model_pb_is_not_uploaded(export):
    (export / "40" / "saved_model.pb").unlink()
    env = {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"}
    with pytest.raises(model_upload.UploadError, match="is not a SavedModel"):
        model_upload.run(export, 40, "s3://b/p", env)
    with pytest.raises(model_upload.UploadError, match="no export in"):
        model_upload.run(export / "missing", 0, "s3://b/p", env)


def test_the_program_runs_as_the_pod_runs_it(s3, export):
    """As a script beside dataset_import.py, its answer on the last line, reasons on stderr."""
    command = [sys.executable, str(Path(model_upload.__file__)), "--export-dir", str(export)]
    command += ["--destination", f"s3://{BUCKET}/script"]
    env = {**os.environ, **s3.env, "PYTHONPATH": ""}
    first, again = (
        subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd="/")
        for _ in range(2)
    )
    assert first.returncode == 0, first.stderr
    last = first.stdout.strip().splitlines()[-1]
    assert last.startswith("GPU_K8S_UPLOADED ")
    assert json.loads(last.split(" ", 1)[1])["destination"] == f"s3://{BUCKET}/script/1000/"
    progress = [x for x in first.stdout.splitlines() if x.startswith("GPU_K8S_UPLOAD ")]
    assert json.loads(progress[-1].split(" ", 1)[1])["file"] == "saved_model.pb"

    assert again.returncode == 1
    assert again.stderr.startswith("upload failed: s3://models/script/1000/ already holds")
    assert s3.env["AWS_SECRET_ACCESS_KEY"] not in again.stdout + again.stderr
