# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Datasets on the shared volume: imported once by a Job, listed, named by `train` (no ops).

`import-dataset name=<n> source=<https://...|s3://bucket/prefix>` runs a short-lived Job
`import-<n>` (actions/dataset_import.py, from a ConfigMap it owns) in the application's
namespace with the shared claim at /data. The program copies into a staging directory
and renames it to `/data/datasets/<n>` only once every file is there and checked, so a
dataset is complete or absent. Its last log line is the dataset's manifest, which the
charm records in the ConfigMap `<app>-datasets` (name -> JSON: source, size, files,
sha256 of a one-file dataset, imported), the registry `list-datasets` shows and `train
dataset=<n>` checks. S3 credentials come from the Juju secret in config
`dataset-credentials` (keys access-key-id, secret-access-key, and optionally
session-token, region, endpoint), written to the Secret `<app>-dataset-credentials`
that the Job's pod reads as environment variables; never on a command line or in a
result.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

import oneshot
import pydantic
from literals import (
    CODE_MOUNT,
    DATA_MOUNT,
    IMPORTER,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
)

from charms.gpu_k8s.v0.config import ActionParams, between

COMPONENT_IMPORT = "import"
LABEL_DATASET = "gpu-k8s.io/dataset"
DATASETS_DIR = f"{DATA_MOUNT}/datasets"
PROGRESS_MARKER = "GPU_K8S_IMPORT"  # dataset_import.py's progress lines
RESULT_MARKER = "GPU_K8S_DATASET"  # and its last line, the manifest
IMPORT_BACKOFF_LIMIT = 2  # the program retries each file itself; this covers a lost node
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# Juju secret keys of `dataset-credentials` -> the environment dataset_import.py reads.
CREDENTIAL_KEYS = {
    "access-key-id": "AWS_ACCESS_KEY_ID",
    "secret-access-key": "AWS_SECRET_ACCESS_KEY",
    "session-token": "AWS_SESSION_TOKEN",
    "region": "AWS_REGION",
    "endpoint": "GPU_K8S_S3_ENDPOINT",
}
REQUIRED_CREDENTIALS = ("access-key-id", "secret-access-key")


class DatasetError(Exception):
    """The dataset request cannot be carried out (the message says why and what to do)."""


def check_name(name: str) -> str:
    """A dataset name: a DNS label of at most 40 characters (it names a Job and a path)."""
    if not _NAME.match(name):
        raise ValueError(
            f"{name!r} is not a valid dataset name: lowercase letters, digits and '-', "
            "starting and ending with a letter or digit, at most 40 characters"
        )
    return name


def check_source(source: str) -> str:
    """An https:// URL of one file or an s3://bucket/prefix; no credentials in it.

    No user, password or query: those are credentials (a presigned URL's signature), and
    the source is kept in the Job and the registry in the clear. Messages never repeat
    the URL beyond its scheme, host and path.
    """
    parts = urllib.parse.urlsplit(source)
    shown = f"{parts.scheme}://{parts.hostname or ''}{parts.path}"
    if parts.scheme not in ("https", "s3"):
        raise ValueError(f"{shown!r}: the source must be an https:// or s3:// URL")
    if not parts.hostname or parts.username or parts.password or parts.query:
        raise ValueError(
            "the source must name a host (https) or bucket (s3) and hold no user, password "
            "or query (a presigned URL is a credential): for S3, use s3://bucket/prefix "
            "with the dataset-credentials secret"
        )
    if parts.scheme == "https" and (not parts.path or parts.path.endswith("/")):
        raise ValueError(f"{shown!r}: an https source must name a file")
    return source


class ImportParams(ActionParams):
    """The `import-dataset` action's parameters."""

    name: str
    source: str
    sha256: str = ""
    timeout: between(0, 86400, "seconds") = 600  # type: ignore[valid-type]

    @pydantic.field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value)

    @pydantic.field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        return check_source(value.strip())

    @pydantic.field_validator("sha256")
    @classmethod
    def _sha256(cls, value: str) -> str:
        value = value.strip().lower()
        if value and not _SHA256.match(value):
            raise ValueError("must be 64 hexadecimal digits (sha256sum's output)")
        return value

    @property
    def scheme(self) -> str:
        """`https` or `s3`."""
        return urllib.parse.urlsplit(self.source).scheme

    def shown_source(self) -> str:
        """The source without its query (a presigned URL's signature is a credential)."""
        return self.source.split("?", 1)[0]


def job_name(name: str) -> str:
    """The import Job of a dataset."""
    return f"import-{name}"


def registry_name(app: str) -> str:
    """The ConfigMap that records the application's datasets."""
    return f"{app}-datasets"


def credentials_name(app: str) -> str:
    """The Secret with the S3 credentials that import and upload Jobs read."""
    return f"{app}-dataset-credentials"


def dataset_dir(name: str) -> str:
    """Where a dataset is in every pod of the application."""
    return f"{DATASETS_DIR}/{name}"


def credentials_manifest(app: str, namespace: str, content: Mapping[str, str]) -> dict:
    """The Secret from the `dataset-credentials` Juju secret's content.

    Raises:
        ValueError: a required key is missing or an unknown one is given (names only).
    """
    missing = [k for k in REQUIRED_CREDENTIALS if not str(content.get(k, "")).strip()]
    unknown = sorted(set(content) - set(CREDENTIAL_KEYS))
    if missing or unknown:
        raise ValueError(
            "the dataset-credentials secret needs the keys "
            f"{', '.join(REQUIRED_CREDENTIALS)} and may have session-token, region, endpoint"
            + (f"; missing: {', '.join(missing)}" if missing else "")
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    data = {
        CREDENTIAL_KEYS[k]: base64.b64encode(str(v).strip().encode()).decode()
        for k, v in sorted(content.items())
        if str(v).strip()
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": credentials_name(app),
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: app},
        },
        "type": "Opaque",
        "data": data,
    }


def _labels(app: str, name: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: app, LABEL_COMPONENT: COMPONENT_IMPORT, LABEL_DATASET: name}


def selector(app: str, name: str | None = None) -> str:
    """Label selector of the application's import Jobs (of one dataset)."""
    terms = [f"{LABEL_MANAGED_BY}={app}", f"{LABEL_COMPONENT}={COMPONENT_IMPORT}"]
    if name:
        terms.append(f"{LABEL_DATASET}={name}")
    return ",".join(terms)


def import_job(params: ImportParams, ctx: Any, *, credentials: bool) -> dict:
    """The Job that copies the dataset (`ctx`: manifests.Context, for image and pod basics).

    `credentials`: an s3 import's pod reads the S3 keys from the credentials Secret. The
    source is on the command line: check_source refused anything secret in it.
    """
    lbls = _labels(ctx.app, params.name)
    env = ctx.identity_env_list()
    container: dict[str, Any] = {
        "name": "import",
        "image": ctx.pulled(ctx.default_image),
        "command": [
            "python3",
            f"{CODE_MOUNT}/{IMPORTER}",
            f"--name={params.name}",
            f"--source={params.source}",
            f"--sha256={params.sha256}",
            f"--root={DATASETS_DIR}",
        ],
        "env": env,
        "volumeMounts": [{"name": "data", "mountPath": DATA_MOUNT}, oneshot.code_mount()],
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
    }
    if credentials and params.scheme == "s3":  # an https import gets no keys
        container["envFrom"] = [{"secretRef": {"name": credentials_name(ctx.app)}}]
    return oneshot.manifest(
        job_name(params.name),
        ctx,
        lbls,
        container,
        [oneshot.claim_volume(ctx.claim), oneshot.code_volume(job_name(params.name))],
        backoff_limit=IMPORT_BACKOFF_LIMIT,
        # kept as long as finished training jobs (job-ttl), so that reconcile records
        # what it copied even when no action waited for it to end
        ttl_seconds=ctx.ttl_seconds,
        failure_policy=[
            # the program gave up (its own retries done, or a refusal): a new pod would
            # only do it all again
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "import", "operator": "In", "values": [1]},
            },
            # a drained or preempted node: try again elsewhere, not counted
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
        ],
    )


def registry_manifest(app: str, namespace: str, entries: Mapping[str, Mapping]) -> dict:
    """The registry ConfigMap: one key per dataset, its summary as JSON."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": registry_name(app),
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: app},
        },
        "data": {name: json.dumps(dict(entry), sort_keys=True) for name, entry in entries.items()},
    }


def read_registry(configmap: Mapping[str, Any] | None) -> dict[str, dict]:
    """The recorded datasets (an unreadable entry is skipped)."""
    out = {}
    for name, text in ((configmap or {}).get("data") or {}).items():
        try:
            entry = json.loads(text)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out[name] = entry
    return out


def result(log: str) -> dict | None:
    """The manifest an import Job printed last, or None."""
    return oneshot.marked(log, RESULT_MARKER)


def failure(log: str) -> str:
    """Why the import failed, from the program's last words."""
    return oneshot.last_words(log, "import failed: ")


def human_size(size: float) -> str:
    """Bytes as people read them (1.2 GB; decimal units, as `aws s3 ls` and browsers)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def progress(log: str, marker: str = PROGRESS_MARKER) -> str:
    """`<file>: 45% of 1.2 GB` from the last progress line ("" before the first)."""
    last = oneshot.marked(log, marker)
    if not last:
        return ""
    done, total = int(last.get("bytes") or 0), last.get("total")
    if total:
        return f"{last.get('file')}: {100 * done // int(total)}% of {human_size(int(total))}"
    return f"{last.get('file')}: {human_size(done)}"


def describe(entry: Mapping[str, Any]) -> str:
    """One line for list-datasets."""
    files = int(entry.get("files") or 0)
    return (
        f"{human_size(int(entry.get('size') or 0))}, {files} file{'s' if files != 1 else ''}, "
        f"from {entry.get('source')}, imported {entry.get('imported')}"
    )


def summary_results(name: str, entry: Mapping[str, Any]) -> dict[str, str]:
    """Action results for an imported dataset."""
    out = {
        "dataset": name,
        "state": "imported",
        "path": dataset_dir(name),
        "size": human_size(int(entry.get("size") or 0)),
        "bytes": str(entry.get("size")),
        "files": str(entry.get("files")),
        "source": str(entry.get("source")),
        "imported": str(entry.get("imported")),
    }
    if entry.get("sha256"):
        out["sha256"] = str(entry["sha256"])
    return out


# ------------------------------------------------------------------ against the cluster

POLL_SECONDS = 5.0


def registry(kube: Any, app: str, namespace: str) -> dict[str, dict]:
    """The application's recorded datasets."""
    return read_registry(kube.get("v1", "ConfigMap", registry_name(app), namespace))


def _record(kube: Any, app: str, namespace: str, name: str, entry: Mapping) -> None:
    patch = registry_manifest(app, namespace, {name: entry})
    kube.apply(patch, field_manager=f"{app}-dataset-{name}")  # one field owner per key


def settle(kube: Any, ctx: Any) -> tuple[dict[str, dict], dict[str, str]]:
    """Record what finished import Jobs copied.

    Returns:
        (the registry, now complete; the state of imports unfinished or failed)
    """
    recorded = registry(kube, ctx.app, ctx.namespace)
    states: dict[str, str] = {}
    for job in kube.list("batch/v1", "Job", ctx.namespace, label_selector=selector(ctx.app)):
        name = (job["metadata"].get("labels") or {}).get(LABEL_DATASET, "")
        if not name or name in recorded:
            continue
        finished = oneshot.finished(job)
        log = oneshot.log(kube, ctx.namespace, job["metadata"]["name"])
        if finished == "Succeeded" and (entry := result(log)) is not None:
            _record(kube, ctx.app, ctx.namespace, name, entry)
            recorded[name] = entry
        elif finished == "Failed":
            states[name] = f"failed: {failure(log)}"
        elif why := oneshot.stuck(kube, ctx.namespace, job["metadata"]["name"]):
            states[name] = f"cannot start: {why}"
        else:
            states[name] = f"importing {progress(log) or '(starting)'}"
    return recorded, states


def _refuse(kube: Any, ctx: Any, params: ImportParams, credentials: bool) -> dict | None:
    """The dataset's record when it is already there from this source, else None.

    Raises:
        DatasetError: the request cannot go ahead (name taken, S3 without credentials, no
            claim).
    """
    existing = registry(kube, ctx.app, ctx.namespace).get(params.name)
    if existing is not None:
        if existing.get("source") != params.shown_source():
            raise DatasetError(
                f"dataset {params.name!r} already exists from {existing.get('source')}: "
                "choose another name"
            )
        return existing
    if params.scheme == "s3" and not credentials:
        raise DatasetError(
            "an s3 source needs credentials: juju add-secret <name> access-key-id=... "
            "secret-access-key=...; juju grant-secret <name> <app>; "
            "juju config <app> dataset-credentials=<the secret URI add-secret printed>"
        )
    if kube.get("v1", "PersistentVolumeClaim", ctx.claim, ctx.namespace) is None:
        raise DatasetError(f"claim {ctx.claim} is missing: check the efs-storage relation")
    return None


def _start(kube: Any, ctx: Any, params: ImportParams, program: str, credentials: bool) -> bool:
    """Create the import Job (after a failed one of an earlier attempt); False if it runs."""
    job = kube.get("batch/v1", "Job", job_name(params.name), ctx.namespace)
    if job is not None and oneshot.finished(job) == "Failed":
        kube.delete("batch/v1", "Job", job_name(params.name), ctx.namespace)
        job = None  # an earlier attempt failed: this is a new one
    if job is not None:
        return False
    manifest = import_job(params, ctx, credentials=credentials)
    oneshot.start(kube, manifest, {IMPORTER: program}, ctx.app)
    return True


def listing(kube: Any, ctx: Any) -> dict[str, Any]:
    """`list-datasets` results: every dataset in one line, and imports not done."""
    recorded, unfinished = settle(kube, ctx)
    found = {name: describe(entry) for name, entry in recorded.items()}
    found.update(unfinished)
    results: dict[str, Any] = {"count": str(len(found))}
    if found:
        results["datasets"] = found
    return results


class _Watch:
    """One look at an import Job per poll: progress logged, the end recorded or raised."""

    def __init__(self, kube: Any, ctx: Any, name: str, log: Any):
        self.kube, self.ctx, self.name, self.log = kube, ctx, name, log
        self.shown = ""
        self.entry: dict = {}  # the manifest, once recorded

    def done(self) -> str | None:
        """`Succeeded` once recorded, None while copying; DatasetError when it cannot end."""
        kube, ns, job = self.kube, self.ctx.namespace, job_name(self.name)
        current = kube.get("batch/v1", "Job", job, ns)
        if current is None:
            raise DatasetError(f"the import Job of {self.name} disappeared: run it again")
        text = oneshot.log(kube, ns, job)
        now = progress(text)
        if now and now != self.shown:
            self.shown = now
            self.log(now)
        finished = oneshot.finished(current)
        if finished == "Failed":
            raise DatasetError(f"import of {self.name} failed: {failure(text)}")
        if finished is None:
            if why := oneshot.stuck(kube, ns, job):
                kube.delete("batch/v1", "Job", job, ns)
                raise DatasetError(f"the import pod of {self.name} cannot start: {why}")
            return None
        entry = result(text)
        if entry is None:
            raise DatasetError(f"import of {self.name} ended without its manifest")
        _record(kube, self.ctx.app, ns, self.name, entry)
        self.entry = entry
        return "Succeeded"


def import_dataset(
    kube: Any,
    ctx: Any,
    params: ImportParams,
    program: str,
    *,
    credentials: bool,
    log: Any,
    sleep: Any,
    clock: Any,
) -> dict[str, str]:
    """Start (or find) the dataset's import Job and wait up to `params.timeout` for it.

    Raises:
        DatasetError: the name is taken by another source, S3 without credentials, the
            claim is missing, or the copy failed (with the program's reason).
    """
    from charms.gpu_k8s.v0.system import poll_until

    existing = _refuse(kube, ctx, params, credentials)
    if existing is not None:
        return {**summary_results(params.name, existing), "created": "false"}
    created = _start(kube, ctx, params, program, credentials)
    if created:
        log(f"importing {params.name} from {params.shown_source()} (Job {job_name(params.name)})")
    watch = _Watch(kube, ctx, params.name, log)
    if poll_until(watch.done, params.timeout, poll=POLL_SECONDS, clock=clock, sleep=sleep):
        return {**summary_results(params.name, watch.entry), "created": str(created).lower()}
    return {
        "dataset": params.name,
        "state": f"importing {watch.shown or '(starting)'}",
        "created": str(created).lower(),
        "next": "list-datasets shows it once the copy is complete",
    }
