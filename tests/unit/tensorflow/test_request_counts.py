"""job-status, list-jobs and logs cost the same number of API requests at every job size.

Issue 31 item 4: they list by label selector (one request for every pod of the job, one
for every Node), never one request per pod or per node. `logs` reads at most
`training.LOG_REPLICAS` replicas' logs whatever the size (the API server has one log
endpoint per pod: kubectl's own `logs -l` is capped by --max-log-requests too). The
numbers at 2/16/64/256 workers are printed by `tox -e bench` (bench_tensorflow_launch).
"""

from __future__ import annotations

import training
from conftest import add_nodes, node, run_action


def _job_requests(ctx, state, api, workers: int, job: str) -> tuple[dict[str, int], str]:
    """API requests of job-status, list-jobs and logs for one running job; `logs`' text."""
    run_action(ctx, state, "train", job=job, workers=workers, **{"gpus-per-worker": 1})
    reconciled = ctx.run(ctx.on.update_status(), state)
    counts = {}
    for action, params in (
        ("job-status", {"job": job}),
        ("list-jobs", {}),
        ("logs", {"job": job}),
    ):
        before = len(api.requests)
        ctx.run(ctx.on.action(action, params=params), reconciled)
        counts[action] = len(api.requests) - before
    return counts, ctx.action_results["logs"]


def test_job_status_list_jobs_and_logs_do_not_grow_with_the_workers(ctx, state, api):
    # GPU nodes of 8 GPUs: 2 workers fit one node, 10 take two (one read per node would
    # show); a CPU node for TensorBoard
    add_nodes(api, *(node(f"gpu-{i}", 8) for i in range(2)), node("cpu-0"))
    small, _ = _job_requests(ctx, state, api, 2, "small")
    run_action(ctx, state, "stop", job="small")
    big, logs = _job_requests(ctx, state, api, 10, "big")
    assert big["job-status"] == small["job-status"]
    assert big["list-jobs"] == small["list-jobs"]
    # logs: the chief's and at most LOG_REPLICAS replicas' (2 workers: both)
    assert big["logs"] <= small["logs"] + training.LOG_REPLICAS - 2
    shown = {line.split()[0] for line in logs.splitlines() if line.startswith("[")}
    assert len(shown) == training.LOG_REPLICAS
    assert "[worker-0]" in shown  # the chief of an mwms job
    assert logs.splitlines()[-1] == (
        "(2 of 10 replicas not shown: worker 8-9; logs role=<role> index=<i> shows one)"
    )
