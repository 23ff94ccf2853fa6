#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Copy a dataset onto the shared volume once: the program of an `import-dataset` Job.

    dataset_import.py --name mnist --source https://host/path/mnist.npz [--sha256 HEX]
    dataset_import.py --name images --source s3://bucket/prefix/

Standard library only: it runs in the training image (tensorflow/tensorflow), which has
Python but neither boto3 nor the AWS CLI.

Sources:
- `https://...` (and `http://`, which the charm never sends; the tests use it): one file,
  kept under its own name. Its size is what the server's Content-Length said.
- `s3://bucket/prefix`: every object under the prefix (ListObjectsV2, all pages), each
  kept at its key relative to the prefix; sizes are the listing's. Requests are signed
  with AWS Signature Version 4 (docs.aws.amazon.com/IAM/latest/UserGuide/
  reference_sigv-create-signed-request.html; S3's form, with the x-amz-content-sha256
  header: docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html), from
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (if set), for AWS_REGION
  (default us-east-1). The endpoint is AWS's virtual-hosted one
  (`https://<bucket>.s3.<region>.amazonaws.com`) or GPU_K8S_S3_ENDPOINT (an S3-compatible
  store, addressed path-style: `<endpoint>/<bucket>/<key>`).

Once: everything is written under `<root>/.incoming/<name>.<pid>` first, each file's
size (and, when given for a one-file dataset, sha256) checked, then `dataset.json`
written, then the directory renamed to `<root>/<name>` in one step (rename(2), atomic on
one file system, NFS included). So `<root>/<name>` is complete or absent; an interrupted
copy leaves only an `.incoming` directory, which the next attempt removes. A dataset that
is already there from the same source is not copied again.

Output: progress lines `GPU_K8S_IMPORT {"file", "bytes", "total"}` at most every 2 s per
file, and, last, `GPU_K8S_DATASET {manifest}` (the content of dataset.json, with "files"
cut to their count) which the charm reads from the pod's log. Exit 0 when the dataset is
in place, 1 with `import failed: <why>` on stderr otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

CHUNK = 1 << 20
PROGRESS_EVERY = 2.0  # seconds
ATTEMPTS = 3  # per file, on a network error or a short read
MANIFEST = "dataset.json"
INCOMING = ".incoming"
PROGRESS_MARKER = "GPU_K8S_IMPORT"
RESULT_MARKER = "GPU_K8S_DATASET"
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class DatasetError(Exception):
    """The dataset cannot be imported as asked (the message says why)."""


class _ShortReadError(Exception):
    """The connection ended before the promised size."""


# ------------------------------------------------------------------------------ sources


class Source:
    """Where the files come from: `files()` lists (relative path, size or None, url)."""

    def files(self) -> list[tuple[str, int | None, str]]:
        """Every file of the dataset: (path relative to it, size if known, URL)."""
        raise NotImplementedError

    def open(self, url: str):
        """An open HTTP response for one file's bytes."""
        return urllib.request.urlopen(url, timeout=60)


class HttpSource(Source):
    """One file at an http(s) URL."""

    def __init__(self, url: str):
        self.url = url
        path = urllib.parse.urlparse(url).path
        name = Path(path).name
        if not name or path.endswith("/"):
            raise DatasetError(f"{url}: the URL must name a file (it ends in /)")
        self.name = name

    def files(self) -> list[tuple[str, int | None, str]]:
        """The one file, its size unknown until the server answers."""
        return [(self.name, None, self.url)]


def sigv4_headers(
    method: str,
    url: str,
    *,
    region: str,
    access_key: str,
    secret_key: str,
    session_token: str = "",
    payload_sha256: str = EMPTY_SHA256,
    signed: dict[str, str] | None = None,
    now: datetime.datetime | None = None,
) -> dict[str, str]:
    """The headers that sign an S3 request (Signature Version 4).

    `payload_sha256`: the hex SHA-256 of the body (S3 refuses a body that does not match
    it: XAmzContentSHA256Mismatch); the empty body's by default. `signed`: more headers
    sent and signed (Content-Type and every x-amz-* header must be, when present:
    docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html).
    """
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    parts = urllib.parse.urlsplit(url)
    headers = {k.lower(): v for k, v in (signed or {}).items()}
    headers |= {
        "host": parts.netloc,
        "x-amz-content-sha256": payload_sha256,
        "x-amz-date": stamp,
    }
    if session_token:
        headers["x-amz-security-token"] = session_token
    query = sorted(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    canonical_query = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in query
    )
    names = ";".join(sorted(headers))
    canonical = "\n".join(
        [
            method,
            urllib.parse.quote(urllib.parse.unquote(parts.path) or "/", safe="/-_.~"),
            canonical_query,
            "".join(f"{k}:{headers[k].strip()}\n" for k in sorted(headers)),
            names,
            payload_sha256,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = f"AWS4{secret_key}".encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
        f"SignedHeaders={names}, Signature={signature}"
    )
    del headers["host"]  # urllib sends it; it was signed as sent
    return headers


class S3Error(Exception):
    """S3 answered with an error: `status` (HTTP) and `code` (S3's, e.g. AccessDenied)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}" if code else f"{status} {message}")
        self.status, self.code = status, code


class S3:
    """A bucket and key prefix (`s3://bucket/prefix`), addressed and signed as AWS does.

    Credentials from the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    AWS_SESSION_TOKEN (if set), AWS_REGION (default us-east-1), GPU_K8S_S3_ENDPOINT (an
    S3-compatible store, addressed path-style).
    """

    def __init__(self, url: str, env: dict[str, str], *, what: str = "s3 sources"):
        parts = urllib.parse.urlparse(url)
        self.bucket, self.prefix = parts.netloc, parts.path.lstrip("/")
        if self.prefix and not self.prefix.endswith("/"):
            # s3://b/data is the "folder" data/, not every key starting with "data" (as
            # `aws s3 cp --recursive` reads it: awscli customizations/s3/fileformat.py)
            self.prefix += "/"
        if not self.bucket:
            raise DatasetError(f"{url}: no bucket (s3://<bucket>/<prefix>)")
        self.access_key = env.get("AWS_ACCESS_KEY_ID", "")
        self.secret_key = env.get("AWS_SECRET_ACCESS_KEY", "")
        if not (self.access_key and self.secret_key):
            raise DatasetError(
                f"{what} need credentials: set dataset-credentials on the tensorflow "
                "application (a Juju secret with access-key-id and secret-access-key)"
            )
        self.token = env.get("AWS_SESSION_TOKEN", "")
        self.region = env.get("AWS_REGION") or "us-east-1"
        endpoint = env.get("GPU_K8S_S3_ENDPOINT", "").rstrip("/")
        # AWS's partitions (botocore data/partitions.json): China regions are under
        # amazonaws.com.cn. A bucket name with dots does not match the endpoint's wildcard
        # certificate in virtual-hosted style, so it is addressed path-style, as botocore
        # does (endpoint-rule-set-1.json isVirtualHostableS3Bucket; utils.py).
        domain = "amazonaws.com.cn" if self.region.startswith("cn-") else "amazonaws.com"
        if endpoint:
            self.base = f"{endpoint}/{self.bucket}"
        elif "." in self.bucket:
            self.base = f"https://s3.{self.region}.{domain}/{self.bucket}"
        else:
            self.base = f"https://{self.bucket}.s3.{self.region}.{domain}"

    def url(self, key: str, query: dict[str, str | None] | None = None) -> str:
        """The URL of a key, with a query sorted and encoded as SigV4 canonicalises it.

        A query value None is a bare name (`?uploads`, as botocore sends it).
        """
        url = f"{self.base}/{urllib.parse.quote(key, safe='/-_.~')}"
        if query:
            url += "?" + "&".join(
                urllib.parse.quote(k, safe="-_.~")
                + ("" if v is None else "=" + urllib.parse.quote(v, safe="-_.~"))
                for k, v in sorted(query.items())
            )
        return url

    def request(
        self,
        method: str,
        url: str,
        *,
        data: Any = None,
        payload_sha256: str = EMPTY_SHA256,
        headers: dict[str, str] | None = None,
    ) -> urllib.request.Request:
        """A signed request (`data`: bytes or a file, with its Content-Length in `headers`).

        A body goes as application/octet-stream unless `headers` say otherwise (urllib's
        own default, a form, is what S3 would then keep as the object's Content-Type).
        Content-Type and x-amz-* headers are signed; the others (Content-Length,
        If-None-Match) are sent as they are.
        """
        headers = dict(headers or {})
        if data is not None:
            headers.setdefault("Content-Type", "application/octet-stream")
        to_sign = {
            k: v
            for k, v in headers.items()
            if k.lower() == "content-type" or k.lower().startswith("x-amz-")
        }
        plain = {k: v for k, v in headers.items() if k not in to_sign}
        signed = sigv4_headers(
            method,
            url,
            region=self.region,
            access_key=self.access_key,
            secret_key=self.secret_key,
            session_token=self.token,
            payload_sha256=payload_sha256,
            signed=to_sign,
        )
        return urllib.request.Request(url, data=data, method=method, headers={**signed, **plain})

    def call(self, method: str, url: str, **kwargs: Any) -> tuple[bytes, Any]:
        """Send a signed request; (body, headers).

        Raises:
            S3Error: S3's error answer, also one inside a 200 (CompleteMultipartUpload
                can fail after its 200 has been sent: docs.aws.amazon.com/AmazonS3/latest/
                API/API_CompleteMultipartUpload.html).
            OSError: the network (urllib.error.URLError is one).
        """
        try:
            with urllib.request.urlopen(self.request(method, url, **kwargs), timeout=60) as r:
                body, headers = r.read(), r.headers
        except urllib.error.HTTPError as e:
            raise _s3_error(e) from None
        except http.client.HTTPException as e:  # a connection that broke mid-answer
            raise ConnectionError(f"{type(e).__name__}: {e}") from None
        if body.strip().startswith(b"<"):
            try:
                root = ET.fromstring(body.strip())
            except ET.ParseError:
                return body, headers
            if root.tag == "Error":
                raise S3Error(200, root.findtext("Code") or "", root.findtext("Message") or "")
        return body, headers

    def keys(self, prefix: str, *, max_keys: int = 1000) -> list[tuple[str, int]]:
        """(key, size) of every object under `prefix` (every page of ListObjectsV2).

        Raises:
            DatasetError: S3 refused, or the network failed.
        """
        out: list[tuple[str, int]] = []
        token = ""
        where = f"listing s3://{self.bucket}/{prefix}"
        while True:
            # encoding-type=url: keys come URL-encoded, so that any key survives XML 1.0
            # (what botocore asks for and decodes: handlers.py decode_list_object_v2)
            query: dict[str, str | None] = {
                "list-type": "2",
                "prefix": prefix,
                "encoding-type": "url",
            }
            if max_keys != 1000:
                query["max-keys"] = str(max_keys)
            if token:
                query["continuation-token"] = token
            try:
                body, _ = self.call("GET", self.url("", query))
                root = ET.fromstring(body)
            except S3Error as e:
                raise DatasetError(f"{where}: {e}") from None
            except (OSError, ET.ParseError) as e:
                raise DatasetError(f"{where}: {e}") from None
            for item in root.iter(f"{S3_NS}Contents"):
                key = urllib.parse.unquote_plus(item.findtext(f"{S3_NS}Key") or "")
                out.append((key, int(item.findtext(f"{S3_NS}Size") or 0)))
            if root.findtext(f"{S3_NS}IsTruncated") != "true":
                return out
            token = root.findtext(f"{S3_NS}NextContinuationToken") or ""
            if not token:
                raise DatasetError(f"{where}: a truncated listing without a continuation token")


class S3Source(S3, Source):
    """Every object under an S3 prefix, requests signed with the environment's keys."""

    PAGE = 1000  # ListObjectsV2's largest page

    def files(self) -> list[tuple[str, int | None, str]]:
        """The objects under the prefix (every page of ListObjectsV2), sizes as listed."""
        out: list[tuple[str, int | None, str]] = []
        for key, size in self.keys(self.prefix, max_keys=self.PAGE):
            relative = key[len(self.prefix) :].lstrip("/") if self.prefix else key
            if not relative or key.endswith("/"):
                continue  # the prefix itself, or a "folder" marker
            out.append((relative, size, self.url(key)))
        if not out:
            raise DatasetError(f"s3://{self.bucket}/{self.prefix} holds no objects")
        return out

    def open(self, url: str):
        """GetObject, signed."""
        return urllib.request.urlopen(self.request("GET", url), timeout=60)


def _s3_error(e: urllib.error.HTTPError) -> S3Error:
    try:
        root = ET.fromstring(e.read())
        return S3Error(e.code, root.findtext("Code") or "", root.findtext("Message") or "")
    except (ET.ParseError, OSError):
        return S3Error(e.code, "", str(e.reason))


def source_for(url: str, env: dict[str, str]) -> Source:
    """The source a URL names; DatasetError for a scheme other than http(s) or s3."""
    scheme = urllib.parse.urlparse(url).scheme
    if scheme in ("http", "https"):
        return HttpSource(url)
    if scheme == "s3":
        return S3Source(url, env)
    raise DatasetError(f"{url}: the source must be an https:// or s3:// URL")


# -------------------------------------------------------------------------------- copy


def _safe(relative: str) -> Path:
    path = Path(relative)
    if path.is_absolute() or ".." in path.parts or relative.startswith("."):
        raise DatasetError(f"refusing the file name {relative!r}")
    return path


def copy_file(source: Source, url: str, target: Path, expected: int | None) -> dict:
    """Copy one file; return {"path", "size", "sha256"}. Retries a broken transfer."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _copy_once(source, url, target, expected)
        except (urllib.error.URLError, OSError, http.client.HTTPException, _ShortReadError) as e:
            if isinstance(e, urllib.error.HTTPError) and e.code < 500:
                raise DatasetError(f"{_shown(url)}: {e.code} {e.reason}") from None
            if attempt == ATTEMPTS:
                raise DatasetError(f"{_shown(url)}: {e} (after {ATTEMPTS} attempts)") from None
            print(f"{_shown(url)}: {e}; trying again", flush=True)
            time.sleep(2 * attempt)
    raise AssertionError("unreachable")


def _shown(url: str) -> str:
    """A URL without its query (which may hold a presigned signature)."""
    return url.split("?", 1)[0]


def _copy_once(source: Source, url: str, target: Path, expected: int | None) -> dict:
    digest = hashlib.sha256()
    done = 0
    last = 0.0
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open(url) as response, target.open("wb") as out:
        length = response.headers.get("Content-Length")
        total = expected if expected is not None else (int(length) if length else None)
        while chunk := response.read(CHUNK):
            out.write(chunk)
            digest.update(chunk)
            done += len(chunk)
            if time.monotonic() - last >= PROGRESS_EVERY:
                last = time.monotonic()
                _progress(target.name, done, total)
        out.flush()
        os.fsync(out.fileno())
    _progress(target.name, done, total)
    if total is not None and done != total:
        raise _ShortReadError(f"got {done} of {total} bytes")
    return {"size": done, "sha256": digest.hexdigest()}


def _progress(name: str, done: int, total: int | None) -> None:
    line = json.dumps({"file": name, "bytes": done, "total": total})
    print(f"{PROGRESS_MARKER} {line}", flush=True)


def run(name: str, url: str, root: Path, sha256: str, env: dict[str, str]) -> dict:
    """Import the dataset (see the module docstring); return its manifest."""
    if not NAME.match(name):
        raise DatasetError(
            f"{name!r} is not a dataset name: lowercase letters, digits and '-', at most 40"
        )
    if sha256 and not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise DatasetError("sha256 must be 64 hexadecimal digits")
    final = root / name
    existing = _manifest(final)
    if existing is not None:
        if existing.get("source") != _shown(url):
            raise DatasetError(
                f"dataset {name!r} already exists from {existing.get('source')}: "
                "choose another name"
            )
        print(f"dataset {name} is already imported", flush=True)
        return existing
    if final.exists():
        raise DatasetError(f"{final} exists but is not a dataset (no {MANIFEST})")
    incoming = root / INCOMING
    for stale in incoming.glob(f"{name}.*"):  # an earlier, interrupted attempt
        shutil.rmtree(stale, ignore_errors=True)
    # A name of its own (PID 1 in every container): the Job replaces a pod only once the
    # last one is gone (podReplacementPolicy Failed), so the cleanup above races nobody.
    staging = incoming / f"{name}.{uuid.uuid4().hex}"
    staging.mkdir(parents=True)
    try:
        manifest = _copy_all(name, url, staging, sha256, env)
        os.rename(staging, final)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise DatasetError(f"cannot put the dataset in place: {e}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def _copy_all(name: str, url: str, staging: Path, sha256: str, env: dict[str, str]) -> dict:
    source = source_for(url, env)
    listed = source.files()
    if sha256 and len(listed) != 1:
        raise DatasetError(f"sha256 checks a one-file dataset; {url} has {len(listed)} files")
    files = []
    if any(relative == MANIFEST for relative, _, _ in listed):
        raise DatasetError(f"the source has a file named {MANIFEST}, which the import writes")
    for relative, size, file_url in listed:
        copied = copy_file(source, file_url, staging / _safe(relative), size)
        if sha256 and copied["sha256"] != sha256:
            raise DatasetError(
                f"{relative}: sha256 is {copied['sha256']}, not the expected {sha256}"
            )
        files.append({"path": relative, **copied})
    manifest = {
        "name": name,
        "source": _shown(url),
        "size": sum(f["size"] for f in files),
        "files": files,
        "imported": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    _write_json(staging / MANIFEST, manifest)
    return manifest


def _manifest(directory: Path) -> dict | None:
    try:
        return json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data: dict) -> None:
    with path.open("w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def summary(manifest: dict) -> dict:
    """The manifest as the charm records it: the file list cut to its count."""
    out = {k: v for k, v in manifest.items() if k != "files"}
    out["files"] = len(manifest.get("files") or [])
    if len(manifest.get("files") or []) == 1:
        out["sha256"] = manifest["files"][0]["sha256"]
    return out


def _terminated(signum: int, _frame) -> None:
    """SIGTERM (the pod deleted): stop now; the staging directory is removed on the way."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    """Import as the arguments say; exit status 0 or 1 (see the module docstring)."""
    parser = argparse.ArgumentParser(description="Copy a dataset onto the shared volume once.")
    parser.add_argument("--name", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sha256", default="")
    parser.add_argument("--root", default="/data/datasets")
    args = parser.parse_args(argv)
    try:
        manifest = run(
            args.name, args.source, Path(args.root), args.sha256.lower(), env or dict(os.environ)
        )
    except DatasetError as e:
        print(f"import failed: {e}", file=sys.stderr, flush=True)
        return 1
    print(f"{RESULT_MARKER} {json.dumps(summary(manifest))}", flush=True)
    return 0


if __name__ == "__main__":
    # As PID 1 in its container the program gets no default SIGTERM action (pid_namespaces(7))
    signal.signal(signal.SIGTERM, _terminated)
    sys.exit(main())
