# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Credentials for a private registry: a Juju secret in, an image pull Secret out (no ops).

The operator keeps the registry login in a Juju secret (`registry`, `username`,
`password`) and names it in the `image-pull-secret` config; the charm writes it to the
application's namespace as a `kubernetes.io/dockerconfigjson` Secret, and every pod the
charm makes (training, TensorBoard, purge) names it in `imagePullSecrets`. The format is
the Docker config file's `auths` map that kubelet reads (kubernetes.io/docs/tasks/
configure-pod-container/pull-image-private-registry/; kubelet's credentialprovider
DockerConfigJSON: `auths` -> registry -> `username`, `password`, `auth` =
base64("username:password")).

Nothing here logs or returns the password: errors name the key that is wrong, never its
value.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import Any

from literals import LABEL_MANAGED_BY

KEYS = ("registry", "username", "password")
DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
# host[:port], optionally with a path (registry.example.com:5000/team): what a Docker
# config `auths` key holds; a scheme is accepted by kubelet but not needed.
_REGISTRY = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._/-]+)?$")


def secret_name(app: str) -> str:
    """The Kubernetes Secret's name in the application's namespace."""
    return f"{app}-image-pull"


def docker_config(content: Mapping[str, str]) -> str:
    """The `.dockerconfigjson` for the secret's content.

    Raises:
        ValueError: a key is missing or malformed; the message names the key only.
    """
    missing = [key for key in KEYS if not str(content.get(key, "")).strip()]
    if missing:
        raise ValueError(
            f"the image-pull-secret has no {', '.join(missing)}: it needs the keys "
            f"{', '.join(KEYS)} (juju update-secret <id> registry=... username=... password=...)"
        )
    registry = content["registry"].strip().removeprefix("https://").rstrip("/")
    if not _REGISTRY.match(registry):
        raise ValueError(
            "the image-pull-secret's registry must be host[:port][/path], such as "
            "registry.example.com:5000"
        )
    username, password = content["username"], content["password"]
    if ":" in username:
        raise ValueError("the image-pull-secret's username cannot contain ':'")
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    entry = {"username": username, "password": password, "auth": auth}
    return json.dumps({"auths": {registry: entry}}, separators=(",", ":"), sort_keys=True)


def manifest(app: str, namespace: str, content: Mapping[str, str]) -> dict[str, Any]:
    """The pull Secret (raises ValueError as `docker_config`)."""
    data = base64.b64encode(docker_config(content).encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(app),
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: app},
        },
        "type": DOCKER_CONFIG_JSON,
        "data": {".dockerconfigjson": data},
    }
