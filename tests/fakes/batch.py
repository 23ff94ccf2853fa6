"""Kueue, JobSet, the Job controller and kubelet, as far as the tensorflow charm relies on them.

The fake API server stores objects and runs no controller. `BatchControllers.tick()` does,
over its objects, what these controllers do, each rule from the upstream documentation or
source named next to it. Tests call `tick()` through the charm's `sleep` (fake time), so a
job moves one step per poll as it would on a cluster.

Kueue (kubernetes-sigs/kueue v0.19.2):
- K0 In a namespace Kueue manages (`managed`: its managedJobsNamespaceSelector matches; the
  control plane labels the tensorflow namespace so), a LocalQueue named `default` is the
  namespace's default queue (pkg/controller/constants DefaultLocalQueueName): Kueue's
  webhooks give every batch Job and (with the deployment integration on, K8) Deployment
  created without a `kueue.x-k8s.io/queue-name` label that label, `default`
  (jobframework/defaults.go, job_webhook.go, deployment_webhook.go): a Job is suspended
  until admitted (K8), a Deployment's pods wait behind the scheduling gate
  `kueue.x-k8s.io/admission` until Kueue admits each (K12).
- K1 In a managed namespace only (the feature gate ManagedJobsNamespaceSelectorAlways-
  Respected is GA and locked on in 0.19, jobframework/reconciler.go returns early for
  other namespaces, and the control plane scopes Kueue's webhooks to the same label: a
  JobSet elsewhere is neither suspended nor queued, it just runs), a JobSet labelled
  `kueue.x-k8s.io/queue-name` is suspended by Kueue's webhook on create (jobframework
  ApplyDefaultForSuspend) and gets a Workload in its namespace, owned by it, named
  `jobset-<name>-<hash>` (workload_names.go), with the WorkloadPriorityClass value of its
  `kueue.x-k8s.io/priority-class` label as `spec.priority`; while that class does not
  exist, no Workload (util/priority GetPriorityFromWorkloadPriorityClass errs).
- K2 A pending Workload is admitted when every resource its pod sets request (each pod's
  requests times the set's count: GPUs, CPU, memory, whatever the ClusterQueue covers)
  gets a flavor, per resource group the first of the ClusterQueue's flavors whose taints
  and labels the pods accept and where it fits what the queue may still take: in a cohort
  its unused localQuota plus what the cohort has left, within its borrowingLimit
  (`Quota.available`, flavorassigner.go; all or nothing): conditions QuotaReserved and
  Admitted True, and the JobSet is unsuspended (RunWithPodSetsInfo). Otherwise it stays
  QuotaReserved False, reason Pending, with Kueue's "couldn't assign flavors" message.
  Higher priority, then older, is admitted first (BestEffortFIFO). Before that, the queue
  must be usable (core/workload_controller.go getQueueBlocker): "LocalQueue <q> doesn't
  exist", "ClusterQueue <cq> doesn't exist", or "ClusterQueue <cq> is inactive" while a
  ResourceFlavor it names is missing (clusterqueue_types.go FlavorQuotas.Name); reason
  Inadmissible (the legacy path: the finer reasons need the UnadmittedWorkloads-
  Observability gate, off by default in 0.19, kube_features.go). Then the scheduler
  checks that the ClusterQueue's `namespaceSelector` selects the Workload's namespace
  (its labels; a null selector selects none, metav1.LabelSelectorAsSelector(nil) is
  labels.Nothing()): one whose namespace it does not select stays QuotaReserved False,
  reason Pending (the gate off: workload.UnadmittedWorkloadReasonWithFallback), message
  "workload namespace doesn't match ClusterQueue selector", whatever quota is free
  (v0.19.2 pkg/scheduler/scheduler.go nominate -> pkg/workload/resources.go
  ValidateAdmissibility, ErrNamespaceMismatch), so a LocalQueue pointing at another
  namespace's ClusterQueue admits nothing.
- K3 Preemption as Kueue with fair sharing on (the control plane's configuration;
  preemption.go fairPreemptions, see `_preempt_for`): a pending Workload that does not
  fit evicts, in its own ClusterQueue, admitted ones of lower priority
  (`withinClusterQueue: LowerPriority`, reason InClusterQueue) and, in the other
  ClusterQueues of the cohort that borrow, any (`reclaimWithinCohort: Any`): all while it
  stays within its nominal quota (InCohortReclamation), else by dominant resource share
  (InCohortFairSharing); queues of highest share first, other queues' candidates before
  its own, lower priority then most recently admitted first, until it fits, then gives
  back those it turns out not to need (preemption/common/ordering.go
  CandidatesOrdering; preemption.go fillBackWorkloads); or a test calls
  `preempt(job, by=)`. A victim of another namespace is stopped by that namespace's
  controllers. The Workload gets Evicted (reason Preempted) and Preempted
  (reason InClusterQueue) while still admitted, with Kueue's message "Preempted to
  accommodate a workload (UID: <preemptor Workload uid>, JobUID: <its job's uid>) due to
  prioritization in the ClusterQueue; preemptor path: /<cohort>/<cq>; preemptee path:
  /<cohort>/<cq>" (preemption.go preemptionMessage, buildCQPath); the JobSet is suspended
  again (stopJob), and once no pod of it is active it loses its quota reservation (a
  terminating pod is not active: pkg/controller/jobs/job IsActive reads the Job's
  status.active, which leaves them out, B9): QuotaReserved
  False, reason Pending, the eviction's message, and Requeued True, reason Preempted
  (jobframework reconciler, "handle eviction"); it is admitted again when its quota is
  free, which sets Evicted and Preempted False (only if they were True, workload.go).
- K4 A Workload whose JobSet finished gets Finished (reason Succeeded or Failed) and frees
  its quota; QuotaReserved and Admitted stay True (workload/finish/finish.go).
- K7 Each ClusterQueue's status: flavorsReservation, flavorsUsage, the reserving, admitted
  and pending Workloads, condition Active (see `_queue_status`).
- K5 `time_out(job)`: the job's pods were not all ready within waitForPodsReady.timeout
  (core/workload_controller.go reconcileNotReadyTimeout): evicted like K3 with reason
  PodsReadyTimeout, "Exceeded the PodsReady timeout <ns>/<workload>", and requeued
  after a backoff (K15).
- K15 The requeue backoff after a PodsReadyTimeout eviction (K5, K13), kueue v0.19.2:
  the eviction adds 1 to `status.requeueState.count` and sets `requeueAt` to the
  eviction time plus min(backoffBaseSeconds * 2^(count-1), backoffMaxSeconds), from the
  manager configuration's waitForPodsReady.requeuingStrategy (defaults 60 and 3600:
  apis/config/v1beta2/defaults.go:51-52, :115-116) (core/workload_controller.go:1229-1276
  reconcileNotReadyTimeout, its Evict's CustomPrepare; pkg/workload/workload.go:816-856
  UpdateRequeueState and SetRequeueState; pkg/util/wait/backoff.go:35-58 NewBackoff(base,
  max, 2, 0.0001) and WaitTime(count) over apimachinery's wait.Backoff Step, which
  doubles and caps). Kueue's jitter (at most 0.01% of the wait) is modelled as 0, and
  requeueAt is written in whole seconds as any metav1.Time. Requeued is False, reason
  PodsReadyTimeout (jobframework/reconciler.go:591: only Preempted and NodeFailures
  evictions requeue at once). Until `clock` reaches requeueAt the Workload is not queued:
  not admitted, not pending in its ClusterQueue's status (the workload controller queues
  it only then: core/workload_controller.go:604-633 and the Update handler's
  "transitioned back to pending", :1442-1483; cluster_queue.go:490-503
  backoffWaitingTimeExpired refuses it while Requeued is False). Then requeueAt is
  cleared, the count kept, Requeued True, reason BackoffFinished, "The workload backoff
  was finished" (core/workload_controller.go:640-669), and it is admitted as K2. The
  count is never reset by an admission or a PodsReady True: only deactivation clears
  requeueState (core/workload_controller.go:671-697; workload_types.go:774-789 "When a
  deactivated ... workload is reactivated ... this count would be reset to null"), so
  every further timeout of the same Workload waits longer, up to the cap
  (`_requeue_at`, `_backoff_over`). backoffLimitCount (deactivation after that many
  requeues, :1282-1296) is not emulated: the control plane leaves it unset.
- K10 A JobSet that restarts its gang (J3: child Jobs deleted and created again, the
  JobSet never suspended) keeps its Workload admitted, its admission unchanged: Kueue
  v0.19.2 does nothing for an unsuspended job whose Workload is admitted ("Job running
  with admitted workload, nothing to do", jobframework/reconciler.go ReconcileGenericJob)
  and never admits it again. Its PodsReady condition and recoveryTimeout: K13.
- K13 waitForPodsReady on an admitted JobSet's Workload (`_pods_ready`). Its condition
  PodsReady (jobframework/reconciler.go generatePodsReadyCondition): True, reason Started
  (Recovered after a recovery), once the JobSet's pods are ready (jobs/jobset PodsReady:
  every replicated Job's Jobs ready, a Job being ready once its ready and succeeded pods
  reach min(parallelism, completions), or succeeded: jobset v0.12.0
  calculateReplicatedJobStatuses); False, reason WaitForStart, before they first were;
  False, reason WaitForRecovery, "At least one pod has failed, waiting for recovery",
  once they were (K10's restart). A Workload WaitForRecovery for the manager
  configuration's `recoveryTimeout` (a Go duration; absent: `timeout`, absent too: 30m,
  apis/config/v1beta2/defaults.go; 0: never, core.go) since that condition's
  lastTransitionTime, by `clock`, is evicted as K5 (core/workload_controller.go
  reconcileNotReadyTimeout, admittedNotReadyWorkload). WaitForStart's `timeout` is not
  timed: a test calls `time_out(job)` (K5). Batch Jobs and pods get no PodsReady here.
- K8 Kueue runs with the manager configuration in the ConfigMap kueue-system/
  kueue-manager-config (`fakes.addons.install_kueue` writes the control plane's; without
  one, upstream's defaults). Its `integrations.frameworks` say which kinds it manages
  (batch/job, jobset.x-k8s.io/jobset; K0's Deployments only with `deployment`) and, with
  `manageJobsWithoutQueueName`, a JobSet or batch Job of a managed namespace without a
  queue label (or with an empty one: `_queue_name`) is managed too
  (jobframework/utils.go WorkloadShouldBeSuspended; a Job a JobSet owns is the
  JobSet's). A batch Job is queued as a JobSet is (K1-K4, K7): the webhook suspends it
  on create, its Workload `job-<name>-<hash>` has one pod set `main` (min(parallelism,
  completions) pods, jobs/job/job_controller.go PodSets) and, admitted, it is
  unsuspended; one naming no queue gets a Workload without `queueName`, never admitted
  ("LocalQueue  doesn't exist"). Workloads are created through the API server, validated
  against the real Workload CRD (`_create_workload`).
- K9 A Workload with `maximumExecutionTimeSeconds` (the `kueue.x-k8s.io/max-exec-time-
  seconds` label, jobframework/utils.go) is deactivated once admitted that long in all
  (`_deadline`: core/workload_controller.go reconcileMaxExecutionTime), evicted with
  reason DeactivatedDueToMaximumExecutionTimeExceeded and never requeued. Time is
  `clock` (tests with fake time set it): the Admitted condition's lastTransitionTime and
  status.accumulatedPastExecutionTimeSeconds (the admitted time before an eviction).
- K12 The pod integration (on with `pod` in `integrations.frameworks`, or implicitly with
  `deployment` or `statefulset`: ImplicitlyEnabledFrameworkNames), in a managed
  namespace. Kueue's pod webhook (pkg/controller/jobs/pod/pod_webhook.go Default) runs on
  every pod created there, a fake controller's included: a pod whose template the
  deployment webhook marked (annotation `kueue.x-k8s.io/pod-suspending-parent`) is gated;
  any other pod that no job Kueue manages owns (jobframework FindAncestorJobManagedByKueue:
  controller references only, by name and uid, through ReplicaSets and every
  registered integration: `_managed_ancestor`; a Job's or JobSet's pod is theirs) gets the
  namespace's `default` queue where it names none, and, naming a queue or with
  manageJobsWithoutQueueName, the label and finalizer `kueue.x-k8s.io/managed` and the
  scheduling gate `kueue.x-k8s.io/admission`. The deployment webhook (deployment_webhook.go
  Default, on create and update only: a Deployment written before the integration was on
  stays unmarked until its next update) puts a Deployment's queue, its
  WorkloadPriorityClass label, the managed label and that annotation into its template;
  its ValidateUpdate refuses the queue or priority label added to a Deployment with a
  ready replica (`_webhooks_on_update`). Kueue's pod reconciler
  gives each managed pod one Workload `pod-<name>-<hash>` with one pod set `main` of 1
  (with `pod` only implied, it skips a pod no Deployment or StatefulSet marked:
  pod_controller.go Skip)
  (pod_controller.go constructPodSets), admitted as K2 (priority from the pod's
  priority-class label); admitting it, Kueue merges the flavor's nodeLabels and
  tolerations into the pod and removes the gate (pod_controller.go Run), and B1's
  scheduler (`_scheduler`) places it; a gated pod is never placed. A pod that ended
  (Succeeded, Failed) finishes its Workload (Finished; its quota freed) and loses the
  finalizer; a pod deleted loses it and its Workload goes (the garbage collector follows
  the Workload's ownerReference); a pod someone else ungated while its Workload is not
  admitted is deleted (jobframework reconciler.go "Running job is not admitted by a
  cluster queue, suspending": stopJob, StopReasonNotAdmitted -> pod_controller.go Stop);
  a preempted
  pod is deleted (Stop) and its Deployment makes another, gated again.
- K14 A Workload left without ownerReferences (its job deleted orphaning its dependents:
  the garbage collector removed its reference, fakes/kube_apiserver.py) that carries the
  `kueue.x-k8s.io/job-uid` label Kueue puts on every job's Workload (jobframework
  reconciler.go ConstructWorkload, JobUIDLabel) is orphaned (core/workload_controller.go
  isOrphanedWorkload) and gets Finished, reason OwnerNotFound, "The workload's owner no
  longer exists" (workload.go FinalizeOrphanedWorkload, feature FinishOrphanedWorkloads,
  beta and on since v0.18: kube_features.go): its quota is freed (K4). The job's pods,
  orphaned with it, run on: nothing of Kueue stops them (`_finish_orphaned`).
- K16 spec.active written by someone (`_activity`; kueue v0.19.2
  pkg/controller/core/workload_controller.go Reconcile). Set false on a Workload not yet
  evicted: evicted, reason Deactivated, "The workload is deactivated" (:672-718,
  workloadevict.Evict), its requeueState cleared; the job is stopped and, once it is,
  the reservation goes with Requeued False, reason Deactivated (K3: jobframework
  reconciler.go "handle eviction", :580-615). Set true again while Requeued is False,
  reason Deactivated: Requeued True, reason Reactivated, "The workload was reactivated"
  (:640-645), and it is queued at once (no backoff: the requeueState is gone). Set true
  before Kueue evicted it, nothing happens (the controllers are level-triggered).
- K11 Admitting a job, Kueue merges each pod set's assigned flavors' `nodeLabels` into its
  pod template's nodeSelector and their `tolerations` into its tolerations (v0.19.2
  pkg/podset/podset.go FromAssignment and Merge, a conflicting nodeSelector key being
  BadPodSetsUpdateError; the JobSet's and the Job's RunWithPodSetsInfo), so its pods
  land on that flavor's nodes (B1); stopping it (K3, K5, K9) puts the Workload's copy of
  each template's nodeSelector and tolerations back (RestorePodSetsInfo, RestorePodSpec).

JobSet (kubernetes-sigs/jobset v0.12.0, pkg/controllers/jobset_controller.go):
- J1 An unsuspended JobSet has one child Job `<jobset>-<replicatedJob>-0` per replicated
  Job (replicas 1), owned by it, labelled jobset-name, replicatedjob-name and
  restart-attempt = `status.restarts`, its pods' subdomain the JobSet's `network.subdomain`.
- J2 A suspended JobSet suspends its active child Jobs (whose pods the Job controller then
  deletes; the Jobs stay).
- J3 A child Job that failed restarts the gang (failurePolicy, RestartJobSet by default):
  `restarts` and `restartsCountTowardsMax` + 1, condition RestartingJobSet (until every
  Job is ready again, reason JobsReady), and every child Job of an earlier restart
  attempt deleted with its pods (their containers stopped together; J5 says when the
  new Jobs come); once `restartsCountTowardsMax` reached `maxRestarts`, the
  JobSet is Failed (ReachedMaxRestarts) instead. The first failurePolicy rule that applies
  to a failed Job (an empty onJobFailureReasons, message patterns or target list matching
  every Job, failure_policy.go ruleIsApplicable) gives the action: FailJobSet fails it at
  once, RestartJobSetAndIgnoreMaxRestarts restarts without counting. No failurePolicy at
  all: Failed (FailedJobs) on the first failure.
- J4 successPolicy Any over the target replicated Jobs: once one of their Jobs completes,
  the JobSet is Completed and its other active Jobs are deleted with their pods.
- J5 `failurePolicy.restartStrategy` (v0.12.0 jobset_controller.go): a child Job whose
  restart-attempt label (pkg/constants/constants.go RestartsKey) is below
  `status.restarts` is of the previous attempt (getChildJobs, lines 364-377), deleted at
  each reconcile (lines 179-183) with propagationPolicy Foreground, once (deleteJobs
  skips a Job that has a deletionTimestamp, lines 761-785): it stays, with
  a deletionTimestamp and the `foregroundDeletion` finalizer, until its pods are gone,
  and the Job controller makes no pods for it (kubernetes pkg/controller/job/
  job_controller.go syncJob calls manageJob only while DeletionTimestamp is nil).
  BlockingRecreate creates no Job while any Job of the previous attempt exists
  (constructJobsFromTemplate, lines 918-936); Recreate (the CRD's default,
  api/jobset/v1alpha2/jobset_types.go line 487, and any JobSet without a failurePolicy)
  creates each Job as soon as no Job of its name exists (shouldCreateJob, lines
  990-1000), so its new pods can start beside another Job's old pods still stopping,
  under the same subdomain (jobset_types.go lines 500-509). Without a `kubelet`, a
  deleted pod's container exits at once unless `stop_ticks` names its replicated Job:
  it then runs on (the pod terminating, with a deletionTimestamp) for that many ticks,
  as a chief saving a checkpoint on SIGTERM (B5).
- J6 A resumed JobSet's suspended child Jobs get its replicated Jobs' nodeSelector and
  tolerations merged into their pod templates before they are unsuspended (resumeJob;
  Kueue's K11 changed them while the JobSet was suspended).
- J7 JobSet's webhook refuses an update changing `replicatedJobs` (replicas, parallelism,
  completions: a team cannot grow a running JobSet), but for its pod templates' labels,
  annotations, nodeSelector, tolerations and scheduling gates while it is suspended
  (`_jobset_webhook_on_update`).
- J8 Every unfinished JobSet has its headless Service, named its subdomain, made by the
  JobSet controller (`_headless_service`).

Job controller and kubelet (kubernetes.io/docs/concepts/workloads/controllers/job/):
- B1 An Indexed, unsuspended, unfinished Job gets one pod per missing index (`per_tick` at
  a time), hostname `<job>-<index>`, the completion-index label, bound to a node the pod
  may use (`_schedule`: ready, tolerated taints, its nodeSelector's labels (kube-
  scheduler's NodeAffinity filter, "node(s) didn't match Pod's node affinity/selector"),
  enough free GPUs, preferred affinity),
  Running and Ready (or Pending with `waiting_reason`); with no such node it stays
  Pending, PodScheduled False, reason Unschedulable, until a later tick finds it a node.
- B2 A suspended Job's active pods are deleted.
- B3 With `backoffLimit: 0`, a Failed pod fails the Job (reason BackoffLimitExceeded),
  unless a podFailurePolicy rule matches it first (onPodConditions, onExitCodes): Ignore
  replaces the pod, FailJob fails the Job with reason PodFailurePolicy and the message
  "Container <c> for pod <ns>/<pod> failed with exit code <N> matching FailJob rule at
  index <i>" (kubernetes pkg/controller/job/pod_failure_policy.go).
- B4 A Job completes when its successPolicy's indexes succeeded (`succeededIndexes`), or
  every index did.
- B6 A NonIndexed Job (the purge and import Jobs: one completion) runs min(parallelism
  (default 1), completions - succeeded) pods at once, parallelism without completions
  (kubernetes pkg/controller/job/job_controller.go manageJob, wantActive; excess pods
  after a lower parallelism are not deleted here); it completes when `completions` (or,
  without, one) succeeded and fails (BackoffLimitExceeded)
  once more than `backoffLimit` (default 6) failed, or at once when a podFailurePolicy
  rule says FailJob (Ignore: not counted).
- B7 A Job's status is what kube-controller-manager 1.36 writes (pkg/controller/job/
  job_controller.go syncJob, with JobManagedBy and JobPodReplacementPolicy GA: the terminal
  condition waits for the pods), checked by the fake API server as kube-apiserver does
  (`fakes.kube_admission` job_status_update_errors): `startTime` the first time the Job
  runs unsuspended; once it failed, FailureTarget (the Failed reason and message), its
  active pods deleted, then Failed; once it succeeded, SuccessCriteriaMet (reason
  CompletionsReached, "Reached expected number of succeeded pods", or SuccessPolicy), its
  remaining pods deleted, then Complete with the same reason and `completionTime`. Not
  written: the pod counters (active, ready, succeeded, failed, terminating), the
  Suspended condition, and a new startTime on resume (the fake keeps the first one).
- B5 With a `kubelet` (tests/functional: real processes), a pod's container runs from its
  creation; it ends the pod (Succeeded on exit 0, else Failed with the exit code) when it
  exits, and a deleted pod's container is stopped first (see `_delete_pods`); a pod
  someone else deleted, gone from the API server at once, has its container stopped at
  the next tick (`kubelet.removed`: SIGTERM, SIGKILL after its grace period). Without
  one, the controllers delete pods through the fake API server (`delete_pod`): at once,
  or, under its `graceful_pods`, for their grace period, and kubelet's part is here
  (`_reap`, `_sigterm`): a terminating pod's container gets SIGTERM when the pod is
  deleted or first seen terminating (a team's DELETE, an eviction) and exits at once
  (143) unless `stop_ticks` names its replicated Job or its Job: it then runs on for
  that many ticks, or, SIGTERM_IGNORED, until the API server's `clock` passes its
  deadline (SIGKILL, 137: `kill_expired_pods`); the pod then goes (`pod_exited`).
  Meanwhile it holds its node's GPUs (`_free`).
- B9 A terminating pod is not active (controller_utils.go IsPodActive). Under
  podReplacementPolicy TerminatingOrFailed (the default without a podFailurePolicy,
  kube-apiserver's SetDefaults_Job) the Job controller replaces it at once; under Failed
  (onlyReplaceFailedPods) it counts it with the active ones (manageJob: wantActive -
  terminating - active; an Indexed Job's terminating indexes are not pending,
  indexed_job_utils.go firstPendingIndexes) and replaces it once it ended or is gone.
- B11 Not modelled: the job-tracking finalizer (batch.kubernetes.io/job-tracking, GA in
  1.26). The real Job controller puts it on every pod it creates and removes it only
  once it has counted the pod (job_controller.go at 6ae037f: manageJob
  appendJobCompletionFinalizerIfNotFound; trackJobStatusAndRemoveFinalizers: a Succeeded
  pod into completedIndexes or succeeded, a failed one, isPodFailed (phase Failed, or
  being deleted outside podReplacementPolicy Failed), into failed unless a
  podFailurePolicy rule ignores it), so a deleted pod stays, terminating then ended,
  until it is counted. Here a deleted pod goes once it ended (`pod_exited`), unread,
  and the controller reads the pods stored, not counters. The tests see the same: every
  pod removal they make carries DisruptionTarget (the taint manager's, an eviction's,
  the GPU watcher's), which the charm's podFailurePolicy ignores (its rule 0), and the
  index is replaced once the pod is gone (B9), where the real controller replaces it in
  the sync that counts it Failed. It would differ for a plain DELETE of a running pod
  (no DisruptionTarget: the real pod ends Failed with the SIGTERM's 143, which the
  charm's policy fails the Job for, a gang restart; here its index is only replaced),
  a Succeeded pod deleted before its Job ended (real: its index stays succeeded; here
  it runs again) and a NonIndexed Job's backoffLimit (B6 counts the Failed pods stored,
  the real one status.failed). No test does these.

- B8 A controller creates its pods through the API server like any client, so admission
  sees them: the pod goes through the Priority plugin (`kube_priority`: its priority from
  its PriorityClass, an unknown class refused) and PodSecurity
  (`kube_admission.PodSecurity`, the policy of the namespace's
  `pod-security.kubernetes.io/*` labels), then the ValidatingAdmissionPolicies stored
  (`admit_controller_create`: as the Job controller's ServiceAccount, kube-system:
  job-controller, or the ReplicaSet controller's for a Deployment's pod, the pod as they
  create it: not bound yet, the scheduler binds it) and last the ResourceQuota plugin's
  object counts (`pods`, `count/pods`: fakes/kube_quota.py, the 403 `pods "<name>" is
  forbidden: exceeded quota: ...`), before it is stored. Neither
  DefaultTolerationSeconds nor ExtendedResourceToleration runs here (their tolerations
  are not added: fakes/taint_eviction.py). A pod any of these refuses
  (or the namespace's enforce level) is not created; the controller records a Warning
  Event, reason FailedCreate, `Error creating: <the API server's message>`, on the Job
  (or the Deployment, see D1) and tries again next tick (kubernetes pkg/controller/
  controller_utils.go RealPodControl.createPods, FailedCreatePodReason; the PodSecurity
  plugin admits pods on create whoever asks, plugin/pkg/admission/security/podsecurity/
  admission.go). `refused` lists those messages. Nothing else changes: the Job gets no
  condition and stays active, its Workload admitted, until a later try is admitted
  (kubernetes pkg/controller/job/job_controller.go at 6ae037f, a stored commit near
  1.36: manageJob decrements its expectations and returns the error, syncJob returns
  it after writing the status, and the Job is queued again with the queue's backoff,
  DefaultJobApiBackOff 1 s doubling to MaxJobApiBackOff 1 min, or sooner when one of its
  pods changes: a tick stands for that wait). B10 A controller creates its pods in slow-
  start batches, the first of one (controller.SlowStartInitialBatchSize), each twice the
  last, and after a batch with a refusal skips the rest until its next sync (job_
  controller.go manageJob; pkg/controller/replicaset/replica_set.go slowStartBatch, at
  3e4a790): so a Job or Deployment refused creates no other pod that tick, and records
  one FailedCreate per try, not one per missing pod.

Deployment controller and kubelet (kubernetes.io/docs/concepts/workloads/controllers/
deployment/, /docs/concepts/workloads/pods/pod-lifecycle/):
- D1 A Deployment has `spec.replicas` (default 1) pods from its template, labelled as the
  template says, bound to a node by B1's scheduler (one asking for more GPUs than any
  node has free stays Pending, Unschedulable). (The pods are owned by the Deployment
  here; the real chain is Deployment -> ReplicaSet -> Pod, which the charm never looks
  at: it selects pods by label. So a refused pod's FailedCreate (B8) is recorded on the
  Deployment; the real ReplicaSet controller records it on the ReplicaSet and sets its
  condition ReplicaFailure, reason FailedCreate, the error as message (kubernetes
  pkg/controller/replicaset/replica_set_utils.go calculateStatus, read at a 2017 stored
  commit 00bdb3f), which the Deployment controller copies to the Deployment
  (pkg/controller/deployment/progress.go syncRolloutStatus, getReplicaFailures): not
  modelled.)
- D2 `images` maps an image to the programs on its PATH, for the images a test knows. A
  container whose command[0] is not there cannot start: containerd reports runc's error
  (`exec: "<cmd>": executable file not found in $PATH`) as the container's last
  termination, reason StartError, exit code 128, and kubelet backs off: the container
  waits with reason CrashLoopBackOff and the pod stays Running and not Ready
  (pod-lifecycle "Container restart policy"; the message as kubectl describe shows it
  for a busybox pod in a public troubleshooting thread).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import re
import time
from collections.abc import Callable
from typing import Any

import yaml

from fakes.kube_admission import FieldError, aggregate, go_quote, invalid
from fakes.kube_apiserver import (
    ApiError,
    generated_suffix,
    json_copy,
    selector_matches,
    stamp,
    stamp_seconds,
)
from fakes.kube_enums import enum_errors
from fakes.taint_eviction import tolerated

JOBSET = "/apis/jobset.x-k8s.io/v1alpha2"
# The hostname of the JobSet controller's pod (its Deployment jobset-controller-manager in
# the release manifest; the ReplicaSet hash and pod suffix made up): events name it.
JOBSET_CONTROLLER_POD = "jobset-controller-manager-6d4c9b7f8-q2x7k"
# Its ServiceAccount, which it writes as (v0.12.0 config/components/rbac/service_account.yaml
# `controller-manager`, config/default/kustomization.yaml namePrefix `jobset-`, namespace
# jobset-system)
JOBSET_ACCOUNT = ("jobset-system", "jobset-controller-manager")
JOB_RESOURCE = ("batch/v1", "jobs")
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
JOB_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"  # and the legacy `job-name`, on every Job's pod
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"  # J1, J5
ROLE = "jobset.sigs.k8s.io/replicatedjob-name"
# B5: `stop_ticks` of a container that ignores SIGTERM: it runs until its grace period's SIGKILL
SIGTERM_IGNORED = math.inf
# J5: what the garbage collector's foreground deletion puts on a Job until its pods are gone
# (metav1.FinalizerDeleteDependents)
FOREGROUND = "foregroundDeletion"
QUEUE = "kueue.x-k8s.io/queue-name"
DEFAULT_QUEUE = "default"  # kueue pkg/controller/constants/constants.go DefaultLocalQueueName
ADMISSION_GATE = "kueue.x-k8s.io/admission"  # kueue pod_webhook.go SchedulingGate
GPU = "nvidia.com/gpu"
# v0.19.2 pkg/workload/resources.go ErrNamespaceMismatch (scheduler.go nominate): K2
NAMESPACE_MISMATCH = "workload namespace doesn't match ClusterQueue selector"
# The Job controller's reason CompletionsReached (pkg/controller/job/job_controller.go); a
# SuccessPolicy's is "Matched rules at index <i>" (success_policy.go matchSuccessPolicy).
COMPLETIONS_REACHED = "Reached expected number of succeeded pods"
MAX_EXEC_TIME = "kueue.x-k8s.io/max-exec-time-seconds"  # constants MaxExecTimeSecondsLabel
KUEUE_CONFIG_MAP = "/api/v1/namespaces/kueue-system/configmaps/kueue-manager-config"
FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset")  # their integrations' FrameworkName
# K12: the pod and deployment integrations (pkg/controller/jobs/pod, jobs/deployment
# FrameworkName); enabling deployment or statefulset enables pod too
# (ImplicitlyEnabledFrameworkNames of each, jobframework/integrationmanager.go)
POD_FRAMEWORK = "pod"
IMPLIES_POD = ("deployment", "statefulset")
# pkg/constants ManagedByKueueLabelKey: the label the pod webhook puts on a pod it gates,
# and (pod/constants PodFinalizer) the finalizer of a plain pod it manages
MANAGED_LABEL = "kueue.x-k8s.io/managed"
# pod/constants SuspendedByParentAnnotation: the deployment webhook's mark on its template
SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"  # WorkloadPriorityClassLabel
# K12: the owners FindAncestorJobManagedByKueue walks through, by apiVersion and kind
# (integrationmanager.go isKnownOwner: every registered integration, enabled or not, and
# ReplicaSet), with the path the fake serves them at and the framework that manages them
# (ReplicaSet: none, it is only walked through); those the fake serves
_KNOWN_OWNERS = {
    "batch/v1": {"Job": ("/apis/batch/v1/namespaces/{ns}/jobs/", FRAMEWORKS[0])},
    "jobset.x-k8s.io/v1alpha2": {
        "JobSet": ("/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/", FRAMEWORKS[1])
    },
    "apps/v1": {
        kind: (f"/apis/apps/v1/namespaces/{{ns}}/{kind.lower()}s/", framework)
        for kind, framework in (
            ("Deployment", "deployment"),
            ("StatefulSet", "statefulset"),
            ("ReplicaSet", ""),
        )
    },
}

# Programs on the PATH of the tensorflow/tensorflow images the charm uses (D2), as far as
# the tests care: the OS's python3, sh and rm, and the console scripts of the TensorFlow
# wheel each image installs (entry_points.txt of the tensorflow 2.20.0 and 2.21.0 cp312
# manylinux wheels on PyPI, read 2026-11-24). 2.20.0's wheel declares `tensorboard` and
# requires tensorboard~=2.20.0; 2.21.0's does neither (TF 2.21 dropped TensorBoard).
_OS = {"python3", "python", "sh", "rm"}
_TF_221 = _OS | {"saved_model_cli", "tf_upgrade_v2", "tflite_convert", "toco"}
_TF_220 = _TF_221 | {"tensorboard", "import_pb_to_tensorboard"}
# tensorflow/serving images: Ubuntu with the model server copied to
# /usr/bin/tensorflow_model_server (tensorflow_serving/tools/docker/Dockerfile, tag 2.20.0).
_SERVING = {"sh", "bash", "tensorflow_model_server"}
TF_IMAGES: dict[str, set[str]] = {
    "tensorflow/tensorflow:2.21.0": _TF_221,
    "tensorflow/tensorflow:2.21.0-gpu": _TF_221,
    "tensorflow/tensorflow:2.20.0": _TF_220,
    "tensorflow/tensorflow:2.20.0-gpu": _TF_220,
    "tensorflow/serving:2.20.0": _SERVING,
    "tensorflow/serving:2.20.0-gpu": _SERVING,
}


def _slow_start(tries: list[Callable[[], bool]]) -> int:
    """B10: `tries` in batches of 1, 2, 4, ...; none after a batch with a refusal.

    kubernetes pkg/controller/replicaset/replica_set.go slowStartBatch and job_controller.go
    manageJob (controller.SlowStartInitialBatchSize 1): every try of a batch is made, the
    next batch only when all succeeded. Returns how many succeeded.
    """
    done, size = 0, 1
    while tries:
        batch, tries = tries[:size], tries[size:]
        results = [attempt() for attempt in batch]
        done += sum(results)
        if not all(results):
            break
        size *= 2
    return done


def _true(obj: dict, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _condition_of(obj: dict, kind: str) -> dict:
    """The object's condition of type `kind`, or {}."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _set(
    obj: dict,
    kind: str,
    status: str,
    reason: str = "",
    message: str = "",
    at: float | None = None,
) -> None:
    """Set the condition, its lastTransitionTime `at` (seconds; now when None) or kept.

    As apimachinery's meta.SetStatusCondition (pkg/api/meta/conditions.go), which Kueue
    and JobSet use: the time changes only when the status does. metav1.Condition requires
    lastTransitionTime (and a reason), so the CRDs refuse a condition without it.
    """
    old = [c for c in (obj.setdefault("status", {}).get("conditions") or []) if c["type"] == kind]
    conditions = [c for c in obj["status"].get("conditions") or [] if c["type"] != kind]
    new = {"type": kind, "status": status, "reason": reason, "message": message}
    same = old and old[0]["status"] == status and "lastTransitionTime" in old[0]
    new["lastTransitionTime"] = (
        old[0]["lastTransitionTime"] if same else stamp(time.time() if at is None else at)
    )
    conditions.append(new)
    obj["status"]["conditions"] = conditions


def _queue_name(obj: dict) -> str:
    """Kueue's jobframework QueueNameForObject: the queue-name label's value ("" names none).

    Every check of Kueue v0.19.2 compares it with "" (utils.go WorkloadShouldBeSuspended,
    reconciler.go ReconcileGenericJob and FindAncestorJobManagedByKueue, defaults.go
    defaultLocalQueueApplies), so a label with an empty value is no label.
    """
    return ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE) or ""


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase", "")


def _gone(obj: dict) -> bool:
    """Being deleted (a deletionTimestamp: terminating, or kept by a finalizer)."""
    return bool(obj["metadata"].get("deletionTimestamp"))


def _ended(pod: dict) -> bool:
    return _phase(pod) in ("Succeeded", "Failed")


def _active(pod: dict) -> bool:
    """Not ended, not terminating (kubernetes pkg/controller/controller_utils.go IsPodActive)."""
    return not _ended(pod) and not _gone(pod)


def _terminating(pod: dict) -> bool:
    """Not ended, with a deletionTimestamp (controller_utils.go IsPodTerminating)."""
    return not _ended(pod) and _gone(pod)


def _replaces_only_failed(job: dict) -> bool:
    """The Job's podReplacementPolicy is Failed (job_controller.go onlyReplaceFailedPods).

    Unset, kube-apiserver defaults it (pkg/apis/batch/v1/defaults.go SetDefaults_Job):
    Failed with a podFailurePolicy, else TerminatingOrFailed (a terminating pod is
    replaced at once: batch/v1 JobSpec "recreate pods when they are terminating").
    """
    spec = job["spec"]
    default = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    return spec.get("podReplacementPolicy", default) == "Failed"


def _unschedulable(pod: dict) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _preference(pod_spec: dict, node: dict) -> int:
    """The summed weight of the pod's preferred node-affinity terms this node matches."""
    labels = node["metadata"].get("labels") or {}
    terms = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    total = 0
    for term in terms:
        ok = True
        for e in term["preference"].get("matchExpressions") or []:
            op, key = e["operator"], e["key"]
            if op == "Exists":
                ok &= key in labels
            elif op == "DoesNotExist":
                ok &= key not in labels
            elif op == "In":
                ok &= labels.get(key) in e["values"]
            else:
                raise NotImplementedError(f"node affinity operator {op}")
        total += term["weight"] if ok else 0
    return total


def _gpus(pod_spec: dict) -> int:
    total = 0
    for c in pod_spec.get("containers") or []:
        total += int(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0))
    return total


# -- Kueue's quota (K2, K6)
_SUFFIX = {
    "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip


def quantity(text: Any) -> float:
    """A Kubernetes quantity (apimachinery pkg/api/resource/quantity.go suffixes)."""
    text = str(text)
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * _SUFFIX[suffix]
    return float(text)


def _show(resource: str, value: float) -> str:
    """An amount as Kueue's messages print it (resource.Quantity's canonical form)."""
    if resource == "memory":
        for suffix in ("Ti", "Gi", "Mi", "Ki"):
            if value >= _SUFFIX[suffix] and value % _SUFFIX[suffix] == 0:
                return f"{int(value // _SUFFIX[suffix])}{suffix}"
    if value != int(value):
        return f"{round(value * 1000)}m"
    return str(int(value))


def pod_requests(pod_spec: dict) -> dict[str, float]:
    """What one pod asks for, as Kueue counts it (K6).

    The containers' requests summed, a resource with a limit and no request counting its
    limit (kubernetes pkg/apis/core/v1/defaults.go SetDefaults_Container copies limits to
    unset requests; kueue pkg/workload/workload.go totalRequestsFromPodSets takes
    resourcehelpers.PodRequests of the pod template).
    """
    total: dict[str, float] = {}
    for c in pod_spec.get("containers") or []:
        resources = c.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in asked.items():
            total[name] = total.get(name, 0.0) + quantity(value)
    return {k: v for k, v in total.items() if v}


def _merge_scheduling(job_template: dict, replicated: dict) -> None:
    """J6: the replicated Job's nodeSelector and tolerations merged into a child Job's.

    jobset v0.12.0 jobset_controller.go resumeJob: "Certain fields on the Job pod template
    may be mutated while a JobSet is suspended, for integration with Kueue" (MergeMaps:
    the replicated Job's value wins a key; MergeSlices: tolerations not yet there added).
    """
    spec = job_template.setdefault("spec", {})
    theirs = replicated.get("spec") or {}
    selector = {**(spec.get("nodeSelector") or {}), **(theirs.get("nodeSelector") or {})}
    if selector:
        spec["nodeSelector"] = selector
    tolerations = list(spec.get("tolerations") or [])
    tolerations += [t for t in theirs.get("tolerations") or [] if t not in tolerations]
    if tolerations:
        spec["tolerations"] = tolerations


def jobset_pod_sets(js: dict) -> list[dict]:
    """The Workload's spec.podSets for a JobSet: one per replicated Job.

    count = replicas x min(parallelism, completions) (kueue pkg/controller/jobs/jobset/
    jobset_controller.go podsCount, PodsCountPerReplica).
    """
    out = []
    for rj in js["spec"]["replicatedJobs"]:
        job = rj["template"]["spec"]
        per_replica = job.get("parallelism", 1)
        per_replica = min(per_replica, job.get("completions", per_replica))
        out.append(
            {
                "name": rj["name"],
                "count": rj.get("replicas", 1) * per_replica,
                "template": json_copy(job["template"]),
            }
        )
    return out


class Quota:
    """Kueue's quota tree over every ClusterQueue, Cohort and admitted Workload (K6).

    Usage is what admitted, unfinished Workloads of every namespace hold
    (status.admission.podSetAssignments[].resourceUsage, per flavor), so two teams'
    controllers see each other's jobs as Kueue's one cache does.
    """

    def __init__(self, api: Any):
        self.api = api
        self.cqs = {c["metadata"]["name"]: c for c in api.objects(f"{KUEUE}/clusterqueues/")}
        self.cohorts = {c["metadata"]["name"]: c for c in api.objects(f"{KUEUE}/cohorts/")}
        self.flavors = {f["metadata"]["name"]: f for f in api.objects(f"{KUEUE}/resourceflavors/")}
        self.usage: dict[tuple[str, str, str], float] = {}
        self.workloads = api.objects(f"{KUEUE}/namespaces/", kind="Workload")
        for w in self.workloads:
            if _true(w, "Admitted") and not _true(w, "Finished"):
                self.add(w, 1)
        for cohort in self.cohorts.values():
            if cohort["spec"].get("parentName"):
                raise NotImplementedError("hierarchical cohorts")

    def add(self, workload: dict, sign: int) -> None:
        """Count (sign 1) or forget (-1) what the admitted Workload holds."""
        admission = (workload.get("status") or {}).get("admission") or {}
        cq = admission.get("clusterQueue")
        for ps in admission.get("podSetAssignments") or []:
            for resource, amount in (ps.get("resourceUsage") or {}).items():
                key = (cq, ps["flavors"][resource], resource)
                self.usage[key] = self.usage.get(key, 0.0) + sign * quantity(amount)

    @staticmethod
    def _quota(groups: list[dict], flavor: str, resource: str) -> dict | None:
        for group in groups or []:
            for f in group.get("flavors") or []:
                for r in f.get("resources") or []:
                    if f["name"] == flavor and r["name"] == resource:
                        return r
        return None

    def nominal(self, cq: str, flavor: str, resource: str) -> float:
        q = self._quota(self.cqs[cq]["spec"].get("resourceGroups"), flavor, resource)
        return quantity(q.get("nominalQuota", 0)) if q else 0.0

    def _members(self, cohort: str) -> list[str]:
        return [n for n, c in self.cqs.items() if c["spec"].get("cohortName") == cohort]

    def local(self, cq: str, flavor: str, resource: str) -> float:
        """Its localQuota: nominal - lendingLimit, kept from the cohort (0 without a limit).

        resource_node.go localQuota (lendingLimit: Beta, on by default in 0.19).
        """
        q = self._quota(self.cqs[cq]["spec"].get("resourceGroups"), flavor, resource)
        limit = (q or {}).get("lendingLimit")
        if limit is None:
            return 0.0
        return max(0.0, self.nominal(cq, flavor, resource) - quantity(limit))

    def subtree(self, cohort: str, flavor: str, resource: str) -> float:
        """The cohort's SubtreeQuota: its own nominalQuota plus its members' less localQuota.

        resource_node.go accumulateFromChild: a member's lendingLimit keeps its localQuota
        out of the cohort.
        """
        obj = self.cohorts.get(cohort)
        own = self._quota((obj or {}).get("spec", {}).get("resourceGroups"), flavor, resource)
        total = quantity(own.get("nominalQuota", 0)) if own else 0.0
        return total + sum(
            self.nominal(m, flavor, resource) - self.local(m, flavor, resource)
            for m in self._members(cohort)
        )

    def _borrowing(self, cq: str, flavor: str, resource: str) -> float | None:
        q = self._quota(self.cqs[cq]["spec"].get("resourceGroups"), flavor, resource)
        limit = (q or {}).get("borrowingLimit")
        return None if limit is None else quantity(limit)

    def available(self, cq: str, flavor: str, resource: str) -> float:
        """What the ClusterQueue may still take (resource_node.go, func available).

        Without a cohort, its nominal quota less its usage. In one, what is left of its
        localQuota plus what the cohort has left (SubtreeQuota less each member's usage
        past its localQuota), the latter capped when a borrowingLimit is set at what it
        stores in the cohort (nominal - localQuota) less what it uses there plus the limit.
        At least 0 (ClusterQueueSnapshot.Available).
        """
        used = self.usage.get((cq, flavor, resource), 0.0)
        nominal = self.nominal(cq, flavor, resource)
        cohort = self.cqs[cq]["spec"].get("cohortName")
        if not cohort:
            return max(0.0, nominal - used)
        local = self.local(cq, flavor, resource)
        left = self.subtree(cohort, flavor, resource) - sum(
            max(0.0, self.usage.get((m, flavor, resource), 0.0) - self.local(m, flavor, resource))
            for m in self._members(cohort)
        )
        limit = self._borrowing(cq, flavor, resource)
        if limit is not None:
            left = min(left, nominal - local - max(0.0, used - local) + limit)
        return max(0.0, max(0.0, local - used) + left)

    def potential(self, cq: str, flavor: str, resource: str) -> float:
        """The most it could take, nothing in use (resource_node.go potentialAvailable).

        Its localQuota plus the cohort's SubtreeQuota, at most nominal + borrowingLimit.
        """
        nominal = self.nominal(cq, flavor, resource)
        cohort = self.cqs[cq]["spec"].get("cohortName")
        if not cohort:
            return nominal
        limit = self._borrowing(cq, flavor, resource)
        whole = self.local(cq, flavor, resource) + self.subtree(cohort, flavor, resource)
        return whole if limit is None else min(whole, nominal + limit)

    def _flavor_mismatch(self, name: str, pod_spec: dict) -> str | None:
        """flavorassigner.go checkFlavorForPodSets: taints tolerated, labels selected."""
        flavor = (self.flavors.get(name) or {}).get("spec") or {}
        for taint in flavor.get("nodeTaints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerated(
                [*(pod_spec.get("tolerations") or []), *(flavor.get("tolerations") or [])],
                taint,
            ):
                text = f"{taint['key']}={taint.get('value', '')}:{taint['effect']}"
                return f"untolerated taint {text} in flavor {name}"
        selector = pod_spec.get("nodeSelector") or {}
        labels = flavor.get("nodeLabels") or {}
        if any(labels.get(k) != v for k, v in selector.items() if k in labels):
            return f"flavor {name} doesn't match node affinity"
        return None

    def _misfits(
        self, cq: str, flavor: str, total: dict[str, float], assumed: dict[tuple[str, str], float]
    ) -> list[str]:
        """Why `total` does not fit `flavor` now (fitsResourceQuota), or nothing."""
        reasons = []
        for r, want in total.items():
            before = assumed.get((flavor, r), 0.0)
            most = self.potential(cq, flavor, r)
            if before + want > most:
                reasons.append(
                    f"insufficient quota for {r} in flavor {flavor}, previously considered "
                    f"podsets requests ({_show(r, before)}) + current podset request "
                    f"({_show(r, want)}) > maximum capacity ({_show(r, most)})"
                )
            elif before + want > self.available(cq, flavor, r):
                more = before + want - self.available(cq, flavor, r)
                reasons.append(
                    f"insufficient unused quota for {r} in flavor {flavor}, "
                    f"{_show(r, more)} more needed"
                )
        return reasons

    def _group_flavor(
        self,
        cq: str,
        pod_spec: dict,
        group: dict,
        total: dict[str, float],
        assumed: dict[tuple[str, str], float],
        reasons: list[str],
    ) -> str | None:
        """The first flavor of the group that fits what the pod set asks of it."""
        wanted = {r: v for r, v in total.items() if r in group["coveredResources"]}
        for f in group.get("flavors") or []:
            why = self._flavor_mismatch(f["name"], pod_spec)
            misfits = [why] if why else self._misfits(cq, f["name"], wanted, assumed)
            if not misfits:
                return f["name"]
            reasons += misfits
        return None

    def preempt_usage(self, cq: str, pod_sets: list[dict]) -> dict[tuple[str, str], float] | None:
        """The Workload's usage per (flavor, resource) with flavors in Preempt mode, or None.

        flavorassigner.go: a pod set's resource group gets its first flavor that fits
        (Fit), else the first whose maximum capacity (`potential`) holds the request
        (Preempt); None when no flavor could hold it even with preemption.
        """
        groups = self.cqs[cq]["spec"].get("resourceGroups") or []
        usage: dict[tuple[str, str], float] = {}
        for ps in pod_sets:
            spec = ps["template"]["spec"]
            total = {r: v * ps["count"] for r, v in pod_requests(spec).items()}
            for group in groups:
                wanted = {r: v for r, v in total.items() if r in group["coveredResources"]}
                if not wanted:
                    continue
                usable = [
                    f["name"]
                    for f in group.get("flavors") or []
                    if not self._flavor_mismatch(f["name"], spec)
                ]
                fit = next((f for f in usable if not self._misfits(cq, f, wanted, usage)), None)
                held = next(
                    (
                        f
                        for f in usable
                        if all(
                            usage.get((f, r), 0.0) + v <= self.potential(cq, f, r)
                            for r, v in wanted.items()
                        )
                    ),
                    None,
                )
                chosen = fit or held
                if chosen is None:
                    return None
                for r, v in wanted.items():
                    usage[(chosen, r)] = usage.get((chosen, r), 0.0) + v
            if any(not any(r in g["coveredResources"] for g in groups) for r in total):
                return None
        return usage

    def borrowing(self, cq: str, flavor: str, resource: str, extra: float = 0.0) -> bool:
        """Its usage (plus `extra`) is over its nominal quota (resource_node.go Borrowing)."""
        used = self.usage.get((cq, flavor, resource), 0.0) + extra
        return used > self.nominal(cq, flavor, resource)

    def share(self, cq: str, extra: dict[tuple[str, str], float] | None = None) -> float:
        """The ClusterQueue's DominantResourceShare (fair_sharing.go dominantResourceShare).

        Per resource, what it borrows over its nominal quota summed over flavors, x 1000
        over what the cohort could lend of that resource (calculateLendable: its
        potentialAvailable summed over the root's flavors); the largest ratio, fair weight
        1 (the charm sets none). -1 when it borrows nothing (not a target: DRS.IsBorrowing
        false), 0 without a cohort.
        """
        cohort = self.cqs[cq]["spec"].get("cohortName")
        if not cohort:
            return -1.0
        extra = extra or {}
        keys = {(f, r) for (c, f, r) in self.usage if c == cq} | set(extra)
        borrowed: dict[str, float] = {}
        for f, r in keys:
            used = self.usage.get((cq, f, r), 0.0) + extra.get((f, r), 0.0)
            over = used - self.nominal(cq, f, r)
            if over > 0:
                borrowed[r] = borrowed.get(r, 0.0) + over
        if not borrowed:
            return -1.0
        best = 0.0
        for r, amount in borrowed.items():
            lendable = sum(self.potential(cq, f, r) for f in self.flavors)
            if lendable > 0:
                best = max(best, amount * 1000.0 / lendable)
        return best

    def assign(self, cq: str, pod_sets: list[dict]) -> tuple[list[dict] | None, str]:
        """flavorassigner.go: a flavor per pod set and resource group, or why none.

        Per pod set, per resource group covering what it asks for, the first flavor (in
        the ClusterQueue's order) that fits: what this Workload's earlier pod sets took of
        it plus this request within `available` (Fit). Over `potential` is "insufficient
        quota ... > maximum capacity" (ExceedsMaxQuota); otherwise "insufficient unused
        quota for <resource> in flavor <flavor>, <amount> more needed" (fitsResourceQuota).
        The reasons of every flavor tried are sorted and joined (Status.Message), each pod
        set's prefixed "couldn't assign flavors to pod set <name>: " (Assignment.Message).
        """
        groups = self.cqs[cq]["spec"].get("resourceGroups") or []
        assumed: dict[tuple[str, str], float] = {}
        out, messages = [], []
        for ps in pod_sets:
            total = {r: v * ps["count"] for r, v in pod_requests(ps["template"]["spec"]).items()}
            flavors: dict[str, str] = {}
            reasons: list[str] = []
            for resource in total:
                group = next((g for g in groups if resource in g["coveredResources"]), None)
                if group is None:
                    reasons.append(f"resource {resource} unavailable in ClusterQueue")
                    break
                if resource in flavors:
                    continue
                chosen = self._group_flavor(
                    cq, ps["template"]["spec"], group, total, assumed, reasons
                )
                if chosen is None:
                    break
                flavors |= {r: chosen for r in total if r in group["coveredResources"]}
            if set(flavors) != set(total):
                messages.append(
                    f"couldn't assign flavors to pod set {ps['name']}: "
                    + ", ".join(sorted(reasons))
                )
                continue
            for r, v in total.items():
                assumed[(flavors[r], r)] = assumed.get((flavors[r], r), 0.0) + v
            usage = {r: _show(r, v) for r, v in total.items()}
            out.append(
                {
                    "name": ps["name"],
                    "flavors": flavors,
                    "resourceUsage": usage,
                    "count": ps["count"],
                }
            )
        if messages:
            return None, "; ".join(messages)
        return out, ""


class _FairPreemption:
    """One run of preemption.go fairPreemptions over a flat cohort (see _preempt_for)."""

    def __init__(
        self,
        quota: Quota,
        cq: str,
        need: dict[tuple[str, str], float],
        frs: set[tuple[str, str]],
    ):
        self.quota, self.cq, self.need = quota, cq, need
        # queueWithinNominalInResourcesNeedingPreemption, the Workload's usage added
        self.within = not any(quota.borrowing(cq, f, r, need.get((f, r), 0.0)) for f, r in frs)
        self.taken: list[tuple[dict, str]] = []

    def fits(self) -> bool:
        """As workloadFitsForFairSharing: its usage within what its queue may take."""
        return all(v <= self.quota.available(self.cq, f, r) for (f, r), v in self.need.items())

    def share(self, cq: str) -> float:
        return self.quota.share(cq, self.need if cq == self.cq else None)

    def next_target(self, queues: dict[str, list[dict]]) -> str | None:
        """As ordering.go nextTarget: the borrowing queue of highest share."""
        best, best_share = None, -1.0
        for where, items in queues.items():
            share = self.share(where)
            if not items or (share < 0 and where != self.cq):
                continue  # pruned: nothing left, or not borrowing
            if best is None or share > best_share:
                best, best_share = where, share
        return best

    def take(self, workload: dict, reason: str) -> bool:
        self.quota.add(workload, -1)
        self.taken.append((workload, reason))
        return self.fits()

    def first_strategy(self, left: dict[str, list[dict]]) -> tuple[bool, dict[str, list[dict]]]:
        """As runFirstFsStrategy, LessThanOrEqualToFinalShare: (fits, candidates left)."""
        retry: dict[str, list[dict]] = {}
        while (where := self.next_target(left)) is not None:
            if where == self.cq or self.within:
                reason = "InClusterQueue" if where == self.cq else "InCohortReclamation"
                if self.take(left[where].pop(0), reason):
                    return True, retry
                continue
            mine = self.share(self.cq)
            for w in list(left[where]):
                left[where].remove(w)
                self.quota.add(w, -1)
                after = self.quota.share(where)
                self.quota.add(w, 1)
                if mine <= max(after, 0.0):
                    if self.take(w, "InCohortFairSharing"):
                        return True, retry
                    break  # might need to pick another queue now
                retry.setdefault(where, []).append(w)
        return False, retry

    def second_strategy(self, retry: dict[str, list[dict]]) -> bool:
        """As runSecondFsStrategy: LessThanInitialShare, one candidate per queue."""
        while (where := self.next_target(retry)) is not None:
            w = retry.pop(where)[0]
            if self.share(self.cq) < self.share(where) and self.take(w, "InCohortFairSharing"):
                return True
        return False

    def undo(self) -> None:
        for w, _ in self.taken:
            self.quota.add(w, 1)

    def fill_back(self) -> list[tuple[dict, str]]:
        """As fillBackWorkloads: give back, last taken first but the last, what is unneeded.

        The quota is left as it was: the victims hold theirs until they stopped (_evict).
        """
        for kept in reversed(self.taken[:-1]):
            self.quota.add(kept[0], 1)
            if self.fits():
                self.taken.remove(kept)
            else:
                self.quota.add(kept[0], -1)
        self.undo()
        return self.taken


# preemption.go HumanReadablePreemptionReasons (v0.19.2), by the Preempted condition's reason
_PREEMPTION_REASONS = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}
# (id of the API server, namespace) -> its controllers: Kueue is one controller for every
# namespace, so a preemption in one team's queue stops a job of another team's
_CONTROLLERS: dict[tuple[int, str], BatchControllers] = {}


class BatchControllers:
    """Kueue, JobSet, the Job controller and kubelet over one namespace (see above)."""

    def __init__(self, api: Any, namespace: str):
        self.api = api
        self.ns = namespace
        self.per_tick = 1000
        self.enabled = True
        self.logs: Callable[[dict], str] | None = None
        self.waiting_reason: str | None = None
        self.images: dict[str, set[str]] = dict(TF_IMAGES)
        self._managed: bool | None = None  # K1: `managed`, unless a test says otherwise
        self._admissions = 0
        self._admitted_at: dict[str, int] = {}
        self._config: tuple[str | None, dict] = ("", {})
        # seconds, for conditions' lastTransitionTime (K9's deadline); tests with fake time
        # set theirs
        self.clock: Callable[[], float] = time.time
        api.mutators.append(self._suspend_on_create)
        api.mutators.append(self._webhooks_on_create)
        api.update_mutators.append(self._webhooks_on_update)
        _CONTROLLERS[(id(api), namespace)] = self
        # Runs the containers of the Job controller's pods (start/stop/reap); None: pods
        # only change when a test says so (end_pod).
        self.kubelet: Any | None = None
        self.refused: list[str] = []  # B8: pods admission refused (FailedCreate events)
        self.expect_refusals = False  # a test showing B8 says so; others expect none
        # B5, J5: ticks a deleted pod's container runs on after SIGTERM, by replicated Job
        # (a JobSet's pods) or Job name (a Job's own; none: it exits at once,
        # SIGTERM_IGNORED: until the grace period's SIGKILL); `_stopping`: each
        # terminating pod's ticks left
        self.stop_ticks: dict[str, float] = {}
        self._stopping: dict[str, float] = {}
        # the JobSet controller's event cache (client-go tools/events), by isomorphic key
        self._events: dict[tuple, dict] = {}

    @property
    def managed(self) -> bool:
        """K1: Kueue manages this namespace: its labels match managedJobsNamespaceSelector.

        The selector of the manager configuration (K8; the control plane's names the label
        `gpu-k8s.io/kueue: managed`, its kueue.configure); without one, upstream's default
        (apis/config/v1beta2/defaults.go: every namespace but kube-system and
        kueue-system). Only `matchLabels` is read. A test may set it outright.
        """
        if self._managed is not None:
            return self._managed
        selector = self._kueue_config().get("managedJobsNamespaceSelector")
        if selector is None:
            return self.ns not in ("kube-system", "kueue-system")
        namespace = self.api.get_object(f"/api/v1/namespaces/{self.ns}") or {}
        labels = (namespace.get("metadata") or {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())

    @managed.setter
    def managed(self, value: bool) -> None:
        self._managed = value

    # -- paths
    def _jobsets(self) -> list[dict]:
        return self.api.objects(f"{JOBSET}/namespaces/{self.ns}/jobsets/")

    def _jobs(self) -> list[dict]:
        return self.api.objects(f"/apis/batch/v1/namespaces/{self.ns}/jobs/")

    def _pods(self) -> list[dict]:
        return self.api.objects(f"/api/v1/namespaces/{self.ns}/pods/")

    def _workloads(self) -> list[dict]:
        return self.api.objects(f"{KUEUE}/namespaces/{self.ns}/workloads/")

    def _put(self, obj: dict, admit: Callable[[], None] | None = None) -> dict:
        """Store a controller's object, checked as kube-apiserver validates its create.

        `put_object` decodes and validates it (enums from `fakes.kube_enums` included): a
        Job the JobSet controller builds from a template with `completionMode: Indexd` is
        refused (422) as the real server refuses the controller's create.
        """
        kind = obj["kind"]
        name = obj["metadata"]["name"]
        path = {
            "JobSet": f"{JOBSET}/namespaces/{self.ns}/jobsets/{name}",
            "Job": f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}",
            "Pod": f"/api/v1/namespaces/{self.ns}/pods/{name}",
            "Deployment": f"/apis/apps/v1/namespaces/{self.ns}/deployments/{name}",
            "Service": f"/api/v1/namespaces/{self.ns}/services/{name}",
        }[kind]
        return self.api.put_object(path, obj, admit)

    def _condition(self, workload: dict, kind: str, status: str, *args: str) -> None:
        """`_set` a Workload's condition at `clock`'s time."""
        _set(workload, kind, status, *args, at=self.clock())

    def _write_status(self, obj: dict) -> None:
        """Write an object's status as its controller does: to `/status`, validated.

        Kueue writes a Workload's status through its status subresource (workload.go
        ApplyAdmissionStatusPatch: `c.Status().Patch(..., client.Apply, ...)`, and the
        other status changes likewise) and a ClusterQueue's with `r.client.Status().Update`
        (clusterqueue_controller.go updateCqStatusIfChanged, only when it changed); JobSet
        its JobSet's with `r.Status().Update` (jobset v0.12.0 jobset_controller.go
        updateJobSetStatus), the Job controller a Job's with `UpdateStatus` (kubernetes
        pkg/controller/job/job_controller.go updateJobStatus). So the fake API server
        decodes the body strictly and checks the object, status included, against the
        real CRD at the pinned tag (`fakes.crds`) or the 1.36 schema: a status shape the
        controller could never write fails the test that makes it. The write keeps the
        stored spec (the status strategy), so `obj`'s spec changes are not written
        (`_write_spec`). A Pod's status is kubelet's PATCH (`_pod_status`). `obj` takes
        the new resourceVersion.
        """
        if obj["kind"] == "Pod":
            self._pod_status(obj)
            return
        meta = obj["metadata"]
        path = {
            "Workload": f"{KUEUE}/namespaces/{meta.get('namespace')}/workloads/{meta['name']}",
            "ClusterQueue": f"{KUEUE}/clusterqueues/{meta['name']}",
            "JobSet": f"{JOBSET}/namespaces/{self.ns}/jobsets/{meta['name']}",
            "Job": f"/apis/batch/v1/namespaces/{self.ns}/jobs/{meta['name']}",
        }[obj["kind"]]
        meta["resourceVersion"] = self._kueue_write(f"{path}/status", obj)

    def _pod_status(self, pod: dict) -> None:
        """Kubelet's pod status write: a PATCH of pods/status (status_manager.go syncPod).

        kubelet sends a two-way strategic merge patch from the status it last wrote to
        the new one, with the pod's uid as precondition (kubernetes pkg/util/pod
        PatchPodStatus); its effect is the new status whole, sent here as a JSON merge
        patch (a list replaced whole, a status field left out set to null), validated
        strictly. Whatever else of `pod` changed is not written (podStatusStrategy keeps
        the spec).
        """
        name = pod["metadata"]["name"]
        path = f"/api/v1/namespaces/{self.ns}/pods/{name}"
        stored = (self.api.get_object(path) or {}).get("status") or {}
        status: dict[str, Any] = dict.fromkeys(stored)
        status.update(pod.get("status") or {})
        patch = {"metadata": {"uid": pod["metadata"]["uid"]}, "status": status}
        headers = {
            "Authorization": "Bearer admin-token",
            "Content-Type": "application/merge-patch+json",
        }
        answer = self.api.handle(
            "PATCH",
            f"{path}/status?fieldValidation=Strict",
            headers,
            json.dumps(patch).encode(),
            controller=True,
        )
        if answer[0] != 200:
            raise AssertionError(f"the API server refused kubelet's write: {answer[2]!r}")
        pod["metadata"]["resourceVersion"] = json.loads(answer[2])["metadata"]["resourceVersion"]

    def _write_spec(self, workload: dict) -> None:
        """Update a Workload (its spec; the stored status stays) through the API server."""
        meta = workload["metadata"]
        path = f"{KUEUE}/namespaces/{meta['namespace']}/workloads/{meta['name']}"
        meta["resourceVersion"] = self._kueue_write(path, workload)

    def _kueue_write(self, path: str, obj: dict) -> str:
        """PUT `obj` at `path` with fieldValidation=Strict; its new resourceVersion."""
        headers = {"Authorization": "Bearer admin-token", "Content-Type": "application/json"}
        body = json.dumps(obj).encode()
        answer = self.api.handle(
            "PUT", f"{path}?fieldValidation=Strict", headers, body, controller=True
        )
        if answer[0] != 200:
            raise AssertionError(f"the API server refused the controller's write: {answer[2]!r}")
        return json.loads(answer[2])["metadata"]["resourceVersion"]

    def _admitted(self, pod: dict, owner: dict) -> bool:
        """B8: admission and validation admit the controller's new pod, or FailedCreate.

        The Priority plugin (`fakes.kube_priority`, mutating) first, then validation (the
        enums, `fakes.kube_enums`), as the registry's BeforeCreate runs before the
        validating admission plugins, then PodSecurity, then the ValidatingAdmission-
        Policies, which see the pod unbound as its controller creates it, then the
        ResourceQuota plugin's counts (`admit_controller_create`).
        """
        namespace = self.api.get_object(f"/api/v1/namespaces/{self.ns}")
        try:
            self.api.admit_priority("CREATE", pod)  # a mutating plugin: first
            errors = enum_errors("v1", "Pod", pod)
            if errors:
                raise invalid("v1", "Pod", pod["metadata"]["name"], errors)
            self.api.admission.pod_security.validate(
                group="",
                kind="Pod",
                plural="pods",
                subresource="",
                operation="CREATE",
                obj=pod,
                old=None,
                namespace=namespace,
                pods=list,
            )
            unbound = json_copy(pod)
            unbound["spec"].pop("nodeName", None)
            account = "job-controller" if owner["kind"] == "Job" else "replicaset-controller"
            self.api.admit_controller_create(("kube-system", account), "v1", "pods", unbound)
        except ApiError as e:
            self.refused.append(e.message)
            name = f"{owner['metadata']['name']}.{generated_suffix(16)}"
            self.api.put_object(
                f"/api/v1/namespaces/{self.ns}/events/{name}",
                {
                    "involvedObject": {
                        "apiVersion": owner["apiVersion"],
                        "kind": owner["kind"],
                        "name": owner["metadata"]["name"],
                        "namespace": self.ns,
                        "uid": owner["metadata"]["uid"],
                    },
                    "type": "Warning",
                    "reason": "FailedCreate",
                    "message": f"Error creating: {e.message}",
                    "source": {"component": f"{owner['kind'].lower()}-controller"},
                },
            )
            return False
        return True

    def _delete(self, obj: dict) -> None:
        """Delete with its dependents (the API server's garbage collector)."""
        self._delete_all([obj])

    def _delete_all(self, objs: list[dict]) -> None:
        """Delete these objects with their dependents: all their pods stop together."""
        uids = {obj["metadata"]["uid"] for obj in objs}
        self._delete_pods(
            [
                pod
                for pod in self._pods()
                if any(r.get("uid") in uids for r in pod["metadata"].get("ownerReferences") or [])
            ]
        )
        for obj in objs:
            kind = obj["kind"]
            base = "/apis/batch/v1" if kind == "Job" else JOBSET
            plural = "jobs" if kind == "Job" else "jobsets"
            name = obj["metadata"]["name"]
            self.api.delete_object(f"{base}/namespaces/{self.ns}/{plural}/{name}")

    def _delete_pod(self, pod: dict) -> None:
        self._delete_pods([pod])

    def _delete_pods(self, pods: list[dict]) -> None:
        """B5: deleted pods' containers get SIGTERM, then SIGKILL after the grace period.

        Each node's kubelet acts on its own pods at once, so the containers of pods
        deleted together are stopped together (`kubelet.stop_pods`), not one after the
        other. With a `kubelet` (real processes), the pod objects go once they have
        exited: the Job's replacement waits for that (podReplacementPolicy Failed, the
        default with a podFailurePolicy), and a restarted gang's old pods are all gone
        before any new Job is created, whatever the restartStrategy (J5's Recreate
        overlap is shown without a kubelet, with `stop_ticks`). Without one, each pod is
        deleted as its controller deletes it (`delete_pod`): gracefully under the API
        server's `graceful_pods`, and always where its container runs on after SIGTERM
        (`stop_ticks`), then kubelet signals it (`_sigterm`).
        """
        if self.kubelet is not None:
            if pods:
                self.kubelet.stop_pods(pods)
            for pod in pods:
                self.api.delete_object(
                    f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}"
                )
            return
        for pod in pods:
            graceful = True if self._stop_ticks(pod) else None  # None: as the server says
            left = self.api.delete_pod(self.ns, pod["metadata"]["name"], graceful=graceful)
            if left is not None:
                self._sigterm(left)

    def _stop_ticks(self, pod: dict) -> float:
        """B5, J5: the ticks the pod's container runs on after SIGTERM (`stop_ticks`)."""
        labels = pod["metadata"].get("labels") or {}
        return self.stop_ticks.get(labels.get(ROLE) or labels.get(JOB_NAME) or "", 0)

    def _sigterm(self, pod: dict) -> None:
        """Kubelet's SIGTERM to a terminating pod's container, once.

        It exits with 143 (128 + SIGTERM) and the pod goes (`pod_exited`), or it runs on
        for its `stop_ticks` (`_reap`), at most until its grace period's SIGKILL.
        """
        name = pod["metadata"]["name"]
        if name in self._stopping:
            return
        ticks = self._stop_ticks(pod)
        if ticks:
            self._stopping[name] = ticks
        else:
            self.api.pod_exited(self.ns, name, 143)

    def _delete_previous(self, jobs: list[dict]) -> None:
        """J5: delete a previous restart attempt's Jobs, Foreground, once each.

        Their pods are deleted together (`_delete_pods`); a Job whose pods are still
        terminating (their containers running on after SIGTERM: `stop_ticks`) stays, with
        the `foregroundDeletion` finalizer, until `_reap` removes it.
        """
        jobs = [j for j in jobs if not j["metadata"].get("deletionTimestamp")]
        if not jobs:
            return
        every = self._pods()
        self._delete_pods([p for job in jobs for p in self._owned(job, every)])
        left = self._pods()
        now = stamp(self.clock())
        for job in jobs:
            if self._owned(job, left):
                job["metadata"]["deletionTimestamp"] = now
                job["metadata"]["finalizers"] = [FOREGROUND]
                self._put(job)
            else:
                self.api.delete_object(
                    f"/apis/batch/v1/namespaces/{self.ns}/jobs/{job['metadata']['name']}"
                )

    def _reap(self) -> None:
        """B5, J5: kubelet's part of this namespace's terminating pods, then the GC's.

        A pod past its grace period is killed (the API server's `kill_expired_pods`); one
        whose container ran on for its `stop_ticks` exits; under `graceful_pods`, a pod
        someone else deleted (a team's DELETE, an eviction) gets its SIGTERM when first
        seen (`_sigterm`). Then a Job deleted Foreground whose pods are all gone goes too
        (the garbage collector removes its finalizer).
        """
        graceful = self.api.graceful_pods and self.kubelet is None
        if not self._stopping and not graceful:
            return
        for name in self.api.kill_expired_pods(self.ns):
            self._stopping.pop(name, None)
        for name, left in list(self._stopping.items()):
            if left > 1:
                self._stopping[name] = left - 1
                continue
            del self._stopping[name]
            self.api.pod_exited(self.ns, name, 143)
        for pod in self._pods() if graceful else []:
            if pod["metadata"].get("deletionGracePeriodSeconds") is not None and not _ended(pod):
                self._sigterm(pod)
        pods = self._pods()
        for job in self._jobs():
            if FOREGROUND in (job["metadata"].get("finalizers") or []) and not self._owned(
                job, pods
            ):
                self.api.delete_object(
                    f"/apis/batch/v1/namespaces/{self.ns}/jobs/{job['metadata']['name']}"
                )

    def _owned(self, owner: dict, items: list[dict]) -> list[dict]:
        uid = owner["metadata"]["uid"]
        return [
            i
            for i in items
            if any(r.get("uid") == uid for r in i["metadata"].get("ownerReferences") or [])
        ]

    @staticmethod
    def _owner(obj: dict) -> dict:
        return {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"],
            "controller": True,
        }

    # -- Kueue
    def workload(self, jobset: str, kind: str = "JobSet") -> dict | None:
        """The Workload of the JobSet (or, `kind="Job"`, the batch Job) named so, or None."""
        owner = self._job_object(jobset, kind)
        if owner is None:
            return None
        return next(iter(self._owned(owner, self._workloads())), None)

    def _job_object(self, name: str, kind: str) -> dict | None:
        items = {"JobSet": self._jobsets, "Pod": self._pods}.get(kind, self._jobs)()
        return next((j for j in items if j["metadata"]["name"] == name), None)

    def _kueue_config(self) -> dict:
        """K8: the manager configuration the control plane wrote (kueue-manager-config).

        Read from the fake's ConfigMap as kueue-controller-manager reads its file; without
        one, upstream's defaults: manageJobsWithoutQueueName false (apis/config/v1beta2/
        configuration_types.go), Job and JobSet integrations on.
        """
        cm = self.api.get_object(KUEUE_CONFIG_MAP) or {}
        text = (cm.get("data") or {}).get("controller_manager_config.yaml")
        version = (cm.get("metadata") or {}).get("resourceVersion")
        if self._config[0] != version:
            config = yaml.safe_load(text) if text else {}
            config.setdefault("integrations", {}).setdefault("frameworks", list(FRAMEWORKS))
            self._config = (version, config)
        return self._config[1]

    def _manages(self, obj: dict) -> bool:
        """K1/K8: Kueue manages this JobSet or batch Job as a top-level job.

        In a managed namespace only (K1), with its integration enabled, and named a queue
        or, with manageJobsWithoutQueueName, any (jobframework/utils.go
        WorkloadShouldBeSuspended, reconciler.go ReconcileGenericJob), and only with no
        managed ancestor (`_managed_ancestor`): a Job its JobSet controls is that JobSet's,
        and so is a JobSet or Job whose controller reference names any job Kueue manages.
        """
        config = self._kueue_config()
        if obj.get("kind") == "Pod":  # K12: the pod webhook labelled it managed
            # pod_controller.go Skip: a pod without the label, or one without a parent's
            # mark while the pod integration is on only implicitly
            meta = obj["metadata"]
            marked = SUSPENDING_PARENT in (meta.get("annotations") or {})
            explicit = POD_FRAMEWORK in config["integrations"]["frameworks"]
            return (meta.get("labels") or {}).get(MANAGED_LABEL) == "true" and (
                explicit or (marked and POD_FRAMEWORK in self._frameworks())
            )
        framework = FRAMEWORKS[0] if obj.get("kind") == "Job" else FRAMEWORKS[1]
        if not self.managed or framework not in config["integrations"]["frameworks"]:
            return False
        if self._managed_ancestor(obj) is not False:
            return False  # not a top-level job (or its owner is missing: an error upstream)
        return self._queued(obj)

    def _queued(self, obj: dict) -> bool:
        """K8: `obj` names a queue (`_queue_name`) or Kueue runs manageJobsWithoutQueueName."""
        return bool(_queue_name(obj) or self._kueue_config().get("manageJobsWithoutQueueName"))

    def _cluster_queue(self, workload: dict) -> tuple[dict | None, tuple[str, str] | None]:
        """K2: the ClusterQueue behind the Workload's LocalQueue, or why it cannot admit."""
        queue = workload["spec"].get("queueName", "")
        local = self.api.get_object(f"{KUEUE}/namespaces/{self.ns}/localqueues/{queue}")
        if local is None:
            return None, ("Inadmissible", f"LocalQueue {queue} doesn't exist")
        name = local["spec"]["clusterQueue"]
        cq = self.api.get_object(f"{KUEUE}/clusterqueues/{name}")
        if cq is None:
            return None, ("Inadmissible", f"ClusterQueue {name} doesn't exist")
        for group in cq["spec"].get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                if self.api.get_object(f"{KUEUE}/resourceflavors/{flavor['name']}") is None:
                    return None, ("Inadmissible", f"ClusterQueue {name} is inactive")
        return cq, None

    def _priority(self, js: dict) -> int:
        name = (js["metadata"].get("labels") or {}).get("kueue.x-k8s.io/priority-class")
        cls = self.api.get_object(f"{KUEUE}/workloadpriorityclasses/{name}") if name else None
        return int((cls or {}).get("value", 0))

    def _default_queue(self) -> None:
        """K0: the webhooks put the namespace's `default` LocalQueue on unlabelled objects."""
        path = f"{KUEUE}/namespaces/{self.ns}/localqueues/{DEFAULT_QUEUE}"
        if not self.managed or self.api.get_object(path) is None:
            return
        deployments = []
        if "deployment" in self._kueue_config()["integrations"]["frameworks"]:
            deployments = self.api.objects(f"/apis/apps/v1/namespaces/{self.ns}/deployments/")
        for obj in [*self._jobs(), *deployments]:
            labels = obj["metadata"].setdefault("labels", {})
            if _queue_name(obj) or "jobset.sigs.k8s.io/jobset-name" in labels:
                continue  # named a queue, or a Kueue-managed JobSet's child
            labels[QUEUE] = DEFAULT_QUEUE
            if obj["kind"] == "Job":
                obj["spec"]["suspend"] = True
            else:
                template = obj["spec"]["template"].setdefault("metadata", {})
                template.setdefault("labels", {})[QUEUE] = DEFAULT_QUEUE
            self._put(obj)

    def _suspend_on_create(self, obj: dict) -> None:
        """K1/K8: Kueue's JobSet and Job webhooks suspend a job it manages as it is created.

        jobframework/base_webhook.go Default -> defaults.go ApplyDefaultForSuspend.
        """
        meta = obj.get("metadata") or {}
        if obj.get("kind") not in ("JobSet", "Job") or meta.get("namespace") != self.ns:
            return
        if self.enabled and self._manages(obj):
            obj.setdefault("spec", {})["suspend"] = True

    def _plain_pods(self) -> list[dict]:
        """K12: Kueue's pod reconciler over this namespace; the pods it manages.

        A pod ended or being deleted has its finalizer removed (its Workload is finished,
        `_pending`); a Workload whose pod is gone goes too (the garbage collector follows
        its ownerReference); a pod someone else ungated while its Workload is not admitted
        is stopped: deleted (jobframework reconciler.go "Running job is not admitted by a
        cluster queue, suspending": stopJob with StopReasonNotAdmitted -> pod_controller.go
        Stop).
        """
        if POD_FRAMEWORK not in self._frameworks():
            return []
        pods = [p for p in self._pods() if self._manages(p)]
        uids = {p["metadata"]["uid"] for p in pods}
        workloads = {}
        for w in self._workloads():
            owner = (w["metadata"].get("ownerReferences") or [{"kind": ""}])[0]  # K14
            if owner["kind"] != "Pod":
                continue
            if owner["uid"] not in uids:
                self.api.delete_object(
                    f"{KUEUE}/namespaces/{self.ns}/workloads/{w['metadata']['name']}"
                )
            else:
                workloads[owner["uid"]] = w
        out = []
        for pod in pods:
            path = f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}"
            finalizers = pod["metadata"].get("finalizers") or []
            if MANAGED_LABEL in finalizers and (
                _gone(pod) or _phase(pod) in ("Succeeded", "Failed")
            ):
                pod["metadata"]["finalizers"] = [f for f in finalizers if f != MANAGED_LABEL]
                if _gone(pod) and not pod["metadata"]["finalizers"]:
                    self.api.delete_object(path)
                    continue
                pod = self._put(pod)
            workload = workloads.get(pod["metadata"]["uid"])
            gated = any(
                g.get("name") == ADMISSION_GATE for g in pod["spec"].get("schedulingGates") or []
            )
            if workload is not None and not gated and not _true(workload, "Admitted"):
                self.api.delete_object(path)  # Stop
                continue
            out.append(pod)
        return out

    def _frameworks(self) -> set[str]:
        """K8/K12: the enabled integrations, those enabled implicitly included."""
        enabled = set(self._kueue_config()["integrations"]["frameworks"])
        if enabled & set(IMPLIES_POD):
            enabled.add(POD_FRAMEWORK)
        return enabled

    def _suspends(self, obj: dict) -> bool:
        """K12: jobframework WorkloadShouldBeSuspended for a Deployment or a plain pod.

        Never for one with a managed ancestor (utils.go: FindAncestorJobManagedByKueue
        first); a missing owner is an error upstream, which refuses the create: here it
        is suspended.
        """
        return self.managed and self._managed_ancestor(obj) is not True and self._queued(obj)

    def _queue_default(self, labels: dict) -> None:
        """K0: jobframework ApplyDefaultLocalQueue: `default` where that LocalQueue exists."""
        path = f"{KUEUE}/namespaces/{self.ns}/localqueues/{DEFAULT_QUEUE}"
        if not labels.get(QUEUE) and self.api.get_object(path) is not None:
            labels[QUEUE] = DEFAULT_QUEUE

    def _webhooks_on_create(self, obj: dict) -> None:
        """K12: Kueue's deployment and pod webhooks on a Deployment or Pod created here."""
        meta = obj.get("metadata") or {}
        if not self.enabled or meta.get("namespace") != self.ns:
            return
        if obj.get("kind") == "Deployment" and "deployment" in self._frameworks():
            self._deployment_webhook(obj)
        elif obj.get("kind") == "Pod" and POD_FRAMEWORK in self._frameworks():
            self._pod_webhook(obj)

    def _deployment_webhook(self, deployment: dict) -> None:
        """K12: deployment_webhook.go Default: the template is marked for the pod webhook.

        In a managed namespace, the Deployment's queue (defaulted to `default` where that
        LocalQueue exists), the managed label and the suspending-parent annotation go into
        the pod template, and its WorkloadPriorityClass label too, when
        WorkloadShouldBeSuspended (`_suspends`): not for a Deployment whose controller
        reference leads to a job Kueue manages, whose pods then run ungated. On create and
        on every update of the Deployment (verbs create;update; `_webhooks_on_update`),
        never between: a Deployment written before the integration was on keeps its
        template unmarked until its next update, and its pods are not gated
        (`_managed_ancestor`: with manageJobsWithoutQueueName its Deployment counts as
        managed).
        """
        if not self.managed:
            return
        labels = deployment["metadata"].setdefault("labels", {})
        self._queue_default(labels)
        if not self._suspends(deployment):
            return
        template = deployment["spec"]["template"].setdefault("metadata", {})
        template.setdefault("annotations", {})[SUSPENDING_PARENT] = "deployment"
        template_labels = template.setdefault("labels", {})
        template_labels[MANAGED_LABEL] = "true"
        for key in (QUEUE, PRIORITY_CLASS):
            if labels.get(key):
                template_labels[key] = labels[key]

    def _webhooks_on_update(self, obj: dict, old: dict) -> None:
        """The JobSet webhook's (J7) and Kueue's deployment webhook's (K12) update checks."""
        if obj.get("kind") == "JobSet" and (obj.get("metadata") or {}).get("namespace") == self.ns:
            self._jobset_webhook_on_update(obj, old)
        self._deployment_webhook_on_update(obj, old)

    @staticmethod
    def _jobset_webhook_on_update(js: dict, old: dict) -> None:
        """J7: jobset v0.12.0 jobset_webhook.go ValidateUpdate (webhook vjobset.kb.io).

        `replicatedJobs` is immutable (ValidateImmutableField), replicas, parallelism and
        completions included (their elastic exception needs the ElasticJobSet gate, alpha
        and off); while the stored or the new JobSet is suspended, its pod templates'
        labels, annotations, nodeSelector, tolerations and schedulingGates may change (for
        Kueue). Refused with 422, `spec.replicatedJobs: Invalid value: ...: field is
        immutable` (the value here the JSON sent, upstream Go's whole struct).
        """
        new_jobs = json_copy(js["spec"].get("replicatedJobs") or [])
        old_jobs = {rj.get("name"): rj for rj in old["spec"].get("replicatedJobs") or []}
        if old["spec"].get("suspend") or js["spec"].get("suspend"):
            for rj in new_jobs:
                if rj.get("name") not in old_jobs:
                    continue
                pod = rj.setdefault("template", {}).setdefault("spec", {})
                pod = pod.setdefault("template", {})
                was = (old_jobs[rj["name"]].get("template") or {}).get("spec") or {}
                was = was.get("template") or {}
                for part, keys in (
                    ("metadata", ("labels", "annotations")),
                    ("spec", ("nodeSelector", "tolerations", "schedulingGates")),
                ):
                    mine, theirs = pod.setdefault(part, {}), was.get(part) or {}
                    for key in keys:
                        mine.pop(key, None)
                        if key in theirs:
                            mine[key] = theirs[key]
                    if not mine and part not in was:
                        del pod[part]
        if new_jobs != (old["spec"].get("replicatedJobs") or []):
            value = js["spec"].get("replicatedJobs")
            error = FieldError("Invalid value", "spec.replicatedJobs", value, "field is immutable")
            refused = invalid(js["apiVersion"], "JobSet", js["metadata"]["name"], [error])
            message = f'admission webhook "vjobset.kb.io" denied the request: {refused.message}'
            raise ApiError(422, "Invalid", message, refused.details)

    def _deployment_webhook_on_update(self, deployment: dict, old: dict) -> None:
        """K12: deployment_webhook.go Default then ValidateUpdate on a Deployment's update.

        Default marks the template as on create. ValidateUpdate refuses a change of the
        queue label unless the stored Deployment has no ready replica (`isSuspended :=
        oldDeployment.Status.ReadyReplicas == 0`; removing it is refused even then:
        ValidateImmutableField), and the WorkloadPriorityClass label added to one with a
        ready replica or removed at all (jobframework/validation.go
        ValidateUpdateForWorkloadPriorityClassName). A webhook's denial answers 403 with
        kube-apiserver's `admission webhook "vdeployment.kb.io" denied the request: `
        before the field errors (controller-runtime's admission.Denied).
        """
        meta = deployment.get("metadata") or {}
        if (
            deployment.get("kind") != "Deployment"
            or not self.enabled
            or meta.get("namespace") != self.ns
            or "deployment" not in self._frameworks()
        ):
            return
        self._deployment_webhook(deployment)
        new_labels = meta.get("labels") or {}
        old_labels = old["metadata"].get("labels") or {}
        suspended = not (old.get("status") or {}).get("readyReplicas")
        errors = []
        new_queue, old_queue = new_labels.get(QUEUE, ""), old_labels.get(QUEUE, "")
        if (not suspended or not new_queue) and new_queue != old_queue:
            path = f"metadata.labels[{QUEUE}]"
            errors.append(FieldError("Invalid value", path, new_queue, "field is immutable"))
        new_class, old_class = new_labels.get(PRIORITY_CLASS), old_labels.get(PRIORITY_CLASS)
        path = f"metadata.labels[{PRIORITY_CLASS}]"
        if not suspended and not old_class and new_class:
            detail = "WorkloadPriorityClass cannot be added to a non-suspended workload"
            errors.append(FieldError("Invalid value", path, new_class, detail))
        if old_class and not new_class:
            detail = "WorkloadPriorityClass cannot be removed from a workload"
            errors.append(FieldError("Invalid value", path, "", detail))
        if errors:
            message = 'admission webhook "vdeployment.kb.io" denied the request: '
            raise ApiError(403, "Forbidden", message + aggregate(errors))

    def _managed_ancestor(self, obj: dict) -> bool | None:
        """K12: jobframework FindAncestorJobManagedByKueue found a job above `obj`.

        The walk follows controller references only (metav1.GetControllerOf: a reference
        without `controller: true` is never followed) while the owner's kind is known
        (integrationmanager.go isKnownOwner: any REGISTERED integration, enabled or not,
        so a StatefulSet with its integration off too, and ReplicaSet, the interim owner
        from a pod to its Deployment), getting each owner by name in the namespace (a
        uid other than the reference's stops the walk). An owner counts as managed when
        its integration is enabled and it names a queue or manageJobsWithoutQueueName is
        on; the walk goes on past an owner that does not. A reference of any other kind
        (DaemonSet, ReplicationController, CronJob) stops it: False. A known owner that
        does not exist is an error upstream (ErrWorkloadOwnerNotFound): None. Upstream
        calls same-namespace ownership spoofing out of scope: the control plane's policies
        refuse a team's object naming a controller (gpu-k8s-consumer-pods-off-the-control-
        plane for pods, gpu-k8s-consumer-controllers-by-kube-system for Deployments,
        ReplicaSets, StatefulSets, DaemonSets, ReplicationControllers, Jobs and JobSets,
        gpu-k8s-jobset-children-only-by-jobset for Jobs too).
        """
        frameworks = self._frameworks()
        seen: set[str] = set()
        while obj["metadata"].get("uid") not in seen:
            seen.add(obj["metadata"].get("uid"))
            owner = next(
                (r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")),
                None,
            )
            known = _KNOWN_OWNERS.get((owner or {}).get("apiVersion", ""), {})
            if owner is None or owner.get("kind") not in known:
                return False
            path, framework = known[owner["kind"]]
            found = self.api.get_object(path.format(ns=self.ns) + owner.get("name", ""))
            if found is None:
                return None
            if found["metadata"]["uid"] != owner.get("uid"):
                return False  # a stale or mismatched reference stops the walk
            if framework in frameworks and self._queued(found):
                return True
            obj = found
        return None  # ErrCyclicOwnership

    def _pod_webhook(self, pod: dict) -> None:
        """K12: pod_webhook.go Default on a pod created in this namespace.

        A pod whose template the deployment webhook marked (`SUSPENDING_PARENT`) is gated
        at once. Otherwise, in a managed namespace, one no Kueue-managed job owns
        (`_managed_ancestor`) gets the namespace's default queue where it has none, and,
        naming a queue or with manageJobsWithoutQueueName, the label
        `kueue.x-k8s.io/managed: "true"`, the finalizer of the same name and the
        scheduling gate `kueue.x-k8s.io/admission` (a gated pod is never scheduled:
        kubernetes.io/docs/concepts/scheduling-eviction/pod-scheduling-readiness).
        """
        meta = pod["metadata"]
        by_parent = SUSPENDING_PARENT in (meta.get("annotations") or {})
        if not by_parent:
            if not self.managed or self._managed_ancestor(pod):
                return
            labels = meta.setdefault("labels", {})
            self._queue_default(labels)
            if not self._suspends(pod):
                return
            labels[MANAGED_LABEL] = "true"
            finalizers = meta.setdefault("finalizers", [])
            if MANAGED_LABEL not in finalizers:
                finalizers.append(MANAGED_LABEL)
        gates = pod.setdefault("spec", {}).setdefault("schedulingGates", [])
        if {"name": ADMISSION_GATE} not in gates:
            gates.append({"name": ADMISSION_GATE})

    def _new_workloads(self, jobs: dict[str, dict]) -> None:
        """K1/K8: suspend each JobSet or batch Job Kueue manages and give it a Workload.

        A Job's Workload has one pod set `main` of min(parallelism, completions) pods
        (pkg/controller/jobs/job/job_controller.go PodSets, podsCount); one without a
        queue label (manageJobsWithoutQueueName) names no queue (reconciler.go
        constructWorkload: QueueNameForObject), so it is never admitted (K2's "LocalQueue
        <q> doesn't exist"). The Workload is created through the API server like any
        client's object, so the real Workload CRD validates it (`fakes.crds`).
        """
        for job in jobs.values():
            if not self._manages(job) or self._owned(job, self._workloads()):
                continue
            labels = job["metadata"].get("labels") or {}
            wpc = labels.get("kueue.x-k8s.io/priority-class")
            if wpc and self.api.get_object(f"{KUEUE}/workloadpriorityclasses/{wpc}") is None:
                continue
            if job["kind"] == "Pod" and (_phase(job) in ("Succeeded", "Failed") or _gone(job)):
                continue  # ended before Kueue saw it
            if job["kind"] != "Pod" and job["spec"].get("suspend") is None:
                job["spec"]["suspend"] = True
                job = self._put(job)
            digest = hashlib.sha256(job["metadata"]["uid"].encode()).hexdigest()[:5]
            spec: dict[str, Any] = {"priority": self._priority(job)}
            if _queue_name(job):
                spec["queueName"] = _queue_name(job)
            spec["podSets"] = self._pod_sets(job)
            seconds = labels.get(MAX_EXEC_TIME)
            if seconds:  # jobframework/utils.go MaximumExecutionTimeSecondsForObject
                spec["maximumExecutionTimeSeconds"] = int(seconds)
            workload = self._create_workload(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "Workload",
                    "metadata": {
                        "name": f"{job['kind'].lower()}-{job['metadata']['name']}-{digest}",
                        "namespace": self.ns,
                        "ownerReferences": [self._owner(job)],
                        "labels": {"kueue.x-k8s.io/job-uid": job["metadata"]["uid"]},
                    },
                    "spec": spec,
                }
            )
            if job["kind"] != "Pod":  # a pod's: its first status is its admission or why not
                self._condition(workload, "QuotaReserved", "False", "Pending", "")
                self._write_status(workload)

    @staticmethod
    def _pod_sets(job: dict) -> list[dict]:
        """The Workload's pod sets: a JobSet's, a Job's `main`, a plain pod's `main` of 1."""
        if job["kind"] == "JobSet":
            return jobset_pod_sets(job)
        if job["kind"] == "Pod":  # K12: pod_controller.go constructPodSets, one pod
            template = {"spec": json_copy(job["spec"])}
            for key in ("schedulingGates", "nodeName"):
                template["spec"].pop(key, None)
            return [{"name": "main", "count": 1, "template": template}]
        count = job["spec"].get("parallelism", 1)
        count = min(count, job["spec"].get("completions", count))
        template = json_copy(job["spec"]["template"])
        return [{"name": "main", "count": count, "template": template}]

    def _create_workload(self, workload: dict) -> dict:
        """POST the Workload as Kueue's controller does: decoded and validated (K8).

        The fake API server checks it against the real Workload CRD at the pinned tag
        (`fakes.crds`) and refuses what kube-apiserver would; a refusal fails the test.
        """
        path = f"{KUEUE}/namespaces/{self.ns}/workloads"
        headers = {"Authorization": "Bearer admin-token", "Content-Type": "application/json"}
        answer = self.api.handle(
            "POST", path, headers, json.dumps(workload).encode(), controller=True
        )
        if answer[0] != 201:
            raise AssertionError(f"the API server refused the Workload: {answer[2]!r}")
        return json.loads(answer[2])

    def _pending(self, jobs: dict[str, dict]) -> list[tuple[dict, dict]]:
        """K4 for finished jobs, K9 past their deadline; the pending Workloads with their jobs.

        A deactivated Workload (spec.active false) is not queued (workload.IsActive).
        """
        pending = []
        for workload in self._workloads():
            owners = workload["metadata"].get("ownerReferences") or [{"uid": ""}]  # K14
            js = jobs.get(owners[0]["uid"])
            if js is None or _true(workload, "Finished"):
                continue
            done = ("Completed", "Failed") if js["kind"] == "JobSet" else ("Complete", "Failed")
            if js["kind"] == "Pod":  # K12: pod_controller.go Finished: a terminated pod
                ended = _phase(js) in ("Succeeded", "Failed")
                reason = "Succeeded" if _phase(js) == "Succeeded" else "Failed"
            else:
                ended = _true(js, done[0]) or _true(js, done[1])
                reason = "Succeeded" if _true(js, done[0]) else "Failed"
            if ended:
                self._condition(workload, "Finished", "True", reason)  # K4: reservation kept
                self._write_status(workload)
            elif _true(workload, "Admitted"):
                self._deadline(workload, js)
                if js["kind"] == "JobSet":
                    self._pods_ready(js)
            elif workload["spec"].get("active", True) and self._backoff_over(workload):
                pending.append((workload, js))
        return pending

    def _requeue_at(self, workload: dict) -> None:
        """K15: one more requeue, and the time the backoff ends (UpdateRequeueState)."""
        strategy = (self._kueue_config().get("waitForPodsReady") or {}).get(
            "requeuingStrategy"
        ) or {}
        base = int(strategy.get("backoffBaseSeconds", 60))
        cap = int(strategy.get("backoffMaxSeconds", 3600))
        state = workload["status"].setdefault("requeueState", {})
        state["count"] = int(state.get("count", 0)) + 1
        wait = min(base * 2 ** (state["count"] - 1), cap)
        state["requeueAt"] = stamp(self.clock() + wait)

    def _backing_off(self, workload: dict) -> bool:
        """K15: evicted by PodsReadyTimeout and `clock` not yet at its requeueAt."""
        requeued = _condition_of(workload, "Requeued")
        at = ((workload.get("status") or {}).get("requeueState") or {}).get("requeueAt")
        return (
            (requeued.get("status"), requeued.get("reason")) == ("False", "PodsReadyTimeout")
            and at is not None
            and self.clock() < stamp_seconds(at)
        )

    def _backoff_over(self, workload: dict) -> bool:
        """K15: whether the Workload may be queued; a backoff just over is marked so."""
        if self._backing_off(workload):
            return False
        requeued = _condition_of(workload, "Requeued")
        if (requeued.get("status"), requeued.get("reason")) == ("False", "PodsReadyTimeout"):
            workload["status"].get("requeueState", {}).pop("requeueAt", None)
            message = "The workload backoff was finished"
            self._condition(workload, "Requeued", "True", "BackoffFinished", message)
            self._write_status(workload)
        return True

    def _deadline(self, workload: dict, job: dict) -> None:
        """K9: deactivate a Workload admitted past its maximumExecutionTimeSeconds.

        core/workload_controller.go reconcileMaxExecutionTime: once the time since the
        Admitted condition's lastTransitionTime plus status.accumulatedPastExecution-
        TimeSeconds (admitted time before an eviction, workload/admissionchecks.go)
        reaches the maximum, DeactivationTarget True (reason MaximumExecutionTimeExceeded,
        "exceeding the maximum execution time"); then Reconcile sets spec.active false and
        evicts it (workloadevict.Evict: reason DeactivatedDueToMaximumExecutionTime-
        Exceeded, patching.ReasonWithCause; message "The workload is deactivated due to
        exceeding the maximum execution time"): the job is stopped and its quota freed
        (jobframework reconciler "handle eviction", Requeued False), never requeued.
        """
        limit = workload["spec"].get("maximumExecutionTimeSeconds")
        if limit is None or not workload["spec"].get("active", True):
            return
        past = int(workload["status"].get("accumulatedPastExecutionTimeSeconds", 0))
        if past + self._since(workload, "Admitted") < limit:
            return
        cause = "MaximumExecutionTimeExceeded"
        self._condition(
            workload, "DeactivationTarget", "True", cause, "exceeding the maximum execution time"
        )
        workload["status"].pop("accumulatedPastExecutionTimeSeconds", None)
        self._write_status(workload)
        workload["spec"]["active"] = False
        self._write_spec(workload)
        message = "The workload is deactivated due to exceeding the maximum execution time"
        self._evict(job["metadata"]["name"], f"DeactivatedDueTo{cause}", message, kind=job["kind"])
        workload = self._job_workload(job)  # the condition goes with the eviction
        workload["status"]["conditions"] = [
            c for c in workload["status"]["conditions"] if c["type"] != "DeactivationTarget"
        ]
        self._write_status(workload)

    def _pods_ready(self, js: dict) -> None:
        """K13: the admitted JobSet's PodsReady condition; evicted past recoveryTimeout."""
        workload = self.workload(js["metadata"]["name"])
        if workload is None or not _true(workload, "Admitted") or _true(workload, "Evicted"):
            return
        old = _condition_of(workload, "PodsReady")
        if self._jobset_pods_ready(js):
            recovered = old.get("reason") in ("WaitForRecovery", "Recovered")
            reason = "Recovered" if recovered else "Started"
            new = ("True", reason, "All pods reached readiness and the workload is running")
        elif old.get("status") == "True" or old.get("reason") == "WaitForRecovery":
            new = ("False", "WaitForRecovery", "At least one pod has failed, waiting for recovery")
        else:
            new = ("False", "WaitForStart", "Not all pods are ready or succeeded")
        if (old.get("status"), old.get("reason"), old.get("message")) != new:
            self._condition(workload, "PodsReady", *new)
            self._write_status(workload)
        limit = self._recovery_timeout()
        if new[1] == "WaitForRecovery" and limit and self._since(workload, "PodsReady") >= limit:
            message = f"Exceeded the PodsReady timeout {self.ns}/{workload['metadata']['name']}"
            self._evict(js["metadata"]["name"], "PodsReadyTimeout", message)

    def _jobset_pods_ready(self, js: dict) -> bool:
        """K13: every replicated Job's Jobs of the current attempt ready or succeeded."""
        jobs = self._owned(js, self._jobs())
        previous = self._previous(js, jobs)
        pods = self._pods()
        ready = 0
        for job in jobs:
            if job in previous or _true(job, "Failed"):
                continue
            spec = job["spec"]
            want = min(spec.get("parallelism", 1), spec.get("completions", 1))
            done = [
                p
                for p in self._owned(job, pods)
                if _phase(p) == "Succeeded" or (_true(p, "Ready") and not _gone(p))
            ]
            ready += _true(job, "Complete") or len(done) >= want
        return ready == sum(rj.get("replicas", 1) for rj in js["spec"]["replicatedJobs"])

    def _recovery_timeout(self) -> float:
        """K13: waitForPodsReady.recoveryTimeout in seconds (0: off), defaulted as Kueue's."""
        block = self._kueue_config().get("waitForPodsReady") or {}
        text = block.get("recoveryTimeout") or block.get("timeout") or "30m"
        units = {"h": 3600, "m": 60, "s": 1}
        parts = re.findall(r"(\d+)([hms])", text)
        assert parts and "".join(n + u for n, u in parts) == text, f"duration {text!r}"
        return float(sum(int(n) * units[u] for n, u in parts))

    def _since(self, workload: dict, kind: str) -> float:
        """Seconds since the condition's lastTransitionTime, by `clock`."""
        cond = next(c for c in workload["status"]["conditions"] if c["type"] == kind)
        return self.clock() - stamp_seconds(cond["lastTransitionTime"])

    def _job_workload(self, job: dict) -> dict:
        found = self.workload(job["metadata"]["name"], job["kind"])
        assert found is not None
        return found

    def _finish_orphaned(self) -> None:
        """K14: a job's Workload that lost its owner reference is Finished (OwnerNotFound)."""
        for workload in self._workloads():
            meta = workload["metadata"]
            orphaned = not meta.get("ownerReferences") and (meta.get("labels") or {}).get(
                "kueue.x-k8s.io/job-uid"
            )
            if orphaned and not meta.get("deletionTimestamp") and not _true(workload, "Finished"):
                message = "The workload's owner no longer exists"
                self._condition(workload, "Finished", "True", "OwnerNotFound", message)
                self._write_status(workload)

    def _activity(self) -> None:
        """K16: a Workload deactivated is evicted; reactivated once stopped, requeued."""
        for workload in self._workloads():
            if _true(workload, "Finished"):
                continue
            owner = (workload["metadata"].get("ownerReferences") or [{}])[0]
            requeued = _condition_of(workload, "Requeued")
            if not workload["spec"].get("active", True):
                if _true(workload, "QuotaReserved") and not _true(workload, "Evicted"):
                    workload["status"].pop("requeueState", None)
                    message = "The workload is deactivated"
                    self._evict(owner["name"], "Deactivated", message, kind=owner["kind"])
                elif workload["status"].pop("requeueState", None) is not None:
                    self._write_status(workload)
            elif (requeued.get("status"), requeued.get("reason")) == ("False", "Deactivated"):
                message = "The workload was reactivated"
                self._condition(workload, "Requeued", "True", "Reactivated", message)
                self._write_status(workload)

    def _kueue(self) -> None:
        self._finish_orphaned()
        self._activity()
        pods = self._plain_pods()
        jobsets = {j["metadata"]["uid"]: j for j in [*self._jobsets(), *self._jobs(), *pods]}
        self._new_workloads(jobsets)
        pending = self._pending(jobsets)
        pending.sort(  # cluster_queue.go baseCompareFunc: priority, timestamp, then UID
            key=lambda p: (
                -p[0]["spec"]["priority"],
                p[0]["metadata"]["creationTimestamp"],
                p[0]["metadata"]["uid"],
            )
        )
        quota = Quota(self.api)
        for workload, js in pending:  # K2
            cq, blocker = self._cluster_queue(workload)
            if cq is None:
                assert blocker is not None
                self._pending_because(workload, *blocker)
                continue
            if not self._selects_namespace(cq):
                self._pending_because(workload, "Pending", NAMESPACE_MISMATCH)
                continue
            name = cq["metadata"]["name"]
            assignment, message = quota.assign(name, workload["spec"]["podSets"])
            if assignment is None and self._preempt_for(workload, cq, quota):
                quota = Quota(self.api)  # the victims gave their quota back
                continue  # admitted on a later tick, once the preempted jobs stopped
            if assignment is None:
                self._pending_because(workload, "Pending", message)
                continue
            workload.setdefault("status", {})["admission"] = {
                "clusterQueue": name,
                "podSetAssignments": assignment,
            }
            quota.add(workload, 1)
            self._condition(workload, "QuotaReserved", "True", "QuotaReserved", "Quota reserved")
            self._admissions += 1  # stands for QuotaReserved's lastTransitionTime
            self._admitted_at[workload["metadata"]["uid"]] = self._admissions
            _set(
                workload, "Admitted", "True", "Admitted", "The workload is admitted", self.clock()
            )
            for kind in ("Evicted", "Preempted"):  # reset only if set (workload.go)
                if _true(workload, kind):
                    self._condition(workload, kind, "False", "QuotaReserved")
            self._write_status(workload)
            self._run_with_pod_sets_info(js, assignment)
            if js["kind"] == "Pod":  # K12: pod_controller.go Run: ungated
                gates = [g for g in js["spec"]["schedulingGates"] if g["name"] != ADMISSION_GATE]
                js["spec"]["schedulingGates"] = gates
                if not gates:
                    del js["spec"]["schedulingGates"]
            else:
                js["spec"]["suspend"] = False
            self._put(js)
        self._queue_status(Quota(self.api))

    @staticmethod
    def _pod_templates(job: dict) -> list[dict]:
        """K11: the pod template of each of the job's pod sets, in the Workload's order."""
        if job["kind"] == "JobSet":
            return [rj["template"]["spec"]["template"] for rj in job["spec"]["replicatedJobs"]]
        if job["kind"] == "Pod":
            return [job]
        return [job["spec"]["template"]]

    def _run_with_pod_sets_info(self, job: dict, assignment: list[dict]) -> None:
        """K11: each pod set's flavors' nodeLabels and tolerations merged into its template."""
        for template, assigned in zip(self._pod_templates(job), assignment, strict=True):
            spec = template.setdefault("spec", {})
            selector = dict(spec.get("nodeSelector") or {})
            tolerations = list(spec.get("tolerations") or [])
            for name in dict.fromkeys(assigned["flavors"].values()):
                flavor = self.api.get_object(f"{KUEUE}/resourceflavors/{name}") or {}
                for key, value in ((flavor.get("spec") or {}).get("nodeLabels") or {}).items():
                    # podset.go PodSetInfo.Merge: a conflicting key is BadPodSetsUpdateError
                    assert selector.get(key, value) == value, (key, selector[key], value)
                    selector[key] = value
                for toleration in (flavor.get("spec") or {}).get("tolerations") or []:
                    if toleration not in tolerations:
                        tolerations.append(toleration)
            if selector:
                spec["nodeSelector"] = selector
            if tolerations:
                spec["tolerations"] = tolerations

    def _restore_pod_sets_info(self, job: dict, workload: dict) -> None:
        """K11: each template's nodeSelector and tolerations back to the Workload's copy."""
        for template, pod_set in zip(
            self._pod_templates(job), workload["spec"]["podSets"], strict=True
        ):
            spec = template.setdefault("spec", {})
            for key in ("nodeSelector", "tolerations"):
                original = (pod_set["template"].get("spec") or {}).get(key)
                if original:
                    spec[key] = json_copy(original)
                else:
                    spec.pop(key, None)

    def _queue_status(self, quota: Quota) -> None:
        """K7: each ClusterQueue's status, as Kueue's ClusterQueue controller writes it.

        kueue v0.19.2 pkg/controller/core/clusterqueue_controller.go updateCqStatusIfChanged
        (lines 513-563) writes, only when it changed, with `Status().Update`:
        - `flavorsReservation` (quota reserved) and `flavorsUsage` (admitted) from its
          cache (pkg/cache/scheduler/cache.go Usage and getUsage, lines 873-893 and
          979-1012): per flavor of each resource group, per covered resource sorted by
          name, `total` and, in a cohort, `borrowed` = total less nominalQuota when above
          0 (the fake admits as it reserves, so both lists are the same);
        - `reservingWorkloads` (the Workloads holding quota: len(cq.Workloads)) and
          `admittedWorkloads` (admittedWorkloadsCount), here the admitted, unfinished ones;
        - `pendingWorkloads`: the queue manager's pending ones, active and inadmissible
          (pkg/cache/queue/manager.go Pending, cluster_queue.go PendingTotal): here every
          Workload not holding quota, unfinished, active (spec.active), whose LocalQueue
          points at the ClusterQueue;
        - condition `Active` (observedGeneration the ClusterQueue's generation) from
          cache.go ClusterQueueReadiness (lines 389-401) and clusterqueue.go
          inactiveReason (lines 310-366): True, Ready, "Can admit new workloads"; or,
          a ResourceFlavor it names missing (the only cause the fake has), False,
          FlavorNotFound, "Can't admit new workloads: references missing
          ResourceFlavor(s): <a>,<b>." (the flavors in the spec's order).
        `fairSharing.weightedShare` is not written (see `Quota.share`).
        """
        holding, pending = self._queue_counts(quota)
        for name, cq in quota.cqs.items():
            flavors = []
            missing = []
            for group in cq["spec"].get("resourceGroups") or []:
                for f in group.get("flavors") or []:
                    if f["name"] not in quota.flavors:
                        missing.append(f["name"])
                    resources = []
                    for r in sorted(group["coveredResources"]):
                        used = quota.usage.get((name, f["name"], r), 0.0)
                        over = used - quota.nominal(name, f["name"], r)
                        borrowed = over if cq["spec"].get("cohortName") and over > 0 else 0.0
                        resources.append(
                            {"name": r, "total": _show(r, used), "borrowed": _show(r, borrowed)}
                        )
                    flavors.append({"name": f["name"], "resources": resources})
            before = cq.get("status") or {}
            cq["status"] = {
                **json_copy(before),
                "flavorsReservation": flavors,
                "flavorsUsage": flavors,
                "reservingWorkloads": holding.get(name, 0),
                "admittedWorkloads": holding.get(name, 0),
                "pendingWorkloads": pending.get(name, 0),
            }
            active = ("True", "Ready", "Can admit new workloads")
            if missing:
                why = f"references missing ResourceFlavor(s): {','.join(missing)}"
                active = ("False", "FlavorNotFound", f"Can't admit new workloads: {why}.")
            _set(cq, "Active", *active, at=self.clock())
            cq["status"]["conditions"][-1]["observedGeneration"] = cq["metadata"]["generation"]
            if cq["status"] != before:
                self._write_status(cq)

    def _queue_counts(self, quota: Quota) -> tuple[dict[str, int], dict[str, int]]:
        """K7: per ClusterQueue, the Workloads holding quota and those pending in it."""
        queues = {
            (q["metadata"]["namespace"], q["metadata"]["name"]): str(q["spec"]["clusterQueue"])
            for q in self.api.objects(f"{KUEUE}/namespaces/", kind="LocalQueue")
        }
        holding: dict[str, int] = {}
        pending: dict[str, int] = {}
        for w in quota.workloads:
            if _true(w, "Finished"):
                continue
            if _true(w, "QuotaReserved"):
                name = str(w["status"]["admission"]["clusterQueue"])
                holding[name] = holding.get(name, 0) + 1
            elif w["spec"].get("active", True) and not self._backing_off(w):  # K15
                name = queues.get((w["metadata"]["namespace"], w["spec"].get("queueName", "")), "")
                pending[name] = pending.get(name, 0) + 1
        return holding, pending

    def _selects_namespace(self, cq: dict) -> bool:
        """K2: whether `cq`'s namespaceSelector selects this namespace (null: none)."""
        selector = cq["spec"].get("namespaceSelector")
        if selector is None:
            return False
        namespace = self.api.get_object(f"/api/v1/namespaces/{self.ns}") or {}
        labels = (namespace.get("metadata") or {}).get("labels") or {}
        return selector_matches(selector, labels)

    def _pending_because(self, workload: dict, reason: str, message: str) -> None:
        reserved = _condition_of(workload, "QuotaReserved")
        if (reserved.get("reason"), reserved.get("message")) != (reason, message):
            self._condition(workload, "QuotaReserved", "False", reason, message)
            self._write_status(workload)

    def _candidates(
        self, preemptor: dict, cq: dict, quota: Quota, frs: set[tuple[str, str]]
    ) -> list[tuple[dict, str]]:
        """preemption.go findCandidates, ordered by common/ordering.go CandidatesOrdering.

        Admitted Workloads (every namespace) holding a flavor-resource the preemptor needs
        preemption for: in its own ClusterQueue those its `withinClusterQueue` policy
        allows; in another ClusterQueue of its cohort that borrows one of those, those
        `reclaimWithinCohort` allows (preemption_policy.go SatisfiesPreemptionPolicy).
        Other queues' first, then lower priority, then most recently admitted. Each with
        its ClusterQueue's name.
        """
        name = cq["metadata"]["name"]
        policy = cq["spec"].get("preemption") or {}
        mine = preemptor["spec"]["priority"]
        out = []
        for w in self.api.objects(f"{KUEUE}/namespaces/", kind="Workload"):
            admission = (w.get("status") or {}).get("admission") or {}
            where = admission.get("clusterQueue")
            if not _true(w, "Admitted") or _true(w, "Finished") or _true(w, "Evicted"):
                continue
            if where not in quota.cqs or w["metadata"]["uid"] == preemptor["metadata"]["uid"]:
                continue
            held = {
                (ps["flavors"][r], r)
                for ps in admission.get("podSetAssignments") or []
                for r in ps.get("resourceUsage") or {}
            }
            if not held & frs:
                continue
            if where == name:
                rule = policy.get("withinClusterQueue", "Never")
            else:
                same = quota.cqs[where]["spec"].get("cohortName")
                if not same or same != cq["spec"].get("cohortName"):
                    continue
                if not any(quota.borrowing(where, f, r) for f, r in frs):
                    continue  # cqIsBorrowing: nothing to reclaim from it
                rule = policy.get("reclaimWithinCohort", "Never")
            lower = w["spec"]["priority"] < mine
            if rule == "Any" or (rule.startswith("Lower") and lower):
                out.append((w, where))
        out.sort(key=lambda c: self._admitted_at.get(c[0]["metadata"]["uid"], 0), reverse=True)
        out.sort(key=lambda c: c[0]["spec"]["priority"])
        out.sort(key=lambda c: c[1] == name)
        return out

    def _preempt_for(self, preemptor: dict, cq: dict, quota: Quota) -> bool:
        """K3: evict what Kueue's fair-sharing preemption picks so the Workload fits, or none.

        The control plane turns fair sharing on (its kueue.py), so Kueue runs
        preemption.go fairPreemptions (v0.19.2), over a flat cohort here:
        - the flavor-resources needing preemption are those the Preempt-mode assignment
          gets over what is available (flavorResourcesNeedPreemption);
        - candidates as `_candidates`; the target ClusterQueue is, each round, the one with
          the highest DominantResourceShare among those that borrow (the preemptor's own
          too, with the Workload's usage added), ties to the better first candidate
          (fairsharing/ordering.go nextTarget);
        - in its own ClusterQueue a candidate is taken (reason InClusterQueue); in another,
          while the preemptor stays within its nominal quota with the Workload
          (FairSharingPreemptWithinNominal, Beta, on in 0.19, kube_features.go), taken
          unconditionally (InCohortReclamation); else taken when the preemptor's new
          share <= the target's share without it (LessThanOrEqualToFinalShare,
          InCohortFairSharing), and then, for those left, when the preemptor's new share <
          the target's old one (LessThanInitialShare, runSecondFsStrategy);
        - until the Workload fits (workloadFitsForFairSharing: its usage within
          `available`), then those not needed are given back, last taken first but the
          last (fillBackWorkloads).
        """
        name = cq["metadata"]["name"]
        need = quota.preempt_usage(name, preemptor["spec"]["podSets"])
        if need is None:
            return False
        frs = {fr for fr, v in need.items() if v > quota.available(name, *fr)}
        candidates = self._candidates(preemptor, cq, quota, frs)
        if not candidates:
            return False
        fair = _FairPreemption(quota, name, need, frs)
        left: dict[str, list[dict]] = {}
        for w, where in candidates:
            left.setdefault(where, []).append(w)
        done, retry = fair.first_strategy(left)
        if not done:
            done = fair.second_strategy(retry)
        if not done:
            fair.undo()
            return False
        for w, reason in fair.fill_back():
            self._evict_workload(w, reason, self._preemption_message(preemptor, cq, w, reason))
        return True

    def _preemption_message(
        self,
        preemptor: dict | None,
        cq: dict,
        victim: dict | None = None,
        reason: str = "InClusterQueue",
    ) -> str:
        """preemption.go preemptionMessage, buildCQPath, HumanReadablePreemptionReasons."""

        def path(queue: dict) -> str:
            cohort = queue["spec"].get("cohortName", "")
            return f"/{cohort}/{queue['metadata']['name']}".replace("//", "/")

        where = ((victim or {}).get("status") or {}).get("admission", {}).get("clusterQueue")
        victim_cq = self.api.get_object(f"{KUEUE}/clusterqueues/{where}") if where else None
        uid = (preemptor or {}).get("metadata", {}).get("uid") or "UNKNOWN"
        job_uid = ((preemptor or {}).get("metadata", {}).get("labels") or {}).get(
            "kueue.x-k8s.io/job-uid", "UNKNOWN"
        )
        return (
            f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to "
            f"{_PREEMPTION_REASONS[reason]}; preemptor path: {path(cq)}; "
            f"preemptee path: {path(victim_cq or cq)}"
        )

    def _evict_workload(self, workload: dict, reason: str, message: str) -> None:
        """K3 for a Workload of any namespace: its namespace's controllers stop its job."""
        ns = workload["metadata"]["namespace"]
        owner = workload["metadata"]["ownerReferences"][0]
        jobset, kind = owner["name"], owner["kind"]
        sibling = _CONTROLLERS.get((id(self.api), ns), self)
        if (
            sibling.api is not self.api or sibling.ns != ns
        ):  # nobody runs that namespace's jobs: no pods to stop
            sibling = BatchControllers.__new__(BatchControllers)
            sibling.__dict__.update(self.__dict__)
            sibling.ns = ns
        sibling._evict(jobset, "Preempted", message, preempted=reason, kind=kind)

    def preempt(self, jobset: str, by: str | None = None) -> None:
        """K3: Kueue preempts the job for `by` (a higher-priority job needing its quota)."""
        workload = self.workload(jobset)
        assert workload is not None, f"no workload for {jobset}"
        cq, blocker = self._cluster_queue(workload)
        assert cq is not None, blocker
        preemptor = self.workload(by) if by else None
        message = self._preemption_message(preemptor, cq)
        self._evict(jobset, "Preempted", message, preempted="InClusterQueue")

    def time_out(self, jobset: str) -> None:
        """K5: the job's pods did not all become ready within waitForPodsReady.timeout."""
        workload = self.workload(jobset)
        assert workload is not None, f"no workload for {jobset}"
        message = f"Exceeded the PodsReady timeout {self.ns}/{workload['metadata']['name']}"
        self._evict(jobset, "PodsReadyTimeout", message)

    def _evict(
        self, jobset: str, reason: str, message: str, *, preempted: str = "", kind: str = "JobSet"
    ) -> None:
        """K3/K5: the job is evicted, stopped, then loses its quota reservation.

        Evicted (and Preempted) while still admitted; the JobSet is suspended; the
        reservation goes once the job stopped (workloadevict.Evict, then jobframework
        reconciler: QuotaReserved and Admitted are cleared when the job is no longer
        active), so JobSet (J2) and the Job controller (B2) act before it can be admitted
        again. A PodsReadyTimeout eviction also sets `requeueState` (K15: count + 1,
        requeueAt after the backoff); a deactivation clears it (K9, K15).
        The time it was admitted is added to status.accumulatedPastExecutionTimeSeconds
        (K9). `kind`: the job's, a JobSet or a batch Job (K8).
        """
        workload = self.workload(jobset, kind)
        assert workload is not None, f"no workload for {jobset}"
        self._condition(workload, "Evicted", "True", reason, message)
        if preempted:
            self._condition(workload, "Preempted", "True", preempted, message)
        if kind == "Pod":  # K12: pod_controller.go Stop deletes it; its owner makes another
            self._write_status(workload)
            self.api.delete_object(f"/api/v1/namespaces/{self.ns}/pods/{jobset}")
            self._plain_pods()  # its Workload goes with it
            return
        if reason == "PodsReadyTimeout":
            self._requeue_at(workload)
        if not workload["spec"].get("active", True):
            workload["status"].pop("requeueState", None)
        self._write_status(workload)
        js = self._job_object(jobset, kind)
        assert js is not None
        self._restore_pod_sets_info(js, workload)
        js["spec"]["suspend"] = True
        self._put(js)
        self._jobset()
        self._job_controller()
        workload = self.workload(jobset, kind)
        assert workload is not None
        admitted = next(c for c in workload["status"]["conditions"] if c["type"] == "Admitted")
        if "lastTransitionTime" in admitted:  # workload/admissionchecks.go, K9
            past = int(workload["status"].get("accumulatedPastExecutionTimeSeconds", 0))
            past += int(self._since(workload, "Admitted"))
            workload["status"]["accumulatedPastExecutionTimeSeconds"] = past
        self._condition(workload, "QuotaReserved", "False", "Pending", message)
        _set(workload, "Admitted", "False", "NoReservation", "", self.clock())
        workload["status"].pop("admission", None)  # workload.UnsetQuotaReservation
        self._condition(workload, "Requeued", "True" if preempted else "False", reason, message)
        self._write_status(workload)

    # -- JobSet
    @staticmethod
    def _rule_applies(rule: dict, job: dict) -> bool:
        """failure_policy.go ruleIsApplicable (v0.12.0): an empty list matches everything.

        onJobFailureReasons holds the Job's Failed reason, onJobFailureMessagePatterns
        one regex its message matches, targetReplicatedJobs its replicated Job.
        """
        failed = next(
            (
                c
                for c in (job.get("status") or {}).get("conditions") or []
                if c["type"] == "Failed"
            ),
            None,
        )
        if failed is None:
            return False
        reasons = rule.get("onJobFailureReasons") or []
        if reasons and failed.get("reason") not in reasons:
            return False
        patterns = rule.get("onJobFailureMessagePatterns") or []
        if patterns and not any(re.search(p, failed.get("message", "")) for p in patterns):
            return False
        targets = rule.get("targetReplicatedJobs") or []
        parent = job["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name")
        return not targets or parent in targets

    def _restart_or_fail(self, js: dict, children: list[dict]) -> None:
        """J3: a child Job failed: the first failurePolicy rule that applies acts.

        failure_policy.go executeFailurePolicy (v0.12.0): no failurePolicy fails the
        JobSet (FailedJobs); else the first rule applying to a failed Job
        (`_rule_applies`) gives the action, RestartJobSet when none does. FailJobSet fails
        it (FailJobSetFailurePolicyAction); RestartJobSet fails it once
        restartsCountTowardsMax reached maxRestarts (ReachedMaxRestarts), else restarts it
        counting; RestartJobSetAndIgnoreMaxRestarts restarts it without counting.
        RestartingJobSet's reason is `FailurePolicy_<rule>` or DefaultFailurePolicy.
        """
        status = js.setdefault("status", {})
        policy = js["spec"].get("failurePolicy")
        failed = [j for j in children if _true(j, "Failed")]
        rule = None
        for candidate in (policy or {}).get("rules") or []:
            if any(self._rule_applies(candidate, j) for j in failed):
                rule = candidate
                break
        action = rule["action"] if rule else "RestartJobSet"
        counted = int(status.get("restartsCountTowardsMax", 0))
        if action in ("RestartJob", "RestartJobAndIgnoreMaxRestarts"):
            raise NotImplementedError(f"JobSet failure policy action {action}")
        if policy is None:
            _set(js, "Failed", "True", "FailedJobs")
        elif action == "FailJobSet":
            _set(js, "Failed", "True", "FailJobSetFailurePolicyAction")
        elif action == "RestartJobSet" and counted >= policy.get("maxRestarts", 0):
            _set(js, "Failed", "True", "ReachedMaxRestarts")
        else:
            status["restarts"] = int(status.get("restarts", 0)) + 1
            if action == "RestartJobSet":
                status["restartsCountTowardsMax"] = counted + 1
            reason = f"FailurePolicy_{rule['name']}" if rule else "DefaultFailurePolicy"
            _set(js, "RestartingJobSet", "True", reason)
        self._write_status(js)
        if _true(js, "Failed"):
            self._delete_all(children)
        else:  # every child is now of the previous attempt (J5)
            self._delete_previous(children)

    def _succeeded(self, js: dict, children: list[dict]) -> bool:
        """J4: True (and the JobSet Completed) once a target replicated Job completed."""
        targets = set(js["spec"].get("successPolicy", {}).get("targetReplicatedJobs") or [])
        role = "jobset.sigs.k8s.io/replicatedjob-name"
        if not any(
            _true(j, "Complete") and j["metadata"]["labels"][role] in targets for j in children
        ):
            return False
        _set(js, "Completed", "True", "AllJobsCompleted")
        self._write_status(js)
        for child in children:
            if not _true(child, "Complete"):
                self._delete(child)
        return True

    def _child_job(self, js: dict, rj: dict) -> dict:
        """J1: the Job of one replicated Job, as JobSet constructs it."""
        template = json_copy(rj["template"])
        labels = {
            **(template.get("metadata") or {}).get("labels", {}),
            "jobset.sigs.k8s.io/jobset-name": js["metadata"]["name"],
            "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
            RESTART_ATTEMPT: str(js.get("status", {}).get("restarts", 0)),
        }
        spec = template["spec"]
        # the JobSet webhook's defaults (jobset v0.12.0 jobset_webhook.go Default), which
        # the real one stores in the JobSet on create: Indexed, and pods OnFailure
        spec.setdefault("completionMode", "Indexed")
        if not spec["template"].setdefault("spec", {}).get("restartPolicy"):
            spec["template"]["spec"]["restartPolicy"] = "OnFailure"
        pod_meta = spec["template"].setdefault("metadata", {})
        pod_meta["labels"] = {**pod_meta.get("labels", {}), **labels}
        spec["template"]["spec"]["subdomain"] = js["spec"]["network"]["subdomain"]
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{js['metadata']['name']}-{rj['name']}-0",
                "namespace": self.ns,
                "labels": labels,
                "ownerReferences": [self._owner(js)],
            },
            "spec": spec,
            "status": {},
        }

    def _jobset(self) -> None:
        for js in self._jobsets():
            if _true(js, "Completed") or _true(js, "Failed"):
                continue
            owned = self._owned(js, self._jobs())
            previous = self._previous(js, owned)
            self._delete_previous(previous)
            children = [j for j in owned if j not in previous]
            if any(_true(j, "Failed") for j in children):
                self._restart_or_fail(js, children)
                continue
            if self._succeeded(js, children) or not self._headless_service(js):
                continue
            if not self._suspend_or_resume(js, children):
                self._run(js, owned, previous)

    def _headless_service(self, js: dict) -> bool:
        """J8: the JobSet's headless Service exists (whether it does, made now or before).

        jobset v0.12.0 jobset_controller.go createHeadlessSvcIfNecessary, each reconcile
        of an unfinished JobSet, suspended or not, once its failure and success policies
        had nothing to do: with network.enableDNSHostnames (the webhook's default true,
        jobset_webhook.go Default), a Service named the subdomain (the JobSet's name by
        default) unless one of that name exists, ClusterIP None, selecting the
        jobset-name label, publishNotReadyAddresses as the JobSet says (default true),
        owned by it. Created as its ServiceAccount (`admit_controller_create`: policies,
        then the `services` count); refused, a HeadlessServiceCreationFailed Warning
        event with the API server's message and the reconcile ends there.
        """
        network = js["spec"].get("network") or {}
        if network.get("enableDNSHostnames") is False:
            return True
        name = network.get("subdomain") or js["metadata"]["name"]
        path = f"/api/v1/namespaces/{self.ns}/services/{name}"
        if self.api.get_object(path) is not None:
            return True
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": self.ns,
                "ownerReferences": [self._owner(js)],
            },
            "spec": {
                "clusterIP": "None",
                "selector": {"jobset.sigs.k8s.io/jobset-name": js["metadata"]["name"]},
                "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True),
            },
        }
        try:
            self._put(
                service,
                lambda: self.api.admit_controller_create(
                    JOBSET_ACCOUNT, "v1", "services", service
                ),
            )
        except ApiError as e:
            self.refused.append(e.message)
            self._jobset_event(js, "Warning", "HeadlessServiceCreationFailed", e.message)
            return False
        return True

    @staticmethod
    def _previous(js: dict, jobs: list[dict]) -> list[dict]:
        """J5: the Jobs of an earlier restart attempt (getChildJobs' `previous`)."""
        restarts = int(js.get("status", {}).get("restarts", 0))
        return [j for j in jobs if int(j["metadata"]["labels"][RESTART_ATTEMPT]) < restarts]

    def _suspend_or_resume(self, js: dict, children: list[dict]) -> bool:
        """J2: child Jobs follow the JobSet's `suspend`; True while it is suspended."""
        suspend = bool(js["spec"].get("suspend"))
        templates = {
            rj["name"]: rj["template"]["spec"]["template"] for rj in js["spec"]["replicatedJobs"]
        }
        for child in children:
            if bool(child["spec"].get("suspend")) != suspend:
                child["spec"]["suspend"] = suspend
                if not suspend:  # J6: resumeJob
                    rj = child["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
                    _merge_scheduling(child["spec"]["template"], templates[rj])
                self._put(child)
        return suspend

    def _run(self, js: dict, owned: list[dict], previous: list[dict]) -> None:
        """J1 and J5: every child Job exists; RestartingJobSet clears once all run.

        `owned` and `previous` are as listed when this reconcile began, so a Job deleted
        in it is created again at the next one at the earliest.
        """
        strategy = (js["spec"].get("failurePolicy") or {}).get("restartStrategy", "Recreate")
        if previous and strategy == "BlockingRecreate":
            return
        taken = {j["metadata"]["name"] for j in owned}
        jobs_path = f"/apis/batch/v1/namespaces/{self.ns}/jobs/"
        for rj in js["spec"]["replicatedJobs"]:
            job = self._child_job(js, rj)
            name = job["metadata"]["name"]
            if name not in taken and self.api.get_object(jobs_path + name) is None:
                if not self._create_job(js, job):
                    return  # reconcileReplicatedJobs returns at the first refusal
        if _true(js, "RestartingJobSet") and self._all_running(js):
            _set(js, "RestartingJobSet", "False", "JobsReady")
            self._write_status(js)

    def _create_job(self, js: dict, job: dict) -> bool:
        """J1: create a child Job (whether it was); refused, JobCreationFailed on the JobSet.

        jobset v0.12.0 jobset_controller.go createJobs: `job %q creation failed with error:
        %v` (the API error's message), recorded as a Warning event, reason
        JobCreationFailed (constants.go), and the reconcile retried. The create is admitted
        as any from JobSet's ServiceAccount (`admit_controller_create`: the Validating-
        AdmissionPolicies, then the ResourceQuota plugin's `count/jobs.batch`), after the
        Job's validation (`_put`); a refusal ends the reconcile, the later replicated Jobs
        not tried (reconcileReplicatedJobs returns the error). The JobSet webhook
        (pkg/webhooks/jobset_webhook.go ValidateCreate) checks names, targets and the
        in-place restart settings of each template, not the Job's own validation, so such
        a JobSet is created and its Jobs never are.
        """
        try:
            self._put(
                job,
                admit=lambda: self.api.admit_controller_create(JOBSET_ACCOUNT, *JOB_RESOURCE, job),
            )
        except ApiError as e:
            name = job["metadata"]["name"]
            message = f"job {go_quote(name)} creation failed with error: {e.message}"
            self.refused.append(message)
            self._jobset_event(js, "Warning", "JobCreationFailed", message)
            return False
        return True

    def _jobset_event(self, js: dict, kind: str, reason: str, note: str) -> None:
        """An event of the JobSet controller, through the events.k8s.io/v1 API.

        jobset v0.12.0 main.go hands its reconciler `mgr.GetEventRecorder("jobset")`, a
        client-go tools/events EventRecorder (jobset_controller.go `Record
        events.EventRecorder`, `Eventf(js, nil, type, reason, "Reconciling", note)`);
        controller-runtime v0.24.0 (its go.mod's pin) builds that recorder on
        `events.NewBroadcaster(&events.EventSinkImpl{Interface: evtCl})` with an
        events.k8s.io/v1 client (pkg/cluster/cluster.go, pkg/internal/recorder), not the
        deprecated core/v1 record.EventBroadcaster of GetEventRecorderFor. client-go v0.36.0
        tools/events event_recorder.go makeEvent writes: name `<regarding>.<unixnano hex>`
        (record/util GenerateEventName), eventTime, reportingController "jobset",
        reportingInstance "jobset-<hostname>", action, reason, regarding, note, type. The
        broadcaster's cache (event_broadcaster.go recordToSink) turns the second isomorphic
        event into a series (count 2, a patch of the same Event) and counts later ones in
        memory only (refreshed every 30 minutes): one Event per (JobSet, reason, note).
        """
        key = (js["metadata"]["uid"], kind, reason, note)
        seen = self._events.get(key)
        if seen is not None and seen.get("series"):
            return
        now = datetime.datetime.now(datetime.timezone.utc)
        micro = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # metav1.MicroTime
        if seen is None:
            nanos = int(now.timestamp() * 1e9)
            name = f"{js['metadata']['name']}.{nanos:x}"
            meta = js["metadata"]
            regarding = {"kind": "JobSet", "namespace": self.ns, "name": meta["name"]}
            regarding |= {"uid": meta["uid"], "apiVersion": js["apiVersion"]}
            regarding["resourceVersion"] = meta.get("resourceVersion", "")
            seen = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": self.ns},
                "eventTime": micro,
                "reportingController": "jobset",
                "reportingInstance": f"jobset-{JOBSET_CONTROLLER_POD}",
                "action": "Reconciling",
                "reason": reason,
                "regarding": regarding,
                "note": note,
                "type": kind,
            }
        else:
            seen = {**seen, "series": {"count": 2, "lastObservedTime": micro}}
        path = f"/apis/events.k8s.io/v1/namespaces/{self.ns}/events/{seen['metadata']['name']}"
        self._events[key] = seen
        self.api.put_object(path, seen)

    def _all_running(self, js: dict) -> bool:
        """Every pod of every replicated Job runs (JobSet's "JobsReady")."""
        want = sum(rj["template"]["spec"]["completions"] for rj in js["spec"]["replicatedJobs"])
        jobs = self._owned(js, self._jobs())
        previous = self._previous(js, jobs)
        pods = [
            p
            for job in jobs
            if job not in previous
            for p in self._owned(job, self._pods())
            if _phase(p) == "Running" and not _gone(p)
        ]
        return len(pods) >= want

    # -- Job controller and kubelet
    def _free(self) -> dict[str, int]:
        """Each node's GPUs that no pod bound to it holds.

        kube-scheduler counts a pod on its node from its binding until it is deleted or
        has ended, terminating or not (kubernetes pkg/scheduler/scheduler.go
        newPodInformer: pods not Succeeded or Failed; eventhandlers.go deletePodFromCache).
        """
        nodes = self.api.objects("/api/v1/nodes/")
        free = {
            n["metadata"]["name"]: int((n.get("status") or {}).get("allocatable", {}).get(GPU, 0))
            for n in nodes
        }
        for pod in self.api.objects("/api/v1/", kind="Pod"):
            where = (pod.get("spec") or {}).get("nodeName")
            if where in free and (pod.get("status") or {}).get("phase") not in (
                "Succeeded",
                "Failed",
            ):
                free[where] -= _gpus(pod["spec"])
        return free

    def _schedule(self, spec: dict) -> str | None:
        """B1's scheduler: the node for a pod, or None (it stays Pending).

        A Ready, uncordoned node whose NoSchedule and NoExecute taints the pod tolerates,
        whose labels its nodeSelector names, and that has the GPUs it asks for free; of
        those the one its preferred node affinity weighs most, then by name.

        Sources: kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/
        (an Exists toleration with a key and no effect tolerates every taint of that key)
        and assign-pod-node/ (preferredDuringSchedulingIgnoredDuringExecution weights).
        """
        gpus = _gpus(spec)
        free = self._free()
        candidates = []
        for node in self.api.objects("/api/v1/nodes/"):
            name = node["metadata"]["name"]
            node_spec = node.get("spec") or {}
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or []
            )
            taints = [
                t
                for t in node_spec.get("taints") or []
                if t.get("effect") in ("NoSchedule", "NoExecute")
            ]
            labels = node["metadata"].get("labels") or {}
            if (
                not ready
                or node_spec.get("unschedulable")
                or free.get(name, 0) < gpus
                or not all(tolerated(spec.get("tolerations") or [], t) for t in taints)
                or any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items())
            ):
                continue
            candidates.append((-_preference(spec, node), name))
        return min(candidates)[1] if candidates else None

    def _job_controller(self) -> int:
        created = 0
        # J5: a Job being deleted gets no pods (syncJob: manageJob only without a
        # deletionTimestamp)
        jobs = [j for j in self._jobs() if not j["metadata"].get("deletionTimestamp")]
        suspended = [  # B2: every suspended Job's pods, deleted together
            pod
            for job in jobs
            if job["spec"].get("suspend") and not (_true(job, "Complete") or _true(job, "Failed"))
            for pod in self._owned(job, self._pods())
            if not _terminating(pod)
        ]
        self._delete_pods(suspended)
        for job in jobs:
            if _true(job, "Complete") or _true(job, "Failed"):
                continue
            pods = self._owned(job, self._pods())
            if job["spec"].get("suspend"):
                continue
            self._start_job(job)
            if job["spec"].get("completionMode", "NonIndexed") != "Indexed":
                created += self._non_indexed(job, pods)
                continue
            if self._finish(job, pods):
                continue
            self._retry(pods)
            waits = _replaces_only_failed(job)  # B9
            have = {
                int(p["metadata"]["labels"][JOB_INDEX])
                for p in pods
                if _active(p) or _phase(p) == "Succeeded" or (waits and _terminating(p))
            }
            missing = [i for i in range(job["spec"]["completions"]) if i not in have]  # B1
            room = max(self.per_tick - created, 0)
            created += _slow_start([self._creates(job, i) for i in missing[:room]])  # B10
        return created

    def _creates(self, job: dict, index: int | None) -> Callable[[], bool]:
        """A try at the Job's pod of `index` (`_create_pod`), for `_slow_start`."""
        return lambda: self._create_pod(job, index)

    def _non_indexed(self, job: dict, pods: list[dict]) -> int:
        """B6: a NonIndexed Job; returns the pods it created."""
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        completions = job["spec"].get("completions")
        succeeded = phases.count("Succeeded")
        if succeeded and (completions is None or succeeded >= completions):
            self._end_job(job, pods, "Complete", "CompletionsReached", COMPLETIONS_REACHED)
            return 0
        actions = [self._policy_action(job, p) for p in pods if _phase(p) == "Failed"]
        if "FailJob" in actions:
            message = "Container failed with a rule"
            self._end_job(job, pods, "Failed", "PodFailurePolicy", message)
            return 0
        if actions.count("Count") > int(job["spec"].get("backoffLimit", 6)):
            message = "Job has reached the backoff limit"
            self._end_job(job, pods, "Failed", "BackoffLimitExceeded", message)
            return 0
        self._retry(pods)
        active = sum(_active(p) for p in pods)
        if _replaces_only_failed(job):  # B9: manageJob counts its terminating pods too
            active += sum(_terminating(p) for p in pods)
        want = job["spec"].get("parallelism", 1)  # manageJob's wantActive
        if completions is not None:
            want = min(want, completions - succeeded)
        return _slow_start([self._creates(job, None)] * max(want - active, 0))  # B10

    def _retry(self, pods: list[dict]) -> None:
        """The scheduler binds a Pending pod once a node can take it."""
        for pod in pods:
            if _unschedulable(pod) and (node := self._schedule(pod["spec"])) is not None:
                self._bind(pod, node)
                pod["status"] = {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                }
                self._write_status(pod)
                self._start(pod)

    @staticmethod
    def _policy_action(job: dict, pod: dict) -> str:
        """B3: what the Job's podFailurePolicy does with a failed pod (Count by default)."""
        return BatchControllers._policy_match(job, pod)[0]

    @staticmethod
    def _policy_match(job: dict, pod: dict) -> tuple[str, str]:
        """B3: the podFailurePolicy's action for a failed pod, and a FailJob's message."""
        containers = [
            (c.get("name"), ((c.get("state") or {}).get("terminated") or {}).get("exitCode"))
            for c in (pod.get("status") or {}).get("containerStatuses") or []
        ]
        rules = (job["spec"].get("podFailurePolicy") or {}).get("rules") or []
        for index, rule in enumerate(rules):
            for cond in rule.get("onPodConditions") or []:
                if _true(pod, cond["type"]):
                    return rule["action"], ""
            exits = rule.get("onExitCodes")
            for name, code in containers if exits else []:
                if code in exits["values"] and exits.get("containerName") in (None, name):
                    message = (
                        f"Container {name} for pod {pod['metadata'].get('namespace', '')}/"
                        f"{pod['metadata']['name']} failed with exit code {code} matching "
                        f"{rule['action']} rule at index {index}"
                    )
                    return rule["action"], message
        return "Count", ""

    def _finish(self, job: dict, pods: list[dict]) -> bool:
        """B3, B4: mark the Job Failed or Complete; True when it finished."""
        for pod in pods:
            if (pod.get("status") or {}).get("phase") != "Failed":
                continue
            action, message = self._policy_match(job, pod)
            if action == "Ignore":
                continue
            reason = "PodFailurePolicy" if action == "FailJob" else "BackoffLimitExceeded"
            self._end_job(job, pods, "Failed", reason, message)
            return True
        succeeded = {
            int(p["metadata"]["labels"][JOB_INDEX])
            for p in pods
            if (p.get("status") or {}).get("phase") == "Succeeded"
        }
        rules = (job["spec"].get("successPolicy") or {}).get("rules") or []
        matched = [  # success_policy.go matchSuccessPolicy: the first rule met
            index
            for index, r in enumerate(rules)
            if "succeededIndexes" in r
            and {int(i) for i in r["succeededIndexes"].split(",")} <= succeeded
        ]
        if matched:
            message = f"Matched rules at index {matched[0]}"
            self._end_job(job, pods, "Complete", "SuccessPolicy", message)
            return True
        if succeeded >= set(range(job["spec"]["completions"])):
            self._end_job(job, pods, "Complete", "CompletionsReached", COMPLETIONS_REACHED)
            return True
        return False

    def _start_job(self, job: dict) -> None:
        """B7: an unsuspended Job's startTime, written the first time it runs."""
        if (job.get("status") or {}).get("startTime") is None:
            job.setdefault("status", {})["startTime"] = stamp(self.clock())
            self._write_status(job)

    def _end_job(self, job: dict, pods: list[dict], kind: str, reason: str, message: str) -> None:
        """B7: the interim condition, the active pods deleted, then the terminal condition."""
        interim = "SuccessCriteriaMet" if kind == "Complete" else "FailureTarget"
        _set(job, interim, "True", reason, message)
        self._write_status(job)
        self._delete_pods([p for p in pods if _active(p)])  # deleteActivePods
        _set(job, kind, "True", reason, message)
        if kind == "Complete":  # never before startTime, whatever a test set `clock` to
            start = stamp_seconds(job["status"]["startTime"])
            job["status"]["completionTime"] = stamp(max(self.clock(), start))
        self._write_status(job)

    def _create_pod(self, job: dict, index: int | None) -> bool:
        """B1/B6 (B8: admitted first); whether the pod was created."""
        template = json_copy(job["spec"]["template"])
        infix = "" if index is None else f"-{index}"
        name = f"{job['metadata']['name']}{infix}-{generated_suffix()}"
        labels = dict(template["metadata"]["labels"])
        labels["job-name"] = labels[JOB_NAME] = job["metadata"]["name"]
        spec = template["spec"]
        if index is not None:
            labels[JOB_INDEX] = str(index)
            spec["hostname"] = f"{job['metadata']['name']}-{index}"
        node = self._schedule(spec)
        status: dict = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        if node is None:
            status = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": f"0/{len(self.api.objects('/api/v1/nodes/'))} nodes are "
                        "available",
                    }
                ],
            }
        else:
            spec["nodeName"] = node
        if node is not None and self.waiting_reason:
            status = {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "tensorflow",
                        "state": {
                            "waiting": {"reason": self.waiting_reason, "message": "pull failed"}
                        },
                    }
                ],
            }
        pod = self._pod(name, labels, job, spec, status)
        if not self._admitted(pod, job):
            return False
        self._create(pod)
        if node is not None:
            self._start(pod)
        return True

    def _start(self, pod: dict) -> None:
        """Kubelet runs a bound pod's container (its log, or a real process: B5).

        B7: a container whose `envFrom` names a Secret that does not exist cannot start:
        it waits with reason CreateContainerConfigError, `secret "<name>" not found`, and
        the pod stays Pending (kubernetes.io/docs/tasks/configure-pod-container/
        configure-pod-configmap/#restrictions; kubelet kuberuntime_container.go).
        """
        for source in pod["spec"]["containers"][0].get("envFrom") or []:
            ref = source.get("secretRef") or {}
            path = f"/api/v1/namespaces/{self.ns}/secrets/{ref.get('name')}"
            if ref and not ref.get("optional") and self.api.get_object(path) is None:
                pod["status"] = {
                    "phase": "Pending",
                    "containerStatuses": [
                        {
                            "name": pod["spec"]["containers"][0]["name"],
                            "state": {
                                "waiting": {
                                    "reason": "CreateContainerConfigError",
                                    "message": f'secret "{ref["name"]}" not found',
                                }
                            },
                        }
                    ],
                }
                self._write_status(pod)
                return
        if self.logs is not None:
            self.api.set_pod_log(self.ns, pod["metadata"]["name"], self.logs(pod))
        if self.kubelet is not None:
            self.kubelet.start(pod)

    def _pod(self, name: str, labels: dict, owner: dict, spec: dict, status: dict) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.ns,
                "labels": labels,
                "ownerReferences": [self._owner(owner)],
            },
            "spec": spec,
            "status": status,
        }

    def _create(self, pod: dict) -> None:
        """Store the controller's new pod, then write the status its node's kubelet gives it.

        Created, a pod's status is the server's (Pending: podStrategy.PrepareForCreate
        resets it); the scheduler binds it (pods/binding sets spec.nodeName) and kubelet
        reports what it started through pods/status (`_pod_status`), validated.
        """
        status = pod.pop("status")
        stored = self._put(pod)
        pod["metadata"] = stored["metadata"]
        pod["status"] = status
        self._write_status(pod)

    def _bind(self, pod: dict, node: str) -> None:
        """The scheduler's binding (pods/binding sets spec.nodeName; the fake stores it)."""
        path = f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}"
        stored = self.api.get_object(path)
        stored["spec"]["nodeName"] = pod["spec"]["nodeName"] = node
        pod["metadata"] = self._put(stored)["metadata"]

    # -- pods by tests
    def pod(self, job: str, role: str, index: int) -> dict:
        for pod in self._pods():
            labels = pod["metadata"]["labels"]
            if pod["metadata"].get("deletionTimestamp"):
                continue  # J5: terminating, of a restart attempt gone
            if (
                labels.get("jobset.sigs.k8s.io/jobset-name") == job
                and labels.get("jobset.sigs.k8s.io/replicatedjob-name") == role
                and labels.get(JOB_INDEX) == str(index)
            ):
                return pod
        raise AssertionError(f"no pod {job} {role} {index}")

    def evict(self, job: str, role: str, index: int) -> None:
        """The Eviction API (a drain): the pod gets DisruptionTarget, its container SIGTERM.

        kube-apiserver's eviction sets the condition (reason EvictionByEvictionAPI,
        kubernetes.io/docs/concepts/workloads/pods/disruptions "Pod disruption conditions")
        before it deletes the pod;
        kubelet then stops the container, and the pod ends Failed with its exit code and
        that condition, which the Job's podFailurePolicy reads (B3). The test goes on while
        the container stops (a `kubelet` ends it at a later `tick`).
        """
        pod = self.pod(job, role, index)
        pod["status"].setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
        )
        self._write_status(pod)
        if self.kubelet is not None:
            self.kubelet.terminate(pod)
        else:
            self._end(pod, "Failed", 143, disrupted=True)

    def end_pod(
        self,
        job: str,
        role: str,
        index: int,
        phase: str,
        *,
        disrupted: bool = False,
        exit_code: int | None = None,
    ) -> None:
        """The pod's container exits (Succeeded/Failed); `disrupted`: evicted or preempted."""
        code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
        self._end(self.pod(job, role, index), phase, code, disrupted=disrupted)

    def _end(self, pod: dict, phase: str, code: int, *, disrupted: bool = False) -> None:
        container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name", "")
        pod["status"] = {
            "phase": phase,
            "conditions": [],
            "containerStatuses": [  # the pod's container, as kubelet reports it
                {"name": container, "state": {"terminated": {"exitCode": code}}}
            ],
        }
        if disrupted:
            pod["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True"})
        self._write_status(pod)

    # -- Deployments (D1) and kubelet's start of their containers (D2)
    def _deployments(self) -> None:
        pods = self._pods()
        deployments = self.api.objects(f"/apis/apps/v1/namespaces/{self.ns}/deployments/")
        for deployment in deployments:  # B1's scheduler retries what waited for a node
            for pod in self._owned(deployment, pods):
                if _unschedulable(pod) and (node := self._schedule(pod["spec"])) is not None:
                    self._bind(pod, node)
                    pod["status"] = self._started(pod["spec"])
                    self._write_status(pod)
        frameworks = self._frameworks()
        for deployment in deployments:
            owned = self._owned(deployment, pods)
            missing = int(deployment["spec"].get("replicas", 1)) - len(owned)
            _slow_start([lambda d=deployment: self._add_replica(d, frameworks)] * missing)

    def _add_replica(self, deployment: dict, frameworks: set[str]) -> bool:
        """D1 (B8: admitted first); whether the pod was created."""
        pod = self._replica(deployment, deployment["spec"]["template"], frameworks)
        if not self._admitted(pod, deployment):
            return False
        self._create(pod)
        return True

    def _replica(self, deployment: dict, template: dict, frameworks: set[str]) -> dict:
        """D1: a new pod of the Deployment, through Kueue's pod webhook (K12), placed."""
        template = json_copy(template)
        name = f"{deployment['metadata']['name']}-{generated_suffix(10)}"
        spec = template["spec"]
        pod = self._pod(name, dict(template["metadata"].get("labels") or {}), deployment, spec, {})
        annotations = template["metadata"].get("annotations")
        if annotations:
            pod["metadata"]["annotations"] = dict(annotations)
        if POD_FRAMEWORK in frameworks:
            self._pod_webhook(pod)  # K12, as on any pod's create
        reason = "SchedulingGated"  # K12: gated until Kueue admits it, never bound
        if not spec.get("schedulingGates"):
            node = self._schedule(spec)
            if node is not None:
                spec["nodeName"] = node
                pod["status"] = self._started(spec)
                return pod
            reason = "Unschedulable"
        condition = {"type": "PodScheduled", "status": "False", "reason": reason}
        pod["status"] = {"phase": "Pending", "conditions": [condition]}
        return pod

    def _scheduler(self) -> None:
        """B1's scheduler for the pods no fake controller here places: bare pods, Kueue's.

        A Pending pod with no node, not being deleted and no scheduling gate left
        (kubernetes.io/docs/concepts/scheduling-eviction/pod-scheduling-readiness: a gated
        pod is not considered for scheduling) is bound where `_schedule` finds room, and
        kubelet starts it (`_started`); with no room it is Unschedulable. A Job's pods are
        the Job controller's here (B1); a Deployment's are started as D1 and D2 say.
        """
        for pod in self._pods():
            spec = pod["spec"]
            owners = {r.get("kind") for r in pod["metadata"].get("ownerReferences") or []}
            if (
                "Job" in owners
                or spec.get("nodeName")
                or spec.get("schedulingGates")
                or _gone(pod)
                or _phase(pod) not in ("", "Pending")
            ):
                continue
            node = self._schedule(spec)
            if node is None:
                if not _unschedulable(pod):
                    pod["status"] = {
                        "phase": "Pending",
                        "conditions": [
                            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                        ],
                    }
                    self._write_status(pod)
                continue
            self._bind(pod, node)
            pod["status"] = self._started(spec)
            self._write_status(pod)
            if "Deployment" not in owners:
                self._start(pod)

    def _started(self, spec: dict) -> dict:
        """The status kubelet gives a pod whose containers it started (or could not)."""
        for container in spec["containers"]:
            programs = self.images.get(container["image"])
            command = (container.get("command") or [""])[0]
            if programs is None or command in programs:
                continue
            error = (
                "failed to create containerd task: failed to create shim task: OCI runtime "
                "create failed: runc create failed: unable to start container process: "
                f'exec: "{command}": executable file not found in $PATH: unknown'
            )
            status = {
                "name": container["name"],
                "ready": False,
                "restartCount": 1,
                "state": {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off 10s restarting failed container={container['name']}",
                    }
                },
                "lastState": {
                    "terminated": {"exitCode": 128, "reason": "StartError", "message": error}
                },
            }
            return {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [status],
            }
        return {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}

    def tick(self) -> int:
        """One round of every controller; returns how many pods were created."""
        if not self.enabled:
            return 0
        if self.kubelet is not None:  # containers that exited end their pods
            pods = self._pods()
            self.kubelet.removed({p["metadata"]["name"] for p in pods})  # B5
            for pod in pods:
                code = self.kubelet.exit_code(pod)
                if code is not None and pod["status"].get("phase") == "Running":
                    phase = "Succeeded" if code == 0 else "Failed"
                    self._end(pod, phase, code, disrupted=_true(pod, "DisruptionTarget"))
        self._reap()
        self._default_queue()
        # a Deployment's new pods first: Kueue admits a pod as it is made (K12), as the
        # real one does within the second
        self._deployments()
        self._kueue()
        self._jobset()
        created = self._job_controller()
        self._jobset()  # a Job that just finished ends or restarts its JobSet at once
        self._scheduler()
        return created
