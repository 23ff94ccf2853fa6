"""The mirror-pod annotation's rules in kube-apiserver 1.36's pod validation.

Source: kubernetes/kubernetes pkg/apis/core/validation/validation.go (the stored text of
ValidatePodSpecificAnnotations and ValidatePodSpecificAnnotationUpdates, read 2026-11-28):
a pod carrying `kubernetes.io/config.mirror` (pkg/apis/core MirrorPodAnnotationKey) must
set spec.nodeName, on create and on update (Invalid "must set spec.nodeName if mirror pod
annotation is set"), and an update may neither add the annotation nor change or remove
it (Forbidden "may not add mirror pod annotation", "may not remove or update mirror pod
annotation"), whoever asks. NodeRestriction (kube_noderestriction.py) adds, for a node,
what its mirror pods must be; for any other user it does nothing (plugin/pkg/admission/
noderestriction/admission.go Admit: "Our job is just to restrict nodes"). So a user who
may create pods creates a mirror pod by naming its node, which CONSUMER_PODS refuses in
a consumer's namespace (admission_policies.py).
"""

from __future__ import annotations

from fakes.kube_admission import FieldError

MIRROR = "kubernetes.io/config.mirror"
_PATH = f"metadata.annotations[{MIRROR}]"


def _annotations(pod: dict | None) -> dict:
    return ((pod or {}).get("metadata") or {}).get("annotations") or {}


def mirror_errors(pod: dict, old: dict | None) -> list[FieldError]:
    """The mirror annotation's errors of `pod` (created, or updated from `old`)."""
    errors: list[FieldError] = []
    new, before = _annotations(pod), _annotations(old)
    if old is not None:
        if MIRROR in before and new.get(MIRROR) != before[MIRROR]:
            detail = "may not remove or update mirror pod annotation"
            errors.append(FieldError("Forbidden", _PATH, detail=detail))
        if MIRROR in new and MIRROR not in before:
            errors.append(
                FieldError("Forbidden", _PATH, detail="may not add mirror pod annotation")
            )
    if MIRROR in new and not (pod.get("spec") or {}).get("nodeName"):
        detail = "must set spec.nodeName if mirror pod annotation is set"
        errors.append(FieldError("Invalid value", _PATH, new[MIRROR], detail))
    return errors
