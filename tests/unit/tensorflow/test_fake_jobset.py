"""The JobSet fake's failure policy against JobSet v0.12.0 (fakes/batch.py J3).

failure_policy.go ruleIsApplicable: a rule with no onJobFailureReasons applies to every
failed Job (the old fake never matched it, so such a FailJobSet rule restarted the gang).
"""

from __future__ import annotations

import manifests
import params
from conftest import CLAIM, JOBSETS, NS, add_nodes, jobset, node

CTX = manifests.Context(
    namespace=NS,
    app="tensorflow",
    claim=CLAIM,
    default_image="tensorflow/tensorflow:2.21.0",
    tensorboard_image="tensorflow/tensorflow:2.21.0",
)


def _run(api, controller, rules: list[dict]) -> dict:
    add_nodes(api, node("cpu-0"))
    js = manifests.jobset(params.TrainRequest(job="fp", workers=2, gpus_per_worker=0), CTX)
    js["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    # runs without Kueue: in a namespace Kueue does not manage (in a team's, Kueue's
    # manageJobsWithoutQueueName would hold a JobSet without a queue, fakes/batch.py K8)
    controller.managed = False
    js["spec"]["failurePolicy"]["rules"] = rules
    api.put_object(f"{JOBSETS}fp", js)
    controller.tick()
    controller.tick()
    controller.end_pod("fp", "worker", 1, "Failed", exit_code=1)
    controller.tick()
    controller.tick()
    return jobset(api, "fp")


def _conditions(js: dict) -> dict[str, str]:
    return {c["type"]: c["reason"] for c in js["status"]["conditions"] if c["status"] == "True"}


def test_a_rule_without_reasons_applies_to_every_failure(api, controller):
    js = _run(api, controller, [{"name": "anyFailure", "action": "FailJobSet"}])
    assert _conditions(js).get("Failed") == "FailJobSetFailurePolicyAction"
    assert int(js["status"].get("restarts", 0)) == 0


def test_restart_ignoring_max_restarts_does_not_count(api, controller):
    rule = {"name": "drained", "action": "RestartJobSetAndIgnoreMaxRestarts"}
    js = _run(api, controller, [rule])
    assert js["status"]["restarts"] == 1
    assert int(js["status"].get("restartsCountTowardsMax", 0)) == 0
    assert "Failed" not in _conditions(js)  # maxRestarts 3 is not reached by it either
