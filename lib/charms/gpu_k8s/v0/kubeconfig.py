# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Reading a kubeconfig that a charm was handed, before anything connects with it.

`load_kubeconfig` checks what the current context needs (a cluster with an http(s)
server, a user, the context itself) and says which part is missing in a message that
never echoes the text, which holds credentials. `kubeclient.Kube.from_kubeconfig` builds
its client from the result.

Several API servers: a kubeconfig cluster names one `server` (client-go's clientcmd
api/v1 `Cluster.Server string`; a `servers` list was proposed and closed unmerged,
kubernetes/kubernetes#25428 and #40674, and the request stays open as #18174 "don't
require a load balancer between cluster and control plane and still be HA"), and
client-go never tries another. kubectl users put a load balancer in front, or keep a
context per API server and pick one with `kubectl --context`. The control plane hands
its consumers the latter: the current context reaches one API server, and one more
context per other API server names the same user and namespace, whose cluster has the
same CA. `servers` reads that list back, current first; `Kube` fails over along it.
"""

from __future__ import annotations

LIBID = "d3d41f4964454e159b01b74e5e2f65c3"
LIBAPI = 0
LIBPATCH = 4


def _check_named_entries(config: dict, section: str, inner: str) -> dict[str, dict]:
    entries = config.get(section)
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"kubeconfig has no {section}")
    named = {}
    for entry in entries:
        if not isinstance(entry, dict) or not entry.get("name"):
            raise ValueError(f"kubeconfig {section} entry without a name")
        if not isinstance(entry.get(inner), dict):
            raise ValueError(f"kubeconfig {section} entry {entry['name']!r} has no {inner}")
        named[entry["name"]] = entry[inner]
    return named


def load_kubeconfig(text: str) -> dict:
    """Parse kubeconfig YAML and check that its current context is usable.

    Raises:
        ValueError: the text is not YAML, or it lacks a cluster server, a user or a context
            that the current context needs. The message never echoes the text (it holds
            credentials).
    """
    import yaml

    try:
        # libyaml's safe loader when PyYAML has it (its wheels do): the same objects, faster
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        config = yaml.load(text, Loader=loader) if text else None
    except yaml.YAMLError:
        try:  # PyYAML's own loader names the line where a person would look
            yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ValueError(f"kubeconfig is not valid YAML{where}") from None
        raise ValueError("kubeconfig is not valid YAML") from None
    if not isinstance(config, dict):
        raise ValueError("kubeconfig must be a YAML mapping with clusters, users and contexts")
    clusters = _check_named_entries(config, "clusters", "cluster")
    users = _check_named_entries(config, "users", "user")
    contexts = _check_named_entries(config, "contexts", "context")
    current = config.get("current-context")
    if not current and len(contexts) == 1:
        current = config["current-context"] = next(iter(contexts))
    if current not in contexts:
        raise ValueError(f"kubeconfig current-context {current!r} is not among its contexts")
    context = contexts[current]
    cluster = clusters.get(context.get("cluster", ""))
    if cluster is None:
        raise ValueError(f"kubeconfig context {current!r} names an unknown cluster")
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise ValueError(f"kubeconfig cluster {context['cluster']!r} needs an http(s) server URL")
    if context.get("user") not in users:
        raise ValueError(f"kubeconfig context {current!r} names an unknown user")
    return config


def servers(config: dict) -> list[str]:
    """The current context's server, then every other server of the same cluster (deduplicated).

    Another context is the same cluster at another address when it names the current
    context's user and namespace and its cluster has the same certificate authority (a
    client built for the current context then trusts it as it is). `config` is what
    `load_kubeconfig` returned.
    """
    clusters = {e["name"]: e["cluster"] for e in config["clusters"]}
    contexts = {e["name"]: e["context"] for e in config["contexts"]}
    current = contexts[config["current-context"]]
    home = clusters[current["cluster"]]

    def same(context: dict) -> bool:
        cluster = clusters.get(context.get("cluster", ""))
        return (
            cluster is not None
            and context.get("user") == current.get("user")
            and context.get("namespace") == current.get("namespace")
            and cluster.get("certificate-authority-data") == home.get("certificate-authority-data")
            and cluster.get("certificate-authority") == home.get("certificate-authority")
            and isinstance(cluster.get("server"), str)
            and cluster["server"].startswith(("https://", "http://"))
        )

    found = [home["server"]]
    for name, context in contexts.items():
        if name != config["current-context"] and same(context):
            server = clusters[context["cluster"]]["server"]
            if server not in found:
                found.append(server)
    return found
