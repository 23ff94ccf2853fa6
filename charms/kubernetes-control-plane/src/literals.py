# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""Constants of the kubernetes-control-plane charm: paths, names, pinned versions."""

from batch_engines import CONTROL_PLANE_LABEL, Release  # noqa: F401  (one name, fleet.py)

from charms.gpu_k8s.v0.kubeadm import ADMIN_CONF  # noqa: F401  (one name for one path)

APP_NAME = "kubernetes-control-plane"
FIELD_MANAGER = "kubernetes-control-plane"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
CONSUMER_LABEL = "gpu-k8s.io/consumer"

PEERS = "peers"
WORKERS = "workers"
KUBE_API = "kube-api"
COS_AGENT = "cos-agent"

API_PORT = 6443
KUBEADM = "/usr/bin/kubeadm"
CA_CERT = "/etc/kubernetes/pki/ca.crt"
APISERVER_CERT = "/etc/kubernetes/pki/apiserver.crt"
APISERVER_KEY = "/etc/kubernetes/pki/apiserver.key"
# Left by a certificate renewal until the API server restarted with the new certificate.
INIT_CONFIG = "/etc/kubernetes/gpu-k8s/kubeadm-init.yaml"
INSTALL_MARKER = "/var/lib/kubernetes-control-plane/installed.json"
# Written once `kubeadm init` or `kubeadm join --control-plane` exited 0: this node is a
# control-plane member (admin.conf alone says nothing: kubeadm join writes it first).
JOINED_MARKER = "/var/lib/kubernetes-control-plane/joined"
ETCD_MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
# What Juju deployed this code as: the unit agent writes the charm URL, revision included,
# into the charm directory once the charm's files are in place, at install and at each
# refresh (juju/juju worker/uniter/charm/manifest_deployer.go finishDeploy, CharmURLPath
# in charm.go; internal/worker/uniter/charm on main). A refresh always deploys another
# URL: a Charmhub revision, or a local charm's next revision.
CHARM_URL_FILE = ".juju-charm"

# The cluster's CNI (`cni` config, new clusters only; calico.py, flannel.py). The leader
# records what it applied in the peer application data (addons.CNI_KEY, whose first word
# names the CNI), so a cluster keeps the CNI it was bootstrapped with.
CALICO = "calico"
FLANNEL = "flannel"
CNIS = (CALICO, FLANNEL)

# Calico, pinned 2026-11-27 to v3.32.1 (tagged 2026-06-24; the newest v3.x tag in the
# projectcalico/calico snapshot of 2026-08-22, v3.31.7 being a patch of the older line).
# Its docs install a manifest cluster with `curl https://raw.githubusercontent.com/
# projectcalico/calico/<tag>/manifests/calico.yaml -O` then `kubectl apply` (tigera/docs
# calico/getting-started/kubernetes/self-managed-onprem/onpremises.mdx, "Manifest").
# The file at the tag has sha256 CALICO_RELEASE.sha256 (read from the tag's blob,
# `git show v3.32.1:manifests/calico.yaml | sha256sum`, again 2026-11-28): the leader
# refuses any other unless `calico-sha256` names it (batch_engines.verify). Everything
# runs in kube-system.
CALICO_RELEASE = Release(
    name=CALICO,
    version="v3.32.1",  # images quay.io/calico/{cni,node,kube-controllers}:v3.32.1
    upstream_url=(
        "https://raw.githubusercontent.com/projectcalico/calico/v3.32.1/manifests/calico.yaml"
    ),
    namespace="kube-system",
    deployment="calico-kube-controllers",
    asset="calico.yaml",
    sha256="a1df919d9721cf667accdc3e72848911b0cb25cfab7d2478ad0c996302c95744",
)

# Pinned CNI of clusters bootstrapped before Calico: flannel release shipped in
# files/kube-flannel.yml.
FLANNEL_VERSION = "v0.27.4"
FLANNEL_CNI_PLUGIN_VERSION = "v1.8.0-flannel1"
POD_CIDR_PLACEHOLDER = "__POD_CIDR__"

# Batch engines, pinned 2026-11-23 to the newest releases in the upstream snapshots read
# (JobSet's of 2026-08-18, Kueue's of 2026-08-20). Both READMEs install with `kubectl apply
# --server-side -f https://github.com/kubernetes-sigs/<project>/releases/download/<tag>/
# manifests.yaml`; names from their config/default kustomizations at the tags. Kueue
# v0.19.2 is built against JobSet v0.12.0 (its go.mod) and tests with it on Kubernetes
# 1.34-1.36 (hack/make/test.mk); 1.37 is not in either project's test matrix yet.
# Their manifests.yaml is built at release (`kustomize build config/default -o
# artifacts/manifests.yaml`: jobset Makefile:310 at v0.12.0, kueue Makefile:379 at
# v0.19.2), not kept in the repository, so no digest could be read when pinning: the leader trusts
# the first it applies from a URL (batch_engines.verify); `jobset-sha256`/`kueue-sha256`
# pin one.
JOBSET = Release(
    name="jobset",
    version="v0.12.0",  # tagged 2026-05-08; image registry.k8s.io/jobset/jobset:v0.12.0
    upstream_url=(
        "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml"
    ),
    namespace="jobset-system",
    deployment="jobset-controller-manager",
)
KUEUE = Release(
    name="kueue",
    version="v0.19.2",  # tagged 2026-08-20; image registry.k8s.io/kueue/kueue:v0.19.2
    upstream_url=(
        "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml"
    ),
    namespace="kueue-system",
    deployment="kueue-controller-manager",
    config_map="kueue-manager-config",
    config_key="controller_manager_config.yaml",
)

# Namespaces whose Jobs and JobSets Kueue manages: every kube-api consumer's but a storage
# provisioner's (rbac.consumer_grant; issue 29 review: labelling only those that asked for
# LocalQueues let a consumer that asked for none run GPU Jobs outside every quota).
# Kueue's job and pod webhooks fail closed and upstream scopes them to every namespace but
# kube-system and kueue-system (kubernetes-sigs/kueue#5244), so while its controller is
# down nothing could start anywhere; here they are scoped to this label.
KUEUE_NAMESPACE_LABEL = "gpu-k8s.io/kueue"
KUEUE_NAMESPACE_VALUE = "managed"

# kube-apiserver's admission plugins beyond its defaults: NodeRestriction (kubeadm's own
# default), ExtendedResourceToleration (GPU pods tolerate the GPU nodes' taint) and
# DenyServiceExternalIPs (a team's Service with externalIPs would take over traffic to any
# address, CVE-2020-8554; kubernetes.io/docs/reference/access-authn-authz/
# admission-controllers/#denyserviceexternalips). Only clusters bootstrapped with this list
# get it: kubeadm keeps a cluster's apiServer extraArgs in kubeadm-config, and `kubeadm
# upgrade apply` renders kube-apiserver from that, which the charm does not rewrite.
ADMISSION_PLUGINS = ("NodeRestriction", "ExtendedResourceToleration", "DenyServiceExternalIPs")

# Pod Security Admission (kube-apiserver's PodSecurity plugin, on by default since 1.23, GA
# in 1.25; kubernetes.io/docs/concepts/security/pod-security-admission/): a namespace's
# labels `pod-security.kubernetes.io/<mode>` (enforce: refuse the pod; warn: a warning to
# the client; audit: an audit annotation) pick a level, `privileged`, `baseline` or
# `restricted`, and `<mode>-version` the Kubernetes minor whose checks apply (`latest`:
# those of the running API server, so an upgrade could start refusing pods that ran;
# k8s.io/pod-security-admission api/helpers.go ParseVersion, PolicyToEvaluate). Versions
# are pinned to the bundle's minor, 1.36 (kubeadm.DEFAULT_MINOR), read 2026-11-27 from
# kubernetes.io/docs/tasks/configure-pod-container/enforce-standards-namespace-labels/.
POD_SECURITY_LABEL_PREFIX = "pod-security.kubernetes.io/"
POD_SECURITY_VERSION = "v1.36"


def pod_security_labels(level: str) -> dict[str, str]:
    """The namespace labels that enforce, warn and audit Pod Security `level`."""
    labels: dict[str, str] = {}
    for mode in ("enforce", "warn", "audit"):
        labels[f"{POD_SECURITY_LABEL_PREFIX}{mode}"] = level
        labels[f"{POD_SECURITY_LABEL_PREFIX}{mode}-version"] = POD_SECURITY_VERSION
    return labels


# A kube-api consumer's (a team's) namespace: `restricted`, the hardened profile every
# pod of the tensorflow charm meets (runAsNonRoot, no privilege escalation, capabilities
# drop ALL, seccomp RuntimeDefault; kubernetes.io/docs/concepts/security/
# pod-security-standards/ "Restricted"). rbac.manifests labels the Namespace with it.
TEAM_POD_SECURITY = pod_security_labels("restricted")
# A storage provisioner's namespace (the apps of kube-api-storage-provisioners, efs-storage):
# `baseline`. Its directory Jobs run as root with CHOWN/DAC_OVERRIDE/FOWNER/FSETID and an
# nfs volume, which restricted refuses (its volume types leave out nfs); baseline still
# refuses privileged pods, hostPath and host namespaces.
PROVISIONER_POD_SECURITY = pod_security_labels("baseline")
# `gpu-k8s-system`, where workers run the CUDA validation pod: `baseline` (review S2: the
# pod needs no privilege, the nvidia runtime class gives it the GPU; baseline refuses
# privileged, hostPath, host namespaces and added capabilities, which is what a stolen
# worker credential would need to take a node). rbac.manifests labels it.
GPU_VALIDATION_POD_SECURITY = pod_security_labels("baseline")

# Where the privileged GPU components run: NVIDIA's device plugin, DCGM exporter and MIG
# manager (device_plugin.py, dcgm_exporter.py, mig_manager.py), and nothing else (issue 29
# item 3). Pod Security `privileged` (kubernetes.io/docs/concepts/security/
# pod-security-standards/ "Privileged": unrestricted), because the MIG manager runs
# privileged with the host's PID and IPC namespaces and / mounted, and all three mount host
# paths, which `baseline` refuses. No kube-api consumer may name it (kube_api's reserved
# namespaces), and no grant but these components' own ServiceAccounts binds anything in it.
# Another privileged component (the EFS CSI driver's node DaemonSet) gets a namespace of its
# own labelled PRIVILEGED_POD_SECURITY, not this one: "nothing else runs there".
GPU_NAMESPACE = "gpu-k8s-gpu"
PRIVILEGED_POD_SECURITY = pod_security_labels("privileged")

# Worker credentials: a ServiceAccount each worker uses to label, drain and validate itself.
WORKER_NAMESPACE = "kube-system"
WORKER_SERVICE_ACCOUNT = "gpu-k8s-worker"
GPU_VALIDATION_NAMESPACE = "gpu-k8s-system"

# Secrets (labels) and peer databag keys.
PEER_SECRET_LABEL = "control-plane-join"
# A bootstrap token a joined member minted for joining peers while the leader cannot.
MEMBER_TOKEN_LABEL = "control-plane-join-token"
ADMIN_SECRET_LABEL = "admin-kubeconfig"
TOKEN_ROTATION_MARGIN_HOURS = 1
# The workers' bootstrap token exists only while a worker unit joins, and lives two hours
# (replaced an hour before it expires, `TOKEN_ROTATION_MARGIN_HOURS`): whoever holds it may
# have a client certificate for any node name approved (kube-controller-manager's
# csrapproving controller approves `system:node:*` client CSRs of the bootstrappers group
# that kubeadm binds to `certificatesigningrequests: nodeclient`; kubernetes
# pkg/controller/certificates/approver/sarapprove.go isNodeClientCert; docs "TLS
# bootstrapping", "Approval"). One machine's first boot, GPU driver and reboot included,
# fits in it; a longer join gets the next token.
WORKER_TOKEN_TTL_HOURS = 2
# kubeadm deletes uploaded certificates after two hours; re-upload well before that.
CERTS_VALID_SECONDS = 2 * 3600
CERTS_REUPLOAD_AFTER_SECONDS = 3600
# A joined member steps in for the leader only when the leader let them go this long
# (the leader itself re-uploads after an hour and rotates tokens an hour before expiry).
MEMBER_REUPLOAD_AFTER_SECONDS = 90 * 60
MEMBER_TOKEN_MARGIN_MINUTES = 30
# What the operator checks when the API server refuses this unit's cluster-admin
# credentials: kubeadm's admin.conf, whose client certificate expires after a year unless
# an upgrade renewed it (kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-certs/).
ADMIN_REFUSED_FIX = (
    "check /etc/kubernetes/admin.conf on this machine (sudo kubeadm certs check-expiration)"
)
# How long a departing control-plane unit waits for its node's pods to be evicted.
DRAIN_TIMEOUT_SECONDS = 300
# How long a worker unit may hold the worker upgrade turn (fleet.py): the longest drain a
# worker may wait for (its `drain-timeout` option, at most 3600 s: kubernetes-worker
# charm_config.py MAX_DRAIN_TIMEOUT) plus an hour for its drain turn, packages, kubeadm
# and kubelet. Past it the turn passes on and the holder is named in the status: root on
# a worker can publish an older `kubernetes-version` and never finish.
WORKER_UPGRADE_TURN_SECONDS = 3600 + 3600
# Peer application data: the node kube-state-metrics runs on, where its COS agent scrapes it
# (written by addons.py, read by summary.py).
KUBE_STATE_METRICS_NODE_KEY = "kube-state-metrics-node"
