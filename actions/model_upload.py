#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Upload one exported SavedModel version to S3: the program of `fetch-model destination=`.

    model_upload.py --export-dir /data/jobs/mnist/export --destination s3://bucket/models \
        [--version 1500]

Standard library only, like dataset_import.py, whose S3 addressing and signing it uses
(the same credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
AWS_REGION, GPU_K8S_S3_ENDPOINT).

Layout: version N (the highest numbered directory when --version is 0) lands under
`s3://bucket/models/N/`, each file at its path relative to the version directory, the
layout TensorFlow Serving reads under a model base path.

Never overwrites: the upload is refused when anything is already under the destination's
`N/`, and each object is written with `If-None-Match: *` (S3 conditional writes:
docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html), so a writer that
came in between gets 412 PreconditionFailed rather than a replaced object.

Never half there and looking complete: `saved_model.pb` (what makes a directory a
SavedModel, tensorflow.org/guide/saved_model) goes last; when the upload fails, the
objects it wrote are deleted and an unfinished multipart upload is aborted.

Integrity: every request body is signed with its SHA-256 (x-amz-content-sha256), which
S3 checks (XAmzContentSHA256Mismatch). Each object carries the upload's random mark
(x-amz-meta-gpu-k8s-upload), so that a write whose answer was lost, sent again and
refused with 412, is known for ours. Files up to MULTIPART_THRESHOLD go in one
PutObject, larger ones in parts (docs.aws.amazon.com/AmazonS3/latest/userguide/
qfacts.html: parts of 5 MiB to 5 GiB, at most 10,000; one PutObject up to 5 GiB).
A part or object is sent again after a network error or a 5xx, ATTEMPTS times at most.

Output: progress lines `GPU_K8S_UPLOAD {"file", "bytes", "total"}` at most every 2 s per
file, and last `GPU_K8S_UPLOADED {"version", "destination", "files", "size"}`. Exit 0
once every file is there, 1 with `upload failed: <why>` on stderr otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

from dataset_import import ATTEMPTS, PROGRESS_EVERY, S3, S3_NS, DatasetError, S3Error

PROGRESS_MARKER = "GPU_K8S_UPLOAD"
RESULT_MARKER = "GPU_K8S_UPLOADED"
MiB = 1 << 20
MULTIPART_THRESHOLD = 256 * MiB
PART_SIZE = 64 * MiB
MAX_PARTS = 10_000
LAST = ("saved_model.pb", "saved_model.pbtxt")  # written after everything else


class UploadError(Exception):
    """The model cannot be uploaded as asked (the message says why)."""


def version_dir(export_dir: Path, version: int) -> Path:
    """The version directory to upload: `version`, or the highest when 0."""
    if not export_dir.is_dir():
        raise UploadError(f"no export in {export_dir}")
    versions = sorted(int(p.name) for p in export_dir.iterdir() if p.name.isdigit())
    wanted = version or (versions[-1] if versions else 0)
    if wanted not in versions:
        have = ", ".join(map(str, versions)) or "none"
        raise UploadError(f"no export version {wanted or ''} in {export_dir} (versions: {have})")
    return export_dir / str(wanted)


def files_in(directory: Path) -> list[Path]:
    """Every file under the version directory, saved_model.pb last."""
    found = sorted(p for p in directory.rglob("*") if p.is_file())
    if not any(p.name in LAST and p.parent == directory for p in found):
        raise UploadError(f"{directory} is not a SavedModel (no saved_model.pb)")
    return sorted(found, key=lambda p: (p.parent == directory and p.name in LAST, str(p)))


def _sha256(path: Path, start: int = 0, size: int | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        f.seek(start)
        left = path.stat().st_size - start if size is None else size
        while left > 0 and (chunk := f.read(min(MiB, left))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


# S3 errors worth sending again (besides 5xx): an error inside a 200 (which botocore
# turns into a 500 to retry: handlers.py _handle_200_error), a body S3 waited too long
# for, and a conditional write that raced another (docs.aws.amazon.com/AmazonS3/latest/
# userguide/conditional-writes.html: 409 ConditionalRequestConflict, "retry").
RETRIED_CODES = ("RequestTimeout", "ConditionalRequestConflict")


def _retried(what: str, send):
    """send() once, again after a network error or a 5xx; S3Error or OSError at the end."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return send()
        except S3Error as e:
            again = e.status >= 500 or e.status == 200 or e.code in RETRIED_CODES
            if not again or attempt == ATTEMPTS:
                raise
            print(f"{what}: {e}; trying again", flush=True)
        except OSError as e:
            if attempt == ATTEMPTS:
                raise
            print(f"{what}: {e}; trying again", flush=True)
        time.sleep(2 * attempt)
    raise AssertionError("unreachable")


def _progress(name: str, done: int, total: int) -> None:
    line = json.dumps({"file": name, "bytes": done, "total": total})
    print(f"{PROGRESS_MARKER} {line}", flush=True)


MARK = "x-amz-meta-gpu-k8s-upload"  # user metadata: which upload wrote the object


class Upload:
    """One version's upload: what it wrote, so that a failure can take it back.

    Every object carries this upload's random mark in its user metadata, so that a
    conditional write sent again after its answer was lost (S3 stored it; the second
    attempt gets 412) is recognised as ours rather than another writer's.
    """

    def __init__(self, s3: S3):
        self.s3 = s3
        self.mark = uuid.uuid4().hex
        self.written: list[str] = []  # keys of whole objects
        self.pending: tuple[str, str] | None = None  # (key, upload id) of a multipart

    def put(self, path: Path, key: str) -> None:
        """One file to one object, in one request or in parts."""
        size = path.stat().st_size
        if size > MULTIPART_THRESHOLD:
            self._put_parts(path, key, size)
        else:
            self._put_whole(path, key, size)
        self.written.append(key)
        _progress(path.name, size, size)

    def _conditional(self, key: str, send) -> None:
        """A write with If-None-Match: *, sent again as needed.

        A 412 after a first try that may have landed is checked against our mark
        (HeadObject): our own object counts as written.
        """
        tries = 0

        def once():
            nonlocal tries
            tries += 1
            try:
                return send()
            except S3Error as e:
                if e.status == 412 and tries > 1 and self._ours(key):
                    return None
                raise

        _retried(key, once)

    def _ours(self, key: str) -> bool:
        try:
            _, headers = self.s3.call("HEAD", self.s3.url(key))
        except (S3Error, OSError):
            return False
        return headers.get(MARK) == self.mark

    def _put_whole(self, path: Path, key: str, size: int) -> None:
        checksum = _sha256(path)

        def send():
            with path.open("rb") as body:
                headers = {"Content-Length": str(size), "If-None-Match": "*", MARK: self.mark}
                url = self.s3.url(key)
                return self.s3.call(
                    "PUT", url, data=body, payload_sha256=checksum, headers=headers
                )

        self._conditional(key, send)

    def _put_parts(self, path: Path, key: str, size: int) -> None:
        part_size = max(PART_SIZE, -(-size // MAX_PARTS))
        create = self.s3.url(key, {"uploads": None})
        body, _ = _retried(key, lambda: self.s3.call("POST", create, headers={MARK: self.mark}))
        upload_id = ET.fromstring(body).findtext(f"{S3_NS}UploadId") or ""
        if not upload_id:
            raise UploadError(f"{key}: S3 gave no UploadId")
        self.pending = (key, upload_id)
        etags = []
        last = time.monotonic()
        with path.open("rb") as f:
            for number, start in enumerate(range(0, size, part_size), start=1):
                f.seek(start)
                data = f.read(part_size)
                checksum = hashlib.sha256(data).hexdigest()
                url = self.s3.url(key, {"partNumber": str(number), "uploadId": upload_id})

                def send(url=url, data=data, checksum=checksum):
                    headers = {"Content-Length": str(len(data))}
                    return self.s3.call(
                        "PUT", url, data=data, payload_sha256=checksum, headers=headers
                    )

                _, headers = _retried(f"{key} part {number}", send)
                etags.append((number, headers.get("ETag", "")))
                if time.monotonic() - last >= PROGRESS_EVERY:
                    last = time.monotonic()
                    _progress(path.name, start + len(data), size)
        parts = "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{_xml(tag)}</ETag></Part>"
            for n, tag in etags
        )
        document = (
            f'<CompleteMultipartUpload xmlns="{S3_NS[1:-1]}">{parts}</CompleteMultipartUpload>'
        ).encode()
        url = self.s3.url(key, {"uploadId": upload_id})
        headers = {
            "Content-Length": str(len(document)),
            "Content-Type": "application/xml",
            "If-None-Match": "*",
        }
        checksum = hashlib.sha256(document).hexdigest()
        self._conditional(
            key,
            lambda: self.s3.call(
                "POST", url, data=document, payload_sha256=checksum, headers=headers
            ),
        )
        self.pending = None

    def take_back(self) -> list[str]:
        """Abort an unfinished multipart upload and delete the objects written.

        Returns:
            The keys that could not be deleted (or aborted), for the operator.
        """
        left = []
        if self.pending:
            key, upload_id = self.pending
            try:
                self.s3.call("DELETE", self.s3.url(key, {"uploadId": upload_id}))
            except (S3Error, OSError) as e:
                print(f"could not abort the upload of {key}: {e}", file=sys.stderr, flush=True)
                left.append(f"{key} (unfinished multipart upload {upload_id})")
        for key in reversed(self.written):
            try:
                self.s3.call("DELETE", self.s3.url(key))
            except (S3Error, OSError) as e:
                print(f"could not delete {key}: {e}", file=sys.stderr, flush=True)
                left.append(key)
        return left


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def run(export_dir: Path, version: int, destination: str, env: dict[str, str]) -> dict:
    """Upload the version (see the module docstring); return what was written."""
    if urllib.parse.urlsplit(destination).scheme != "s3":
        raise UploadError(f"{destination}: the destination must be an s3:// URL")
    try:
        s3 = S3(destination, env, what="s3 destinations")
    except DatasetError as e:
        raise UploadError(str(e)) from None
    source = version_dir(export_dir, version)
    files = files_in(source)
    prefix = f"{s3.prefix}{source.name}/"
    where = f"s3://{s3.bucket}/{prefix}"
    try:
        taken = s3.keys(prefix, max_keys=1)
    except DatasetError as e:
        raise UploadError(str(e)) from None
    if taken:
        raise UploadError(
            f"{where} already holds objects ({taken[0][0]}): nothing is overwritten; "
            "choose another destination or remove them"
        )
    upload = Upload(s3)
    try:
        for path in files:
            upload.put(path, prefix + path.relative_to(source).as_posix())
    except (S3Error, OSError, UploadError, ET.ParseError) as e:
        left = upload.take_back()
        kept = f"; left behind, delete by hand: {', '.join(left)}" if left else ""
        raise UploadError(f"{where}: {e}{kept}") from None
    except BaseException:
        upload.take_back()
        raise
    return {
        "version": int(source.name),
        "destination": where,
        "files": len(files),
        "size": sum(p.stat().st_size for p in files),
    }


def _terminated(signum: int, _frame) -> None:
    """SIGTERM (the pod deleted): stop; what was written is taken back on the way out."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    """Upload as the arguments say; exit status 0 or 1 (see the module docstring)."""
    parser = argparse.ArgumentParser(description="Upload an exported SavedModel to S3.")
    parser.add_argument("--export-dir", required=True, type=Path)
    parser.add_argument("--version", type=int, default=0)
    parser.add_argument("--destination", required=True)
    args = parser.parse_args(argv)
    try:
        answer = run(args.export_dir, args.version, args.destination, env or dict(os.environ))
    except UploadError as e:
        print(f"upload failed: {e}", file=sys.stderr, flush=True)
        return 1
    print(f"{RESULT_MARKER} {json.dumps(answer)}", flush=True)
    return 0


if __name__ == "__main__":
    # As PID 1 in its container the program gets no default SIGTERM action (pid_namespaces(7))
    signal.signal(signal.SIGTERM, _terminated)
    sys.exit(main())
