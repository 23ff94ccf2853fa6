"""The part of the JobSet v1alpha2 API the tensorflow charm writes, as a JSON schema.

Written from kubernetes-sigs/jobset at tag v0.12.0, api/jobset/v1alpha2/jobset_types.go
(JSON names, enums, required fields, minimums) and the webhook's name rules
(pkg/webhooks/jobset_webhook.go ValidateCreate: generated Job names `<jobset>-<rj>-<i>`
must be DNS-1035 labels of at most 63 characters; pod names `<job>-<index>-<5 chars>` too).
Fields the charm never writes are allowed but not described (additionalProperties stays
open only where the upstream type has more fields). Each replicated Job's `template` is a
batch/v1 JobTemplateSpec, checked separately with the Kubernetes schema
(`validate_jobset` wraps it into a Job for kubernetes_validate).
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import kubernetes_validate

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "jobset.x-k8s.io/v1alpha2"},
        "kind": {"const": "JobSet"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": _DNS_1035.pattern, "maxLength": 63},
                "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "spec": {
            "type": "object",
            "required": ["replicatedJobs"],
            "additionalProperties": False,
            "properties": {
                "replicatedJobs": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "template"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "pattern": _DNS_1035.pattern},
                            "groupName": {"type": "string"},
                            "replicas": {"type": "integer", "minimum": 0},
                            "template": {"type": "object"},
                            "dependsOn": {"type": "array"},
                        },
                    },
                },
                "network": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "enableDNSHostnames": {"type": "boolean"},
                        "subdomain": {"type": "string", "pattern": _DNS_1035.pattern},
                        "publishNotReadyAddresses": {"type": "boolean"},
                    },
                },
                "successPolicy": {
                    "type": "object",
                    "required": ["operator"],
                    "additionalProperties": False,
                    "properties": {
                        "operator": {"enum": ["All", "Any"]},
                        "targetReplicatedJobs": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "failurePolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "maxRestarts": {"type": "integer", "minimum": 0},
                        "restartStrategy": {"enum": ["Recreate", "BlockingRecreate"]},
                        "rules": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["action"],
                                "additionalProperties": False,
                                "properties": {
                                    # FailurePolicyRule; the webhook's reason list and the
                                    # name pattern (RestartJob* need a feature gate: left out)
                                    "name": {
                                        "type": "string",
                                        "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                                        "maxLength": 128,
                                    },
                                    "action": {
                                        "enum": [
                                            "FailJobSet",
                                            "RestartJobSet",
                                            "RestartJobSetAndIgnoreMaxRestarts",
                                        ]
                                    },
                                    "onJobFailureReasons": {
                                        "type": "array",
                                        "items": {
                                            "enum": [
                                                "BackoffLimitExceeded",
                                                "DeadlineExceeded",
                                                "FailedIndexes",
                                                "MaxFailedIndexesExceeded",
                                                "PodFailurePolicy",
                                            ]
                                        },
                                    },
                                    "onJobFailureMessagePatterns": {"type": "array"},
                                    "targetReplicatedJobs": {"type": "array"},
                                },
                            },
                        },
                    },
                },
                "startupPolicy": {"type": "object"},
                "suspend": {"type": "boolean"},
                "coordinator": {"type": "object"},
                "managedBy": {"type": "string"},
                "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
                "volumeClaimPolicies": {"type": "array"},
            },
        },
    },
}


def validate_jobset(obj: dict[str, Any], kubernetes_version: str = "1.33") -> None:
    """Raise when `obj` is not a JobSet the API server (and its webhook) would accept."""
    jsonschema.validate(obj, SCHEMA)
    spec = obj["spec"]
    names = {rj["name"] for rj in spec["replicatedJobs"]}
    for key in ("successPolicy", "failurePolicy"):
        targets = (spec.get(key) or {}).get("targetReplicatedJobs") or []
        unknown = set(targets) - names
        if unknown:
            raise ValueError(f"{key} targets unknown replicated jobs {sorted(unknown)}")
    for rj in spec["replicatedJobs"]:
        replicas = rj.get("replicas", 1)
        job_name = f"{obj['metadata']['name']}-{rj['name']}-{max(replicas - 1, 0)}"
        completions = rj["template"]["spec"].get("completions", 1)
        pod_name = f"{job_name}-{max(completions - 1, 0)}-abcde"
        for name in (job_name, pod_name):
            if len(name) > 63 or not _DNS_1035.match(name):
                raise ValueError(f"generated name {name} is not a DNS-1035 label of <= 63")
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job_name, "namespace": obj["metadata"].get("namespace", "x")},
            **{k: v for k, v in rj["template"].items() if k != "metadata"},
        }
        job["metadata"]["labels"] = (rj["template"].get("metadata") or {}).get("labels", {})
        kubernetes_validate.validate(job, kubernetes_version, strict=True)
