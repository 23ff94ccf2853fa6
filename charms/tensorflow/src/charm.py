#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The tensorflow charm: distributed TensorFlow training jobs on the related cluster.

Thin ops layer: relations (`kube-api` for credentials in the charm's namespace,
`shared-storage` for the claim), status, and actions that hand over to the workload
modules: `training.py` (jobs on the cluster), `datasets.py`, `exports.py`, `serving.py`
and `queues.py` (the team's Kueue queues), with `params.py` (action parameters),
`charm_config.py` (the config) and `manifests.Context` (where jobs run).

Status goes through `charms.gpu_k8s.v0.status`, one `Statuses` per hook: collect-status
checks the config and both relations in every hook (Blocked or Waiting, saying what to
do); the leader's reconcile adds what it met on the cluster: a secret config option it
cannot use (Blocked), Kueue missing (Waiting), the Kubernetes API refusing the grant
(Blocked) or not answering (Waiting); and the jobs at a glance, as the Ready line.
Actions answer with `event.fail` as CONTRIBUTING's "Adding an action" says.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import datasets
import exports
import job_metrics
import ops
import queues
import registry_auth
import serving
import training
from charm_config import Config, quota_request
from literals import (
    DEFAULT_USER,
    IMPORTER,
    KUBE_API,
    NAMESPACED_RULES,
    SHARED_STORAGE,
    TRAINER,
    UPLOADER,
    cluster_rules,
)
from manifests import Context
from params import (
    JobParams,
    LogsParams,
    NoParams,
    ScaleParams,
    StopParams,
    TrainRequest,
    parse_user,
)

from charms.gpu_k8s.v0.config import UnreadableSecretError, secret_content
from charms.gpu_k8s.v0.cos_agent import CosAgentProvider
from charms.gpu_k8s.v0.images import mirrored
from charms.gpu_k8s.v0.kube_api import KubeApiRequirer, Rule
from charms.gpu_k8s.v0.kubeclient import Kube, KubeError
from charms.gpu_k8s.v0.shared_storage import SharedStorageRequirer
from charms.gpu_k8s.v0.status import StatusError, Statuses, on_error
from charms.gpu_k8s.v0.system import machine

logger = logging.getLogger(__name__)


# Who provides each relation, for the Blocked message that asks for it.
PROVIDERS = {KUBE_API: "kubernetes-control-plane", SHARED_STORAGE: "efs-storage"}


class TensorflowCharm(ops.CharmBase):
    """Runs distributed TensorFlow training as Kubernetes Jobs."""

    _stored = ops.StoredState()

    # Boundaries that tests replace: sleeping and the clock of polling; the wall clock of
    # a scale's lease on its job, which every unit reads (scale_records).
    sleep: Callable[[float], None] = staticmethod(time.sleep)
    monotonic: Callable[[], float] = staticmethod(time.monotonic)
    wall_clock: Callable[[], float] = staticmethod(time.time)
    # The machine (where the unit-state server for the COS agent runs: unit_state).
    host_factory = staticmethod(machine)
    # Seconds before the Kubernetes client's first retry of a 429/5xx answer (kubeclient).
    kube_backoff: float = 0.5

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        namespace = self.app.name
        rules: list[Rule | dict[str, Any]] = [*NAMESPACED_RULES]
        cluster: list[Rule | dict[str, Any]] = [*cluster_rules(namespace)]
        # the team's quota travels in the request: the control plane writes its queue
        self.kube_api = KubeApiRequirer(
            self,
            KUBE_API,
            namespace=namespace,
            rules=rules,
            cluster_rules=cluster,
            quotas=quota_request(self.config),
        )
        # The application's own directory on the shared volume, owned by the user its pods
        # run as (an invalid `run-as` asks for the default meanwhile; the status says why).
        try:
            uid, gid = parse_user(str(self.config.get("run-as", DEFAULT_USER)))
        except ValueError:
            uid, gid = parse_user(DEFAULT_USER)
        self.storage = SharedStorageRequirer(
            self, SHARED_STORAGE, namespace=namespace, directory=self.app.name, uid=uid, gid=gid
        )
        self.cos = CosAgentProvider(self, "cos-agent", host=self.host_factory)
        self._statuses = Statuses()  # what this hook found, for collect-status
        self._stored.set_default(
            queues="",
            glance="",
            pull_secret=False,
            secrets=[],
            scrape_jobs="[]",  # the training pods' (job_metrics.py), for cos-agent hooks
            # False from a refresh until the leader labelled the scale records an earlier
            # revision wrote (training.label_older_records); a new install has none
            records_labelled=True,
            # False from a refresh until Kueue marked every TensorBoard and model-server
            # Deployment of the app (training.queue_older_deployments)
            deployments_queued=True,
            metrics_policy="",
        )
        if self._stored.pull_secret:  # written by a revision that tracked only this one
            self._stored.secrets = sorted(
                {*self._stored.secrets, registry_auth.secret_name(namespace)}
            )
            self._stored.pull_secret = False
        on = self.on
        framework.observe(on.upgrade_charm, self._on_upgrade_charm)  # before the reconcile
        for event in (
            on.config_changed,
            on.update_status,
            on.upgrade_charm,
            on.secret_changed,
            on[KUBE_API].relation_changed,
            on[KUBE_API].relation_broken,
            on[SHARED_STORAGE].relation_changed,
            on[SHARED_STORAGE].relation_broken,
        ):
            framework.observe(event, self._reconcile)
        framework.observe(on.collect_unit_status, self._on_collect_status)
        for event in (on["cos-agent"].relation_joined, on["cos-agent"].relation_changed):
            framework.observe(event, self._on_cos_agent)
        framework.observe(on.upgrade_charm, self._on_cos_agent)  # new rules or dashboards
        framework.observe(on.train_action, self._on_train)
        framework.observe(on.scale_action, self._on_scale)
        framework.observe(on.job_status_action, self._on_job_status)
        framework.observe(on.list_jobs_action, self._on_list_jobs)
        framework.observe(on.logs_action, self._on_logs)
        framework.observe(on.stop_action, self._on_stop)
        framework.observe(on.import_dataset_action, self._on_import_dataset)
        framework.observe(on.list_datasets_action, self._on_list_datasets)
        framework.observe(on.export_action, self._on_export)
        framework.observe(on.serve_action, self._on_serve)
        framework.observe(on.unserve_action, self._on_unserve)
        framework.observe(on.fetch_model_action, self._on_fetch_model)

    # -- what every hook needs

    def _config(self) -> Config:
        """The config; StatusError (Blocked, naming the option) when it is invalid."""
        try:
            return self.load_config(Config)
        except ValueError as e:
            raise StatusError.blocked(str(e)) from None

    def _check_relations(self) -> None:
        """StatusError while a relation is not ready to use.

        Blocked when one is missing (integrate with its provider); Waiting while the
        control plane or the storage charm has not answered yet.
        """
        libs = {KUBE_API: self.kube_api, SHARED_STORAGE: self.storage}
        missing = [name for name, lib in libs.items() if lib.relation is None]
        if missing:
            raise StatusError.blocked(
                f"missing relation {' and '.join(missing)}: integrate with "
                f"{' and '.join(PROVIDERS[m] for m in missing)}"
            )
        for name, lib in libs.items():
            if problem := lib.problem():
                raise StatusError.waiting(f"{name}: {problem}")

    def _access(self, config: Config) -> tuple[str, Context]:
        """The kubeconfig and where jobs run; StatusError while a relation is not ready."""
        self._check_relations()
        claim = self.storage.claim()
        kubeconfig = self.kube_api.kubeconfig()
        namespace = self.kube_api.namespace() or self.storage.namespace
        if claim is None or kubeconfig is None:  # pragma: no cover - problem() covers it
            raise StatusError.waiting("waiting for kube-api and shared-storage")
        return kubeconfig, config.job_context(self.app.name, namespace, claim.claim_name)

    def _kube(self, kubeconfig: str) -> Kube:
        """A client from the granted kubeconfig; StatusError (Waiting) when it is unusable."""
        try:
            return Kube.from_kubeconfig(kubeconfig, backoff=self.kube_backoff)
        except ValueError as e:
            raise StatusError.waiting(f"{KUBE_API}: {e}") from None

    # -- hooks

    def _reconcile(self, _: ops.EventBase) -> None:
        """Keep the directory request, the Secrets and the team's queues; glance at the jobs.

        JobSet ends and deletes the jobs themselves.
        """
        if not self.unit.is_leader():
            self.cos.set_gauges([])  # the leader counts the jobs
            self._stored.scrape_jobs = "[]"  # and scrapes their pods
            self.cos.update([])
            return
        self.storage.publish()  # `run-as` may have changed what the directory request says
        self.kube_api.publish()  # and a quota what the kube-api request says
        try:
            config = self._config()
            kubeconfig, ctx = self._access(config)
        except StatusError:
            return  # collect-status checks the config and the relations in every hook
        with self._statuses.step(), self._kube(kubeconfig) as kube:
            for sync in (self._sync_pull_secret, self._sync_dataset_secret):
                try:
                    sync(kube, ctx, config)
                except StatusError as e:  # Blocked on that option; the rest goes on
                    self._statuses.add(e.status)
            datasets.settle(kube, ctx)  # record imports that ended with nobody waiting
            if not self._stored.records_labelled:
                for job in training.label_older_records(kube, ctx):
                    logger.info("labelled %s-scale as a scale record", job)
                self._stored.records_labelled = True
            if not self._stored.deployments_queued:
                self._queue_older_deployments(kube, ctx)
            self._apply_queues(kube, ctx, config)  # JobSets exist only where Kueue runs
            glance = training.at_a_glance(kube, ctx, self.wall_clock)
            self._stored.glance = glance.line
            self.cos.set_gauges(glance.gauges())
            job, self._stored.metrics_policy = job_metrics.sync(
                kube, ctx, self._own_addresses(), self._stored.metrics_policy
            )
            self._stored.scrape_jobs = json.dumps([job] if job else [])
            self.cos.update(self._scrape_jobs())

    def _on_upgrade_charm(self, _: ops.UpgradeCharmEvent) -> None:
        """An earlier revision may have left scale records and Deployments to label."""
        self._stored.records_labelled = False
        self._stored.deployments_queued = False

    def _queue_older_deployments(self, kube: Kube, ctx: Context) -> None:
        """Until Kueue marked them, put earlier revisions' Deployments in the team's queue."""
        marked, waiting = training.queue_older_deployments(kube, ctx)
        for name in marked:
            logger.info("queued Deployment %s in LocalQueue %s", name, ctx.queue)
        if waiting:
            logger.info(
                "Deployments %s name LocalQueue %s; Kueue has not queued them yet (is the "
                "control plane refreshed?): tried again at the next hook",
                ", ".join(waiting),
                ctx.queue,
            )
        self._stored.deployments_queued = not waiting

    def _sync_pull_secret(self, kube: Kube, ctx: Context, config: Config) -> None:
        """The image pull Secret from config image-pull-secret (registry_auth)."""
        self._sync_secret(
            kube,
            ctx,
            "image-pull-secret",
            config.image_pull_secret,
            registry_auth.secret_name(self.app.name),
            lambda content: registry_auth.manifest(self.app.name, ctx.namespace, content),
        )

    def _sync_dataset_secret(self, kube: Kube, ctx: Context, config: Config) -> None:
        """The S3 credentials Secret from config dataset-credentials (datasets)."""
        self._sync_secret(
            kube,
            ctx,
            "dataset-credentials",
            config.dataset_credentials,
            datasets.credentials_name(self.app.name),
            lambda content: datasets.credentials_manifest(self.app.name, ctx.namespace, content),
        )

    def _sync_secret(
        self,
        kube: Kube,
        ctx: Context,
        option: str,
        secret: ops.Secret | None,
        name: str,
        build: Callable[[dict[str, str]], dict[str, Any]],
    ) -> None:
        """Write a Kubernetes Secret from a Juju secret config option; delete it once unset.

        Raises:
            StatusError: Blocked: the Juju secret cannot be read or lacks a key (the message
                names the option and the key, never a value, and says what to do).
        """
        written = set(self._stored.secrets)
        if secret is None:
            if name in written:
                kube.delete("v1", "Secret", name, ctx.namespace)
                self._stored.secrets = sorted(written - {name})
            return
        try:
            content = secret_content(secret, option, self.app.name)
        except UnreadableSecretError as e:
            raise StatusError.blocked(str(e)) from None
        with on_error(ops.BlockedStatus, ValueError):  # a key missing or malformed
            manifest = build(content)
        kube.apply(manifest, field_manager=self.app.name)
        self._stored.secrets = sorted(written | {name})

    def _apply_queues(self, kube: Kube, ctx: Context, config: Config) -> None:
        """This team's LocalQueue, applied when it changed (its ClusterQueue is the CP's).

        Raises:
            StatusError: Waiting: the cluster has no Kueue (the message says what to set).
        """
        with on_error(ops.WaitingStatus, queues.NotInstalledError):
            self._stored.queues = queues.reconcile(
                kube, self.app.name, ctx.namespace, self._stored.queues
            )

    def _on_cos_agent(self, _: ops.EventBase) -> None:
        # the training pods' metrics (job_metrics.py), as the leader's last reconcile found
        # them; the agent collects this machine's own metrics and logs by itself
        self.cos.update(self._scrape_jobs())

    def _scrape_jobs(self) -> list[dict[str, Any]]:
        return json.loads(self._stored.scrape_jobs)

    def _own_addresses(self) -> list[str]:
        """This unit's addresses, by which its machine is found among the Nodes."""
        binding = self.model.get_binding("cos-agent")
        if binding is None:  # pragma: no cover - the endpoint is in charmcraft.yaml
            return []
        network = binding.network
        found = {str(a) for a in network.ingress_addresses}
        found |= {str(i.address) for i in network.interfaces if i.address is not None}
        return sorted(found)

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        with self._statuses.step():
            config = self._config()
            self._check_relations()
            # what the control plane gave this team less of than it asked (issue 29)
            caps = "; ".join(c.words() for c in self.kube_api.quota_capped())
            capped = f"; quota capped: {caps}" if caps else ""
            if self._stored.glance:  # the jobs at a glance, as the last reconcile saw them
                self._statuses.add(ops.ActiveStatus(f"Ready: {self._stored.glance}{capped}"))
            claim = self.storage.claim()
            self._statuses.add(
                ops.ActiveStatus(
                    f"Ready: namespace {self.kube_api.namespace()}, "
                    f"claim {claim.claim_name if claim else '?'}, "
                    f"image {mirrored(config.default_image, config.image_registry)}{capped}"
                )
            )
        self._statuses.report(event)

    # -- actions

    def _run(
        self,
        event: ops.ActionEvent,
        operation: Callable[[Kube, Context], dict[str, Any]],
        *,
        pull_secret: bool = False,
    ) -> None:
        """Run `operation(kube, ctx)` and set its results; failures become `event.fail`.

        `pull_secret`: the operation makes pods, so the image pull Secret is written first
        (an action can run before any hook after the operator changed the secret).
        """
        try:
            config = self._config()
        except StatusError as e:
            event.fail(f"charm config is invalid: {e}")
            return
        try:
            kubeconfig, ctx = self._access(config)
            kube = self._kube(kubeconfig)
        except StatusError as e:
            event.fail(f"not ready: {e}")
            return
        try:
            with kube:
                if pull_secret:
                    self._sync_pull_secret(kube, ctx, config)
                results = operation(kube, ctx)
        except StatusError as e:  # a secret config option it cannot use: the message says why
            event.fail(str(e))
            return
        except (
            training.JobError,
            datasets.DatasetError,
            exports.ExportError,
            serving.ServingError,
        ) as e:
            event.fail(str(e))
            return
        except KubeError as e:
            event.fail(f"Kubernetes API error: {e.message} ({e.status} {e.reason})")
            return
        event.set_results(results)

    def _wait_args(self, event: ops.ActionEvent) -> dict[str, Any]:
        """Progress logging and the (test-replaceable) sleep and clock for waiting actions."""

        def log(message: str) -> None:
            logger.info(message)
            event.log(message)

        return {"log": log, "sleep": self.sleep, "clock": self.monotonic}

    def _on_train(self, event: ops.ActionEvent) -> None:
        request = event.load_params(TrainRequest, errors="fail")
        try:
            code = training.read_code()
        except OSError as e:
            event.fail(f"the charm is missing its launcher: {e}")
            return
        waits = self._wait_args(event)
        self._run(
            event,
            lambda kube, ctx: training.launch(
                kube, ctx, request, code, now=self.wall_clock, **waits
            ),
            pull_secret=True,
        )

    def _on_scale(self, event: ops.ActionEvent) -> None:
        p = event.load_params(ScaleParams, errors="fail")
        try:
            code = training.read_code()
        except OSError as e:
            event.fail(f"the charm is missing its launcher: {e}")
            return
        waits = self._wait_args(event)
        self._run(
            event,
            lambda kube, ctx: training.scale(
                kube, ctx, p.job, p.workers, p.timeout, code, now=self.wall_clock, **waits
            ),
            pull_secret=True,
        )

    def _on_job_status(self, event: ops.ActionEvent) -> None:
        params = event.load_params(JobParams, errors="fail")
        self._run(event, lambda kube, ctx: training.status(kube, ctx, params.job, self.wall_clock))

    def _on_list_jobs(self, event: ops.ActionEvent) -> None:
        event.load_params(NoParams, errors="fail")

        def list_jobs(kube: Kube, ctx: Context) -> dict[str, Any]:
            found = training.list_jobs(kube, ctx, self.wall_clock)
            results: dict[str, Any] = {"count": str(len(found))}
            if found:
                results["jobs"] = found
            return results

        self._run(event, list_jobs)

    def _on_logs(self, event: ops.ActionEvent) -> None:
        params = event.load_params(LogsParams, errors="fail")
        self._run(
            event,
            lambda kube, ctx: {
                "logs": training.logs(
                    kube, ctx, params.job, params.lines, params.role, params.index
                )
            },
        )

    def _on_stop(self, event: ops.ActionEvent) -> None:
        p = event.load_params(StopParams, errors="fail")
        waits = self._wait_args(event)
        self._run(event, lambda kube, ctx: training.stop(kube, ctx, p.job, p.purge, **waits))

    def _program(self, event: ops.ActionEvent, name: str) -> str | None:
        """The source of one of the charm's programs for a pod (None: the action failed)."""
        try:
            return training.read_program(name)
        except OSError as e:
            event.fail(f"the charm is missing its program {name}: {e}")
            return None

    def _on_import_dataset(self, event: ops.ActionEvent) -> None:
        params = event.load_params(datasets.ImportParams, errors="fail")
        program = self._program(event, IMPORTER)
        if program is None:
            return
        waits = self._wait_args(event)

        def run(kube: Kube, ctx: Context) -> dict[str, Any]:
            config = self._config()
            self._sync_dataset_secret(kube, ctx, config)
            credentials = config.dataset_credentials is not None
            return datasets.import_dataset(
                kube, ctx, params, program, credentials=credentials, **waits
            )

        self._run(event, run, pull_secret=True)

    def _on_list_datasets(self, event: ops.ActionEvent) -> None:
        event.load_params(NoParams, errors="fail")
        self._run(event, datasets.listing)

    def _on_export(self, event: ops.ActionEvent) -> None:
        params = event.load_params(exports.ExportParams, errors="fail")
        trainer = self._program(event, TRAINER)
        if trainer is None:
            return
        waits = self._wait_args(event)

        def run(kube: Kube, ctx: Context) -> dict[str, Any]:
            image = training.image_of(kube, ctx, params.job)
            return exports.run(kube, ctx, params, trainer, image, **waits)

        self._run(event, run, pull_secret=True)

    def _on_serve(self, event: ops.ActionEvent) -> None:
        params = event.load_params(serving.ServeParams, errors="fail")
        waits = self._wait_args(event)

        # Each server pod is admitted by Kueue within the team's quota (serving.PRIORITY).
        def run(kube: Kube, ctx: Context) -> dict[str, Any]:
            return serving.serve(kube, ctx, params, self._config().serving_image, **waits)

        self._run(event, run, pull_secret=True)

    def _on_unserve(self, event: ops.ActionEvent) -> None:
        params = event.load_params(JobParams, errors="fail")

        def run(kube: Kube, ctx: Context) -> dict[str, Any]:
            return serving.unserve(kube, ctx, params.job)

        self._run(event, run)

    def _on_fetch_model(self, event: ops.ActionEvent) -> None:
        params = event.load_params(exports.FetchParams, errors="fail")
        waits = self._wait_args(event)
        programs = {}
        if params.destination:
            for name in (UPLOADER, IMPORTER):  # the uploader signs with the importer's code
                if (program := self._program(event, name)) is None:
                    return
                programs[name] = program

        def run(kube: Kube, ctx: Context) -> dict[str, Any]:
            image = ctx.pulled(ctx.default_image)
            if not params.destination:
                return exports.fetch(kube, ctx, params, image, **waits)
            config = self._config()
            self._sync_dataset_secret(kube, ctx, config)
            credentials = config.dataset_credentials is not None
            return exports.upload(
                kube, ctx, params, programs, image, credentials=credentials, **waits
            )

        self._run(event, run, pull_secret=True)


if __name__ == "__main__":  # pragma: nocover
    ops.main(TensorflowCharm)
