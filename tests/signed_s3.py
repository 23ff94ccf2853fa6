"""moto's S3 server as a child process that checks every request's signature and policy.

Started with INITIAL_NO_AUTH_ACTION_COUNT=3, moto lets the first three requests through
unsigned (they create an IAM user, its access key and its policy) and from then on
recomputes each request's Signature Version 4 with botocore, refusing a wrong one (403
SignatureDoesNotMatch), and evaluates the user's IAM policy (403 AccessDenied), as AWS
does (docs.getmoto.org/en/latest/docs/iam.html). S3_UPLOAD_PART_MIN_SIZE is moto's
smallest part but the last of a multipart upload (S3's is 5 MiB).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from tf_demo import free_ports

REGION = "eu-west-1"


@dataclass
class SignedS3:
    """The running server: its endpoint, the user's credentials, a boto3 client as that user."""

    endpoint: str
    env: dict[str, str]  # what dataset_import.py and model_upload.py read
    client: Any

    def bucket(self, name: str) -> None:
        """Create a bucket in REGION."""
        self.client.create_bucket(
            Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION}
        )

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key under the prefix."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


@contextmanager
def signed_s3(
    statements: list[dict] | None = None, min_part_size: int = 5 << 20
) -> Iterator[SignedS3]:
    """A moto server whose one user may do `statements` (default: all of S3)."""
    port = free_ports(1)[0]
    env = {
        **os.environ,
        "INITIAL_NO_AUTH_ACTION_COUNT": "3",
        "S3_UPLOAD_PART_MIN_SIZE": str(min_part_size),
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.2)
        boot = {"aws_access_key_id": "boot", "aws_secret_access_key": "boot"}
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", **boot)
        iam.create_user(UserName="charm")
        key = iam.create_access_key(UserName="charm")["AccessKey"]
        policy = {
            "Version": "2012-10-17",
            "Statement": statements or [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(UserName="charm", PolicyName="s3", PolicyDocument=json.dumps(policy))
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"],
        )
        creds = {
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_REGION": REGION,
            "GPU_K8S_S3_ENDPOINT": endpoint,
        }
        yield SignedS3(endpoint, creds, client)
    finally:
        server.terminate()
        server.wait(timeout=30)
