"""The import-dataset Job's program against a local HTTP server and a moto S3 server.

moto runs as its own server process with request signing enforced (tests/signed_s3.py),
so a signing mistake fails as it would on AWS.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import botocore.auth
import dataset_import
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from signed_s3 import signed_s3

from fakes.web import FileServer

PROGRAM = Path(dataset_import.__file__)
DATA = os.urandom(3 * dataset_import.CHUNK + 12345)
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def web():
    with FileServer() as server:
        yield server


@pytest.fixture(autouse=True)
def no_waits(monkeypatch):
    monkeypatch.setattr(dataset_import.time, "sleep", lambda _: None)


def _run(root: Path, *args: str, env: dict | None = None) -> tuple[int, str, str]:
    result = subprocess.run(
        [sys.executable, str(PROGRAM), "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    return result.returncode, result.stdout, result.stderr


def _result(stdout: str) -> dict:
    line = [x for x in stdout.splitlines() if x.startswith(dataset_import.RESULT_MARKER)][-1]
    return json.loads(line.split(" ", 1)[1])


def test_an_https_file_lands_once_complete_with_its_manifest(web, tmp_path):
    web.files["/pub/mnist.npz"] = DATA
    source = f"{web.url}/pub/mnist.npz"
    code, out, err = _run(tmp_path, "--name", "mnist", "--source", source, "--sha256", SHA)

    assert code == 0, err
    assert (tmp_path / "mnist" / "mnist.npz").read_bytes() == DATA
    manifest = json.loads((tmp_path / "mnist" / "dataset.json").read_text())
    assert manifest["source"] == source and manifest["size"] == len(DATA)
    assert manifest["files"] == [{"path": "mnist.npz", "size": len(DATA), "sha256": SHA}]
    assert _result(out) | {"imported": ""} == {
        "name": "mnist",
        "source": source,
        "size": len(DATA),
        "files": 1,
        "sha256": SHA,
        "imported": "",
    }
    progress = [json.loads(x.split(" ", 1)[1]) for x in out.splitlines() if "GPU_K8S_IMPORT" in x]
    assert progress[-1] == {"file": "mnist.npz", "bytes": len(DATA), "total": len(DATA)}
    assert not list((tmp_path / ".incoming").iterdir())

    # once: a second import of the same source copies nothing
    gets = web.gets
    code, out, _ = _run(tmp_path, "--name", "mnist", "--source", source)
    assert code == 0 and "already imported" in out and web.gets == gets
    # the name is taken by another source: refused
    code, _, err = _run(tmp_path, "--name", "mnist", "--source", f"{web.url}/other.npz")
    assert code == 1
    assert f"dataset 'mnist' already exists from {source}: choose another name" in err


def test_a_wrong_sha256_leaves_nothing(web, tmp_path):
    web.files["/d.npz"] = DATA
    code, _, err = _run(
        tmp_path, "--name", "d", "--source", f"{web.url}/d.npz", "--sha256", "0" * 64
    )
    assert code == 1
    assert f"d.npz: sha256 is {SHA}, not the expected {'0' * 64}" in err
    assert not (tmp_path / "d").exists()
    assert not list((tmp_path / ".incoming").iterdir())


def test_a_connection_cut_short_is_retried_and_never_looks_complete(web, tmp_path):
    web.files["/d.npz"] = DATA
    web.cut = len(DATA) // 2  # every answer ends half way
    with pytest.raises(dataset_import.DatasetError, match="after 3 attempts"):
        dataset_import.run("d", f"{web.url}/d.npz", tmp_path, "", {})
    assert web.gets == dataset_import.ATTEMPTS
    assert not (tmp_path / "d").exists()
    assert not list((tmp_path / ".incoming").iterdir())

    web.cut, web.fail = None, 1  # one server error, then the whole file
    manifest = dataset_import.run("d", f"{web.url}/d.npz", tmp_path, SHA, {})
    assert manifest["size"] == len(DATA)
    assert (tmp_path / "d" / "d.npz").read_bytes() == DATA


def test_a_killed_copy_leaves_no_dataset_and_the_next_attempt_cleans_up(web, tmp_path):
    web.files["/d.npz"] = DATA
    web.hold = threading.Event()  # the rest of the file waits until the copy is killed,
    web.hold_after = 2 * dataset_import.CHUNK  # once a whole chunk is on disk
    proc = subprocess.Popen(
        [sys.executable, str(PROGRAM), "--root", str(tmp_path), "--name", "d"]
        + ["--source", f"{web.url}/d.npz"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until bytes are on disk
        if line.startswith("GPU_K8S_IMPORT") and json.loads(line.split(" ", 1)[1])["bytes"]:
            break
    proc.send_signal(signal.SIGKILL)  # the node went away
    proc.wait(timeout=30)
    proc.stdout.close()
    web.hold.set()
    web.hold = None
    assert not (tmp_path / "d").exists()
    assert [p.name.split(".")[0] for p in (tmp_path / ".incoming").iterdir()] == ["d"]

    code, _, err = _run(tmp_path, "--name", "d", "--source", f"{web.url}/d.npz", "--sha256", SHA)
    assert code == 0, err
    assert (tmp_path / "d" / "d.npz").read_bytes() == DATA
    assert not list((tmp_path / ".incoming").iterdir())


@pytest.mark.parametrize(
    ("name", "source", "message"),
    [
        ("Bad_Name", "https://x/y.npz", "is not a dataset name"),
        ("ok", "ftp://x/y.npz", "must be an https:// or s3:// URL"),
        ("ok", "https://x/dir/", "the URL must name a file"),
        ("ok", "s3:///prefix", "no bucket"),
        ("ok", "s3://bucket/prefix", "s3 sources need credentials"),
    ],
)
def test_bad_requests_fail_clearly_and_create_nothing(tmp_path, name, source, message):
    with pytest.raises(dataset_import.DatasetError, match=message):
        dataset_import.run(name, source, tmp_path, "", {})
    assert not (tmp_path / name).exists()


# ------------------------------------------------------------------------------- S3


def test_the_signature_is_what_botocore_computes(monkeypatch):
    """Same request, same instant: our Authorization header equals botocore's."""
    when = datetime.datetime(2026, 11, 24, 6, 30, 0, tzinfo=datetime.UTC)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: when)
    body = hashlib.sha256(b"model bytes").hexdigest()
    for method, url, token, payload in [
        ("GET", "https://b.s3.eu-west-1.amazonaws.com/data/a%20b/x.npz", "", ""),
        (
            "GET",
            "https://b.s3.eu-west-1.amazonaws.com/?list-type=2&prefix=data%2F",
            "tok/en+=",
            "",
        ),
        (
            "GET",
            "http://127.0.0.1:5000/b/?continuation-token=1%2Fab%3D%3D&list-type=2&prefix=",
            "",
            "",
        ),
        # model_upload.py's writes: a body signed by its hash, a bare `?uploads`
        ("PUT", "https://b.s3.eu-west-1.amazonaws.com/m/1/saved_model.pb", "", body),
        ("POST", "https://b.s3.eu-west-1.amazonaws.com/m/1/v.data?uploads", "", ""),
        (
            "PUT",
            "https://b.s3.eu-west-1.amazonaws.com/m/1/v.data?partNumber=2&uploadId=x.y",
            "",
            body,
        ),
    ]:
        data = b"model bytes" if payload else b""
        payload = payload or dataset_import.EMPTY_SHA256
        ours = dataset_import.sigv4_headers(
            method,
            url,
            region="eu-west-1",
            access_key="AKIDEXAMPLE",
            secret_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            session_token=token,
            payload_sha256=payload,
            now=when,
        )
        request = AWSRequest(method=method, url=url, data=data)
        auth = botocore.auth.S3SigV4Auth(
            Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token or None),
            "s3",
            "eu-west-1",
        )
        auth.add_auth(request)
        assert ours["authorization"] == request.headers["Authorization"], url

    # a PUT with headers S3 wants signed: Content-Type and user metadata
    extra = {"Content-Type": "application/octet-stream", "x-amz-meta-gpu-k8s-upload": "ab12"}
    url = "https://b.s3.eu-west-1.amazonaws.com/m/1/saved_model.pb"
    ours = dataset_import.sigv4_headers(
        "PUT",
        url,
        region="eu-west-1",
        access_key="AKIDEXAMPLE",
        secret_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        payload_sha256=body,
        signed=extra,
        now=when,
    )
    request = AWSRequest(method="PUT", url=url, data=b"model bytes", headers=dict(extra))
    botocore.auth.S3SigV4Auth(
        Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"), "s3", "eu-west-1"
    ).add_auth(request)
    assert (
        "content-type;host;x-amz-content-sha256;x-amz-date;x-amz-meta-gpu-k8s-upload"
        in (ours["authorization"])
    )
    assert ours["authorization"] == request.headers["Authorization"]


@pytest.fixture(scope="module")
def s3():
    """The signature-checking moto server, a user with an S3 key, a bucket of files."""
    with signed_s3() as server:
        client = server.client
        server.bucket("datasets")
        client.put_object(Bucket="datasets", Key="digits/train.npz", Body=DATA)
        client.put_object(Bucket="datasets", Key="digits/sub dir/labels.txt", Body=b"0\n1\n")
        client.put_object(Bucket="datasets", Key="digits/a+b & c.txt", Body=b"odd name")
        for i in range(3):
            client.put_object(Bucket="datasets", Key=f"many/part-{i:04d}", Body=b"x" * i)
        # siblings of the prefix `many`, which s3://datasets/many must not take in
        client.put_object(Bucket="datasets", Key="many-old/part-0000", Body=b"old")
        client.put_object(Bucket="datasets", Key="manyfile", Body=b"other")
        yield client, server.env


def test_an_s3_prefix_lands_with_every_object_at_its_relative_path(s3, tmp_path):
    _, creds = s3
    manifest = dataset_import.run("digits", "s3://datasets/digits/", tmp_path, "", creds)
    assert (tmp_path / "digits" / "train.npz").read_bytes() == DATA
    assert (tmp_path / "digits" / "sub dir" / "labels.txt").read_bytes() == b"0\n1\n"
    assert (tmp_path / "digits" / "a+b & c.txt").read_bytes() == b"odd name"
    assert sorted(f["path"] for f in manifest["files"]) == [
        "a+b & c.txt",
        "sub dir/labels.txt",
        "train.npz",
    ]
    assert manifest["size"] == len(DATA) + 4 + 8


def test_listing_follows_every_page(s3, tmp_path, monkeypatch):
    _, creds = s3
    pages = []
    real = dataset_import.S3.url

    def recorded(self, key, query=None):
        if query is not None:
            pages.append(query.get("continuation-token", ""))
        return real(self, key, query)

    monkeypatch.setattr(dataset_import.S3Source, "PAGE", 1)
    monkeypatch.setattr(dataset_import.S3, "url", recorded)
    manifest = dataset_import.run("many", "s3://datasets/many", tmp_path, "", creds)
    assert len(pages) == 3 and pages[0] == "" and all(pages[1:])  # continuation tokens
    assert sorted(f["path"] for f in manifest["files"]) == [f"part-{i:04d}" for i in range(3)]


def test_s3_refusals_are_said_and_leave_nothing(s3, tmp_path):
    _, creds = s3
    wrong = {**creds, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    with pytest.raises(dataset_import.DatasetError, match="403 SignatureDoesNotMatch"):
        dataset_import.run("digits", "s3://datasets/digits", tmp_path, "", wrong)
    with pytest.raises(dataset_import.DatasetError, match="holds no objects"):
        dataset_import.run("none", "s3://datasets/nothing-here/", tmp_path, "", creds)
    with pytest.raises(dataset_import.DatasetError, match="sha256 checks a one-file dataset"):
        dataset_import.run("digits", "s3://datasets/digits", tmp_path, SHA, creds)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".incoming"]
    assert not list((tmp_path / ".incoming").iterdir())


@pytest.mark.parametrize(
    ("bucket", "region", "base"),
    [
        ("data", "us-east-1", "https://data.s3.us-east-1.amazonaws.com"),
        ("data", "eu-west-1", "https://data.s3.eu-west-1.amazonaws.com"),
        # dots break the *.s3 wildcard certificate: path style, as botocore does
        ("my.data", "eu-west-1", "https://s3.eu-west-1.amazonaws.com/my.data"),
        ("data", "cn-north-1", "https://data.s3.cn-north-1.amazonaws.com.cn"),
    ],
)
def test_aws_endpoints_follow_the_bucket_and_the_partition(bucket, region, base):
    env = {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": region}
    source = dataset_import.S3Source(f"s3://{bucket}/p", env)
    assert source.base == base
    assert source.prefix == "p/"
