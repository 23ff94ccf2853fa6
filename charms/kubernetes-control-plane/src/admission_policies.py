# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""ValidatingAdmissionPolicies that fence the cluster-wide rights root on a node could use.

Root on a GPU node (where the teams' images run) can read the ServiceAccount tokens of the
DaemonSet pods on that node. Three of them hold cluster-wide writes their upstream RBAC
needs, because RBAC cannot name "my own node":
- the EFS CSI node plugin (`efs_csi`: nodes patch, to remove its not-ready taint from its
  own Node) and NVIDIA's MIG manager (`mig_manager.CLUSTER_RULES`: nodes patch, labels of
  its own Node): with a stolen token, any Node's labels and taints (move a team's pods
  onto a node the thief owns, or drain the cluster);
- calico-node (Calico's calico.yaml ClusterRole `calico-node`: nodes/status patch and
  update, pods/status patch): any Node's status and any pod's status.
And a storage provisioner (efs-storage, lib kube_api PROVISIONER_RULES) may create, change
and delete any PersistentVolume: a hostPath volume is root on whichever node mounts it (RBAC
good practices, "Persistent volume creation"), and RBAC cannot say "only mine".

Upstream's answer is a ValidatingAdmissionPolicy keyed on the node a pod-bound token names
(kubernetes test/e2e/auth/e2edata/per_node_validatingadmissionpolicy.yaml, the per-node
example of KEP-4193 "Bound service account token improvements"): kubelet's projected
token of a pod is bound to that pod, and the API server puts the pod's node into the
token and into the authenticated user's extra `authentication.kubernetes.io/node-name`
(ServiceAccountTokenPodNodeInfo: alpha 1.29, beta 1.30, GA and locked on in 1.32,
kubernetes pkg/features/versioned_kube_features.go; the key is k8s.io/apiserver
pkg/authentication/serviceaccount/util.go NodeNameKey). ValidatingAdmissionPolicy is GA
in admissionregistration.k8s.io/v1 since 1.30, so every Kubernetes this charm deploys
has both.

What is applied (`manifests`), each policy with a binding of the same name
(validationActions [Deny]; failurePolicy Fail: a policy that cannot be evaluated refuses):
- per DaemonSet ServiceAccount (NODE_BOUND), matched by its exact username: a request
  from it must carry the node-name extra, and may change only the Node of that name (its
  status included) and, for calico-node, the status only of pods bound to that node. A
  token of that ServiceAccount that names no node (a TokenRequest not bound to a pod, or
  a legacy Secret token) is refused every such write. The MIG manager may also delete
  (NODE_BOUND_DELETES) only pods of its own namespace that run on its node and are
  labelled as NVIDIA's validators, the only pods mig-parted deletes (reconfigure.go
  deletePod); its Role grants pods delete in that whole namespace, where the device plugin
  and DCGM exporter of every node run.
- EFS_ONLY: a PersistentVolume created or updated by any ServiceAccount outside
  kube-system (every kube-api consumer, the provisioners included; kube-system's are the
  cluster's own controllers, such as the PersistentVolume binder that writes claimRef) is
  an EFS volume: through the EFS CSI driver with efs-storage's volumeHandle
  `<fs-id>::<fsap-id>` (charms/efs-storage storage.py volume_source), or plain NFS to an
  EFS file system's DNS name (`<fs-id>.efs.<region>.amazonaws.com[.cn]`, efs_model.py
  dns_name), which efs-storage still writes while the driver is not on every node. A
  PersistentVolume has exactly one source (kubernetes pkg/apis/core/validation
  ValidatePersistentVolumeSpec: "may not specify more than 1 volume type"), so no
  hostPath, local or other driver's volume passes.
- EFS_OWN (`gpu-k8s-efs-own-volumes`): the same ServiceAccounts create, change and delete
  only their own PersistentVolumes, those labelled `gpu-k8s.io/efs-app: <the account's
  name>` (EFS_APP_LABEL): a new or changed volume must carry it, a changed or deleted one
  must have carried it. So a provisioner cannot delete or rewrite an operator's volume or
  another provisioner's, nor make a volume that another efs-storage would take for its own.
  On update the claimRef may lose only its uid and resourceVersion (CLAIM_REF_FORGETTABLE,
  what efs-storage does to a Released volume); its namespace and name, which bind the
  volume to one consumer's claim, never change. efs-storage runs no external-provisioner
  (efs_csi: the EFS CSI controller is not applied; volumes are statically provisioned),
  so no other claimRef write is a provisioner's.
- EFS_CLAIMS (`gpu-k8s-efs-own-claims`): a storage provisioner's grant holds cluster-wide
  persistentvolumeclaims create/patch/update/delete (lib kube_api PROVISIONER_RULES), and
  teams write claims in their own namespaces through their own grants, so this policy
  matches only the provisioners' ServiceAccounts the control plane granted, by exact
  username (`claims_manifests(accounts)`, applied again by addons.apply_provisioner_claims
  _policy whenever that set changes; a matchConditions list rather than a paramKind
  ConfigMap: one object to apply, and nothing a param lookup could fail on). Such an
  account creates, changes and deletes only claims labelled `gpu-k8s.io/efs-app: <its
  name>` (a new or changed claim must carry it, a changed or deleted one must have), and a
  claim it creates or changes must go into the namespace the control plane granted the
  consumer its `gpu-k8s.io/consumer` label names: that Namespace carries the same label
  (rbac.manifests, literals.CONSUMER_LABEL; no consumer may write Namespaces), read from
  `namespaceObject` (the request's Namespace, k8s.io/apiserver pkg/admission/plugin/policy/
  validating dispatcher.go and plugin/cel CreateNamespaceObject), as efs-storage itself
  checks before it writes one (storage.py namespace_problem). So no team's claim, another
  provisioner's or an operator's is created, changed or deleted by a provisioner, and none
  goes into a system namespace or another team's.
- EFS_SERVED (`gpu-k8s-efs-within-consumers`): the control plane does not see the
  `shared-storage` relations, so each provisioner publishes on kube-api whom it serves
  (lib kube_api `storage-consumers`: each consumer's application and the access point its
  volume mounts, "" for plain NFS); the control plane maps each consumer to the namespace
  it granted it (access.py's record) and this policy, generated from that
  (`claims_manifests(accounts, served)`, a literal map like EFS_CLAIMS' username list),
  matches the same provisioners' accounts on PersistentVolume and claim creates and
  updates: (1) a volume must be pre-bound (claimRef) into the namespace of a consumer that
  provisioner serves, and mount that consumer's access point (volumeHandle
  `<fs-id>::<its fsap-id>`), plain NFS only while none was published for it; (2) a volume
  it writes is named `<its ServiceAccount's name>-...` (efs-storage storage.py claim_spec:
  `<app>-<namespace>-<consumer>-<digest>`), never under another provisioner's longer
  prefix, and a claim it writes must name (spec.volumeName) such a volume of its own: a
  claim without volumeName, or naming any other volume, could bind an unbound volume
  that is not its own (kubernetes pkg/controller/volume/persistentvolume: a claim binds
  the volume it names, or any matching unbound one), and an admission policy cannot look
  the volume up; (3) a claim goes only into the namespace of a consumer it serves.
  Nothing else is matched: deletes stay EFS_OWN's and EFS_CLAIMS'.

The denial is what kube-apiserver answers for a policy (k8s.io/apiserver pkg/admission/
plugin/policy/validating/dispatcher.go, admission.NewForbidden with the validation's
reason): `reason: Forbidden` makes it a 403 `nodes "b" is forbidden: ValidatingAdmission
Policy '<policy>' with binding '<binding>' denied request: <message>`.

- CALICO_CNI (`gpu-k8s-calico-cni-plugin`): calico-node may request tokens of the
  `calico-cni-plugin` ServiceAccount (calico.yaml ClusterRole `calico-node`:
  serviceaccounts/token create, resourceNames calico-cni-plugin); such a token is not bound
  to a pod, so it names no node, and its ClusterRole grants pods/status patch and IPPool
  create/update/delete cluster-wide. The CNI plugin writes pods only through pods/status,
  and only the annotations `cni.projectcalico.org/podIP`, `podIPs` and `containerID`
  (libcalico-go lib/backend/k8s/resources/workloadendpoint.go calcCNIAnnotations,
  patchOutAnnotations, patchPodAnnotations; conversion/constants.go), and writes no IPPool
  (cni-plugin reads them for IPAM): so through this account a pod's status, labels,
  finalizers and annotations outside `cni.projectcalico.org/` stay as they are, and no
  IPPool is created, changed or deleted.
- CALICO_SETTINGS (`gpu-k8s-calico-node-settings`): calico-node's ClusterRole lets it
  create and update the cluster's Calico settings. At startup it writes only (Calico
  v3.32.1 node/pkg/lifecycle/startup/startup.go ensureDefaultConfig, configureIPPools,
  ensureDefaultBGPConfigExists; libcalico-go lib/clientv3/client.go EnsureInitialized):
  ClusterInformation `default` (creates it; sets calicoVersion, a clusterGUID when empty,
  datastoreReady true when unset, appends to clusterType), the Tiers `default` (Deny),
  `kube-admin` and `kube-baseline` (Pass), FelixConfiguration `default` (reportingInterval
  and logSeverityScreen when unset), BGPConfiguration `default` (empty) and the default
  IPPools `default-ipv4-ippool` / `default-ipv6-ippool`. The policy allows exactly that,
  and any write of the FelixConfiguration `node.<its node>` (that node's own settings,
  keyed on the token's node name as above). It refuses every BGPPeer write (v3.32.1's
  calico-node writes none: its only BGPPeer write is clientv3 node.go Delete, run by
  kube-controllers; the ClusterRole's create/update is "only required for upgrade from
  v2.6") and a CalicoNodeStatus update but of its own node's (node/pkg/status
  nodestatus.go reports only the objects whose spec.node is its node).
- IPAM (`_calico_ipam`, in both Calico policies; the _IPAM_RESOURCES comment says what
  libcalico-go writes): both accounts write block affinities, IPAM blocks and the IPAM
  configuration only in the shapes libcalico-go's IPAM writes them (no block moved to
  another node, none deleted in use, no affinity's key changed). calico-node, whose token
  names its node, also claims and creates blocks only for that node, drops the affinity
  only of its own node's blocks and changes another node's affinity only toward its
  deletion (the reclaim of an empty block). The CNI plugin's tokens name no node (calico-
  node requests them with no bound object, node/pkg/cni/token_watch.go UpdateToken), and
  any node may borrow from and release addresses in any block (strict affinity off), so
  which allocations of a block a writer frees or takes cannot be fenced: still open.
  IPAMHandles carry no node either and are not matched. CALICO_CNI also refuses its
  ClusterInformation and IPReservation writes (CNI_NEVER_WRITES).
- JOBSET_CHILDREN (`gpu-k8s-jobset-children-only-by-jobset`): a Job with an
  ownerReference to a JobSet may be created, or given such a reference, only by the JobSet
  controller's ServiceAccount (jobset v0.12.0 config/default/kustomization.yaml namespace
  jobset-system, namePrefix jobset-, config/components/rbac/service_account.yaml
  controller-manager; it sets the reference with SetControllerReference, pkg/controllers/
  jobset_controller.go). Kueue does not suspend a child Job whose ancestor's Workload is
  admitted and not finished (kubernetes-sigs/kueue v0.19.2 pkg/controller/jobframework/
  reconciler.go shouldSuspendChildJob), so a team's hand-made Job owned by its admitted
  JobSet ran outside its quota; the same holds for a Job owned by an admitted Job
  (Kueue's batch/job integration is on too). A reference that was there before may stay or go (the
  garbage collector removes it when orphaning).

- CONSUMER_PODS (`gpu-k8s-consumer-pods-off-the-control-plane`): in every consumer's
  namespace (the Namespace labelled `gpu-k8s.io/consumer`, CONSUMER_LABEL, which only the
  control plane writes: rbac.manifests; no consumer may write Namespaces), a pod is never
  created with `spec.nodeName`, and it tolerates only an allow-list of taints (the GPU
  nodes', and a lost node's, LOST_NODE_TAINTS, for at most LOST_NODE_SECONDS: what
  the charms' pods, Kueue and kube-apiserver's own admission plugins give them), never
  the control plane's taint (CONTROL_PLANE_TAINTS), the GPU quarantine's (it would keep a
  team's pod on a GPU the watcher found bad and the node from draining for its repair), a
  cordon's (the scheduler would place it on a node drained for a GPU reset or a driver
  upgrade), a lost node's for ever (its quota and GPUs held in the cohort's accounting)
  or every taint (a toleration without a key, operator Exists). A
  pod bound by name skips the scheduler, and kubelet admits it checking only NoExecute
  taints (kubernetes pkg/kubelet/lifecycle/predicate.go generalFilter: "Kubelet is only
  interested in the NoExecute taint"), so kubeadm's NoSchedule taint on the control-plane
  node kept no team's pod off it; a toleration of that taint lets the scheduler put it
  there. The control-plane node holds admin.conf and efs-storage's cloud credential: a
  container escape there is cluster-admin. Matched on the namespace, not on who asks: a
  team's Jobs, JobSets and Deployments make their pods through kube-controller-manager's
  controllers, each its own ServiceAccount in kube-system (kubeadm sets
  --use-service-account-credentials=true, cmd/kubeadm/app/phases/controlplane/
  manifests.go), so a rule on the consumer's username would miss every pod but those it
  makes itself, and a rule on each workload's pod template would miss a kind it did not
  name. kube-scheduler binds through pods/binding, which sets nodeName without a pod
  CREATE or UPDATE (not matched): no grant may create a Binding (lib kube_api refuses
  pods/binding and bindings in any scope), and no pod is created there naming a scheduler
  but kube-scheduler (`default-scheduler`; a pod naming another stays unbound for whoever
  binds it). nodeName cannot be set by a pod update (kubernetes
  pkg/apis/core/validation ValidatePodUpdate: only additions to tolerations, and a few
  other fields, may change), so nodeName is checked at CREATE and tolerations at CREATE
  and UPDATE, where those the pod had stay (ValidatePodUpdate lets an update change an
  existing toleration's tolerationSeconds, to none too: such a changed toleration is a new
  one here, and must be allowed). No pod of this bundle in a consumer's namespace sets
  nodeName, and none tolerates more than those (tensorflow's `nvidia.com/gpu`
  Exists, manifests.py and serving.py; efs-storage's directory Jobs the same, directories
  .py). A DaemonSet's pods are refused there, whoever made the DaemonSet: its controller
  gives them tolerations of cordons, node pressure and a lost node for ever (kubernetes
  pkg/controller/daemon/util/daemonset_util.go AddOrUpdateDaemonPodTolerations, stored
  commit 05c351a9), and a drain leaves them (lib
  drain.py `stays`), so they would keep a node's GPUs through its reset and its driver
  upgrade; no grant holds daemonsets writes (lib kube_api), and a DaemonSet of the
  operator's belongs in a namespace of its own.
  Nor is a pod created there that names a PriorityClass, or whose priority is above 0.
  kube-apiserver's Priority plugin (on by default) resolves a pod's priorityClassName to
  its spec.priority in any namespace: since Kubernetes 1.17 the system classes
  `system-node-critical` and `system-cluster-critical` are no longer kept to kube-system
  (kubernetes/kubernetes#60596; plugin/pkg/admission/priority/admission.go admitPod looks
  the class up by name, and nothing else), and no grant may write PriorityClasses
  (cluster-scoped: kube_api refuses them in any scope). The teams' training pods have
  priority 0 (no class: the charms make none for teams; Kueue's WorkloadPriorityClasses,
  `train priority=...`, order workloads, not pods), and their Jobs and the pods of a
  team's Deployment are outside what kube-scheduler would spare: it preempts pods of
  lower priority for a pending pod (kubernetes.io/docs/concepts/scheduling-eviction/
  pod-priority-preemption), so a team's critical pod evicted other teams' admitted
  training pods and took their GPUs past every quota, and kubelet's node-pressure
  eviction spares critical pods. The plugin runs before this policy (mutating admission
  first), so spec.priority here is what the class gave, and a pod that sets spec.priority
  itself to anything but the class's value is the plugin's refusal. Upstream's way to
  ration a class is a ResourceQuota scoped to it with the ResourceQuota plugin's
  `limitedResources` (kubernetes.io/docs/concepts/policy/resource-quotas, "Limit Priority
  Class consumption by default"), a kube-apiserver admission configuration kubeadm does
  not write; a policy on the consumers' namespaces needs no API server restart. A cluster
  whose operator made a PriorityClass `globalDefault` has its name written into every pod
  that names none (admission.go getDefaultPriority): this policy then refuses the teams'
  pods, naming it. Both fields are immutable (ValidatePodUpdate), so CREATE only.
  And no pod there gets past Kueue (issue 29 item 6). Kueue's pod integration gates every
  pod of a managed namespace until Kueue admits it within its team's quota
  (kueue.configure), but two ways past it remain to a grant holding pods create or
  patch, which any consumer may ask for in its namespace (lib kube_api). (1) Kueue v0.19.2
  does not gate a pod whose controller reference names a job it manages (jobframework
  reconciler.go FindAncestorJobManagedByKueue walks controller references by name and
  uid through Jobs, JobSets, Deployments and the ReplicaSets between; it calls "same-
  namespace ownership spoofing ... out of scope"), so a bare pod naming the team's own
  admitted Job as its controller would run ungated: a pod with a controller reference is
  created there only by kube-system's ServiceAccounts, kube-controller-manager's
  controllers (the Job, ReplicaSet, StatefulSet and DaemonSet controllers make every
  such pod of this bundle; CONTROLLERS_PREFIX). (2) An update may remove a pod's
  scheduling gates (ValidatePodUpdate lets schedulingGates only shrink), and Kueue
  deletes a pod someone else ungated only once it sees it (jobframework reconciler.go
  "Running job is not admitted by a cluster queue, suspending": stopJob with
  StopReasonNotAdmitted, pod_controller.go Stop): its
  gate `kueue.x-k8s.io/admission` (KUEUE_GATE) is removed by Kueue's ServiceAccount only
  (KUEUE_CONTROLLER). A gated pod cannot be bound past the gate either: kube-apiserver
  refuses a pods/binding of a pod with scheduling gates ("has non-empty
  .spec.schedulingGates", kubernetes pkg/registry/core/pod/storage/storage.go
  assignPod), and a pod created with spec.nodeName is refused above.
- CONSUMER_TOKENS (`gpu-k8s-consumer-short-lived-tokens`): in the same namespaces, no
  Secret of type `kubernetes.io/service-account-token` is created (the token controller
  fills it with a token that never expires, kubernetes pkg/controller/serviceaccount
  tokens_controller.go; the type cannot change on update, ValidateSecretUpdate), and no
  TokenRequest (`serviceaccounts/token` create) asks for more than rbac.TOKEN_SECONDS, the
  lifetime the control plane's own consumer tokens have (access.py renews them before
  they expire), and no TokenRequest names the consumer's own ServiceAccount (the
  namespace's CONSUMER_LABEL value, rbac.consumer_grant) but the control plane's, which
  asks as kubeadm's admin (KUBEADM_ADMIN, admin.conf's user: access.py renews with it).
  Otherwise a consumer (tensorflow's grant holds `secrets create` for its image pull
  Secret, and any grant may hold `serviceaccounts/token` in its namespace) turns a stolen
  48 h kubeconfig into a credential that outlives every renewal, until the relation is
  removed: a long-lived token, or a new 48 h token of its own account every 47 h.
  kube-apiserver admits a TokenRequest as a create of the subresource with the
  TokenRequest as the object, after its defaults (expirationSeconds 3600 when left out)
  and validation, before it issues the token (kubernetes pkg/registry/core/serviceaccount/
  storage/token.go TokenREST.Create: createValidation). The alternative,
  kube-apiserver's --service-account-max-token-expiration, does not refuse: it shortens
  every TokenRequest cluster-wide to the maximum with a warning (token.go; kube-apiserver
  reference: "The maximum validity duration of a token created by the service account
  token issuer"), applies to kubelet's pod-bound tokens and the system's too, needs an API
  server restart, and leaves the Secret tokens, which never expire, untouched. Kubelet's
  pod tokens ask 3607 s (its projected default) and are extended to a year after
  admission (--service-account-extend-token-expiration, on by default: token.go, for a
  pod-bound token of exactly 3607 s), so they pass here and stay bound to their pod; a
  pod's projected token asking more than TOKEN_SECONDS is refused to its kubelet.
- CONSUMER_EGRESS (`gpu-k8s-consumer-egress-by-the-control-plane`): in the same namespaces,
  a ServiceAccount of that namespace (a consumer's grant: its own namespace's account,
  rbac.consumer_grant) writes no NetworkPolicy that isolates egress (`Egress` in
  policyTypes, or egress rules, which imply it: network-policies page, "The NetworkPolicy
  resource"), and creates, changes or deletes no policy named
  network_policies.METADATA_NAME. Policies are additive (the union of every policy that
  selects a pod), so one egress rule of the team's own would reopen what the control plane's
  egress policy keeps from its pods: every private address but the API servers' port, so
  every node's listeners (the DCGM exporter, the COS collector, the kubelet) and the
  instance metadata service (network_policies.py: an allow-list). A team's own policies
  (tensorflow's: Ingress only) are untouched. Matched on the requester, not only the
  namespace: the control plane writes as kubeadm's admin (no ServiceAccount), and
  kube-controller-manager's namespace controller (its ServiceAccount
  kube-system:namespace-controller, kubernetes cmd/kube-controller-manager/app/core.go
  startNamespaceController, ClientBuilder.ConfigOrDie("namespace-controller"), not the
  namespace's) deletes a namespace's policies when the namespace goes. A deletecollection's
  items are checked by the stored object's name (oldObject: the request's name is empty).

- CONSUMER_JOBS (`gpu-k8s-consumer-jobs-started-by-kueue`): in the same namespaces, a
  suspended batch Job or JobSet is unsuspended only by Kueue's ServiceAccount
  (KUEUE_CONTROLLER: it starts a job once its Workload is admitted, jobframework
  reconciler.go) or, for a JobSet's child Jobs, the JobSet controller's (it resumes them
  when Kueue resumed their JobSet: jobset v0.12.0 jobset_controller.go resumeJob).
  Kueue v0.19.2 validates no change of `suspend` (jobframework/validation.go
  ValidateJobOnUpdate) and suspends again a job someone else
  started only once it sees it (reconciler.go "Running job is not admitted by a cluster
  queue, suspending"); meanwhile the Job controller makes its pods, which Kueue's pod
  integration never gates (they are a managed job's), so a team holding jobs or jobsets
  patch (tensorflow's grant does) ran GPUs past every quota (issue 29 item 6). Kueue's
  job webhooks suspend every job of a managed namespace on create (kueue.configure), so
  a create needs no rule. The tensorflow charm never writes `suspend`.
  Nor does a batch Job there change its `parallelism` or `completions` while unsuspended
  but by those two: Kueue v0.19.2 refuses such a change only with partial admission
  (job_webhook.go validatePartialAdmissionUpdate) and stops the Job only once its
  reconciler finds no Workload matching it (reconciler.go ensureOneWorkload, "No
  matching Workload; restoring pod templates according to existent Workload"), while
  the Job controller at once runs min(parallelism, completions - succeeded) pods
  (kubernetes job_controller.go manageJob): a team grew its admitted 1-GPU Job to 4
  GPUs (review29e gap 2). Kueue itself writes `parallelism` (and `completions` with
  parallelism synced) as it starts or stops a partially admitted Job
  (job_controller.go RunWithPodSetsInfo, RestorePodSetsInfo); the JobSet controller
  writes its child Jobs' only for an elastic JobSet (jobset v0.12.0 jobset_controller.go
  syncJobScaling, feature gate ElasticJobSet, alpha and off, not turned on here). A
  JobSet needs no such rule: JobSet's webhook keeps `replicatedJobs` (replicas,
  parallelism, completions) immutable (jobset v0.12.0 pkg/webhooks/jobset_webhook.go
  ValidateUpdate, ValidateImmutableField; the elastic exception only with ElasticJobSet).
  An elastic Kueue Job (a batch Job annotated `kueue.x-k8s.io/elastic-job: "true"`;
  feature ElasticJobsViaWorkloadSlices, beta and on by default since Kueue v0.18:
  pkg/features/kube_features.go) is refused the same, and the annotation then gives a
  team nothing, so no rule refuses it on create. Such a Job grows by that very change:
  Kueue makes a new Workload slice and gates the new pods (`kueue.x-k8s.io/elastic-job`,
  jobs/job/job_webhook.go applyWorkloadSliceSchedulingGate) until it admits the slice
  (elasticjobs/elastic_job_ungater.go), and leaves a running elastic Job whose Workload
  is not admitted unsuspended (reconciler.go "unless this job is workload-slicing
  enabled"). Both ways there, growing a running Job and starting one, are Kueue's alone
  here, so that gate (which the pods policy does not fence) never holds a pod beyond
  what Kueue admitted; Kueue keeps the annotation immutable (jobframework/validation.go
  validatedUpdateForEnabledWorkloadSlice) and refuses it on a JobSet or Deployment
  (ValidateElasticJobAnnotation).
  Nor is a Job or JobSet there deleted leaving its dependents (its pods, a JobSet's Jobs)
  running: a DELETE that orphans them (k8s.io/apiserver v0.36.3 pkg/registry/generic/
  registry/store.go shouldOrphanDependents: `orphanDependents` true or `propagationPolicy`
  Orphan, or neither and the object carries the `orphan` finalizer, or, with none of
  those, a batch/v1 Job, whose default is to orphan "for backwards compatibility":
  kubernetes pkg/registry/batch/job/strategy.go DefaultGarbageCollectionPolicy) is
  refused. The garbage collector removes the orphans' references (garbagecollector.go
  attemptToOrphan), Kueue v0.19.2 then finishes the job's Workload, "The workload's owner
  no longer exists", and frees its quota (pkg/workload/workload.go FinalizeOrphanedWorkload,
  core/workload_controller.go isOrphanedWorkload; feature FinishOrphanedWorkloads, beta and
  on since v0.18), while the orphaned pods keep their GPUs: a team deleting its running
  Job with a plain DELETE (its grant holds jobs delete) ran again and again on one quota.
  Every deleter this bundle relies on names a propagation that deletes them too: kubectl
  (`--cascade` defaults to background; kubectl v0.36.3 pkg/cmd/delete), the tensorflow
  and efs-storage charms (lib kubeclient `delete`: Background), the JobSet controller
  (Foreground for a restart's Jobs, jobset_controller.go deleteJobs; ttl_after_finished.go
  deleteJobSet), Kueue (Background, a deactivated job under its objectRetentionPolicies:
  reconciler.go handleWorkloadAfterDeactivatedPolicy), the TTL-after-finished controller
  (Foreground, ttlafterfinished_controller.go processJob), the namespace controller
  (Background, namespaced_resources_deleter.go) and the garbage collector (Background,
  or Foreground, as the dependent's finalizers say: garbagecollector.go
  attemptToDeleteItem; Orphan only for an object carrying the `orphan` finalizer, which
  is refused).

- CONSUMER_CONTROLLERS (`gpu-k8s-consumer-controllers-by-kube-system`): in the same
  namespaces, no Deployment, ReplicaSet, StatefulSet, DaemonSet, ReplicationController,
  batch Job or JobSet is created with a controller ownerReference, nor updated to add or
  change one, but by kube-system's ServiceAccounts (CONTROLLERS_PREFIX: kube-controller-
  manager's controllers, each with its own account because kubeadm runs it with
  --use-service-account-credentials=true, cmd/kubeadm/app/phases/controlplane/
  manifests.go getControllerManagerCommand; the deployment controller, as
  `deployment-controller` (cmd/kube-controller-manager/app/apps.go
  ClientOrDie("deployment-controller")), makes each ReplicaSet with a controller
  reference to its Deployment, the garbage collector removes references) or, for a
  JobSet's Jobs, the JobSet controller (JOBSET_CONTROLLER). Kueue v0.19.2 decides
  whether a workload is a queued job's by its controller reference alone
  (jobframework reconciler.go FindAncestorJobManagedByKueue follows
  metav1.GetControllerOf, by name and uid, through every REGISTERED
  integration, enabled or not, and ReplicaSets: integrationmanager.go isKnownOwner; a
  reference without `controller: true` is never followed). Its webhooks neither
  suspend a job nor mark a Deployment's template for the pod webhook once such an
  ancestor is found (jobframework/utils.go WorkloadShouldBeSuspended;
  deployment_webhook.go Default), and the pod webhook gates no pod with a managed
  ancestor (pod_webhook.go Default). So a team holding deployments create (tensorflow's
  grant does) that named its own held Job as the Deployment's controller had the
  ReplicaSet controller make ungated GPU pods outside its quota; a JobSet naming the
  team's running JobSet, or a ReplicaSet or StatefulSet naming a Job, the same. The
  charm's own objects carry ownerReferences without `controller` (tensorflow's
  training.py and oneshot.py), which pass. Pods are CONSUMER_PODS', and Jobs naming a
  JobSet or a Job are also JOBSET_CHILDREN's.
- CONSUMER_TERMINATING (`gpu-k8s-consumer-terminating-pods-bounded`): in the same
  namespaces, no pod is created, and no Job, JobSet (each replicatedJobs[*] Job's pod
  template), Deployment, ReplicaSet, StatefulSet, DaemonSet or ReplicationController is
  created or updated with a pod template, whose terminationGracePeriodSeconds exceeds
  GRACE_CAP_SECONDS; and no Job, nor a JobSet's Job template, is created or updated to
  replace a pod before the old one is gone (podReplacementPolicy other than `Failed`).
  A terminating pod keeps its GPUs until its containers end, at worst its grace period,
  while Kueue v0.19.2 counts a job's pods as running only while the Job has active ones
  (pkg/controller/jobs/job/job_controller.go IsActive: Status.Active != 0; terminating
  pods are not active), and clears an evicted job's quota reservation once it is no
  longer active (jobframework/reconciler.go "The job is no longer active, clear the
  workloads admission"; keps/83-workload-preemption: "While Pods are terminating, a
  ClusterQueue's quota could be oversubscribed"). So a
  team's Job whose pods ignore SIGTERM with a one-year grace period, and the team
  deleting its own pod (tensorflow's grant holds pods delete), had the Job controller
  make a replacement at once under the default podReplacementPolicy
  `TerminatingOrFailed` (batch/v1 JobSpec: "recreate pods when they are terminating"),
  holding N GPUs on a one-GPU admission for a year; and every preempted pod held its GPUs
  for its grace period after its quota went to another team. `Failed` waits until the
  old pod's phase is Failed or Succeeded (the feature JobPodReplacementPolicy is GA
  and locked on since 1.34, to be removed in 1.37: kubernetes pkg/features/
  kube_features.go).
  kube-apiserver defaults the field on a Job (pkg/apis/batch/v1/defaults.go
  SetDefaults_Job: `Failed` with a podFailurePolicy, where it is the only allowed value,
  else `TerminatingOrFailed`), which the JobSet webhook does not do for its templates
  (jobset v0.12.0 pkg/webhooks/jobset_webhook.go Default); the JobSet controller copies
  a replicatedJob's Job spec whole into each child Job (jobset_controller.go constructJob:
  `Spec: *rjob.Template.Spec.DeepCopy()`), so a template with a podFailurePolicy and no
  podReplacementPolicy passes as its Jobs will have `Failed`. A pod's grace period cannot
  be raised after its create (pkg/apis/core/validation ValidatePodUpdate: immutable but
  from a negative value to 1), so a pod UPDATE needs no rule; an unset one is 30 (core/v1
  PodSpec). Nor is such a pod deleted, or evicted, with a longer grace period: a
  DeleteOptions' gracePeriodSeconds overrides the pod's (pkg/registry/core/pod/
  strategy.go CheckGracefulDelete) and the store sets it before admission sees it
  (k8s.io/apiserver registry/store.go Delete: BeforeDelete, then deleteValidation; the
  options are `request.options`, cel/condition.go CreateAdmissionRequest), so a plain
  delete asks the pod's own, and a pod stored before this policy with a longer one of
  its own may still be deleted at that. A template or Job stored before this policy that
  breaks it may still be updated as long as the update does not add a new breach (Kueue
  suspends and resumes such jobs). The remaining window in which a cohort may be
  oversubscribed by a terminating pod is GRACE_CAP_SECONDS.
- CONSUMER_SERVICES (`gpu-k8s-consumer-services-no-external-ips`): in the same namespaces,
  no Service is created with `spec.externalIPs`, nor updated to name one it did not have.
  kube-proxy on every node sends a Service's external IPs' traffic to its endpoints, so a
  team's Service naming another address (the API server's, a DNS server's, another team's
  pod's) takes over the cluster's traffic to it (CVE-2020-8554, kubernetes/kubernetes
  #97076). kube-apiserver's DenyServiceExternalIPs plugin refuses the same (kubernetes
  plugin/pkg/admission/network/denyserviceexternalips/admission.go: on create and update of
  a Service, externalIPs that are not all in the old object), but only clusters bootstrapped
  with it in kubeadm's config have it (literals.ADMISSION_PLUGINS: `kubeadm upgrade`
  renders kube-apiserver from the apiServer extraArgs the cluster was made with); this
  policy covers every cluster, the ones made before included. Matched on the namespace,
  whoever writes: no Service of this bundle has externalIPs (tensorflow's are ClusterIP,
  manifests.py, serving.py; JobSet's headless), and upstream's plugin refuses everyone.

Not fenced here (say so when touching it): Calico's IPAM objects (blocks may be borrowed
across nodes, so they cannot be keyed on one node), calico-node's writes of BGPPeers,
CalicoNodeStatuses and IPAM configuration, and the calico-cni-plugin account's writes of
ClusterInformation (cni-plugin pkg/upgrade/migrate.go updates it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import efs_csi
import mig_manager
import network_policies
import rbac
from literals import CONSUMER_LABEL, FIELD_MANAGER, JOBSET, KUEUE, MANAGED_BY_LABEL

from charms.gpu_k8s.v0.kubernetes_cluster import GPU_TAINT, QUARANTINE_TAINT

API_VERSION = "admissionregistration.k8s.io/v1"
# The user of kubeadm's admin.conf, the charm's own credential (lib kubeadm ADMIN_CONF):
# its client certificate's CN (kubernetes cmd/kubeadm/app/phases/kubeconfig/kubeconfig.go
# getKubeConfigSpecsBase, ClientName "kubernetes-admin", group kubeadm:cluster-admins since
# kubeadm 1.29; super-admin.conf, which the charm never uses, is "kubernetes-super-admin").
KUBEADM_ADMIN = "kubernetes-admin"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
SA_PREFIX = "system:serviceaccount:"

# calico.yaml at CALICO_RELEASE: the DaemonSet `calico-node` runs as the ServiceAccount
# `calico-node` in kube-system (the manifest's namespace).
CALICO_NODE = ("kube-system", "calico-node")
EFS_CSI_NODE = (efs_csi.NAMESPACE, "efs-csi-node-sa")  # node-serviceaccount.yaml at the tag
MIG_MANAGER = (mig_manager.NAMESPACE, mig_manager.NAME)

_NODES = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"]}
# ServiceAccount -> (short name, resources it may touch only on its own node)
NODE_BOUND: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {
    EFS_CSI_NODE: ("efs-csi-node", ("nodes",)),
    MIG_MANAGER: ("mig-manager", ("nodes",)),
    CALICO_NODE: ("calico-node", ("nodes", "nodes/status", "pods/status")),
}
NODE_BOUND_PREFIX = "gpu-k8s-node-bound-"
# ServiceAccount -> (resource it may DELETE, in its own namespace, only where bound to its
# node (spec.nodeName); the label key and values those objects carry; what they are). The
# MIG manager deletes only NVIDIA's validator pods on its own node (mig-parted v0.15.0
# reconfigure.go deletePod, mig_manager.VALIDATOR_APPS); its Role
# (mig_manager.NAMESPACE_RULES) cannot say "on my node" or "these pods".
NODE_BOUND_DELETES: dict[tuple[str, str], tuple[str, str, tuple[str, ...], str]] = {
    MIG_MANAGER: ("pods", "app", mig_manager.VALIDATOR_APPS, "NVIDIA's validator pods"),
}
# calico.yaml at CALICO_RELEASE: the account whose tokens calico-node requests for the CNI
# binary (its ClusterRole calico-node: serviceaccounts/token, resourceNames calico-cni-plugin).
CALICO_CNI_PLUGIN = ("kube-system", "calico-cni-plugin")
CALICO_CNI = "gpu-k8s-calico-cni-plugin"
CALICO_SETTINGS = "gpu-k8s-calico-node-settings"
# The Calico API groups: the CRDs calico.yaml installs, and the aggregated API of Calico's
# API server (calico.yaml's ClusterRoles name both).
_CALICO_GROUPS = ["crd.projectcalico.org", "projectcalico.org"]
# libcalico-go conversion/constants.go: AnnotationPodIP, AnnotationPodIPs,
# AnnotationContainerID all carry this prefix.
CNI_ANNOTATION_PREFIX = "cni.projectcalico.org/"
# Calico's IPAM objects at v3.32.1, as the crd.projectcalico.org v1 CRDs hold them
# (libcalico-go lib/apis/internalapi blockaffinity.go, ipam_block.go, ipam_config.go; the
# backend's lib/backend/k8s/resources ipam_affinity_v1.go, ipam_block.go):
# - a BlockAffinity (spec.node, cidr, type: its key, as its name `<node>-<cidr>` is) is
#   created only `pending` (lib/ipam ipam_block_reader_writer.go getPendingAffinity), then
#   confirmed, marked `pendingDeletion` (releaseBlockAffinity: also another node's, when
#   reclaiming its empty block after EmptyBlockMinReclaimAge, findUsableBlock), and deleted
#   only after an update that marks it `deleted` (DeleteKVP: Delete is not supported).
# - an IPAMBlock (spec.cidr its key) is created empty with `affinity: host:<node>`
#   (claimAffineBlock, newBlock), loses its affinity only when its own node releases it
#   (releaseBlockAffinity), is written by any node that borrows an address from it (strict
#   affinity off, the default) or releases one, and is marked `deleted`, then deleted,
#   only when empty (releaseBlockAffinity and the release of a non-affine block's last
#   address; ipamBlockClient.DeleteKVP). Empty: every ordinal is in `unallocated`.
# - the IPAMConfig `default` is only ever created, with the defaults (ipam.go
#   GetIPAMConfig: strictAffinity false, autoAllocateBlocks true, maxBlocksPerHost 0);
#   SetIPAMConfig is calicoctl's, not calico-node's or the CNI plugin's.
_IPAM_RESOURCES = ["blockaffinities", "ipamblocks"]
_IPAM_CONFIGS = ["ipamconfigs", "ipamconfigurations"]
# What the calico-cni-plugin account may write (its ClusterRole) and the CNI plugin never
# does at v3.32.1: cni-plugin pkg/plugin/plugin.go only Gets the ClusterInformation
# `default` (its one write is pkg/upgrade/migrate.go, run by calico-ipam -upgrade in
# calico-node's upgrade-ipam init container, as calico-node), and libcalico-go lib/ipam
# only Lists IPReservations (ipam.go IPReservationInterface).
CNI_NEVER_WRITES = ("clusterinformations", "ipreservations")
AFFINITY_STATES = ("pending", "confirmed", "pendingDeletion")
# node/pkg/lifecycle/startup/startup.go at v3.32.1: DEFAULT_IPV4_POOL_NAME, _IPV6_
DEFAULT_POOLS = ("default-ipv4-ippool", "default-ipv6-ippool")
# libcalico-go lib/names/policy.go and lib/clientv3/client.go EnsureInitialized: the
# Tiers calico-node creates, with their defaultAction (api projectcalico/v3 tier.go).
JOBSET_CHILDREN = "gpu-k8s-jobset-children-only-by-jobset"
# jobset v0.12.0 config/default/kustomization.yaml (namespace jobset-system, namePrefix
# jobset-) on config/components/rbac/service_account.yaml (controller-manager); the
# Deployment runs as it, and literals.JOBSET names both.
JOBSET_CONTROLLER = (JOBSET.namespace, JOBSET.deployment)
# Kueue's ServiceAccount: `controller-manager` (kueue v0.19.2 config/components/rbac/
# service_account.yaml) renamed by config/default's namePrefix `kueue-`, in kueue-system
KUEUE_CONTROLLER = (KUEUE.namespace, KUEUE.deployment)
# kueue v0.19.2 pkg/controller/jobs/pod/constants SchedulingGateName
KUEUE_GATE = "kueue.x-k8s.io/admission"
# kube-controller-manager's controllers, each its own ServiceAccount there (see CONSUMER_PODS)
CONTROLLERS_PREFIX = f"{SA_PREFIX}kube-system:"
DEFAULT_TIERS = {"default": "Deny", "kube-admin": "Pass", "kube-baseline": "Pass"}
CONSUMER_PODS = "gpu-k8s-consumer-pods-off-the-control-plane"
CONSUMER_TOKENS = "gpu-k8s-consumer-short-lived-tokens"
CONSUMER_EGRESS = "gpu-k8s-consumer-egress-by-the-control-plane"
CONSUMER_JOBS = "gpu-k8s-consumer-jobs-started-by-kueue"
CONSUMER_CONTROLLERS = "gpu-k8s-consumer-controllers-by-kube-system"
CONSUMER_TERMINATING = "gpu-k8s-consumer-terminating-pods-bounded"
CONSUMER_SERVICES = "gpu-k8s-consumer-services-no-external-ips"
# The longest terminationGracePeriodSeconds of a pod in a consumer's namespace: the longest
# a pod Kueue no longer counts (preempted, or replaced) may keep its GPUs. The charms' own
# pods need at most 60 s (tensorflow's training pods: literals.GRACE_SECONDS, the chief's
# checkpoint save on a drain; its serving, TensorBoard and one-shot pods and efs-storage's
# Jobs set none: 30 s); twice that leaves a team's own program room for a slower save
# while bounding how long a cohort may be oversubscribed by a terminating pod.
GRACE_CAP_SECONDS = 120
# A kind as an admission rule names it: (apiGroup, version, resources)
JOBS = ("batch", "v1", ("jobs",))
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", ("jobsets",))  # the one JobSet v0.12.0 serves
# What CONSUMER_JOBS fences: the kinds Kueue suspends and starts
SUSPENDED_KINDS = (JOBS, JOBSETS)
# metav1.FinalizerOrphanDependents and FinalizerDeleteDependents: a stored object's own
# propagation when a DELETE names none (k8s.io/apiserver store.go shouldOrphanDependents)
GC_FINALIZERS = ("orphan", "foregroundDeletion")
# What CONSUMER_CONTROLLERS fences: every kind a consumer may be granted that Kueue v0.19.2
# walks through or manages (isKnownOwner) or whose controller makes pods (DaemonSets,
# ReplicationControllers: kube-controller-manager's)
CONTROLLED_KINDS = (
    ("apps", "v1", ("deployments", "replicasets", "statefulsets", "daemonsets")),
    ("", "v1", ("replicationcontrollers",)),
    *SUSPENDED_KINDS,
)
# The kinds whose pod template CONSUMER_TERMINATING checks: CONTROLLED_KINDS, each of which
# has one (a JobSet's: spec.replicatedJobs[*].template.spec.template)
TEMPLATED_KINDS = CONTROLLED_KINDS
# kubeadm taints each control-plane node `node-role.kubernetes.io/control-plane:NoSchedule`
# (cmd/kubeadm/app/constants ControlPlaneTaint); `.../master` is the key it used before
# 1.25, which a node of an older cluster may still carry.
DEFAULT_SCHEDULER = "default-scheduler"  # kubernetes pkg/apis/core/v1 defaults.go
CONTROL_PLANE_TAINTS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
# The taints a pod of a consumer's namespace may tolerate (CONSUMER_PODS), an allow-list of
# what its pods are given:
# - the GPU nodes' taint (lib kubernetes_cluster.GPU_TAINT, nvidia.com/gpu:NoSchedule, which
#   a GPU worker registers with), in any form: its key matches no other taint. The charms'
#   pods tolerate it (Exists, no effect), and kube-apiserver's ExtendedResourceToleration
#   plugin, which the control plane turns on (literals.ADMISSION_PLUGINS), adds it (Exists,
#   NoSchedule) to every pod asking for nvidia.com/gpu (kubernetes plugin/pkg/admission/
#   extendedresourcetoleration/admission.go, stored commit 143ac994);
# - a lost node's (core/v1 well_known_taints.go TaintNodeNotReady, TaintNodeUnreachable),
#   effect NoExecute and for at most LOST_NODE_SECONDS: the DefaultTolerationSeconds plugin
#   (on by default, a mutating plugin, so it runs before this policy) gives every pod that
#   tolerates neither for NoExecute these two for 300 s (plugin/pkg/admission/
#   defaulttolerationseconds/admission.go, stored commits aed80471, 012b085a; its flags
#   --default-not-ready-toleration-seconds and --default-unreachable-toleration-seconds,
#   which neither kubeadm nor the charm sets). An empty effect would also tolerate the
#   NoSchedule taints of those keys, so the scheduler would place the pod on a node not
#   ready; no tolerationSeconds keeps the pod bound for ever to a node that is gone.
# Kueue v0.19.2 merges the tolerations of the ResourceFlavors it assigns into a job's pod
# templates when it admits it (pkg/podset/podset.go FromAssignment, Merge): the control
# plane's flavors (kueue.cluster_objects) carry nodeTaints, no tolerations, so it adds
# none; JobSet v0.12.0 adds one (alpha.jobset.sigs.k8s.io/no-schedule, jobset_controller.go
# addTaintToleration) only to a JobSet annotated for exclusive placement by node selector
# on nodes an operator labelled and tainted so, which this bundle does not do: refused.
# Everything else is refused, the quarantine's (lib kubernetes_cluster.QUARANTINE_TAINT,
# NoExecute, set on a node whose GPU the worker's watcher found bad) among them: a pod
# tolerating it stays on that node (kube-controller-manager's taint eviction deletes only
# the pods that do not tolerate it: pkg/controller/tainteviction/taint_eviction.go
# processPodOnNode), and with a PodDisruptionBudget keeps it from draining for its repair;
# a cordon's (UNSCHEDULABLE_TAINT, which the node lifecycle controller sets on every
# cordoned node: TaintNodesByCondition) would let the scheduler place it on a node drained
# for a GPU reset or a driver upgrade.
LOST_NODE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
# The longest a pod of a consumer's namespace stays bound to a lost node: the API server's
# own default, which every pod the charms make gets. A shorter cap would refuse them all;
# a longer one would only let a team's pods hold its Kueue quota and its GPUs in the
# cohort's accounting longer on a node that is gone (Kueue frees them once the pods are).
LOST_NODE_SECONDS = 300
SA_TOKEN_SECRET = "kubernetes.io/service-account-token"
EFS_ONLY = "gpu-k8s-efs-volumes-only"
EFS_OWN = "gpu-k8s-efs-own-volumes"
EFS_CLAIMS = "gpu-k8s-efs-own-claims"
EFS_SERVED = "gpu-k8s-efs-within-consumers"
# efs-storage labels every object it makes with its application's name (charms/efs-storage
# src/claims.py LABEL_APP, Owner.labels), and a kube-api consumer's ServiceAccount is named
# after its application (rbac.consumer_grant): so a provisioner's own volumes are those
# labelled with its ServiceAccount's name. A label value holds no ':' (apimachinery
# validation IsValidLabelValue), so `username.endsWith(':' + value)` names the account.
EFS_APP_LABEL = "gpu-k8s.io/efs-app"
# The claimRef fields a provisioner may remove from its own volume, and nothing else of the
# claimRef may change: efs-storage pre-binds a volume by namespace and name (storage.py
# volume_manifest) and, once its claim is gone (Released), forgets the old claim's uid and
# resourceVersion so a new claim binds (storage.py _apply_pair); the PersistentVolume
# controller (kube-system, not matched) writes the uid and resourceVersion when it binds.
CLAIM_REF_FORGETTABLE = ("uid", "resourceVersion")
# The other fields of an ObjectReference (kubernetes api core/v1 types.go ObjectReference).
CLAIM_REF_FIELDS = ("kind", "namespace", "name", "apiVersion", "fieldPath")

# The EFS identifiers efs-storage writes: fs-<hex> and fsap-<hex> (AWS: 8 or 17 hex
# digits today; the range leaves room) and the file system's DNS name.
_EFS_HANDLE = r"^fs-[0-9a-f]{8,40}::fsap-[0-9a-f]{8,40}$"
# `[.]`, not `\.`: CEL's string literals have no `\.` escape (cel-spec doc/langdef.md,
# "String and Bytes Values"), so kube-apiserver would refuse the policy's compilation.
_EFS_DNS = r"^fs-[0-9a-f]{8,40}[.]efs[.][a-z0-9-]+[.]amazonaws[.]com([.]cn)?$"
_EXTRA = f"request.userInfo.extra['{NODE_NAME_EXTRA}']"


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "labels": {MANAGED_BY_LABEL: FIELD_MANAGER}}


def _binding(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(name),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


def node_bound_policy(account: tuple[str, str]) -> dict[str, Any]:
    """The policy that keeps `account`'s writes on the node its token names."""
    short, resources = NODE_BOUND[account]
    username = f"{SA_PREFIX}{account[0]}:{account[1]}"
    validations = [
        {
            "expression": "variables.nodeName != ''",
            "message": f'this user must have a "{NODE_NAME_EXTRA}" claim',
            "reason": "Forbidden",
        },
        {
            "expression": (
                "!(request.resource.resource == 'nodes') || "
                "object.metadata.name == variables.nodeName"
            ),
            "message": "this user may only modify the node its pod runs on",
            "reason": "Forbidden",
        },
    ]
    if "pods/status" in resources:
        validations.append(
            {
                "expression": (
                    "!(request.resource.resource == 'pods') || "
                    "(has(object.spec.nodeName) && object.spec.nodeName == variables.nodeName)"
                ),
                "message": "this user may only modify pods on the node its pod runs on",
                "reason": "Forbidden",
            }
        )
    rules = [{**_NODES, "resources": list(resources)}]
    if account in NODE_BOUND_DELETES:
        resource, key, values, what = NODE_BOUND_DELETES[account]
        rules.append({**_NODES, "operations": ["DELETE"], "resources": [resource]})
        deleting = f"request.operation != 'DELETE' || request.resource.resource != '{resource}'"
        labels = _map("oldObject.metadata", "labels")
        validations += [
            _deny(
                f"{deleting} || (request.namespace == '{account[0]}' && "
                "has(oldObject.spec.nodeName) && oldObject.spec.nodeName == variables.nodeName)",
                f"this user may only delete {resource} on the node its pod runs on",
            ),
            _deny(
                f"{deleting} || ('{key}' in {labels} && {labels}['{key}'] in {list(values)})",
                f"this user may only delete {what} ({key}={', '.join(values)})",
            ),
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(NODE_BOUND_PREFIX + short),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules},
            "matchConditions": [
                {
                    "name": "from-the-daemonset",
                    "expression": f"request.userInfo.username == '{username}'",
                }
            ],
            "variables": [
                {
                    "name": "nodeName",
                    "expression": (
                        f"'{NODE_NAME_EXTRA}' in request.userInfo.extra && "
                        f"size({_EXTRA}) > 0 ? {_EXTRA}[0] : ''"
                    ),
                }
            ],
            "validations": validations,
        },
    }


def _username(account: tuple[str, str]) -> str:
    return f"{SA_PREFIX}{account[0]}:{account[1]}"


def _deny(expression: str, message: str) -> dict[str, str]:
    return {"expression": expression, "message": message, "reason": "Forbidden"}


def _writes_of(
    kinds: Iterable[tuple[str, str, tuple[str, ...]]],
    operations: tuple[str, ...] = ("CREATE", "UPDATE"),
) -> list[dict[str, Any]]:
    """The resourceRules matching `operations` on `kinds` (apiGroup, version, plurals)."""
    return [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "operations": list(operations),
            "resources": list(resources),
        }
        for group, version, resources in kinds
    ]


def _policy(name: str, rules: list[dict], account: tuple[str, str], spec: dict) -> dict:
    """A policy on `rules` for the requests of `account` only."""
    condition = {
        "name": "from-the-account",
        "expression": f"request.userInfo.username == '{_username(account)}'",
    }
    return _matched(name, rules, condition, spec)


def _matched(name: str, rules: list[dict], condition: dict[str, str], spec: dict) -> dict:
    """A failing-closed policy on `rules` for the requests `condition` matches."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(name),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules},
            "matchConditions": [condition],
            **spec,
        },
    }


def _map(expression: str, field: str, present: str = "true") -> str:
    """`expression.field`, or an empty map where it is absent or `present` is false.

    `object`/`oldObject` is null on CREATE/DELETE, and a null compares with no map.
    """
    return f"({present} && has({expression}.{field}) ? {expression}.{field} : {{}})"


def _unchanged_but(new: str, old: str, keep: str) -> str:
    """CEL: maps `new` and `old` differ only at keys for which `keep` (of k) holds."""
    return (
        f"{new}.all(k, {keep} || (k in {old} && {old}[k] == {new}[k])) && "
        f"{old}.all(k, {keep} || k in {new})"
    )


def _calico_spec_variables() -> list[dict[str, str]]:
    """`spec` and `oldSpec` of the object written, {} where there is none (CREATE, DELETE)."""
    return [
        {"name": "spec", "expression": _map("object", "spec", "request.operation != 'DELETE'")},
        {
            "name": "oldSpec",
            "expression": _map("oldObject", "spec", "request.operation != 'CREATE'"),
        },
    ]


def _calico_ipam(node: str | None) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(rules, validations): IPAM writes only as libcalico-go's IPAM makes them.

    `node`: CEL of the node the token names (calico-node), None where the token names
    none (the CNI plugin's): then only what no node ever writes is refused (see the
    _IPAM_RESOURCES comment). Reads `variables.spec` and `variables.oldSpec`.
    """
    new, old = "variables.spec", "variables.oldSpec"
    resource = "request.resource.resource"
    op = "request.operation"

    def field(spec: str, key: str) -> str:
        return f"('{key}' in {spec} ? string({spec}.{key}) : '')"

    def flag(spec: str, key: str) -> str:
        # a boolean field, never string()ed: CEL's string(true) is 'true' (cel-spec
        # langdef.md) and cel-python's 'True'
        return f"('{key}' in {spec} && {spec}.{key} == true)"

    def kept(*keys: str) -> str:
        return " && ".join(f"{field(new, k)} == {field(old, k)}" for k in keys)

    def empty(spec: str) -> str:
        return (
            f"('allocations' in {spec} && 'unallocated' in {spec} && "
            f"size({spec}.unallocated) == size({spec}.allocations))"
        )

    affinity, block = f"{resource} != 'blockaffinities'", f"{resource} != 'ipamblocks'"
    validations = [
        _deny(
            f"{affinity} || {op} != 'CREATE' || ({field(new, 'state')} == 'pending' && "
            f"{field(new, 'deleted')} != 'true')",
            "this user may create a block affinity only pending",
        ),
        _deny(
            f"{affinity} || {op} != 'UPDATE' || ({kept('node', 'cidr', 'type')} && "
            f"{field(new, 'state')} in {list(AFFINITY_STATES)})",
            "this user may not change a block affinity's node, CIDR or type",
        ),
        _deny(
            f"{affinity} || {op} != 'DELETE' || {field(old, 'deleted')} == 'true'",
            "this user may delete only a block affinity marked deleted",
        ),
        _deny(
            f"{block} || {op} != 'CREATE' || ({empty(new)} && "
            f"{field(new, 'affinity')}.startsWith('host:'))",
            "this user may create only an empty IPAM block affine to a host",
        ),
        _deny(
            f"{block} || {op} != 'UPDATE' || ({kept('cidr')} && "
            f"({field(new, 'affinity')} in ['', {field(old, 'affinity')}]) && "
            f"(!{flag(new, 'deleted')} || {empty(new)}))",
            "this user may not move an IPAM block, give it to a host or delete one in use",
        ),
        _deny(
            f"{block} || {op} != 'DELETE' || {flag(old, 'deleted')}",
            "this user may delete only an IPAM block marked deleted",
        ),
        _deny(
            f"!({resource} in {_IPAM_CONFIGS}) || ({op} == 'CREATE' && "
            f"object.metadata.name == 'default' && !{flag(new, 'strictAffinity')} && "
            f"{flag(new, 'autoAllocateBlocks')} && "
            f"{field(new, 'maxBlocksPerHost')} in ['', '0'])",
            "this user may only create the default IPAM configuration",
        ),
    ]
    if node is not None:
        host = f"'host:' + {node}"
        validations += [
            _deny(
                f"{affinity} || {op} != 'CREATE' || {field(new, 'node')} == {node}",
                "this user may claim blocks only for the node its pod runs on",
            ),
            _deny(
                f"{affinity} || {op} != 'UPDATE' || {field(old, 'node')} == {node} || "
                f"{field(new, 'state')} == 'pendingDeletion' || {field(new, 'deleted')} == 'true'",
                "this user may change another node's block affinity only to release it",
            ),
            _deny(
                f"{block} || {op} != 'CREATE' || {field(new, 'affinity')} == {host}",
                "this user may create IPAM blocks only for the node its pod runs on",
            ),
            _deny(
                f"{block} || {op} != 'UPDATE' || {field(new, 'affinity')} != '' || "
                f"{field(old, 'affinity')} in ['', {host}]",
                "this user may release only its own node's IPAM blocks",
            ),
        ]
    rules = [
        {
            "apiGroups": _CALICO_GROUPS,
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": [*_IPAM_RESOURCES, *_IPAM_CONFIGS],
        }
    ]
    return rules, validations


def calico_cni_policy() -> dict[str, Any]:
    """The policy that keeps the calico-cni-plugin account to its pod IP annotations."""
    prefix = f"k.startsWith('{CNI_ANNOTATION_PREFIX}')"
    resource = "request.resource.resource"
    pods = f"{resource} != 'pods'"
    rules = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["pods/status"],
        },
        {
            "apiGroups": _CALICO_GROUPS,
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["ippools", *CNI_NEVER_WRITES],
        },
    ]
    ipam_rules, ipam = _calico_ipam(None)
    validations = [
        _deny("request.resource.resource != 'ippools'", "this user may not write IPPools"),
        _deny(
            f"!(request.resource.resource in {list(CNI_NEVER_WRITES)})",
            "this user may not write the ClusterInformation or IP reservations",
        ),
        *ipam,
        _deny(
            f"{pods} || object.status == oldObject.status",
            "this user may not change a pod's status",
        ),
        _deny(
            f"{pods} || ({_map('object.metadata', 'labels')} == "
            f"{_map('oldObject.metadata', 'labels')} && "
            "(has(object.metadata.finalizers) ? object.metadata.finalizers : []) == "
            "(has(oldObject.metadata.finalizers) ? oldObject.metadata.finalizers : []))",
            "this user may not change a pod's labels or finalizers",
        ),
        _deny(
            f"{pods} || "
            + _unchanged_but("variables.annotations", "variables.oldAnnotations", prefix),
            f"this user may change only a pod's {CNI_ANNOTATION_PREFIX} annotations",
        ),
    ]
    pod = f"{resource} == 'pods'"
    variables = [
        {"name": "annotations", "expression": _map("object.metadata", "annotations", pod)},
        {"name": "oldAnnotations", "expression": _map("oldObject.metadata", "annotations", pod)},
        *_calico_spec_variables(),
    ]
    return _policy(
        CALICO_CNI,
        rules + ipam_rules,
        CALICO_CNI_PLUGIN,
        {"variables": variables, "validations": validations},
    )


def calico_settings_policy() -> dict[str, Any]:
    """The policy that lets calico-node write only what its startup writes (and its node's)."""
    new, old = "variables.spec", "variables.oldSpec"
    rules = [
        {
            "apiGroups": _CALICO_GROUPS,
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": [
                "felixconfigurations",
                "clusterinformations",
                "ippools",
                "bgpconfigurations",
                "tiers",
                "bgppeers",
            ],
        },
        {
            "apiGroups": _CALICO_GROUPS,
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["caliconodestatuses"],
        },
    ]
    resource = "request.resource.resource"
    name = "object.metadata.name"
    ipam_rules, ipam = _calico_ipam("variables.nodeName")
    felix_default = _unchanged_but(
        new, old, f"(!(k in {old}) && k in ['reportingInterval', 'logSeverityScreen'])"
    )
    cluster_info = _unchanged_but(
        new,
        old,
        f"(k == 'calicoVersion' && k in {new}) || "
        f"(k == 'clusterGUID' && k in {new} && (!(k in {old}) || {old}[k] == '')) || "
        f"(k == 'datastoreReady' && !(k in {old}) && {new}[k] == true) || "
        f"(k == 'clusterType' && k in {new} && (!(k in {old}) || {old}[k] == '' || "
        f"string({new}[k]).startsWith(string({old}[k]) + ',')))",
    )
    tiers = " || ".join(
        f"({name} == '{tier}' && {new}.all(k, k in ['order', 'defaultAction']) && "
        f"'defaultAction' in {new} && {new}.defaultAction == '{action}')"
        for tier, action in DEFAULT_TIERS.items()
    )
    create = "request.operation == 'CREATE'"
    validations = [
        _deny("variables.nodeName != ''", f'this user must have a "{NODE_NAME_EXTRA}" claim'),
        _deny(
            f"{resource} != 'felixconfigurations' || {name} == 'node.' + variables.nodeName"
            f" || ({name} == 'default' && {felix_default})",
            "this user may change only its own node's FelixConfiguration, and the default"
            " one only where unset",
        ),
        _deny(
            f"{resource} != 'clusterinformations' || ({name} == 'default' && {cluster_info})",
            "this user may change the ClusterInformation only as calico-node's startup does",
        ),
        _deny(
            f"{resource} != 'ippools' || ({create} && {name} in {list(DEFAULT_POOLS)})",
            "this user may only create the default IPPools",
        ),
        _deny(
            f"{resource} != 'bgpconfigurations' || "
            f"({create} && {name} == 'default' && size({new}) == 0)",
            "this user may only create the empty default BGPConfiguration",
        ),
        _deny(
            f"{resource} != 'tiers' || ({create} && ({tiers}))",
            "this user may only create Calico's default Tiers",
        ),
        _deny(f"{resource} != 'bgppeers'", "this user may not write BGPPeers"),
        _deny(
            f"{resource} != 'caliconodestatuses' || ("
            f"'node' in {new} && {new}.node == variables.nodeName && "
            f"'node' in {old} && {old}.node == variables.nodeName)",
            "this user may write only its own node's CalicoNodeStatus",
        ),
        *ipam,
    ]
    variables = [_node_name_variable(), *_calico_spec_variables()]
    return _policy(
        CALICO_SETTINGS,
        rules + ipam_rules,
        CALICO_NODE,
        {"variables": variables, "validations": validations},
    )


def jobset_children_policy() -> dict[str, Any]:
    """The policy that lets only the JobSet controller make a Job a JobSet's child."""
    # Kueue walks up controller references through every integration it runs (reconciler.go
    # FindAncestorJobManagedByKueue, manager.isKnownOwner): kueue.FRAMEWORKS enables
    # batch/job too, so a Job owned by an admitted Job is a child the same way; no
    # controller of this bundle makes one.
    jobset_ref = (
        "(r.kind == 'JobSet' && r.apiVersion.startsWith('jobset.x-k8s.io/')) || "
        "(r.kind == 'Job' && r.apiVersion == 'batch/v1')"
    )
    refs = "object.metadata.ownerReferences"
    old_refs = "oldObject.metadata.ownerReferences"
    had = (
        f"request.operation == 'UPDATE' && has({old_refs}) && {old_refs}.exists(o, o.uid == r.uid)"
    )
    policy = _policy(
        JOBSET_CHILDREN,
        _writes_of([JOBS]),
        JOBSET_CONTROLLER,
        {
            "validations": [
                _deny(
                    f"!has({refs}) || {refs}.all(r, !({jobset_ref}) || ({had}))",
                    "only the JobSet controller may create a Job owned by a JobSet or a Job",
                )
            ]
        },
    )
    (condition,) = policy["spec"]["matchConditions"]
    condition["name"] = "not-the-jobset-controller"
    condition["expression"] = condition["expression"].replace("==", "!=")
    return policy


def _in_consumer_namespace() -> dict[str, str]:
    """The matchConditions entry: the request's Namespace is a consumer's (CONSUMER_LABEL)."""
    labels = _map("namespaceObject.metadata", "labels")  # pods, secrets: never null
    return {"name": "in-a-consumers-namespace", "expression": f"'{CONSUMER_LABEL}' in {labels}"}


def _consumer_policy(name: str, rules: list[dict], spec: dict) -> dict[str, Any]:
    return _matched(name, rules, _in_consumer_namespace(), spec)


def consumer_pods_policy() -> dict[str, Any]:
    """The policy that keeps the pods of consumers' namespaces off the control plane.

    And off the consumer's own ServiceAccount (its token would outlive the grant's), and
    off any priority above the teams' (it would preempt other teams' pods).
    """
    tolerations = "(has(object.spec.tolerations) ? object.spec.tolerations : [])"
    old = (
        "(request.operation == 'UPDATE' && has(oldObject.spec.tolerations)"
        " ? oldObject.spec.tolerations : [])"
    )
    allowed = (
        f"has(t.key) && (t.key == '{GPU_TAINT['key']}' || (t.key in {list(LOST_NODE_TAINTS)}"
        " && has(t.effect) && t.effect == 'NoExecute' && has(t.tolerationSeconds)"
        f" && t.tolerationSeconds <= {LOST_NODE_SECONDS}))"
    )

    def gated(pod: str) -> str:
        return (
            f"(has({pod}.spec.schedulingGates) &&"
            f" {pod}.spec.schedulingGates.exists(g, g.name == '{KUEUE_GATE}'))"
        )

    return _consumer_policy(
        CONSUMER_PODS,
        [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["pods"],
            }
        ],
        {
            "variables": [
                {"name": "tolerations", "expression": tolerations},
                {"name": "oldTolerations", "expression": old},
                {
                    "name": "consumer",
                    "expression": f"namespaceObject.metadata.labels['{CONSUMER_LABEL}']",
                },
            ],
            "validations": [
                _deny(
                    "request.operation != 'CREATE' || !has(object.spec.nodeName) || "
                    "object.spec.nodeName == ''",
                    "a pod in a consumer's namespace may not set spec.nodeName: the"
                    " scheduler places it",
                ),
                _deny(
                    f"variables.tolerations.all(t, t in variables.oldTolerations || ({allowed}))",
                    "a pod in a consumer's namespace tolerates only the GPU nodes' taint"
                    f" ({GPU_TAINT['key']}) and a lost node ({', '.join(LOST_NODE_TAINTS)}:"
                    f" effect NoExecute, tolerationSeconds at most {LOST_NODE_SECONDS}, as"
                    " kube-apiserver gives every pod): not every taint (a toleration without"
                    f" a key), nor the control plane's ({', '.join(CONTROL_PLANE_TAINTS)}),"
                    f" the GPU quarantine's ({QUARANTINE_TAINT['key']}), a cordon's"
                    f" ({UNSCHEDULABLE_TAINT}) or any other",
                ),
                # The grant's ServiceAccount is the consumer's name (rbac.consumer_grant), the
                # namespace's CONSUMER_LABEL value. A pod running as it would hold a token of
                # the grant that kubelet renews for as long as the pod lives, past the 48 h
                # the control plane gives (rbac.TOKEN_SECONDS). No charm's pod runs as it.
                # serviceAccount is the field's deprecated alias (core/v1 PodSpec); a pod's
                # ServiceAccount never changes on UPDATE (ValidatePodUpdate).
                _deny(
                    "request.operation != 'CREATE' || !has(object.spec.priorityClassName) ||"
                    " object.spec.priorityClassName == ''",
                    "a pod in a consumer's namespace may not name a PriorityClass: it would"
                    " preempt other teams' pods (kube-scheduler evicts lower priorities);"
                    " order a team's jobs with train priority=... (Kueue's)",
                ),
                _deny(
                    "request.operation != 'CREATE' || !has(object.spec.priority) ||"
                    " object.spec.priority <= 0",
                    "a pod in a consumer's namespace may not have a priority above 0: it would"
                    " preempt other teams' pods (kube-scheduler evicts lower priorities)",
                ),
                _deny(
                    "request.operation != 'CREATE' || !has(object.metadata.ownerReferences) ||"
                    " !object.metadata.ownerReferences.exists(r, has(r.controller) &&"
                    " r.controller) ||"
                    f" request.userInfo.username.startsWith('{CONTROLLERS_PREFIX}')",
                    "a pod in a consumer's namespace names a controller only when that"
                    " controller makes it (kube-controller-manager): Kueue never gates a pod"
                    " it takes for a queued job's",
                ),
                _deny(
                    f"request.operation != 'UPDATE' || !{gated('oldObject')} ||"
                    f" {gated('object')} || request.userInfo.username =="
                    f" '{_username(KUEUE_CONTROLLER)}'",
                    f"only Kueue removes a pod's scheduling gate {KUEUE_GATE}: it does when"
                    " it admits the pod within its team's quota",
                ),
                # kube-scheduler binds only the pods naming it (default-scheduler, what
                # SetDefaults_PodSpec writes for none); a pod naming another scheduler stays
                # unbound for whoever may POST its Binding (no grant may: kube_api), and no
                # pod of this bundle, Kueue v0.19.2 or JobSet v0.12.0 names one. The field
                # is immutable (ValidatePodUpdate), so CREATE only.
                _deny(
                    "request.operation != 'CREATE' || !has(object.spec.schedulerName) ||"
                    f" object.spec.schedulerName in ['', '{DEFAULT_SCHEDULER}']",
                    "a pod in a consumer's namespace is placed by kube-scheduler"
                    f" (schedulerName {DEFAULT_SCHEDULER}): no other scheduler binds it",
                ),
                _deny(
                    "request.operation != 'CREATE' || !["
                    "has(object.spec.serviceAccountName) ? object.spec.serviceAccountName : '',"
                    " has(object.spec.serviceAccount) ? object.spec.serviceAccount : ''"
                    "].exists(n, n == variables.consumer)",
                    "a pod in a consumer's namespace may not run as the consumer's own"
                    " ServiceAccount: its token would outlive the grant's rotation",
                ),
            ],
        },
    )


def consumer_tokens_policy() -> dict[str, Any]:
    """The policy that lets no credential in a consumer's namespace outlive its own.

    And lets none but the control plane renew the consumer's own token.
    """
    seconds = rbac.TOKEN_SECONDS
    return _consumer_policy(
        CONSUMER_TOKENS,
        [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["secrets", "serviceaccounts/token"],
            }
        ],
        {
            "variables": [
                {
                    "name": "consumer",
                    "expression": f"namespaceObject.metadata.labels['{CONSUMER_LABEL}']",
                },
            ],
            "validations": [
                _deny(
                    "request.resource.resource != 'secrets' || !has(object.type) || "
                    f"object.type != '{SA_TOKEN_SECRET}'",
                    f"a consumer's namespace holds no {SA_TOKEN_SECRET} Secret (its token never"
                    f" expires): request a token of at most {seconds} s",
                ),
                _deny(
                    "request.resource.resource != 'serviceaccounts' || "
                    "(has(object.spec.expirationSeconds) && "
                    f"object.spec.expirationSeconds <= {seconds})",
                    f"a TokenRequest in a consumer's namespace may live at most {seconds} s, as"
                    " the control plane's own",
                ),
                # The grant's ServiceAccount is the consumer's name (rbac.consumer_grant), the
                # namespace's CONSUMER_LABEL value; the control plane renews its token as
                # kubeadm's admin (access.py, rbac.request_token with admin.conf).
                _deny(
                    "request.resource.resource != 'serviceaccounts' ||"
                    " request.name != variables.consumer ||"
                    f" request.userInfo.username == '{KUBEADM_ADMIN}'",
                    "serviceaccounts/token of the consumer's own ServiceAccount (the grant's) is"
                    " requested by the control plane alone, which renews the grant's"
                    " kubeconfig: a stolen one cannot renew itself",
                ),
            ],
        },
    )


def _orphaning() -> str:
    """CEL: the DELETE orphans the job's dependents (store.go shouldOrphanDependents).

    An explicit orphanDependents, else propagationPolicy, else the first of the stored
    object's `orphan` / `foregroundDeletion` finalizers, else the kind's default: orphan
    for a batch/v1 Job (pkg/registry/batch/job/strategy.go), delete for a JobSet (a custom
    resource has no default of its own).
    """
    options = "request.options"
    finalizers = (
        "(has(oldObject.metadata.finalizers) ? oldObject.metadata.finalizers.filter(f,"
        f" f in {list(GC_FINALIZERS)}) : [])"
    )
    return (
        f"(has({options}.orphanDependents) ? {options}.orphanDependents :"
        f" has({options}.propagationPolicy) ? {options}.propagationPolicy == 'Orphan' :"
        f" size({finalizers}) > 0 ? {finalizers}[0] == '{GC_FINALIZERS[0]}' :"
        " request.resource.resource == 'jobs')"
    )


def consumer_jobs_policy() -> dict[str, Any]:
    """The policy that leaves starting or growing a consumer's Job or JobSet to Kueue.

    And that deletes none of them leaving its pods (or a JobSet's Jobs) running.
    """
    suspended = "(has({0}.spec.suspend) && {0}.spec.suspend)"
    starters = [_username(KUEUE_CONTROLLER), _username(JOBSET_CONTROLLER)]
    # a Job's pod counts; -1 for an absent one (kube-apiserver defaults parallelism to 1,
    # and completions stays unset for a work-queue Job: pkg/apis/batch/v1 defaults.go)
    count = "(has({0}.spec.{1}) ? {0}.spec.{1} : -1)"
    unchanged = " && ".join(
        f"{count.format('object', f)} == {count.format('oldObject', f)}"
        for f in ("parallelism", "completions")
    )
    deleting = "request.operation == 'DELETE'"
    return _consumer_policy(
        CONSUMER_JOBS,
        _writes_of(SUSPENDED_KINDS, ("UPDATE", "DELETE")),
        {
            "validations": [
                _deny(
                    f"{deleting} || !{suspended.format('oldObject')} ||"
                    f" {suspended.format('object')} ||"
                    f" request.userInfo.username in {starters}",
                    "only Kueue starts a job in a consumer's namespace (it unsuspends it once"
                    " admitted within the team's quota)",
                ),
                _deny(
                    f"{deleting} || request.resource.resource != 'jobs' ||"
                    f" {suspended.format('object')} ||"
                    f" ({unchanged}) || request.userInfo.username in {starters}",
                    "only Kueue changes a running job's parallelism or completions in a"
                    " consumer's namespace (it admitted the job's pods as they were; suspend"
                    " the job to resize it and Kueue admits it again)",
                ),
                _deny(
                    f"!({deleting}) || !{_orphaning()}",
                    "a job in a consumer's namespace is deleted with its pods: delete it with"
                    " propagationPolicy=Background (kubectl's default; a batch/v1 Job's own"
                    " default orphans them), as pods orphaned keep their GPUs after Kueue"
                    " frees the job's quota",
                ),
            ]
        },
    )


def consumer_controllers_policy() -> dict[str, Any]:
    """The policy that leaves naming a controller in a consumer's namespace to its controller."""
    refs = "{0}.metadata.ownerReferences.filter(r, has(r.controller) && r.controller)"
    jobset = _username(JOBSET_CONTROLLER)
    return _consumer_policy(
        CONSUMER_CONTROLLERS,
        _writes_of(CONTROLLED_KINDS),
        {
            "variables": [
                {
                    "name": "controllers",
                    "expression": f"has(object.metadata.ownerReferences) ? {refs.format('object')}"
                    " : []",
                },
                {
                    "name": "oldControllers",
                    "expression": "request.operation == 'UPDATE' &&"
                    f" has(oldObject.metadata.ownerReferences) ? {refs.format('oldObject')} : []",
                },
            ],
            "validations": [
                _deny(
                    "variables.controllers.all(r, r in variables.oldControllers) ||"
                    f" request.userInfo.username.startsWith('{CONTROLLERS_PREFIX}') ||"
                    f" (request.resource.resource == 'jobs' && request.userInfo.username =="
                    f" '{jobset}')",
                    "an object in a consumer's namespace names a controller only when"
                    " kube-controller-manager makes it (or JobSet, a JobSet's Jobs): Kueue"
                    " neither suspends nor gates what it takes for a queued job's",
                )
            ],
        },
    )


def _pod_specs(obj: str) -> str:
    """CEL: the pod specs of `obj` (a pod or a TEMPLATED_KINDS object), [] where it has none."""
    jobset = (
        f"has({obj}.spec.replicatedJobs) ? {obj}.spec.replicatedJobs.filter(r,"
        " has(r.template.spec) && has(r.template.spec.template.spec))"
        ".map(r, r.template.spec.template.spec) : []"
    )
    templated = (
        f"has({obj}.spec.template) && has({obj}.spec.template.spec) ?"
        f" [{obj}.spec.template.spec] : []"
    )
    return (
        f"request.resource.resource == 'pods' ? [{obj}.spec] :"
        f" request.resource.resource == 'jobsets' ? ({jobset}) : ({templated})"
    )


def _job_specs(obj: str) -> str:
    """CEL: the Job specs of `obj` (a Job, or a JobSet's Job templates), [] for other kinds."""
    return (
        f"request.resource.resource == 'jobs' ? [{obj}.spec] :"
        f" request.resource.resource == 'jobsets' && has({obj}.spec.replicatedJobs) ?"
        f" {obj}.spec.replicatedJobs.filter(r, has(r.template.spec))"
        ".map(r, r.template.spec) : []"
    )


def consumer_terminating_policy() -> dict[str, Any]:
    """The policy that bounds how long a consumer's terminating pod holds what Kueue freed.

    Each validation first asks whether the request is one it checks (a ternary, whose
    untaken branch CEL never evaluates), so a pod's delete reads no template and a Job's
    write no DeleteOptions.
    """
    cap = GRACE_CAP_SECONDS

    def grace(spec: str) -> str:
        return (
            f"(has({spec}.terminationGracePeriodSeconds) ?"
            f" {spec}.terminationGracePeriodSeconds : 0)"
        )

    # `Failed` set, or left out with a podFailurePolicy (SetDefaults_Job: then `Failed`)
    waits = (
        "(has(j.podReplacementPolicy) ? j.podReplacementPolicy == 'Failed' :"
        " has(j.podFailurePolicy))"
    )
    update = "request.operation == 'UPDATE'"
    # a DELETE's DeleteOptions (request.options: CreateAdmissionRequest) or an Eviction's
    delete = "request.operation == 'DELETE'"
    evict = "request.kind.kind == 'Eviction'"
    asked = (
        f"({delete} ? (has(request.options.gracePeriodSeconds) ?"
        " request.options.gracePeriodSeconds : 0) :"
        " has(object.deleteOptions) && has(object.deleteOptions.gracePeriodSeconds)"
        " ? object.deleteOptions.gracePeriodSeconds : 0)"
    )
    own = (
        f"{delete} && has(oldObject.spec.terminationGracePeriodSeconds) &&"
        f" {asked} <= oldObject.spec.terminationGracePeriodSeconds"
    )
    # an over-cap value the stored object had already (written before this policy) stays
    kept = f"{update} && {grace('s')} in ({_pod_specs('oldObject')}).map(o, {grace('o')})"
    pods = {"apiGroups": [""], "apiVersions": ["v1"]}
    return _consumer_policy(
        CONSUMER_TERMINATING,
        [
            {**pods, "operations": ["CREATE", "DELETE"], "resources": ["pods"]},
            {**pods, "operations": ["CREATE"], "resources": ["pods/eviction"]},
            *_writes_of(TEMPLATED_KINDS),
        ],
        {
            "validations": [
                _deny(
                    f"{delete} || {evict} ? true : ({_pod_specs('object')})"
                    f".all(s, {grace('s')} <= {cap} ? true : {kept})",
                    "a pod in a consumer's namespace may have a terminationGracePeriodSeconds"
                    f" of at most {cap} s: a terminating pod keeps its GPUs after Kueue"
                    " counts them free (preempted or replaced)",
                ),
                # DeleteOptions.gracePeriodSeconds overrides the pod's (pod strategy.go
                # CheckGracefulDelete) and kubelet waits that long; the store sets it before
                # admission (store.go Delete: BeforeDelete, then deleteValidation), so a
                # pod stored before this policy with a longer one of its own may still go.
                _deny(
                    f"!({delete} || {evict}) ? true : {asked} <= {cap} ? true : {own}",
                    "a pod in a consumer's namespace may be deleted or evicted with a grace"
                    f" period of at most {cap} s: a terminating pod keeps its GPUs after"
                    " Kueue counts them free",
                ),
                _deny(
                    "!(request.resource.resource in ['jobs', 'jobsets']) ? true :"
                    f" ({_job_specs('object')}).all(j, {waits}) ? true :"
                    f" {update} && !({_job_specs('oldObject')}).all(j, {waits})",
                    "a Job in a consumer's namespace (and each Job of a JobSet) must have"
                    " podReplacementPolicy Failed (or a podFailurePolicy): a pod replaced"
                    " while it terminates keeps its GPUs outside Kueue's quota",
                ),
            ],
        },
    )


def consumer_egress_policy() -> dict[str, Any]:
    """The policy that leaves a consumer's egress to the control plane (CONSUMER_EGRESS)."""
    policy = _consumer_policy(
        CONSUMER_EGRESS,
        [
            {
                "apiGroups": ["networking.k8s.io"],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE", "DELETE"],
                "resources": ["networkpolicies"],
            }
        ],
        {
            "variables": [
                {
                    "name": "policy",
                    "expression": "request.operation == 'DELETE' ? oldObject : object",
                }
            ],
            "validations": [
                _deny(
                    f"variables.policy.metadata.name != '{network_policies.METADATA_NAME}'",
                    f"{network_policies.METADATA_NAME} is the control plane's: it keeps"
                    " the nodes, the instance metadata service and every private address"
                    " but the API servers' port from every pod of a consumer's namespace",
                ),
                _deny(
                    "request.operation == 'DELETE' || !("
                    "(has(object.spec.policyTypes) && 'Egress' in object.spec.policyTypes) ||"
                    " (has(object.spec.egress) && size(object.spec.egress) > 0))",
                    "a consumer's own NetworkPolicies isolate ingress only: egress is the"
                    f" control plane's ({network_policies.METADATA_NAME})",
                ),
            ],
        },
    )
    policy["spec"]["matchConditions"].append(
        {
            "name": "from-the-namespaces-own-account",
            "expression": (
                f"request.userInfo.username.startsWith('{SA_PREFIX}' + request.namespace + ':')"
            ),
        }
    )
    return policy


def consumer_services_policy() -> dict[str, Any]:
    """The policy that adds no externalIPs to a consumer's Service (CONSUMER_SERVICES)."""
    old = (
        "request.operation == 'UPDATE' && has(oldObject.spec.externalIPs)"
        " ? oldObject.spec.externalIPs : []"
    )
    return _consumer_policy(
        CONSUMER_SERVICES,
        [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["services"],
            }
        ],
        {
            "variables": [{"name": "oldExternalIPs", "expression": old}],
            "validations": [
                _deny(
                    "!has(object.spec.externalIPs) ||"
                    " object.spec.externalIPs.all(ip, ip in variables.oldExternalIPs)",
                    "a Service in a consumer's namespace may not add spec.externalIPs: every"
                    " node would send that address's traffic to it (CVE-2020-8554)",
                ),
            ],
        },
    )


def consumer_policies() -> list[dict[str, Any]]:
    """CONSUMER_PODS, _TOKENS, _EGRESS, _JOBS, _CONTROLLERS, _TERMINATING, _SERVICES."""
    return [
        consumer_pods_policy(),
        consumer_tokens_policy(),
        consumer_egress_policy(),
        consumer_jobs_policy(),
        consumer_controllers_policy(),
        consumer_terminating_policy(),
        consumer_services_policy(),
    ]


def _node_name_variable() -> dict[str, str]:
    return {
        "name": "nodeName",
        "expression": (
            f"'{NODE_NAME_EXTRA}' in request.userInfo.extra && "
            f"size({_EXTRA}) > 0 ? {_EXTRA}[0] : ''"
        ),
    }


def efs_only_policy() -> dict[str, Any]:
    """The policy that lets ServiceAccounts outside kube-system write only EFS volumes."""
    efs_csi_volume = (
        f"object.spec.csi.driver == '{efs_csi.DRIVER}' && has(object.spec.csi.volumeHandle) "
        f"&& object.spec.csi.volumeHandle.matches('{_EFS_HANDLE}')"
    )
    efs_nfs_volume = f"has(object.spec.nfs) && object.spec.nfs.server.matches('{_EFS_DNS}')"
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(EFS_ONLY),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["persistentvolumes"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "a-service-account-outside-kube-system",
                    "expression": (
                        f"request.userInfo.username.startsWith('{SA_PREFIX}') && "
                        f"!request.userInfo.username.startsWith('{SA_PREFIX}kube-system:')"
                    ),
                }
            ],
            "validations": [
                {
                    "expression": (
                        f"has(object.spec.csi) ? ({efs_csi_volume}) : ({efs_nfs_volume})"
                    ),
                    "message": (
                        f"a PersistentVolume must be an EFS access point through {efs_csi.DRIVER}"
                        " (volumeHandle <fs-id>::<fsap-id>) or NFS to an EFS file system's DNS"
                        " name"
                    ),
                    "reason": "Forbidden",
                }
            ],
        },
    }


def _claim_ref_kept() -> str:
    """CEL: on UPDATE, the claimRef is as it was but for CLAIM_REF_FORGETTABLE removed.

    Field by field (an ObjectReference is a typed object in kube-apiserver's CEL, not a map
    to iterate).
    """
    new, old = "object.spec.claimRef", "oldObject.spec.claimRef"
    kept = " && ".join(
        f"has({new}.{f}) == has({old}.{f}) && (!has({new}.{f}) || {new}.{f} == {old}.{f})"
        for f in CLAIM_REF_FIELDS
    )
    forgotten = " && ".join(
        f"(!has({new}.{f}) || (has({old}.{f}) && {new}.{f} == {old}.{f}))"
        for f in CLAIM_REF_FORGETTABLE
    )
    return f"(!has({new}) && !has({old})) || (has({new}) && has({old}) && {kept} && {forgotten})"


# `object` is null on DELETE, `oldObject` on CREATE: when each is there
_PRESENT = {
    "object": "request.operation != 'DELETE'",
    "oldObject": "request.operation != 'CREATE'",
}
_OURS = f"{EFS_APP_LABEL}=<its ServiceAccount's name>"


def _label(obj: str, key: str) -> str:
    """CEL: label `key` of `obj` (object or oldObject), '' when absent or `obj` is null."""
    labels = _map(f"{obj}.metadata", "labels", _PRESENT[obj])
    return f"('{key}' in {labels} ? string({labels}['{key}']) : '')"


def _own(kind: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(variables, validations): the user writes only `kind`s labelled with its name."""
    mine = "(variables.{0} != '' && request.userInfo.username.endsWith(':' + variables.{0}))"
    variables = [
        {"name": "owner", "expression": _label("object", EFS_APP_LABEL)},
        {"name": "oldOwner", "expression": _label("oldObject", EFS_APP_LABEL)},
    ]
    validations = [
        _deny(
            f"request.operation == 'DELETE' || {mine.format('owner')}",
            f"a {kind} this user writes must carry the label {_OURS}",
        ),
        _deny(
            f"request.operation == 'CREATE' || {mine.format('oldOwner')}",
            f"this user may change or delete only the {kind}s labelled {_OURS}",
        ),
    ]
    return variables, validations


def _core_writes(resource: str) -> list[dict[str, Any]]:
    """The resource rules of every write to the core `resource` (matchConstraints)."""
    operations = ["CREATE", "UPDATE", "DELETE"]
    return [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": operations,
            "resources": [resource],
        }
    ]


def efs_own_policy() -> dict[str, Any]:
    """The policy that keeps a provisioner's writes and deletes to its own volumes."""
    variables, validations = _own("PersistentVolume")
    validations.append(
        _deny(
            f"request.operation != 'UPDATE' || {_claim_ref_kept()}",
            "this user may only remove a PersistentVolume's claimRef "
            + " and ".join(CLAIM_REF_FORGETTABLE),
        )
    )
    policy = efs_only_policy()
    policy["metadata"] = _meta(EFS_OWN)
    policy["spec"].update(
        {
            "matchConstraints": {"resourceRules": _core_writes("persistentvolumes")},
            "variables": variables,
            "validations": validations,
        }
    )
    return policy


def _provisioners_condition(accounts: Iterable[tuple[str, str]]) -> str:
    usernames = sorted({_username(a) for a in accounts})
    return f"request.userInfo.username in {usernames!r}"


def efs_own_claims_policy(accounts: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The policy that keeps the provisioners' claim writes to their own claims (EFS_CLAIMS).

    `accounts`: the (namespace, name) of each storage provisioner's ServiceAccount the
    control plane granted (access.provisioner_accounts); a team's claims in its own
    namespace are its own business, so only these are matched.
    """
    variables, validations = _own("PersistentVolumeClaim")
    holder = _map("namespaceObject.metadata", "labels")  # a claim is namespaced: never null
    validations.append(
        _deny(
            "request.operation == 'DELETE' || "
            "(variables.holder != '' && variables.consumer == variables.holder)",
            f"a PersistentVolumeClaim this user writes must go into the namespace the control"
            f" plane granted the consumer its label {CONSUMER_LABEL} names",
        )
    )
    variables += [
        {"name": "consumer", "expression": _label("object", CONSUMER_LABEL)},
        {
            "name": "holder",
            "expression": (
                f"'{CONSUMER_LABEL}' in {holder} ? string({holder}['{CONSUMER_LABEL}']) : ''"
            ),
        },
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(EFS_CLAIMS),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": _core_writes("persistentvolumeclaims")},
            "matchConditions": [
                {"name": "a-storage-provisioner", "expression": _provisioners_condition(accounts)}
            ],
            "variables": variables,
            "validations": validations,
        },
    }


def _prefixes(accounts: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Username -> [its own volume name prefix, the other provisioners' it must not use].

    `<name>-` is ambiguous where another provisioner's name extends it (`efs` and
    `efs-b`): `efs-b-...` is then the longer one's only.
    """
    names = sorted({a[1] for a in accounts})
    return {
        _username(a): [
            f"{a[1]}-",
            *(f"{o}-" for o in names if o != a[1] and o.startswith(f"{a[1]}-")),
        ]
        for a in accounts
    }


def efs_served_policy(served: Mapping[tuple[str, str], Mapping[str, str]]) -> dict[str, Any]:
    """The policy that keeps each provisioner to the consumers it serves (EFS_SERVED).

    `served`: each storage provisioner's ServiceAccount (namespace, name) -> {the namespace
    the control plane granted a consumer it serves: that consumer's access point, or ""}.
    Every provisioner granted is named, one that serves nobody with an empty map.
    """
    fenced = {
        f"{_username(a)}/{namespace}": point
        for a, consumers in served.items()
        for namespace, point in consumers.items()
    }
    volumes = "request.resource.resource == 'persistentvolumes'"
    ref = "object.spec.claimRef"
    point = "variables.served[variables.key]"
    handle = "object.spec.csi.volumeHandle"
    own_name = (
        "variables.prefixes[request.userInfo.username][0]",
        "variables.prefixes[request.userInfo.username].all(p, p == "
        "variables.prefixes[request.userInfo.username][0] || !variables.volume.startsWith(p))",
    )
    variables = [
        {"name": "served", "expression": repr(dict(sorted(fenced.items())))},
        {"name": "prefixes", "expression": repr(_prefixes(served))},
        {
            "name": "namespace",
            "expression": (
                f"{volumes} ? (has({ref}) && has({ref}.namespace) ? {ref}.namespace : '')"
                " : request.namespace"
            ),
        },
        {"name": "key", "expression": "request.userInfo.username + '/' + variables.namespace"},
        {
            "name": "volume",
            "expression": (
                f"{volumes} ? object.metadata.name : "
                "(has(object.spec.volumeName) ? object.spec.volumeName : '')"
            ),
        },
    ]
    validations = [
        _deny(
            "variables.key in variables.served",
            "a PersistentVolumeClaim this user writes, and a PersistentVolume's claimRef, must"
            " be in the namespace of a consumer it serves (kube-api storage-consumers)",
        ),
        _deny(
            f"!({volumes}) || !(variables.key in variables.served) || (has(object.spec.csi)"
            f" ? ({point} != '' && has({handle}) && {handle}.endsWith('::' + {point}))"
            f" : {point} == '')",
            "a PersistentVolume this user writes must mount the access point published for"
            " its consumer (kube-api storage-consumers), plain NFS only while none is",
        ),
        _deny(
            f"variables.volume.startsWith({own_name[0]}) && {own_name[1]}",
            "a PersistentVolume this user writes, and the volumeName of its claims, must be"
            " named <its ServiceAccount's name>-...",
        ),
    ]
    usernames = sorted(_username(a) for a in served)
    rules = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["persistentvolumes", "persistentvolumeclaims"],
        }
    ]
    condition = {
        "name": "a-storage-provisioner",
        "expression": f"request.userInfo.username in {usernames!r}",
    }
    return _matched(
        EFS_SERVED, rules, condition, {"variables": variables, "validations": validations}
    )


def claims_manifests(
    accounts: Iterable[tuple[str, str]],
    served: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """EFS_CLAIMS and EFS_SERVED with their bindings, for the provisioners' `accounts`.

    `served`: see efs_served_policy; an account of `accounts` it lacks serves nobody.
    """
    accounts = sorted(set(accounts))
    served = {a: (served or {}).get(a, {}) for a in accounts}
    return [
        efs_own_claims_policy(accounts),
        efs_served_policy(served),
        _binding(EFS_CLAIMS),
        _binding(EFS_SERVED),
    ]


def manifests() -> list[dict[str, Any]]:
    """Every policy and its binding, policies first (a binding names its policy)."""
    policies = [
        *(node_bound_policy(a) for a in NODE_BOUND),
        calico_cni_policy(),
        calico_settings_policy(),
        jobset_children_policy(),
        efs_only_policy(),
        efs_own_policy(),
        *consumer_policies(),
    ]
    return [*policies, *(_binding(p["metadata"]["name"]) for p in policies)]
