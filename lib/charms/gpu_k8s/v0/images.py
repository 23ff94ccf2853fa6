# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Container images through a mirror registry, for sites that reach no public registry.

Each charm has an `image-registry` option. Empty keeps every image where upstream
publishes it; `registry.example.com:5000/mirror` moves each image there, keeping its path
below the registry host and its tag or digest:

    nvcr.io/nvidia/k8s-device-plugin:v0.18.2
        -> registry.example.com:5000/mirror/nvidia/k8s-device-plugin:v0.18.2
    tensorflow/tensorflow:2.20.0  (Docker Hub)
        -> registry.example.com:5000/mirror/tensorflow/tensorflow:2.20.0

The mirror is filled with one copy per image to that name (`skopeo copy
docker://<image> docker://<mirrored name>`). Which images: each charm's `upstream_images()`,
named in its `image-registry` help and in docs/how-to/air-gapped.md (tests/unit/docs/
test_images.py holds the three to one another). The reference
grammar (a first component with a `.` or `:`, or `localhost`, is a registry host;
otherwise the image is on Docker Hub, and a one-component name there lives under
`library/`) is distribution/reference's `normalize.go` (`splitDockerDomain`).
"""

from __future__ import annotations

import re

LIBID = "f6a07ee8f4b74f41af9d34a12a3f23f6"
LIBAPI = 0
LIBPATCH = 2

DOCKER_HUB = "docker.io"

# host[:port] then optional /path components: lowercase path components as the
# distribution reference grammar allows (alphanumerics separated by ., _, __ or -).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = rf"{_LABEL}(?:\.{_LABEL})*"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY = re.compile(rf"^{_HOST}(?::[0-9]{{1,5}})?(?:/{_COMPONENT})*$")


def validate_registry(value: str) -> str:
    """Return `value` without a trailing `/`, or raise ValueError saying what is wrong.

    Empty means "no mirror". A scheme (`https://`) is refused: container runtimes take
    a registry host, never a URL.
    """
    value = value.strip().rstrip("/")
    if not value:
        return ""
    if "://" in value:
        raise ValueError(
            f"{value!r} is a URL; give the registry host and optional path, "
            "such as registry.example.com:5000/mirror"
        )
    if not _REGISTRY.match(value):
        raise ValueError(
            f"{value!r} is not a registry host[:port][/path], "
            "such as registry.example.com:5000/mirror"
        )
    return value


def split(image: str) -> tuple[str, str]:
    """(registry host, path with tag or digest) of an image reference."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    if not sep:
        return DOCKER_HUB, f"library/{image}"
    return DOCKER_HUB, image


def mirrored(image: str, registry: str) -> str:
    """`image` pulled from `registry` instead of where upstream publishes it.

    With an empty `registry` the image is returned unchanged, and so is an image already
    under `registry` (an operator may configure the mirrored name itself: it is not moved
    a second time).
    """
    registry = registry.rstrip("/")
    if not registry or image.startswith(f"{registry}/"):
        return image
    _, path = split(image)
    return f"{registry}/{path}"
