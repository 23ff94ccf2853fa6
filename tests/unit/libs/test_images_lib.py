"""Images move to a mirror registry keeping their path; bad registries fail clearly."""

from __future__ import annotations

import pytest

from charms.gpu_k8s.v0.images import mirrored, split, validate_registry


@pytest.mark.parametrize(
    ("image", "registry", "path"),
    [
        ("nvcr.io/nvidia/device-plugin:v0.18.2", "nvcr.io", "nvidia/device-plugin:v0.18.2"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io", "pause:3.10"),
        ("localhost/x:1", "localhost", "x:1"),
        ("mirror:5000/x/y@sha256:ab", "mirror:5000", "x/y@sha256:ab"),
        ("tensorflow/tensorflow:2.20.0", "docker.io", "tensorflow/tensorflow:2.20.0"),
        ("ubuntu:24.04", "docker.io", "library/ubuntu:24.04"),
    ],
)
def test_split_follows_the_docker_reference_grammar(image, registry, path):
    assert split(image) == (registry, path)


def test_empty_registry_keeps_the_upstream_image():
    assert mirrored("nvcr.io/nvidia/cuda:12", "") == "nvcr.io/nvidia/cuda:12"


def test_mirror_keeps_the_path_below_the_host():
    assert (
        mirrored("ghcr.io/flannel-io/flannel:v0.27.4", "reg.example.com:5000/mirror/")
        == "reg.example.com:5000/mirror/flannel-io/flannel:v0.27.4"
    )
    assert mirrored("ubuntu:24.04", "reg.example.com") == "reg.example.com/library/ubuntu:24.04"


def test_an_image_already_under_the_mirror_is_not_moved_twice():
    image = "reg.example.com/mirror/nvidia/cuda:13.0"
    assert mirrored(image, "reg.example.com/mirror") == image
    assert mirrored(image, "reg.example.com/mirror/") == image


@pytest.mark.parametrize("value", ["reg.example.com", "10.0.0.5:5000/a/b", " reg:1/x/ ", ""])
def test_valid_registries(value):
    assert validate_registry(value) == value.strip().rstrip("/")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("https://reg.example.com", "is a URL"),
        ("reg.example.com/Upper", "not a registry"),
        ("reg example", "not a registry"),
        ("reg.example.com:port", "not a registry"),
    ],
)
def test_bad_registries_say_what_to_give(value, words):
    with pytest.raises(ValueError, match=words):
        validate_registry(value)
