"""JobSet's and Kueue's CustomResourceDefinitions at the control plane's pins, for the fakes.

The files are under tests/fixtures/crds/ (README.md there: kubernetes-sigs/jobset v0.12.0
and kubernetes-sigs/kueue v0.19.2, config/components/crd/bases, descriptions pruned by
tools/prune_crds.py). A fake API server holding one of these CRDs validates the kind's
objects as apiextensions-apiserver does (kube_admission.py: pruning of undeclared fields,
then type, required, enum, pattern, bounds, then the CEL rules, `x-kubernetes-validations`),
so an object a test or the charm writes with a
misspelled field or a wrong value fails there as it would on a cluster.

`crd("jobsets.jobset.x-k8s.io")` is a fresh copy each call (~10 ms for all seven; `shared`
the same object each time); `validate(obj)` checks one object against its kind's CRD
without a server, as the API server's decoding under `fieldValidation=Strict` and its
validation would;
`validate_jobset` adds the JobSet webhook's checks on create and kube-apiserver's on each
Job its controller creates from the JobSet.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "crds"

JOBSET_VERSION = "v0.12.0"
KUEUE_VERSION = "v0.19.2"

JOBSET = "jobsets.jobset.x-k8s.io"
KUEUE = tuple(
    f"{plural}.kueue.x-k8s.io"
    for plural in (
        "resourceflavors",
        "cohorts",
        "workloadpriorityclasses",
        "clusterqueues",
        "localqueues",
        "workloads",
    )
)


def _file(name: str) -> Path:
    plural, _, group = name.partition(".")
    return FIXTURES / f"{group}_{plural}.json"


@functools.cache
def _text(name: str) -> str:
    return _file(name).read_text()


def crd(name: str) -> dict[str, Any]:
    """The CRD `<plural>.<group>` (a copy the caller may change)."""
    return json.loads(_text(name))


@functools.cache
def _by_kind() -> dict[tuple[str, str], str]:
    out = {}
    for name in (JOBSET, *KUEUE):
        spec = crd(name)["spec"]
        for version in spec["versions"]:
            out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = name
    return out


@functools.cache
def shared(name: str) -> dict[str, Any]:
    """The CRD `<plural>.<group>`, one object per process: read it, never change it.

    (For `FakeKubeApiServer.put_object`, which stores a copy: one copy instead of two.)
    """
    return crd(name)


def crd_of(api_version: str, kind: str) -> dict[str, Any] | None:
    """The CRD serving `kind` at `api_version` (shared: do not change it), or None."""
    name = _by_kind().get((api_version, kind))
    return shared(name) if name else None


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    """Raise the fake API server's ApiError when it would refuse `obj` (a JobSet or Kueue object).

    Decoded as under `fieldValidation=Strict` (an undeclared field is 400 `strict decoding
    error: unknown field "spec.x"`), then validated (422 Invalid with each field's path),
    its CRD's rules included: as a create, or as an update of `old`.
    """
    from fakes.kube_admission import Admission, Request

    crd_ = crd_of(obj.get("apiVersion", ""), obj.get("kind", ""))
    if crd_ is None:
        raise ValueError(f"no CRD for {obj.get('apiVersion')} {obj.get('kind')}")
    body = json.loads(json.dumps(obj))
    admission = Admission()
    request = Request("CREATE", "object", "Strict")
    admission.decode(body["apiVersion"], body["kind"], body, request, crd_)
    name = (body.get("metadata") or {}).get("name", "")
    admission.validate(body["apiVersion"], body["kind"], body, name, crd_, old)


def _job_templates(obj: dict[str, Any]) -> None:
    """Each replicated Job as kube-apiserver validates the Job the JobSet controller creates.

    The webhook validates none of the Job template's own fields (jobset_webhook.go
    ValidateCreate), and the CRD's embedded Job schema has no enums: a JobSet whose
    template says `completionMode: Indexd` is stored, and each Job its controller creates
    is refused (fakes/batch.py `_create_job`). Checked here with the webhook's defaults
    (Default: Indexed, pods OnFailure), as the Job would be built.
    """
    from fakes.kube_admission import aggregate
    from fakes.kube_enums import job_spec_errors

    for rj in obj["spec"]["replicatedJobs"]:
        spec = json.loads(json.dumps(rj["template"].get("spec") or {}))
        spec.setdefault("completionMode", "Indexed")
        pod = spec.setdefault("template", {}).setdefault("spec", {})
        pod["restartPolicy"] = pod.get("restartPolicy") or "OnFailure"
        errors = job_spec_errors(spec)
        if errors:
            raise ValueError(
                f"replicated Job {rj['name']}'s Jobs are refused: {aggregate(errors)}"
            )


_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def validate_jobset(obj: dict[str, Any]) -> None:
    """`validate`, each Job's validation, then the JobSet webhook's create checks.

    kubernetes-sigs/jobset v0.12.0 pkg/webhooks/jobset_webhook.go ValidateCreate: the
    InPlaceRestart strategy only with its feature gate (off by default); each replicated
    Job's longest generated Job name `<jobset>-<rj>-<replicas-1>` and, for an Indexed Job,
    pod name `<job>-<completions-1>-abcde` are DNS-1035 labels (<= 63 characters); the
    success policy's and failure rules' targets are replicated Jobs of the JobSet.
    """
    validate(obj)
    _job_templates(obj)
    spec = obj["spec"]
    failure = spec.get("failurePolicy") or {}
    if failure.get("restartStrategy") == "InPlaceRestart":
        raise ValueError("InPlaceRestart restart strategy cannot be set when InPlaceRestart ...")
    names = {rj["name"] for rj in spec["replicatedJobs"]}
    targets = list((spec.get("successPolicy") or {}).get("targetReplicatedJobs") or [])
    for rule in failure.get("rules") or []:
        targets += rule.get("targetReplicatedJobs") or []
    if set(targets) - names:
        raise ValueError(f"targets of no replicated job: {sorted(set(targets) - names)}")
    for rj in spec["replicatedJobs"]:
        job = f"{obj['metadata']['name']}-{rj['name']}-{rj.get('replicas', 1) - 1}"
        generated = [job]
        job_spec = rj["template"].get("spec") or {}
        if job_spec.get("completionMode") == "Indexed" and "completions" in job_spec:
            generated.append(f"{job}-{job_spec['completions'] - 1}-abcde")
        for name in generated:
            if len(name) > 63 or not _DNS_1035.match(name):
                raise ValueError(f"generated name {name} is not a DNS-1035 label of <= 63")
