"""A Service's type-dependent fields, as kube-apiserver 1.36 validates and clears them.

Sources, kubernetes/kubernetes:
- pkg/apis/core/validation/validation.go ValidateService (stored commit 000f260): a
  ClusterIP Service's ports name no nodePort (Forbidden "may not be used when `type` is
  'ClusterIP'" at `spec.ports[i].nodePort`); loadBalancerSourceRanges (at the path
  `spec.LoadBalancerSourceRanges`, capitalised as upstream writes it), or without the
  field its annotation service.beta.kubernetes.io/load-balancer-source-ranges (at
  `metadata.annotations[<key>]`; present, even empty: `if len(...) > 0 || ok`, stored
  copy of validation.go, index id 38700836414; the ranges' syntax is not checked) and
  allocateLoadBalancerNodePorts only on a LoadBalancer (Forbidden "may only be used when
  `type` is 'LoadBalancer'"); validateServiceExternalTrafficPolicy's healthCheckNodePort
  only on a LoadBalancer with externalTrafficPolicy Local (Invalid "may only be set when
  `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"). The enum checks,
  externalTrafficPolicy's among them, are kube_enums.service_errors'.
- pkg/registry/core/service/strategy.go dropTypeDependentFields (stored commit 184c250),
  run by PrepareForUpdate: on an update to a type that needs none, the node ports, the
  healthCheckNodePort, allocateLoadBalancerNodePorts, loadBalancerClass and
  externalTrafficPolicy (needsExternalTrafficPolicy: NodePort or LoadBalancer) are
  cleared when the update left them as they were (a node port is left when the update
  adds one it did not have: validation then refuses it), and a Service that is no
  LoadBalancer loses its status.loadBalancer. The clusterIP clearing for ExternalName is
  not modelled (no charm writes one).

The node port allocator is not modelled: a NodePort Service keeps the node ports it was
given (a seed or a client names them); none is allocated.
"""

from __future__ import annotations

from fakes.kube_admission import FieldError

_NODE_PORT_TYPES = ("NodePort", "LoadBalancer")


def _node_ports(spec: dict) -> set[int]:
    return {p["nodePort"] for p in spec.get("ports") or [] if p.get("nodePort")}


def _health_checked(spec: dict) -> bool:
    kind = spec.get("type") or "ClusterIP"
    return kind == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


def drop_type_dependent_fields(new: dict, old: dict) -> None:
    """`dropTypeDependentFields` on `new`, the update of `old` (both whole Services)."""
    spec, before = new.get("spec") or {}, old.get("spec") or {}
    kind, was = spec.get("type") or "ClusterIP", before.get("type") or "ClusterIP"
    if was in _NODE_PORT_TYPES and kind not in _NODE_PORT_TYPES:
        if _node_ports(spec) <= _node_ports(before):
            for port in spec.get("ports") or []:
                port.pop("nodePort", None)
        _drop_unchanged(spec, before, "externalTrafficPolicy")
    if _health_checked(before) and not _health_checked(spec):
        _drop_unchanged(spec, before, "healthCheckNodePort")
    if was == "LoadBalancer" and kind != "LoadBalancer":
        if spec.get("allocateLoadBalancerNodePorts") is not None:
            _drop_unchanged(spec, before, "allocateLoadBalancerNodePorts")
        _drop_unchanged(spec, before, "loadBalancerClass")
    if kind != "LoadBalancer" and (new.get("status") or {}).get("loadBalancer"):
        new["status"]["loadBalancer"] = {}


def _drop_unchanged(spec: dict, before: dict, field: str) -> None:
    """Clear `field` when the update left it as it was (the same value, or both unset)."""
    if spec.get(field) == before.get(field):
        spec.pop(field, None)


SOURCE_RANGES_ANNOTATION = "service.beta.kubernetes.io/load-balancer-source-ranges"


def type_errors(spec: dict, annotations: object = None) -> list[FieldError]:
    """ValidateService's checks of the fields only some types may carry, in its order."""
    errors: list[FieldError] = []
    kind = spec.get("type") or "ClusterIP"
    if kind == "ClusterIP":
        for i, port in enumerate(spec.get("ports") or []):
            if port.get("nodePort"):
                detail = "may not be used when `type` is 'ClusterIP'"
                errors.append(FieldError("Forbidden", f"spec.ports[{i}].nodePort", detail=detail))
    only_lb = "may only be used when `type` is 'LoadBalancer'"
    annotated = isinstance(annotations, dict) and SOURCE_RANGES_ANNOTATION in annotations
    if (spec.get("loadBalancerSourceRanges") or annotated) and kind != "LoadBalancer":
        path = (
            "spec.LoadBalancerSourceRanges"
            if spec.get("loadBalancerSourceRanges")
            else f"metadata.annotations[{SOURCE_RANGES_ANNOTATION}]"
        )
        errors.append(FieldError("Forbidden", path, detail=only_lb))
    if spec.get("allocateLoadBalancerNodePorts") is not None and kind != "LoadBalancer":
        path = "spec.allocateLoadBalancerNodePorts"
        errors.append(FieldError("Forbidden", path, detail=only_lb))
    if spec.get("healthCheckNodePort") and not _health_checked(spec):
        detail = (
            "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"
        )
        errors.append(
            FieldError(
                "Invalid value", "spec.healthCheckNodePort", spec["healthCheckNodePort"], detail
            )
        )
    return errors
