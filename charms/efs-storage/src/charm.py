#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The efs-storage charm: an Amazon EFS file system shared through Kubernetes claims.

One `_reconcile()` handles every event on the leader: validate config, get Kubernetes
access (`kube-api`) and AWS credentials (`--trust` or a Juju secret), make one
non-blocking pass over AWS (`efs.Efs.reconcile`), then make each `shared-storage`
consumer's PersistentVolume + claim (`storage.Storage`) and answer on the relation.
Nothing waits in a hook: progress is a Waiting status re-checked on the next event.

Statuses: a step that cannot go on raises `StatusError` (charms.gpu_k8s.v0.status), which
`Statuses.step()` keeps for collect-unit-status, as it keeps a Kubernetes API error read
by `kube_status`; an AWS error (aws.py) becomes its status in `aws_access.aws_call`.

Removal (the application's planned units drop to 0): every hook while dying runs one
teardown step. First the claims are deleted (refused, with a status naming the pods,
while pods mount them); then, only for a file system this application created and only
with `delete-on-remove=true`, the mount targets, the file system and the security group,
one step per hook in the order AWS requires. The `remove` hook raises while AWS deletion
is still under way, so that Juju retries it: each retry is the next poll.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import aws
import ops
from aws_access import AwsAccess, aws_call
from charm_config import Config
from claims import Owner, efs_path
from confinement import Access, RootServed, access_points, confine, csi_driver_on_every_node
from directories import HELPER_IMAGE, Directories, Holdings
from efs import Efs
from efs_model import Desired, Node, Observed, nodes_from_kubernetes
from literals import (
    CLUSTER_RULES,
    HOLDINGS_KEY,
    KUBE_API,
    NAMESPACED_RULES,
    PEERS,
    SHARED_STORAGE,
)
from operator_actions import OperatorActions
from storage import (
    CLAIMS_IN_USE,
    ClaimState,
    Managed,
    Storage,
    claim_spec,
    kept_line,
    namespace_problem,
)

from charms.gpu_k8s.v0.cos_agent import CosAgentProvider
from charms.gpu_k8s.v0.databag import write
from charms.gpu_k8s.v0.images import mirrored
from charms.gpu_k8s.v0.kube_api import KubeApiRequirer
from charms.gpu_k8s.v0.kubeclient import Kube
from charms.gpu_k8s.v0.shared_storage import SharedStorageProvider, StorageRequest
from charms.gpu_k8s.v0.status import StatusError, Statuses
from charms.gpu_k8s.v0.system import machine
from charms.gpu_k8s.v0.unit_state import Gauge

logger = logging.getLogger(__name__)


class TeardownPendingError(Exception):
    """Raised by the `remove` hook while AWS deletion is still under way (Juju retries)."""


class EfsStorageCharm(ops.CharmBase):
    """Provides an EFS file system to Kubernetes consumers as ReadWriteMany claims."""

    # Boundaries that tests point at local servers (moto, the fake API server).
    aws_endpoint_url: str | None = None
    aws_max_attempts: int = aws.DEFAULT_MAX_ATTEMPTS
    kube_retries: int = 5
    kube_backoff: float = 0.5
    # How long one hook waits for the Job that makes a consumer's directory (directories.py);
    # a Job still running then is looked at again on the next event.
    directory_wait: float = 60.0
    sleep: Callable[[float], None] = staticmethod(time.sleep)
    monotonic: Callable[[], float] = staticmethod(time.monotonic)
    # The machine (where the unit-state server for the COS agent runs: unit_state).
    host_factory = staticmethod(machine)

    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        self._stored.set_default(claims=[])
        self.kube_api = KubeApiRequirer(
            self,
            KUBE_API,
            namespace=self.app.name,
            rules=NAMESPACED_RULES,
            cluster_rules=CLUSTER_RULES,
        )
        self.shared_storage = SharedStorageProvider(self, SHARED_STORAGE)
        self.cos = CosAgentProvider(self, "cos-agent", host=self.host_factory)
        # What this hook found, for collect-unit-status. Refused Kubernetes credentials read
        # as the lib's Blocked "...; check the kube-api grant on the control plane".
        self._statuses = Statuses()
        self._kube_client: Kube | None = None
        on = self.on
        for event in (
            on.install,
            on.config_changed,
            on.upgrade_charm,
            on.update_status,
            on.leader_elected,
            on.stop,
            on.secret_changed,
            on[KUBE_API].relation_changed,
            on[KUBE_API].relation_departed,
            on[KUBE_API].relation_broken,
            on[SHARED_STORAGE].relation_changed,
            on[SHARED_STORAGE].relation_departed,
            on[SHARED_STORAGE].relation_broken,
        ):
            framework.observe(event, self._on_event)
        framework.observe(on.remove, self._on_remove)
        framework.observe(on.collect_unit_status, self._on_collect_status)
        for event in (on["cos-agent"].relation_joined, on["cos-agent"].relation_changed):
            framework.observe(event, self._on_cos_agent)
        framework.observe(on.upgrade_charm, self._on_cos_agent)  # new rules or dashboards
        self.actions = OperatorActions(
            self,
            config=lambda: self.load_config(Config, errors="raise"),
            desired=self._desired,
            efs=self._efs,
            kube=self._kube_or_none,
        )
        framework.observe(on.show_filesystem_action, self.actions.on_show_filesystem)

    # -- events ---------------------------------------------------------------------------
    def _on_event(self, _: ops.EventBase) -> None:
        with self._statuses.step():
            self._reconcile()

    def _on_remove(self, _: ops.RemoveEvent) -> None:
        tearing_down = self.app.planned_units() == 0 and self.unit.is_leader()
        done: bool | None = None  # stays None when a step stops with a status
        with self._statuses.step():
            if tearing_down:
                try:
                    self.load_config(Config)
                except ValueError as e:  # nothing more is deleted with a config in doubt
                    raise StatusError.blocked(f"invalid config: {e}") from None
            done = self._reconcile()
        if done is None:
            if not tearing_down:
                return  # this unit goes, the application stays: nothing to tear down
            stopped = self._statuses.found[-1]
            blocked = isinstance(stopped, ops.BlockedStatus)
            if blocked and not stopped.message.startswith(CLAIMS_IN_USE):
                self._release_or_fail(stopped.message)
                return
            done = False  # claims in use or AWS busy: Juju retries, the rules stay meanwhile
        if not done:
            found = self._statuses.found
            message = found[-1].message if found else "teardown pending"
            raise TeardownPendingError(f"{message}; Juju retries this hook to continue")

    def _release_or_fail(self, problem: str) -> None:
        """Revoke the NFS rules of a removal the operator must unblock, or fail the hook.

        Nothing more is deleted, but the rules that reference Juju's groups go now, or
        `juju destroy-model` stalls on them: the hook fails (Juju retries it) until they
        are revoked.
        """
        why = self._release_rules()
        if why is not None:
            raise TeardownPendingError(
                f"{problem}; the NFS rules that reference Juju's security groups could not "
                f"be revoked ({why}), which would stop `juju destroy-model`: fix this and "
                "Juju retries this hook"
            )

    def _release_rules(self) -> str | None:
        """Revoke this application's NFS rules, whatever else failed; None once done.

        Needs only the credentials: with an invalid config, the model's own credential
        (`juju trust`) is tried.
        """
        try:
            config = self.load_config(Config)
        except ValueError:
            config = Config()
        try:
            manager = self._efs(config)
            aws_call(lambda: manager.release_rules(self.model.uuid, self.app.name))
        except StatusError as e:
            return e.status.message
        return None

    def _on_cos_agent(self, _: ops.EventBase) -> None:
        # no scrape job but the unit's own state: the agent collects the machine's metrics
        self.cos.update([])

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        self._statuses.report(event)

    # -- reconcile ------------------------------------------------------------------------
    def _reconcile(self) -> bool:
        """One pass; returns False while a removal is still under way."""
        try:
            config = self.load_config(Config, errors="raise")
        except ValueError as e:
            # as errors="blocked" words it, but the hook ends normally: errors="blocked"
            # aborts it before commit, so a related COS agent never heard of the block
            raise StatusError.blocked(f"Invalid config: {e}") from None
        if not self.unit.is_leader():
            self._statuses.add(ops.ActiveStatus("standby: the leader manages EFS"))
            self.cos.set_gauges([])  # the leader reports the file system
            return True
        if self.app.planned_units() == 0:
            return self._teardown(config)
        desired = self._desired(config)  # validates before anything talks to AWS
        kube = self._kube()
        credentials, region = AwsAccess(self.model).resolve(config)
        listed = kube.list("v1", "Node")
        nodes = nodes_from_kubernetes(listed)
        desired = self._desired(config, nodes)
        manager = self._connect(credentials, region)
        observed = aws_call(lambda: manager.reconcile(desired))
        if observed.unresolved_nodes:
            logger.warning("nodes not found in EC2: %s", ", ".join(observed.unresolved_nodes))
        access = Access(manager, desired, observed, csi_driver_on_every_node(listed))
        states = self._serve(kube, config, observed, access)
        self._report(observed, states, access)
        self.cos.set_gauges(_gauges(observed, states))
        return True

    def _desired(self, config: Config, nodes: tuple[Node, ...] = ()) -> Desired:
        desired = Desired(
            model_uuid=self.model.uuid,
            app=self.app.name,
            nodes=nodes,
            file_system_id=config.file_system_id or None,
            performance_mode=config.performance_mode,
            throughput_mode=config.throughput_mode,
            provisioned_throughput_mibps=config.provisioned_throughput or None,
            kms_key_id=config.kms_key_id or None,
            backup=config.aws_backup,
        )
        try:
            desired.validate()
        except aws.AwsConfigError as e:
            raise StatusError.blocked(str(e)) from None
        return desired

    def _serve(
        self, kube: Kube, config: Config, observed: Observed, access: Access
    ) -> list[ClaimState]:
        """Make every consumer's claim, answer on the relation, delete claims not wanted."""
        owner = Owner(self.app.name, self.model.uuid)
        directories = Directories(
            kube,
            owner,
            namespace=self.kube_api.namespace() or self.app.name,
            image=mirrored(HELPER_IMAGE, config.image_registry),
            wait=self.directory_wait,
            sleep=self.sleep,
            monotonic=self.monotonic,
            efs_ready=observed.ready and not observed.dns_problem,
        )
        storage = Storage(kube, owner, directories)
        managed = storage.managed()
        holdings = self._holdings(managed)
        # Once one volume mounts through an access point, every one does: a node that
        # joins before its driver pod runs waits for it rather than undo the confinement.
        access.confining = access.driver_ready or any(m.access_point for m in managed)
        states: list[ClaimState] = []
        keep: set[str] = set()
        # The relation made first comes first among requests that arrive in one hook.
        requests = sorted(self.shared_storage.requests(), key=lambda r: r.relation.id)
        accepted = self._accept(kube, holdings, config, access, requests)
        points = access_points(access, config, accepted)
        self._publish_served(accepted, points, access, managed)
        for request, directory in accepted:
            point = points.get(request.app_name)
            if isinstance(point, aws.AwsApiError):
                self._refuse(request, f"no access point: {point}", "fix it in AWS")
                # what it has (a claim over NFS) stays until it has an access point
                mine = [m for m in managed if m.consumer == request.app_name]
                keep.update(str(x) for m in mine for x in (m.key, m.volume_name) if x)
                continue
            if access.confining and point is None:  # the file system is not available yet
                continue
            if point is not None and directory is None:  # the root: its status names it
                access.root.append(RootServed.of(request.app_name, config, point))
            spec = claim_spec(
                storage.owner,
                consumer=request.app_name,
                namespace=request.namespace or "",  # accepted: set
                capacity=config.capacity,
                server=observed.dns_name or "",
                path=config.path,
                file_system_id=observed.file_system_id or "",
                directory=directory,
                directory_owner=request.owner,
                access_point=point.access_point_id if point is not None else None,
            )
            keep.update((spec.key, spec.volume_name))
            state = storage.ensure(spec)
            states.append(state)
            if state.problem and not state.waiting:
                self.shared_storage.refuse(request.relation, state.problem)
                continue
            self.shared_storage.answer(
                request.relation,
                claim_name=spec.claim_name,
                capacity=spec.capacity,
                file_system_id=spec.file_system_id,
                namespace=spec.namespace,
                ready=observed.ready and state.bound,
                request=request,
            )
        in_use = storage.release_all_except(keep, managed)
        for key, pods in sorted(in_use.items()):
            self._statuses.add(ops.BlockedStatus(kept_line(key, pods)))
        self._stored.claims = sorted({s.spec.key for s in states} | set(in_use))
        # A consumer keeps what it holds while it is related or pods still use its claim.
        related = {r.app_name for r in requests}
        holdings.keep_only(related | {m.consumer for m in managed if m.key in in_use})
        write(self._peer_data(), {HOLDINGS_KEY: holdings.dump()})
        if access.confining and observed.state == "available":
            live = {m.access_point or "" for m in managed}
            confine(access, storage, live, points)
        return states

    def _publish_served(
        self,
        accepted: list[tuple[StorageRequest, str | None]],
        points: dict,
        access: Access,
        managed: list[Managed],
    ) -> None:
        """Publish whom this application serves (lib kube_api storage-consumers).

        Each consumer whose volume is written in this pass, with its access point ("" for a
        plain NFS volume): the control plane's policy lets this application write only
        those consumers' volumes and claims. Until it names a new one, that consumer's
        writes are refused and it waits (storage.py _not_admitted); the control plane's
        answer (the same field on its side) brings relation-changed, and it is served.
        A consumer no longer served whose claim is left (pods use it) stays named, with
        the access point it mounts: the control plane lets this application list pods only
        in the namespaces of those it names, and the claim goes once none uses it.
        """
        served: dict[str, str] = {}
        for request, _ in accepted:
            point = points.get(request.app_name)
            if isinstance(point, aws.AwsApiError) or (access.confining and point is None):
                continue
            served[request.app_name] = point.access_point_id if point is not None else ""
        names = {request.app_name for request, _ in accepted}
        for left in managed:
            if left.consumer and left.consumer not in names and left.claim_name:
                served.setdefault(left.consumer, left.access_point or "")
        self.kube_api.publish_storage_consumers(served)

    def _accept(
        self,
        kube: Kube,
        holdings: Holdings,
        config: Config,
        access: Access,
        requests: list[StorageRequest],
    ) -> list[tuple[StorageRequest, str | None]]:
        """The requests to serve, each with its directory; the others are refused."""
        accepted: list[tuple[StorageRequest, str | None]] = []
        for request in requests:
            directory = request.directory
            if request.namespace is not None:
                request = self._own_namespace(kube, request)
            if request.namespace is not None:
                directory = self._directory_of(holdings, request, config, access.confining)
                request = self._hold(holdings, request, config, directory)
            if request.namespace is None:
                self._refuse(request, request.error or "invalid request", "fix that consumer")
                continue
            accepted.append((request, directory))
        return accepted

    def _refuse(self, request: StorageRequest, error: str, fix: str) -> None:
        self.shared_storage.refuse(request.relation, error)
        self._statuses.add(ops.BlockedStatus(f"{request.app_name}: {error}; {fix}"))

    def _directory_of(
        self, holdings: Holdings, request: StorageRequest, config: Config, confining: bool
    ) -> str | None:
        """The directory a consumer is served: its own, the root, or one named after it.

        Through an access point, a consumer that asks for no directory gets one named after
        it: an access point never serves the root (issue 29 item 5) unless `root-consumers`
        names the consumer, or it held the root before access points (its data is there).
        """
        if request.directory or not confining:
            return request.directory
        if request.app_name in config.root_consumer_names:
            return None
        if holdings.held.get(request.app_name) == efs_path(config.path, None):
            return None
        return request.app_name

    def _peer_data(self) -> ops.RelationDataContent:
        peers = self.model.get_relation(PEERS)
        if peers is None:  # Juju makes it when the application is deployed; install may precede
            raise StatusError.waiting("waiting for the peer relation to record directory holders")
        return peers.data[self.app]

    def _holdings(self, managed: list[Managed]) -> Holdings:
        """Who holds which path, from the peer data (or, the first time, the live volumes).

        A revision before this one recorded nothing: the volumes it made say who was served
        what, the oldest first (they were served first).
        """
        try:
            recorded = Holdings.load(self._peer_data().get(HOLDINGS_KEY))
        except ValueError as e:
            raise StatusError.blocked(f"peer data {HOLDINGS_KEY}: {e}; remove the key") from None
        if recorded is not None:
            return recorded
        holdings = Holdings({})
        for item in sorted(managed, key=lambda m: m.created):
            if item.consumer and item.path is not None:
                holdings.claim(item.consumer, item.path)
        return holdings

    def _own_namespace(self, kube: Kube, request: StorageRequest) -> StorageRequest:
        """`request`, or a refusal when its namespace is not the one granted to it."""
        namespace = request.namespace or ""
        if namespace == (self.kube_api.namespace() or self.app.name):
            error: str | None = f"namespace {namespace} is {self.app.name}'s own; ask for yours"
        else:
            error = namespace_problem(kube, request.app_name, namespace)
        if error is None:
            return request
        return dataclasses.replace(request, namespace=None, error=error)

    def _hold(
        self, holdings: Holdings, request: StorageRequest, config: Config, directory: str | None
    ) -> StorageRequest:
        """`request`, or a refusal when another consumer holds an overlapping path."""
        path = efs_path(config.path, directory)
        if not directory and request.app_name in config.root_consumer_names:
            holdings.release(request.app_name)  # the operator lets it have the root beside
            return request  # the directories: it holds nothing that stops them
        taken = holdings.claim(request.app_name, path)
        if taken is None:
            return request
        other, held = taken
        if directory:
            asked = f"directory {directory}"
            error = f"{asked} overlaps {held}, held by {other}; ask for another"
        else:
            error = (
                f"the file system's root {path} holds {held}, held by {other}; ask for a "
                "directory of your own (or the operator names you in root-consumers)"
            )
        return dataclasses.replace(request, namespace=None, error=error)

    def _report(self, observed: Observed, states: list[ClaimState], access: Access) -> None:
        for state in states:
            if state.problem:
                status = ops.WaitingStatus if state.waiting else ops.BlockedStatus
                self._statuses.add(status(state.problem))
        if observed.zone_problems:
            self._statuses.add(_zone_status(observed))
            return
        if observed.dns_problem:
            self._statuses.add(ops.BlockedStatus(observed.dns_problem))
            return
        if not observed.ready:
            self._statuses.add(ops.WaitingStatus(observed.progress))
            return
        pending = [s.spec.key for s in states if not s.bound and not s.problem]
        if pending:
            self._statuses.add(
                ops.WaitingStatus(f"{observed.progress}; waiting for claims {', '.join(pending)}")
            )
            return
        bound = sum(1 for s in states if s.bound)
        note = ""
        if observed.unresolved_nodes:
            note = f", {len(observed.unresolved_nodes)} nodes not found in EC2"
        note += access.note(states)
        self._statuses.add(ops.ActiveStatus(f"{observed.progress}, {bound} claims bound{note}"))

    # -- removal --------------------------------------------------------------------------
    def _teardown(self, config: Config) -> bool:
        """One removal step: claims first, then (if asked and owned) the AWS resources."""
        kube = self._kube() if self.kube_api.relation is not None else None
        if kube is not None:
            storage = Storage(kube, Owner(self.app.name, self.model.uuid))
            in_use = storage.release_all_except(set())
            self._stored.claims = sorted(in_use)
            if in_use:
                key, pods = sorted(in_use.items())[0]
                self._statuses.add(ops.BlockedStatus(kept_line(key, pods, removing=True)))
                return False
        desired = self._desired(config)
        manager = self._efs(config)
        if kube is None and self._stored.claims:
            # The claims may still be in use: keep the file system, but still revoke the
            # rules that reference Juju's groups, or Juju cannot delete them.
            logger.warning(
                "kube-api is gone; left claims %s in the cluster", ", ".join(self._stored.claims)
            )
            progress = aws_call(lambda: manager.teardown(desired, False))
            self._statuses.add(
                ops.MaintenanceStatus(
                    f"removing: kept EFS and claims {', '.join(self._stored.claims)} "
                    f"(kube-api gone before they were released); {progress.message}"
                )
            )
            return True
        progress = aws_call(lambda: manager.teardown(desired, config.delete_on_remove))
        logger.info("removal: %s", progress.message)
        self._statuses.add(ops.MaintenanceStatus(f"removing: {progress.message}"))
        return progress.done

    # -- access ---------------------------------------------------------------------------
    def _kube(self) -> Kube:
        """A client for the cluster granted on kube-api (created once per hook)."""
        if self._kube_client is not None:
            return self._kube_client
        problem = self.kube_api.problem()
        if problem:
            refused = problem.startswith("control plane refused")
            if self.kube_api.relation is None or refused:
                raise StatusError.blocked(problem)
            raise StatusError.waiting(problem)
        try:
            self._kube_client = Kube.from_kubeconfig(
                self.kube_api.kubeconfig() or "",
                retries=self.kube_retries,
                backoff=self.kube_backoff,
            )
        except ValueError as e:
            raise StatusError.blocked(f"kube-api kubeconfig: {e}") from None
        return self._kube_client

    def _kube_or_none(self) -> Kube | None:
        try:
            return self._kube()
        except StatusError:
            return None

    def _efs(self, config: Config) -> Efs:
        """The AWS side, with the credentials and region `config` and the model give."""
        return self._connect(*AwsAccess(self.model).resolve(config))

    def _connect(self, credentials: aws.Credentials, region: str) -> Efs:
        return Efs.connect(
            credentials, region, self.aws_endpoint_url, max_attempts=self.aws_max_attempts
        )


def _gauges(observed: Observed, states: list[ClaimState]) -> list[Gauge]:
    """The file system as this pass saw it, for the unit-state scrape job."""
    fs = {"file_system_id": observed.file_system_id or ""}
    return [
        Gauge(
            "gpu_k8s_efs_size_bytes",
            "Metered size of the EFS file system (what AWS bills), as EFS last reported it.",
            observed.size_bytes,
            fs,
        ),
        Gauge(
            "gpu_k8s_efs_mount_targets",
            "Mount targets of the file system.",
            len(observed.mount_targets),
            fs,
        ),
        Gauge(
            "gpu_k8s_efs_zones_unserved",
            "Availability zones with cluster nodes where AWS refused a mount target.",
            len(observed.zone_problems),
            fs,
        ),
        Gauge(
            "gpu_k8s_efs_claims_bound",
            "Consumers' PersistentVolumeClaims bound to the file system.",
            sum(1 for s in states if s.bound),
            fs,
        ),
    ]


def _zone_status(observed: Observed) -> ops.StatusBase:
    """Zones without a mount target: Waiting if AWS says to retry, else Blocked."""
    problems = "; ".join(str(p) for p in observed.zone_problems)
    if all(p.retry_later for p in observed.zone_problems):
        return ops.WaitingStatus(f"{observed.progress}; {problems}; retrying on the next event")
    zones = ", ".join(p.zone for p in observed.zone_problems if not p.retry_later)
    return ops.BlockedStatus(
        f"{observed.progress}; {problems}; fix it in AWS or move the nodes of {zones}, "
        "the charm retries on every event"
    )


if __name__ == "__main__":  # pragma: nocover
    ops.main(EfsStorageCharm)
