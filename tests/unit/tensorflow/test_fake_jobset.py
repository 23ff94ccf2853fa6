"""The JobSet fake's failure policy against JobSet v0.12.0 (fakes/batch.py J3).

failure_policy.go ruleIsApplicable: a rule with no onJobFailureReasons applies to every
failed Job (the old fake never matched it, so such a FailJobSet rule restarted the gang).
J5: its restartStrategy (the old fake always waited for the whole old gang, so the
charm's BlockingRecreate could have gone back to Recreate unnoticed). B9: the Job
controller's podReplacementPolicy, on pods that end gracefully.
"""

from __future__ import annotations

import manifests
import params
import pytest
from conftest import CTX, JOBSETS, NS, add_nodes, jobset, node

from fakes.batch import SIGTERM_IGNORED, BatchControllers


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


# -- J5: restartStrategy (jobset v0.12.0 jobset_controller.go constructJobsFromTemplate)


def _restart(api, controller, strategy: str | None, job: str = "ps") -> list[dict[str, set[str]]]:
    """A ps job's worker fails while its chief takes 3 ticks to save on SIGTERM.

    The charm's JobSet, its `restartStrategy` set to `strategy` (None: as the charm writes
    it; "": none, the CRD's default). Returns, after each tick, the hostnames of the
    job's pods (terminating ones included) by restart attempt.
    """
    add_nodes(api, node("cpu-0"))
    request = params.TrainRequest(job=job, strategy="ps", workers=2, ps=1, gpus_per_worker=0)
    js = manifests.jobset(request, CTX)
    js["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    controller.managed = False  # as in `_run`
    if strategy == "":
        del js["spec"]["failurePolicy"]["restartStrategy"]  # the CRD's default: Recreate
    elif strategy is not None:
        js["spec"]["failurePolicy"]["restartStrategy"] = strategy
    api.put_object(f"{JOBSETS}{job}", js)
    controller.stop_ticks = {"chief": 3}
    controller.tick()
    controller.tick()
    controller.end_pod(job, "worker", 1, "Failed", exit_code=1)
    seen = []
    for _ in range(4):  # the old chief goes at the 4th
        controller.tick()
        gangs: dict[str, set[str]] = {}
        for pod in api.objects(f"/api/v1/namespaces/{NS}/pods/"):
            labels = pod["metadata"]["labels"]
            if labels["jobset.sigs.k8s.io/jobset-name"] != job:
                continue
            attempt = labels["jobset.sigs.k8s.io/restart-attempt"]
            assert pod["spec"]["subdomain"] == job  # one DNS domain for both gangs
            gangs.setdefault(attempt, set()).add(pod["spec"]["hostname"])
        seen.append(gangs)
    assert jobset(api, job)["status"]["restarts"] == 1
    return seen


def _overlaps(seen: list[dict[str, set[str]]]) -> list[dict[str, set[str]]]:
    """The ticks at which pods of two restart attempts existed together."""
    return [gangs for gangs in seen if len(gangs) > 1]


GANG = {"ps-chief-0-0", "ps-worker-0-0", "ps-worker-0-1", "ps-ps-0-0"}


def test_recreate_starts_a_new_gang_beside_the_old_chief_still_saving(api, controller):
    seen = _restart(api, controller, "Recreate")
    overlaps = _overlaps(seen)
    assert overlaps, seen
    # the old chief, terminating, beside new pods under the old gang's names
    assert overlaps[0] == {"0": {"ps-chief-0-0"}, "1": GANG - {"ps-chief-0-0"}}
    assert seen[-1] == {"1": GANG}  # its own Job recreated once its old one was gone


def test_blocking_recreate_starts_no_new_pod_until_the_old_gang_is_gone(api, controller):
    seen = _restart(api, controller, "BlockingRecreate")
    assert not _overlaps(seen), seen
    assert {"0": {"ps-chief-0-0"}} in seen  # the old chief was still saving meanwhile
    assert seen[-1] == {"1": GANG}


def test_the_charms_jobset_would_overlap_its_gangs_under_recreate(api, controller):
    """The charm's restartStrategy is what keeps the gangs apart (review N5).

    Its JobSet as written passes the overlap check; the same with `Recreate`, or with no
    restartStrategy (the CRD's default), fails it.
    """
    assert not _overlaps(_restart(api, controller, None))
    assert _overlaps(_restart(api, controller, "Recreate", job="re"))
    assert _overlaps(_restart(api, controller, "", job="dflt"))


# -- B9: podReplacementPolicy of an Indexed Job (kubernetes pkg/controller/job) ------------


@pytest.mark.parametrize(
    ("policy", "replaced"), [({}, True), ({"podFailurePolicy": {"rules": []}}, False)]
)
def test_an_indexed_jobs_terminating_pod_is_replaced_as_its_policy_says(
    api, policy: dict, replaced: bool
):
    """TerminatingOrFailed (the default) replaces a terminating index at once, Failed not.

    Failed is the default with a podFailurePolicy (SetDefaults_Job); its index is not
    pending while the old pod terminates (firstPendingIndexes), only once it is gone. In
    a namespace of no team (no Pod Security level, no Kueue).
    """
    add_nodes(api, node("cpu-0"))
    api.put_object(f"/api/v1/namespaces/{PLAIN}", {})
    controller = BatchControllers(api, PLAIN)
    controller.managed = False
    api.graceful_pods = True
    controller.stop_ticks = {"ix": SIGTERM_IGNORED}
    spec = {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}
    job = {
        "metadata": {"name": "ix"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            **policy,
            "template": {"metadata": {"labels": {"app": "ix"}}, "spec": spec},
        },
    }
    api.put_object(f"/apis/batch/v1/namespaces/{PLAIN}/jobs/ix", job)
    controller.tick()
    [first] = _index(api, "0")
    assert api.delete_pod(PLAIN, first["metadata"]["name"]) is not None
    controller.tick()
    assert len(_index(api, "0")) == (2 if replaced else 1)
    assert len(_index(api, "1")) == 1  # the other index untouched
    assert api.pod_exited(PLAIN, first["metadata"]["name"], 137)
    controller.tick()
    [pod] = _index(api, "0")
    assert pod["metadata"]["name"] != first["metadata"]["name"]


PLAIN = "plain"


def _index(api, index: str) -> list[dict]:
    return [
        p
        for p in api.objects(f"/api/v1/namespaces/{PLAIN}/pods/")
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == index
    ]
