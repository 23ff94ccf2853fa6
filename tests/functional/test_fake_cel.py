"""The fake's CEL answers as kube-apiserver's (cel-go) where our policies could tell.

fakes/kube_admission.py evaluates ValidatingAdmissionPolicies with cel-python 0.5.0; each
probe here is an expression on which cel-python alone answers otherwise than cel-go with
Kubernetes' base environment (k8s.io/apiserver pkg/cel/environment/base.go), the expected
value from google/cel-spec (doc/langdef.md, tests/simple/testdata) or cel-go's source.
"""

from __future__ import annotations

import collections

import celpy
import pytest
from charm_modules import load

from fakes import kube_admission

DATA = {
    "t": True,
    "f": False,
    "i": 0,
    "one": 1.0,
    "s": "x",
    "m": {"a": 1},
    "l": [1],
    "n": None,
}


def _value(expression: str, data: dict | None = None):
    value, error = kube_admission._cel(expression, {"o": celpy.json_to_cel(data or DATA)})
    assert not error, error
    return value


def _error(expression: str, data: dict | None = None) -> str:
    value, error = kube_admission._cel(expression, {"o": celpy.json_to_cel(data or DATA)})
    assert error, value
    return error


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # langdef.md "string": string(bool) converts true to "true" (cel-python: 'True').
        ("string(true)", "true"),
        ("string(o.f)", "false"),
        # conformance conversions.textproto string/double, double_hard; cel-go double.go %g.
        ("string(123.456)", "123.456"),
        ("string(-4.5e-3)", "-0.0045"),
        ("string(o.one)", "1"),
        ("string(1e6)", "1e+06"),
        ("string(o.i)", "0"),
        ("string(9876u)", "9876"),
    ],
)
def test_string_converts_as_cel_go(expression: str, expected: str):
    assert _value(expression) == expected


@pytest.mark.parametrize("expression", ["string(o.m)", "string(o.l)", "string(o.n)"])
def test_string_of_a_map_a_list_or_null_is_an_error(expression: str):
    """cel-go: a map, list or null has no conversion to string (cel-python: its repr)."""
    assert "type conversion error" in _error(expression)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # langdef.md "Equality": heterogeneous at runtime, numbers on one number line.
        ("o.s == 1", False),
        ("o.s != 1", True),
        ("o.i == 0.0", True),
        ("1 == 1u", True),
        ("o.l == [1.0]", True),
        ("o.l == ['a']", False),
        ("o.m == {'a': 'x'}", False),
        ("o.m == {'a': 1.0}", True),
        ("o.n == o.m", False),
        # `in` is equality over a list's elements, a map's keys.
        ("1 in ['a']", False),
        ("1.0 in o.l", True),
        ("1.0 in {1: 'a'}", True),
        # CrossTypeNumericComparisons (base.go, since 1.28).
        ("o.i < 0.5", True),
        ("1u >= o.one", True),
    ],
)
def test_equality_and_order_are_heterogeneous(expression: str, expected: bool):
    assert _value(expression) == expected


@pytest.mark.parametrize(
    "expression", ["o.missing == 1", "o.missing != 1", "1 != o.missing", "o.missing in [1]"]
)
def test_an_operand_in_error_is_the_answer_of_equality_and_in(expression: str):
    """cel-go: an operator applied to an error is that error.

    cel-python's own operators too (evaluation.py `boolean`); the fake's cel-go equality and
    `in` answered false or true.
    """
    assert "no such member" in _error(expression)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("false && o.missing == 1", False),
        ("o.missing == 1 && false", False),
        ("o.missing == 1 || true", True),
        ("o.missing == 1 && true", None),
        ("o.missing == 1 && o.missing == 2", None),
        ("o.missing == 1 || o.missing == 2", None),
    ],
)
def test_and_or_answer_an_error_only_when_no_side_decides(expression: str, expected):
    """cel-go interpreter/interpretable.go evalAnd, evalOr.

    cel-python answers two errors with its own `no matching overload` error, or fails
    formatting it.
    """
    if expected is None:
        assert _error(expression) == _error("o.missing")  # the left side's error itself
    else:
        assert _value(expression) == expected


def test_has_errs_where_the_selected_object_does_not_exist():
    """cel-go refQualify: only the last selection is a presence test (cel-python: false)."""
    assert "no such member" in _error("has(o.missing.f)")
    assert "list" in _error("has(o.l.f)")


@pytest.mark.parametrize("expression", ["has(o.n.f)", "has(o.s.f)", "has(o.m.b)"])
def test_has_of_null_or_a_scalar_is_false(expression: str):
    """Kubernetes leaves cel-go's EnableErrorOnBadPresenceTest unset: false, no error."""
    assert _value(expression) is not None and not _value(expression)


@pytest.mark.parametrize(
    "expression",
    [
        "'a,b'.split(',')",  # ext.Strings, not in cel-python
        "quantity('1Gi').isGreaterThan(quantity('1'))",  # Kubernetes' quantity library
        "url('https://a').getHost() == 'a'",
        "[1, 2].isSorted()",
        "o.?s.orValue('') == ''",  # optional syntax: cel-python cannot parse it
        "optional.none() == optional.none()",
        "int(o.s) == 0",  # cel-python's, never checked against cel-go here
        "has(o)",  # cel-go: invalid argument to has() macro
        "o.l.map(x, x > 0, x).size() == 0",  # the filtering map cel-python lacks
    ],
)
def test_what_the_fake_cannot_model_is_refused(expression: str):
    with pytest.raises(NotImplementedError, match="the fake's CEL|cel-python cannot parse"):
        kube_admission._cel(expression, {"o": celpy.json_to_cel(DATA)})


def _calico_validation(piece: str) -> str:
    module = load("kubernetes-control-plane", "admission_policies")
    spec = module.calico_cni_policy()["spec"]
    return next(v["expression"] for v in spec["validations"] if piece in v["expression"])


def test_a_blockaffinity_created_deleted_true_is_refused_by_our_policy():
    """Our policy's own expression: string(true) is 'true', so `deleted: true` is refused."""
    expression = _calico_validation("request.operation != 'CREATE' || (('state'")
    request = {"resource": {"resource": "blockaffinities"}, "operation": "CREATE"}
    for deleted, allowed in ((True, False), ("true", False), (False, True)):
        spec = {"state": "pending", "deleted": deleted}
        activation = {
            "request": celpy.json_to_cel(request),
            "variables": celpy.celtypes.MapType(
                {celpy.celtypes.StringType("spec"): celpy.json_to_cel(spec)}
            ),
        }
        value, error = kube_admission._cel(expression, activation)
        assert (error, bool(value)) == ("", allowed), deleted


def _answer(variables: dict[str, str], validations: list[str]) -> tuple[str, str] | None:
    """The fake's answer to one request under a policy of these variables and validations."""
    spec = {
        "variables": [{"name": n, "expression": e} for n, e in variables.items()],
        "validations": [{"expression": e} for e in validations],
    }
    request = {"operation": "CREATE", "userInfo": {"username": "u", "groups": [], "extra": {}}}
    inputs = kube_admission._Inputs(request, {"spec": {"a": 1}}, None)
    return kube_admission.ValidatingAdmissionPolicies._evaluate(spec, inputs)


def test_a_variable_no_validation_reads_is_never_evaluated(monkeypatch):
    """Kubernetes evaluates a policy's variable when an expression first reads it.

    k8s.io/apiserver v0.36.3 pkg/admission/plugin/cel composition.go: `variables` is a lazy
    map (compositionContext.Variables). So one whose evaluation fails fails nothing while
    no validation reads it; one that a validation reads fails that validation, in its words
    (activation.go Evaluate, variableAccessor.Callback).
    """
    evaluated = _counting(monkeypatch)
    assert _answer({"missing": "object.spec.missing"}, ["object.spec.a == 1"]) is None
    assert evaluated["object.spec.missing"] == 0
    message, reason = _answer({"missing": "object.spec.missing"}, ["variables.missing == 1"])
    assert reason == "Invalid"
    assert message.startswith(
        "expression 'variables.missing == 1' resulted in error:"
        ' composited variable "missing" fails to evaluate: '
    )


def test_a_variable_read_again_is_evaluated_once_a_request(monkeypatch):
    """A variable read again keeps its first value; another request evaluates it anew.

    k8s.io/apiserver v0.36.3 pkg/cel/lazy/lazy.go MapValue.resolveField keeps the first
    value; pkg/admission/plugin/cel activation.go newActivation makes one map a request.
    """
    evaluated = _counting(monkeypatch)
    variables = {"base": "object.spec.a + 1", "twice": "variables.base + variables.base"}
    validations = ["variables.twice == 4", "variables.base == 2", "variables.twice > 3"]
    assert _answer(variables, validations) is None
    assert (evaluated["object.spec.a + 1"], evaluated["variables.base + variables.base"]) == (1, 1)
    assert _answer(variables, validations) is None
    assert evaluated["object.spec.a + 1"] == 2


def _counting(monkeypatch) -> collections.Counter:
    """How often the fake evaluates each expression (its `_cel`, still doing the work)."""
    evaluated: collections.Counter = collections.Counter()
    real = kube_admission._cel

    def counted(expression: str, activation: dict):
        evaluated[expression] += 1
        return real(expression, activation)

    monkeypatch.setattr(kube_admission, "_cel", counted)
    return evaluated
