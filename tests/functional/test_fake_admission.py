"""The fake API server refuses what kube-apiserver 1.36 refuses on write, and accepts the rest.

One test per rule of tests/fakes/kube_admission.py, each naming its upstream source, run
with the real `kubernetes` client (`Kube`) against the fake over HTTP; raw HTTP where the
answer's headers are the point.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from fakes import crds
from fakes.kube_admission import CHECKS, PodSecurityConfig
from fakes.kube_apiserver import ApiError, FakeKubeApiServer

DEPLOYMENTS = "/apis/apps/v1/namespaces/work/deployments"
PODS = "/api/v1/namespaces/work/pods"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NOW = "2026-11-27T21:00:00Z"
# A pod the restricted level admits (Pod Security Standards, "Restricted" at 1.36)
RESTRICTED_SPEC: dict[str, Any] = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "c",
            "image": "busybox",
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ],
}


@pytest.fixture
def work(kube: Kube) -> Kube:
    """`kube`, with the namespace `work` created."""
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "work"}})
    return kube


def deployment(name: str = "web", **spec: Any) -> dict:
    """A Deployment the server accepts, `spec` fields replaced."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "work"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
            **spec,
        },
    }


def pod(name: str = "p", spec: dict | None = None, **meta: Any) -> dict:
    """A Pod in `work` (a plain busybox container unless `spec` says otherwise)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "work", **meta},
        "spec": spec or {"containers": [{"name": "c", "image": "busybox"}]},
    }


def raw(api: FakeKubeApiServer, method: str, path: str, body: Any, ctype: str) -> tuple:
    """(status, decoded body, Warning headers) of one HTTP request to the fake."""
    request = urllib.request.Request(api.url + path, data=json.dumps(body).encode(), method=method)
    request.add_header("Content-Type", ctype)
    request.add_header("Authorization", "Bearer admin-token")  # kubeadm's admin
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read()), answer.headers.get_all("Warning")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers.get_all("Warning")


def label(kube: Kube, labels: dict[str, str | None]) -> None:
    """Set (None: remove) labels of the namespace `work`."""
    kube.patch("v1", "Namespace", "work", {"metadata": {"labels": labels}})


# ---------------------------------------------------------------- decoding


def test_an_unknown_field_validation_directive_is_invalid(work: Kube):
    """Source: apimachinery pkg/apis/meta/v1/validation ValidateFieldValidation."""
    with pytest.raises(KubeError) as info:
        work.request("POST", DEPLOYMENTS, query={"fieldValidation": "Loud"}, body=deployment())
    assert (info.value.status, info.value.reason) == (422, "Invalid")
    assert info.value.message == (
        'CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Loud": '
        'supported values: "", "Ignore", "Strict", "Warn"'
    )
    work.request("POST", DEPLOYMENTS, query={"fieldValidation": "Strict"}, body=deployment())


def test_strict_field_validation_refuses_unknown_fields(work: Kube):
    """Source: apiserver handlers/create.go; a strict decoding error is a 400 naming each field."""
    manifest = deployment(paused=False, replica=2)
    manifest["spec"]["template"]["spec"]["containers"][0]["imagePolicy"] = "x"
    with pytest.raises(KubeError) as info:
        work.request("POST", DEPLOYMENTS, query={"fieldValidation": "Strict"}, body=manifest)
    assert (info.value.status, info.value.reason) == (400, "BadRequest")
    assert info.value.message == (
        'Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: '
        'unknown field "spec.template.spec.containers[0].imagePolicy", '
        'unknown field "spec.replica"'  # in the body's order: `replica` comes last
    )
    assert work.get("apps/v1", "Deployment", "web", "work") is None
    work.request("POST", DEPLOYMENTS, query={"fieldValidation": "Strict"}, body=deployment())


def test_unknown_fields_are_dropped_with_a_warning_by_default(kube_api: FakeKubeApiServer):
    """rest.go fieldValidation: Warn when absent; filters/warning.go: `299 - "..."`."""
    kube_api.put_object("/api/v1/namespaces/work", {"metadata": {"name": "work"}})
    status, created, warnings = raw(
        kube_api, "POST", DEPLOYMENTS, deployment(replica=2), "application/json"
    )
    assert status == 201
    assert "replica" not in created["spec"]
    assert warnings == ['299 - "unknown field \\"spec.replica\\""']
    assert kube_api.warnings == [("POST", DEPLOYMENTS, 'unknown field "spec.replica"')]


def test_ignore_drops_unknown_fields_silently(work: Kube, kube_api: FakeKubeApiServer):
    """create.go: Ignore decodes as if the fields were not there, without a warning."""
    created = work.request(
        "POST", DEPLOYMENTS, query={"fieldValidation": "Ignore"}, body=deployment(replica=2)
    )
    assert "replica" not in created["spec"]
    assert kube_api.warnings == []


def test_a_value_of_the_wrong_type_is_a_decoding_error(work: Kube):
    """rest.go transformDecodeError with sigs.k8s.io/json's UnmarshalTypeError."""
    with pytest.raises(KubeError) as info:
        work.create(deployment(replicas="2"))
    assert (info.value.status, info.value.reason) == (400, "BadRequest")
    assert info.value.message == (
        'Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal '
        "string into Go struct field DeploymentSpec.spec.replicas of type int32"
    )
    work.create(deployment(replicas=2))


def test_server_set_metadata_of_the_wrong_type_is_refused_in_a_body_seen_before(work: Kube):
    """The schema findings kept per body leave out uid, generation...: those are checked too."""
    work.create(deployment())  # the same body less its metadata.generation: kept clean
    work.delete("apps/v1", "Deployment", "web", "work")
    body = deployment()
    body["metadata"]["generation"] = "two"
    with pytest.raises(KubeError) as info:
        work.create(body)
    assert (info.value.status, info.value.reason) == (400, "BadRequest")
    assert "ObjectMeta.metadata.generation of type int64" in info.value.message


def test_a_merge_patch_that_breaks_the_type_is_invalid(work: Kube):
    """patch.go jsonPatcher: the patched object fails decoding, 422 on the field `patch`."""
    work.create(deployment())
    with pytest.raises(KubeError) as info:
        work.patch("apps/v1", "Deployment", "web", {"spec": {"replicas": "many"}}, "work")
    assert (info.value.status, info.value.reason) == (422, "Invalid")
    assert info.value.message.startswith(' "" is invalid: patch: Invalid value: "{')
    assert info.value.message.endswith(
        "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of "
        "type int32"
    )
    patched = work.patch("apps/v1", "Deployment", "web", {"spec": {"replicas": 3}}, "work")
    assert patched["spec"]["replicas"] == 3


def test_server_side_apply_refuses_undeclared_fields_whatever_the_directive(work: Kube):
    """structured-merge-diff typed/validate.go via managedfields structuredmerge.go: a 500."""
    path = f"{DEPLOYMENTS}/web"
    for directive in ("Ignore", "Warn", "Strict"):
        with pytest.raises(KubeError) as info:
            work.request(
                "PATCH",
                path,
                query={"fieldManager": "t", "fieldValidation": directive},
                body=deployment(replica=2),
                content_type="application/apply-patch+yaml",
            )
        assert (info.value.status, info.value.message) == (
            500,
            "failed to create typed patch object (work/web; apps/v1, Kind=Deployment): "
            ".spec.replica: field not declared in schema",
        )
    assert work.apply(deployment(), field_manager="t")["spec"]["replicas"] == 1


def test_a_missing_required_field_is_invalid(work: Kube):
    """pkg/api/errors NewInvalid: `Deployment.apps "x" is invalid: <path>: Required value`."""
    manifest = deployment()
    del manifest["spec"]["selector"]
    del manifest["spec"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(KubeError) as info:
        work.create(manifest)
    assert (info.value.status, info.value.reason) == (422, "Invalid")
    assert info.value.message == (
        'Deployment.apps "web" is invalid: [spec.selector: Required value, '
        "spec.template.spec.containers[0].name: Required value]"
    )


def test_an_invalid_answer_lists_each_cause(kube_api: FakeKubeApiServer):
    """metav1.Status details: group, kind, name and a cause per field error."""
    kube_api.put_object("/api/v1/namespaces/work", {"metadata": {"name": "work"}})
    manifest = deployment()
    del manifest["spec"]["selector"]
    status, body, _ = raw(kube_api, "POST", DEPLOYMENTS, manifest, "application/json")
    assert status == 422
    assert body["details"] == {
        "name": "web",
        "group": "apps",
        "kind": "Deployment",
        "causes": [
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.selector"}
        ],
    }


# ---------------------------------------------------------------- custom resources


def widget_crd(schema: dict) -> dict:
    """A CRD for example.io/v1 Widgets with the given openAPIV3Schema."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.io"},
        "spec": {
            "group": "example.io",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


WIDGET_SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "color": {"type": "string", "enum": ["red", "blue"]},
                "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "port": {"x-kubernetes-int-or-string": True},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
    },
}


def widget(**spec: Any) -> dict:
    """A Widget in `work`."""
    return {
        "apiVersion": "example.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "work"},
        "spec": spec,
    }


@pytest.fixture
def widgets(work: Kube) -> Kube:
    """`work`, with the Widget CRD installed."""
    work.kinds[("example.io/v1", "Widget")] = ("widgets", True)
    work.create(widget_crd(WIDGET_SCHEMA))
    return work


def test_the_real_kueue_and_jobset_crds_apply_server_side(kube: Kube):
    """What the control plane does with the releases' CRDs (`kubectl apply --server-side`).

    Their schemas nest `additionalProperties: {type: string}` and `items` schemas, which the
    CRD kind's own schema leaves untyped (JSONSchemaPropsOrBool, JSONSchemaPropsOrArray):
    structured-merge-diff takes any value there (kube-openapi pkg/schemaconv's
    `__untyped_deduced_`), where the fake once answered 500 "field not declared in schema".
    """
    for name in (crds.JOBSET, *crds.KUEUE):
        applied = kube.apply(crds.crd(name), field_manager="kubectl")
        assert applied["spec"]["versions"] == crds.crd(name)["spec"]["versions"]


def test_a_crd_schema_must_be_structural(work: Kube):
    """apiextensions-apiserver pkg/apiserver/schema/validation.go: a type at each node."""
    schema = {"type": "object", "properties": {"spec": {"properties": {"size": {}}}}}
    with pytest.raises(KubeError) as info:
        work.create(widget_crd(schema))
    assert (info.value.status, info.value.reason) == (422, "Invalid")
    assert info.value.message == (
        'CustomResourceDefinition.apiextensions.k8s.io "widgets.example.io" is invalid: ['
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type: "
        "Required value: must not be empty for specified object fields, "
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: "
        "Required value: must not be empty for specified object fields]"
    )
    root = {"type": "array", "items": {"type": "string"}}
    with pytest.raises(KubeError) as info:
        work.create(widget_crd(root))
    assert 'openAPIV3Schema.type: Invalid value: "array": must be object at the root' in (
        info.value.message
    )
    work.create(widget_crd(WIDGET_SCHEMA))


def test_undeclared_fields_of_a_custom_resource_are_pruned(
    widgets: Kube, kube_api: FakeKubeApiServer
):
    """schema/pruning/algorithm.go; preserved where x-kubernetes-preserve-unknown-fields."""
    created = widgets.create(widget(size=2, shape="round", extra={"anything": [1]}))
    assert created["spec"] == {"size": 2, "extra": {"anything": [1]}}
    assert [w for _, _, w in kube_api.warnings] == ['unknown field "spec.shape"']
    with pytest.raises(KubeError) as info:
        widgets.request(
            "POST",
            "/apis/example.io/v1/namespaces/work/widgets",
            query={"fieldValidation": "Strict"},
            body={**widget(size=2, shape="round"), "metadata": {"name": "v"}},
        )
    assert (info.value.status, info.value.message) == (
        400,
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: '
        'unknown field "spec.shape"',
    )


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (
            {"size": "two"},
            'spec.size: Invalid value: "string": spec.size in body must be of type integer: '
            '"string"',
        ),
        ({}, "spec.size: Required value"),
        (
            {"size": 0},
            "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
        ),
        (
            {"size": 11},
            "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10",
        ),
        (
            {"size": 1, "color": "green"},
            'spec.color: Unsupported value: "green": supported values: "red", "blue"',
        ),
        (
            {"size": 1, "name": "Bad"},
            "spec.name: Invalid value: \"Bad\": spec.name in body should match '^[a-z]+$'",
        ),
        ({"size": 1, "name": "abcdefghi"}, "spec.name: Too long: may not be more than 8 bytes"),
        (
            {"size": 1, "tags": ["a", "b", "c"]},
            "spec.tags: Too many: 3: must have at most 2 items",
        ),
        (
            {"size": 1, "port": True},
            'spec.port: Invalid value: "boolean": spec.port in body must be of type '
            'integer,string: "boolean"',
        ),
    ],
    ids=[
        "type",
        "required",
        "minimum",
        "maximum",
        "enum",
        "pattern",
        "maxLength",
        "maxItems",
        "int-or-string",
    ],
)
def test_a_custom_resource_is_validated_against_its_schema(widgets: Kube, spec: dict, error: str):
    """Custom resources are checked with kube-openapi, answered as field errors.

    Sources: apiextensions-apiserver pkg/apiserver/validation/validation.go
    kubeOpenAPIResultToFieldErrors, kube-openapi pkg/validation/errors/schema.go.
    """
    with pytest.raises(KubeError) as info:
        widgets.create(widget(**spec))
    assert (info.value.status, info.value.message) == (
        422,
        f'Widget.example.io "w" is invalid: {error}',
    )
    widgets.create(widget(size=1, color="red", name="ok", tags=["a"], port="http"))


def test_server_side_apply_of_a_custom_resource_refuses_undeclared_fields(widgets: Kube):
    """structured-merge-diff types an applied custom resource with its CRD's schema too."""
    with pytest.raises(KubeError) as info:
        widgets.apply(widget(size=1, shape="round"), field_manager="t")
    assert (info.value.status, info.value.message) == (
        500,
        "failed to create typed patch object (work/w; example.io/v1, Kind=Widget): "
        ".spec.shape: field not declared in schema",
    )
    assert widgets.apply(widget(size=1, extra={"x": 1}), field_manager="t")["spec"]["size"] == 1


# ---------------------------------------------------------------- PodSecurity


def test_a_namespace_with_an_invalid_pod_security_label_is_invalid(work: Kube):
    """pod-security-admission admission.go ValidateNamespace, api/helpers.go ParseLevel."""
    with pytest.raises(KubeError) as info:
        label(work, {"pod-security.kubernetes.io/enforce": "strict"})
    assert (info.value.status, info.value.message) == (
        422,
        'Namespace "work" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: '
        'Invalid value: "strict": must be one of privileged, baseline, restricted',
    )
    with pytest.raises(KubeError) as info:
        label(work, {"pod-security.kubernetes.io/warn-version": "1.30"})
    assert info.value.message.endswith('Invalid value: "1.30": must be "latest" or "v1.x"')
    label(work, {"pod-security.kubernetes.io/enforce": "baseline"})


def test_without_labels_every_pod_is_admitted(work: Kube, kube_api: FakeKubeApiServer):
    """admission/api/v1/defaults.go: privileged:latest for every mode (our kubeadm setup)."""
    spec = {"hostNetwork": True, "containers": [{"name": "c", "image": "busybox"}]}
    work.create(pod(spec=spec))
    assert kube_api.warnings == []
    assert kube_api.admission.audit[-1] == {
        "pod-security.kubernetes.io/enforce-policy": "privileged:latest"
    }


def test_enforce_restricted_refuses_a_plain_pod_with_every_reason(work: Kube):
    """admission.go EvaluatePod and response.go forbiddenResponse; the checks in order."""
    label(work, {"pod-security.kubernetes.io/enforce": "restricted"})
    with pytest.raises(KubeError) as info:
        work.create(pod())
    assert (info.value.status, info.value.reason) == (403, "Forbidden")
    assert info.value.message == (
        'pods "p" is forbidden: violates PodSecurity "restricted:latest": '
        "allowPrivilegeEscalation != false "
        '(container "c" must set securityContext.allowPrivilegeEscalation=false), '
        'unrestricted capabilities (container "c" must set '
        'securityContext.capabilities.drop=["ALL"]), '
        'runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to '
        '"RuntimeDefault" or "Localhost")'
    )
    assert work.create(pod(spec=RESTRICTED_SPEC))["metadata"]["name"] == "p"


def with_container(**security: Any) -> dict:
    return {"containers": [{"name": "c", "image": "busybox", "securityContext": security}]}


BASELINE_VIOLATIONS = {  # check ID -> (pod spec, metadata, ForbiddenReason (ForbiddenDetail))
    "privileged": (
        with_container(privileged=True),
        {},
        'privileged (container "c" must not set securityContext.privileged=true)',
    ),
    "hostNamespaces": (
        {"hostPID": True, "hostIPC": True, **with_container()},
        {},
        "host namespaces (hostPID=true, hostIPC=true)",
    ),
    "hostPathVolumes": (
        {"volumes": [{"name": "root", "hostPath": {"path": "/"}}], **with_container()},
        {},
        'hostPath volumes (volume "root")',
    ),
    "hostPorts": (
        {
            "containers": [
                {"name": "c", "image": "b", "ports": [{"containerPort": 80, "hostPort": 8080}]}
            ]
        },
        {},
        'hostPort (container "c" uses hostPort 8080)',
    ),
    "capabilities_baseline": (
        with_container(capabilities={"add": ["SYS_ADMIN", "CHOWN"]}),
        {},
        'non-default capabilities (container "c" must not include "SYS_ADMIN" in '
        "securityContext.capabilities.add)",
    ),
    "appArmorProfile": (
        {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}, **with_container()},
        {},
        'forbidden AppArmor profile (pod must not set AppArmor profile type to "Unconfined")',
    ),
    "seLinuxOptions": (
        with_container(seLinuxOptions={"type": "spc_t", "user": "root"}),
        {},
        'seLinuxOptions (container "c" set forbidden securityContext.seLinuxOptions: '
        'type "spc_t"; user may not be set)',
    ),
    "procMount": (
        with_container(procMount="Unmasked"),
        {},
        'procMount (container "c" must not set securityContext.procMount to "Unmasked")',
    ),
    "seccompProfile_baseline": (
        {"securityContext": {"seccompProfile": {"type": "Unconfined"}}, **with_container()},
        {},
        'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")',
    ),
    "sysctls": (
        {
            "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
            **with_container(),
        },
        {},
        "forbidden sysctls (kernel.msgmax)",
    ),
    "windowsHostProcess": (
        with_container(windowsOptions={"hostProcess": True}),
        {},
        'hostProcess (container "c" must not set securityContext.windowsOptions.hostProcess=true)',
    ),
    "hostProbesAndHostLifecycle": (
        {
            "containers": [
                {
                    "name": "c",
                    "image": "b",
                    "livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}},
                }
            ]
        },
        {},
        'probe or lifecycle host (container "c" uses probe or lifecycle host "10.0.0.1")',
    ),
}


def test_every_baseline_check_has_a_violation_here():
    """The table below covers each baseline check of pod-security-admission policy/."""
    assert set(BASELINE_VIOLATIONS) == {c.id for c in CHECKS if c.level == "baseline"}


@pytest.mark.parametrize("check", sorted(BASELINE_VIOLATIONS))
def test_enforce_baseline_refuses_each_violation(work: Kube, check: str):
    """pod-security-admission policy/check_<id>.go, each at baseline:latest."""
    spec, meta, reason = BASELINE_VIOLATIONS[check]
    label(work, {"pod-security.kubernetes.io/enforce": "baseline"})
    with pytest.raises(KubeError) as info:
        work.create(pod(spec=spec, **meta))
    assert (info.value.status, info.value.message) == (
        403,
        f'pods "p" is forbidden: violates PodSecurity "baseline:latest": {reason}',
    )
    work.create(pod())  # baseline admits a plain pod


def restricted_with(change: str) -> dict:
    """RESTRICTED_SPEC broken in one way."""
    spec = json.loads(json.dumps(RESTRICTED_SPEC))
    container = spec["containers"][0]
    if change == "allowPrivilegeEscalation":
        del container["securityContext"]["allowPrivilegeEscalation"]
    elif change == "capabilities_restricted":
        container["securityContext"]["capabilities"]["add"] = ["CHOWN"]
    elif change == "runAsNonRoot":
        spec["securityContext"]["runAsNonRoot"] = False
    elif change == "runAsUser":
        spec["securityContext"]["runAsUser"] = 0
    elif change == "seccompProfile_restricted":
        del spec["securityContext"]["seccompProfile"]
    elif change == "restrictedVolumes":
        spec["volumes"] = [{"name": "n", "nfs": {"server": "nfs", "path": "/"}}]
    elif change == "procMount_restricted":
        spec["hostUsers"] = False
        container["securityContext"]["procMount"] = "Unmasked"
    return spec


RESTRICTED_VIOLATIONS = {
    "allowPrivilegeEscalation": 'allowPrivilegeEscalation != false (container "c" must set '
    "securityContext.allowPrivilegeEscalation=false)",
    "capabilities_restricted": 'unrestricted capabilities (container "c" must not include '
    '"CHOWN" in securityContext.capabilities.add)',
    "runAsNonRoot": "runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)",
    "runAsUser": "runAsUser=0 (pod must not set runAsUser=0)",
    "seccompProfile_restricted": 'seccompProfile (pod or container "c" must set '
    'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
    "restrictedVolumes": 'restricted volume types (volume "n" uses restricted volume type "nfs")',
    "procMount_restricted": 'procMount (container "c" must not set securityContext.procMount '
    'to "Unmasked")',
}


def test_every_restricted_check_has_a_violation_here():
    """The table covers each restricted check of pod-security-admission policy/."""
    assert set(RESTRICTED_VIOLATIONS) == {c.id for c in CHECKS if c.level == "restricted"}


@pytest.mark.parametrize("check", sorted(RESTRICTED_VIOLATIONS))
def test_enforce_restricted_refuses_each_violation(work: Kube, check: str):
    """pod-security-admission policy/check_<id>.go, each at restricted:latest."""
    label(work, {"pod-security.kubernetes.io/enforce": "restricted"})
    with pytest.raises(KubeError) as info:
        work.create(pod(spec=restricted_with(check)))
    assert (info.value.status, info.value.message) == (
        403,
        'pods "p" is forbidden: violates PodSecurity "restricted:latest": '
        f"{RESTRICTED_VIOLATIONS[check]}",
    )


def test_a_user_namespace_relaxes_baseline_but_not_restricted(work: Kube):
    """check_procMount_baseline.go 1.35: hostUsers=false allows procMount at baseline only."""
    label(work, {"pod-security.kubernetes.io/enforce": "baseline"})
    work.create(pod(spec=restricted_with("procMount_restricted")))


def test_the_policy_version_picks_the_checks_of_that_release(work: Kube):
    """check_hostProbesAndhostLifecycle.go exists from 1.34: v1.33 admits a probe host."""
    spec, meta, _ = BASELINE_VIOLATIONS["hostProbesAndHostLifecycle"]
    label(
        work,
        {
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/enforce-version": "v1.33",
        },
    )
    work.create(pod(spec=spec, **meta))
    label(work, {"pod-security.kubernetes.io/enforce-version": "v1.34"})
    with pytest.raises(KubeError) as info:
        work.create(pod("q", spec=spec, **meta))
    assert 'violates PodSecurity "baseline:v1.34": probe or lifecycle host' in info.value.message


def test_warn_answers_a_warning_and_admits_the_pod(kube_api: FakeKubeApiServer):
    """admission.go EvaluatePod: warn mode adds `would violate PodSecurity ...` warnings."""
    kube_api.put_object(
        "/api/v1/namespaces/work",
        {"metadata": {"name": "work", "labels": {"pod-security.kubernetes.io/warn": "baseline"}}},
    )
    spec = {"hostNetwork": True, "containers": [{"name": "c", "image": "busybox"}]}
    status, _, warnings = raw(kube_api, "POST", PODS, pod(spec=spec), "application/json")
    assert status == 201
    assert warnings == [
        '299 - "would violate PodSecurity \\"baseline:latest\\": host namespaces '
        '(hostNetwork=true)"'
    ]


def test_warn_follows_a_stricter_enforce_level(work: Kube, kube_api: FakeKubeApiServer):
    """api/helpers.go PolicyToEvaluate: without a warn label, warn takes enforce's level."""
    label(work, {"pod-security.kubernetes.io/enforce": "baseline"})
    spec = {"hostNetwork": True, "containers": [{"name": "c", "image": "busybox"}]}
    work.create(deployment(template={"metadata": {"labels": {"app": "web"}}, "spec": spec}))
    assert [w for _, _, w in kube_api.warnings] == [
        'would violate PodSecurity "baseline:latest": host namespaces (hostNetwork=true)'
    ]


def test_pod_templates_are_warned_and_audited_never_enforced(
    work: Kube, kube_api: FakeKubeApiServer
):
    """admission.go ValidatePodController: enforce is for pods; templates get warn and audit."""
    label(
        work,
        {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/warn": "restricted",
            "pod-security.kubernetes.io/audit": "baseline",
        },
    )
    spec = {"hostNetwork": True, "containers": [{"name": "c", "image": "busybox"}]}
    template = {"metadata": {"labels": {"app": "web"}}, "spec": spec}
    work.create(deployment(template=template))
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "work"},
        "spec": {"template": {"spec": {**spec, "restartPolicy": "Never"}}},
    }
    work.create(job)
    warned = [(p, w.split(":")[0]) for _, p, w in kube_api.warnings]
    assert warned == [
        (DEPLOYMENTS, 'would violate PodSecurity "restricted'),
        ("/apis/batch/v1/namespaces/work/jobs", 'would violate PodSecurity "restricted'),
    ]
    assert kube_api.admission.audit[-1] == {
        "pod-security.kubernetes.io/audit-violations": "would violate PodSecurity "
        '"baseline:latest": host namespaces (hostNetwork=true)'
    }


def test_a_pod_update_is_checked_only_when_an_image_changes(work: Kube):
    """admission.go isSignificantPodUpdate: labels may change on a pod the policy refuses."""
    work.create(pod())
    label(work, {"pod-security.kubernetes.io/enforce": "restricted"})
    work.patch("v1", "Pod", "p", {"metadata": {"labels": {"a": "b"}}}, "work")
    work.patch("v1", "Pod", "p", {"status": {"phase": "Running"}}, "work", subresource="status")
    image = {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}}
    with pytest.raises(KubeError) as info:
        work.patch("v1", "Pod", "p", image, "work")
    assert info.value.status == 403


def test_raising_enforce_warns_about_the_pods_already_there(
    work: Kube, kube_api: FakeKubeApiServer
):
    """admission.go EvaluatePodsInNamespace: one warning per distinct violation."""
    for name in ("a", "b", "c"):
        work.create(pod(name))
    label(work, {"pod-security.kubernetes.io/enforce": "baseline"})
    assert kube_api.warnings == []
    label(work, {"pod-security.kubernetes.io/enforce": "restricted"})
    assert [w for _, _, w in kube_api.warnings] == [
        'existing pods in namespace "work" violate the new PodSecurity enforce level '
        '"restricted:latest"',
        "a (and 2 other pods): allowPrivilegeEscalation != false, unrestricted capabilities, "
        "runAsNonRoot != true, seccompProfile",
    ]


def test_exempt_namespaces_and_runtime_classes_are_not_checked(
    work: Kube, kube_api: FakeKubeApiServer
):
    """PodSecurityConfiguration exemptions (none in our kubeadm setup, so only by asking)."""
    label(work, {"pod-security.kubernetes.io/enforce": "restricted"})
    kube_api.admission.pod_security.config = PodSecurityConfig(exempt_runtime_classes=("kata",))
    work.create(pod(spec={"runtimeClassName": "kata", **pod()["spec"]}))
    assert kube_api.admission.audit[-1] == {"pod-security.kubernetes.io/exempt": "runtimeClass"}
    kube_api.admission.pod_security.config = PodSecurityConfig(exempt_namespaces=("work",))
    work.create(pod("q"))
    assert kube_api.admission.audit[-1] == {"pod-security.kubernetes.io/exempt": "namespace"}


# ---------------------------------------------------------------- DenyServiceExternalIPs


def test_external_ips_are_refused_new_and_kept_on_update(kube_api: FakeKubeApiServer):
    """DenyServiceExternalIPs, which our kubeadm config enables.

    plugin/pkg/admission/network/denyserviceexternalips/admission.go: new externalIPs are
    Forbidden; an update keeping a subset of the old ones passes (isSubset), as does a
    Service without any.
    """
    kube_api.put_object("/api/v1/namespaces/work", {"metadata": {"name": "work"}})
    services = "/api/v1/namespaces/work/services"
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "steal"},
        "spec": {"ports": [{"port": 443}], "externalIPs": ["10.96.0.1"]},
    }
    status, body, _ = raw(kube_api, "POST", services, service, "application/json")
    assert (status, body["reason"], body["message"]) == (
        403,
        "Forbidden",
        'services "steal" is forbidden: Use of external IPs is denied by admission control',
    )
    del service["spec"]["externalIPs"]
    assert raw(kube_api, "POST", services, service, "application/json")[0] == 201
    # one a component stored before (put_object is the cluster's own): an update may keep it
    kept = {**service, "spec": {"ports": [{"port": 443}], "externalIPs": ["192.0.2.1"]}}
    kube_api.put_object(f"{services}/kept", {**kept, "metadata": {"name": "kept"}})
    kept["metadata"] = {"name": "kept"}
    assert raw(kube_api, "PUT", f"{services}/kept", kept, "application/json")[0] == 200
    kept["spec"]["externalIPs"] = ["192.0.2.1", "192.0.2.2"]
    assert raw(kube_api, "PUT", f"{services}/kept", kept, "application/json")[0] == 403


def test_without_deny_service_external_ips_they_are_stored(kube_api: FakeKubeApiServer):
    """A cluster bootstrapped before the plugin was in kubeadm's config: nothing refuses them.

    (literals.ADMISSION_PLUGINS: kubeadm keeps the apiServer extraArgs it bootstrapped
    with); the control plane's own policy (gpu-k8s-consumer-services-no-external-ips) is
    what refuses them in a team's namespace there.
    """
    kube_api.deny_service_external_ips = False
    kube_api.put_object("/api/v1/namespaces/work", {"metadata": {"name": "work"}})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "steal"},
        "spec": {"ports": [{"port": 443}], "externalIPs": ["10.96.0.1"]},
    }
    services = "/api/v1/namespaces/work/services"
    assert raw(kube_api, "POST", services, service, "application/json")[0] == 201


# ---------------------------------------------------------------- ResourceQuota


QUOTAS = "/api/v1/namespaces/work/resourcequotas"
CONFIGMAPS = "/api/v1/namespaces/work/configmaps"


def _quota(hard: dict[str, str], name: str = "counts") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name},
        "spec": {"hard": hard},
    }


def _configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}


def test_an_object_count_quota_refuses_the_create_past_it(kube_api: FakeKubeApiServer, work: Kube):
    """controller.go CheckRequest: used + 1 past hard is 403, with the plugin's message.

    Its status says what is used (the quota controller's job), the legacy name and
    count/configmaps.. both count a ConfigMap (registry.go legacyObjectCountAliases), a
    delete frees its count at once, and updates are not counted (objectCountEvaluator
    .Handles: Create only).
    """
    hard = {"configmaps": "2", "count/secrets": "5"}
    assert raw(kube_api, "POST", QUOTAS, _quota(hard), "application/json")[0] == 201
    quota = kube_api.get_object(f"{QUOTAS}/counts")
    assert quota["status"] == {"hard": hard, "used": {"configmaps": "0", "count/secrets": "0"}}
    for name in ("a", "b"):
        assert raw(kube_api, "POST", CONFIGMAPS, _configmap(name), "application/json")[0] == 201
    status, body, _ = raw(kube_api, "POST", CONFIGMAPS, _configmap("c"), "application/json")
    assert (status, body["reason"], body["message"]) == (
        403,
        "Forbidden",
        'configmaps "c" is forbidden: exceeded quota: counts, requested: configmaps=1, used:'
        " configmaps=2, limited: configmaps=2",
    )
    assert body["details"] == {"name": "c", "kind": "configmaps"}
    # an update is no create: not counted
    changed = {**_configmap("a"), "data": {"k": "v"}}
    assert raw(kube_api, "PUT", f"{CONFIGMAPS}/a", changed, "application/json")[0] == 200
    # nor server-side apply of one that exists; one that creates is refused
    work.apply(
        {**_configmap("b"), "metadata": {"name": "b", "namespace": "work"}}, field_manager="t"
    )
    with pytest.raises(KubeError) as refused:
        work.apply(
            {**_configmap("c"), "metadata": {"name": "c", "namespace": "work"}}, field_manager="t"
        )
    assert refused.value.status == 403
    assert kube_api.get_object(f"{QUOTAS}/counts")["status"]["used"]["configmaps"] == "2"
    work.delete("v1", "ConfigMap", "a", "work")
    assert kube_api.get_object(f"{QUOTAS}/counts")["status"]["used"]["configmaps"] == "1"
    assert raw(kube_api, "POST", CONFIGMAPS, _configmap("c"), "application/json")[0] == 201


def test_a_quota_counts_every_group_and_never_events(kube_api: FakeKubeApiServer, work: Kube):
    """count/<resource>.<group> counts any resource (ObjectCountQuotaResourceNameFor).

    `pods` counts live pods, count/pods every pod (pods.go); Events are never counted
    (install/registry.go ignoredResources), nor writes in another namespace.
    """
    hard = {"count/jobs.batch": "1", "pods": "1", "count/pods": "2", "count/events": "0"}
    work.create({**_quota(hard), "metadata": {"name": "counts", "namespace": "work"}})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "work"},
        "spec": {"template": {"spec": {**pod()["spec"], "restartPolicy": "Never"}}},
    }
    work.create(job)
    with pytest.raises(KubeError) as refused:  # the resource qualified by its group
        work.create({**job, "metadata": {"name": "k", "namespace": "work"}})
    assert refused.value.message.startswith(
        'jobs.batch "k" is forbidden: exceeded quota: counts, requested: count/jobs.batch=1,'
    )
    work.create(pod("p"))
    with pytest.raises(KubeError, match="requested: pods=1, used: pods=1, limited: pods=1"):
        work.create(pod("q"))
    kube_api.put_object(f"{PODS}/p", {**pod("p"), "status": {"phase": "Succeeded"}})
    used = kube_api.get_object(f"{QUOTAS}/counts")["status"]["used"]
    assert (used["pods"], used["count/pods"]) == ("0", "1")
    work.create(pod("q"))  # a finished pod is no longer a live one
    with pytest.raises(KubeError) as refused:  # every name it exceeds, sorted
        work.create(pod("r"))
    assert refused.value.message.endswith(
        "exceeded quota: counts, requested: count/pods=1,pods=1, used: count/pods=2,pods=1,"
        " limited: count/pods=2,pods=1"
    )
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e", "namespace": "work"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "work"},
        "reason": "Seen",
        "message": "seen",
    }
    work.create(event)
    work.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    work.create({**_configmap("x"), "metadata": {"name": "x", "namespace": "other"}})
    assert kube_api.get_object(f"{QUOTAS}/counts")["status"]["used"]["count/events"] == "0"


def test_a_quota_beyond_object_counts_is_not_modelled(kube_api: FakeKubeApiServer, work: Kube):
    """Compute resources and scopes are answered 500: no test may rely on them here."""
    status, body, _ = raw(
        kube_api, "POST", QUOTAS, _quota({"requests.cpu": "4"}), "application/json"
    )
    assert (status, body["reason"]) == (500, "InternalError")
    assert "models only object counts" in body["message"]
    with pytest.raises(ApiError, match="models only object counts"):
        kube_api.put_object(f"{QUOTAS}/q", _quota({"pods": "1.5"}))


# ---------------------------------------------------------------- Priority


def test_a_pod_gets_the_priority_of_its_class_in_any_namespace(work: Kube):
    """priority/admission.go admitPod; the system classes exist from the start.

    Since 1.17 a system class is not kept to kube-system (kubernetes/kubernetes#60596).
    """
    classes = work.list("scheduling.k8s.io/v1", "PriorityClass")
    assert {c["metadata"]["name"]: c["value"] for c in classes} == {
        "system-cluster-critical": 2000000000,
        "system-node-critical": 2000001000,
    }
    spec = {"containers": [{"name": "c", "image": "busybox"}]}
    made = work.create(pod("critical", {**spec, "priorityClassName": "system-node-critical"}))
    assert (made["spec"]["priority"], made["spec"]["preemptionPolicy"]) == (
        2000001000,
        "PreemptLowerPriority",
    )
    plain = work.create(pod("plain"))  # no class, no global default: 0
    assert (plain["spec"]["priority"], plain["spec"].get("priorityClassName")) == (0, None)
    # an update that leaves the priority out keeps it (admitPod on UPDATE)
    plain["spec"].pop("priority")
    plain["metadata"]["labels"] = {"seen": "yes"}
    assert work.request("PUT", f"{PODS}/plain", body=plain)["spec"]["priority"] == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"priorityClassName": "mine-first"},
            'pods "p" is forbidden: no PriorityClass with name mine-first was found',
        ),
        (
            {"priority": 1000000},
            'pods "p" is forbidden: the integer value of priority (1000000) must not be'
            " provided in pod spec; priority admission controller computed 0 from the given"
            " PriorityClass name",
        ),
        (
            {"priorityClassName": "system-cluster-critical", "preemptionPolicy": "Never"},
            'pods "p" is forbidden: the string value of PreemptionPolicy (Never) must not be'
            " provided in pod spec; priority admission controller computed"
            " PreemptLowerPriority from the given PriorityClass name",
        ),
    ],
    ids=["unknown-class", "own-priority", "own-preemption-policy"],
)
def test_the_priority_plugin_refuses_what_it_cannot_compute(work: Kube, spec: dict, message):
    """priority/admission.go admitPod: admission.NewForbidden, 403."""
    body = pod()
    body["spec"].update(spec)
    with pytest.raises(KubeError) as info:
        work.create(body)
    assert (info.value.status, info.value.reason, info.value.message) == (
        403,
        "Forbidden",
        message,
    )


def test_the_global_default_class_names_a_pod_that_names_none(work: Kube):
    """admission.go getDefaultPriorityClass: the globalDefault class of lowest value."""
    for name, value in (("high", 100), ("low", 10)):
        work.create(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "globalDefault": True,
            }
        )
    made = work.create(pod(spec={"containers": [{"name": "c", "image": "busybox"}]}))
    assert (made["spec"]["priorityClassName"], made["spec"]["priority"]) == ("low", 10)
    made = work.create(pod("same", spec={**made["spec"], "priority": 10}))  # equal: admitted
    assert made["spec"]["priority"] == 10


# ---------------------------------------------------------------- seeds (put_object)


def seed_refusal(api: FakeKubeApiServer, path: str, obj: dict) -> tuple[int, str, str]:
    """(code, reason, message) of the ApiError `put_object` raises; nothing is stored."""
    with pytest.raises(ApiError) as info:
        api.put_object(path, obj)
    assert api.get_object(path) is None
    return info.value.code, info.value.reason, info.value.message


def test_a_seed_is_decoded_strictly_and_validated_as_a_create(kube_api: FakeKubeApiServer):
    """put_object refuses what a create with fieldValidation=Strict is refused for.

    A seed is the test setting the world up: were it invalid, the charm would be tested
    against a world no cluster holds. Decoding as handlers/create.go (strict: 400, each
    undeclared field; a wrong type: 400), then the strategy's validation (422: required
    fields, kube_enums.py's values).
    """
    kube_api.put_object("/api/v1/namespaces/work", {"metadata": {"name": "work"}})
    path = f"{DEPLOYMENTS}/web"
    assert seed_refusal(kube_api, path, deployment(replica=2)) == (
        400,
        "BadRequest",
        'Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: '
        'unknown field "spec.replica"',
    )
    assert seed_refusal(kube_api, path, deployment(replicas="2"))[:2] == (400, "BadRequest")
    no_selector = deployment()
    del no_selector["spec"]["selector"]
    assert seed_refusal(kube_api, path, no_selector) == (
        422,
        "Invalid",
        'Deployment.apps "web" is invalid: spec.selector: Required value',
    )
    tcp = pod(spec={"containers": [{"name": "c", "image": "b", "ports": [{"containerPort": 80}]}]})
    tcp["spec"]["containers"][0]["ports"][0]["protocol"] = "tcp"
    assert seed_refusal(kube_api, f"{PODS}/p", tcp) == (
        422,
        "Invalid",
        'Pod "p" is invalid: spec.containers[0].ports[0].protocol: Unsupported value: "tcp": '
        'supported values: "SCTP", "TCP", "UDP"',
    )
    kube_api.put_object(path, deployment())  # a valid one is stored


def test_a_seeds_kind_must_be_its_paths(kube_api: FakeKubeApiServer):
    """The body's apiVersion and kind are the path's, as a create's must be.

    Its name and namespace are the path's: put_object sets them.
    """
    kube_api.put_object("/api/v1/namespaces/work", {"metadata": {"name": "work"}})
    assert seed_refusal(kube_api, f"{PODS}/p", deployment()) == (
        400,
        "BadRequest",
        "the API version in the data (apps/v1) and kind (Deployment) do not match v1 Pod",
    )
    assert kube_api.put_object(f"{PODS}/q", pod())["metadata"]["name"] == "q"


def test_a_seeds_status_is_checked_against_its_schema(kube_api: FakeKubeApiServer):
    """Status is what tests seed most: its fields' types and names as the schema declares.

    A built-in kind's status against kubernetes-validate's 1.36 schema; a custom resource's
    against its CRD's status schema (JobSet v0.12.0: a condition needs its five fields, its
    status is True, False or Unknown).
    """
    kube_api.put_object("/api/v1/namespaces/work", {"metadata": {"name": "work"}})
    running = {**pod(), "status": {"phase": "Running", "podIPs": "10.0.0.1"}}
    assert seed_refusal(kube_api, f"{PODS}/p", running)[:2] == (400, "BadRequest")
    running["status"] = {"phase": "Running", "ready": True}
    assert seed_refusal(kube_api, f"{PODS}/p", running)[2].endswith(
        'strict decoding error: unknown field "status.ready"'
    )
    running["status"] = {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}]}
    assert kube_api.put_object(f"{PODS}/p", running)["status"] == running["status"]
    kube_api.put_shared(f"{CRDS}/{crds.JOBSET}", crds.shared(crds.JOBSET))
    spec = {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {}}}]}
    spec["replicatedJobs"][0]["template"]["spec"]["template"] = {
        "spec": {"containers": [{"name": "c", "image": "b"}]}
    }
    jobsets = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/work/jobsets"
    done = {"type": "Completed", "status": "Yes", "reason": "AllJobsCompleted"}
    code, reason, message = seed_refusal(
        kube_api, f"{jobsets}/js", {"spec": spec, "status": {"conditions": [done]}}
    )
    assert (code, reason) == (422, "Invalid")
    assert message == (
        'JobSet.jobset.x-k8s.io "js" is invalid: ['
        "status.conditions[0].lastTransitionTime: Required value, "
        "status.conditions[0].message: Required value, "
        'status.conditions[0].status: Unsupported value: "Yes": '
        'supported values: "True", "False", "Unknown", '
        '<nil>: Invalid value: "null": some validation rules were not checked because the '
        "object was invalid; correct the existing errors to complete validation]"
    )
    done.update(status="True", message="jobset completed", lastTransitionTime=NOW)
    kube_api.put_object(f"{jobsets}/js", {"spec": spec, "status": {"conditions": [done]}})
