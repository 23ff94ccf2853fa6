#!/usr/bin/env python3
# Copyright 2026 gpu-k8s contributors
# See LICENSE file for licensing details.

"""The tensorflow charm: distributed TensorFlow training jobs on the related cluster.

Thin ops layer: relations (`kube-api` for credentials in the charm's namespace,
`shared-storage` for the claim), status, and actions that hand over to `training.py`
(cluster operations), `params.py` (action parameters) and `manifests.py` (`Context`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import datasets
import exports
import ops
import queues
import registry_auth
import serving
import training
from charm_config import Config
from literals import (
    CLUSTER_RULES,
    DEFAULT_USER,
    IMPORTER,
    KUBE_API,
    NAMESPACED_RULES,
    SHARED_STORAGE,
    TRAINER,
    UPLOADER,
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

from charms.gpu_k8s.v0.cos_agent import CosAgentProvider
from charms.gpu_k8s.v0.images import mirrored
from charms.gpu_k8s.v0.kube_api import KubeApiRequirer, Rule
from charms.gpu_k8s.v0.shared_storage import SharedStorageRequirer
from charms.gpu_k8s.v0.system import machine

logger = logging.getLogger(__name__)


class NotReadyError(Exception):
    """The relations do not give access to the cluster yet; the message says why."""


class SecretConfigError(Exception):
    """A secret config option cannot be used; the message says why (never its content)."""


class TensorflowCharm(ops.CharmBase):
    """Runs distributed TensorFlow training as Kubernetes Jobs."""

    _stored = ops.StoredState()

    # Boundaries that tests replace: sleeping and the clock of polling.
    sleep: Callable[[float], None] = staticmethod(time.sleep)
    monotonic: Callable[[], float] = staticmethod(time.monotonic)
    # The machine (where the unit-state server for the COS agent runs: unit_state).
    host_factory = staticmethod(machine)

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        namespace = self.app.name
        rules: list[Rule | dict[str, Any]] = [*NAMESPACED_RULES]
        cluster_rules: list[Rule | dict[str, Any]] = [*CLUSTER_RULES]
        self.kube_api = KubeApiRequirer(
            self, KUBE_API, namespace=namespace, rules=rules, cluster_rules=cluster_rules
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
        self._api_error: str | None = None
        self.cos = CosAgentProvider(self, "cos-agent", host=self.host_factory)
        self._queue_problem: str | None = None
        self._secret_problem: str | None = None
        self._stored.set_default(queues="", glance="", pull_secret=False, secrets=[])
        if self._stored.pull_secret:  # written by a revision that tracked only this one
            self._stored.secrets = sorted(
                {*self._stored.secrets, registry_auth.secret_name(namespace)}
            )
            self._stored.pull_secret = False
        on = self.on
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

    # -- access to the cluster

    def _problem(self) -> tuple[type[ops.StatusBase], str] | None:
        """What keeps the charm from the cluster: (status class, message), or None."""
        missing = [
            name for name, lib in ((KUBE_API, self.kube_api), (SHARED_STORAGE, self.storage))
            if lib.relation is None
        ]  # fmt: skip
        if missing:
            fix = {KUBE_API: "kubernetes-control-plane", SHARED_STORAGE: "efs-storage"}
            return ops.BlockedStatus, (
                f"missing relation {' and '.join(missing)}: integrate with "
                f"{' and '.join(fix[m] for m in missing)}"
            )
        for name, lib in ((KUBE_API, self.kube_api), (SHARED_STORAGE, self.storage)):
            problem = lib.problem()
            if problem:
                return ops.WaitingStatus, f"{name}: {problem}"
        return None

    @contextmanager
    def _cluster(self, config: Config) -> Iterator[tuple[Any, Context]]:
        """A Kube client and the job context; NotReadyError while relations are not ready."""
        problem = self._problem()
        if problem is not None:
            raise NotReadyError(problem[1])
        from charms.gpu_k8s.v0.kubeclient import Kube

        claim = self.storage.claim()
        kubeconfig = self.kube_api.kubeconfig()
        namespace = self.kube_api.namespace() or self.storage.namespace
        if claim is None or kubeconfig is None:  # pragma: no cover - _problem covers it
            raise NotReadyError("waiting for kube-api and shared-storage")
        ctx = config.job_context(self.app.name, namespace, claim.claim_name)
        try:
            kube = Kube.from_kubeconfig(kubeconfig)
        except ValueError as e:
            raise NotReadyError(f"{KUBE_API}: {e}") from None
        with kube:
            yield kube, ctx

    # -- hooks

    def _reconcile(self, _: ops.EventBase) -> None:
        """Keep the directory request and the team's queues (JobSet ends and deletes jobs)."""
        from charms.gpu_k8s.v0.kubeclient import KubeError

        if not self.unit.is_leader():
            self.cos.set_gauges([])  # the leader counts the jobs
            return
        self.storage.publish()  # `run-as` may have changed what the directory request says
        try:
            config = self.load_config(Config)
        except ValueError:
            return  # collect-status reports it
        try:
            with self._cluster(config) as (kube, ctx):
                for sync in (self._sync_pull_secret, self._sync_dataset_secret):
                    try:
                        sync(kube, ctx, config)
                    except SecretConfigError as e:
                        self._secret_problem = str(e)
                datasets.settle(kube, ctx)  # record imports that ended with nobody waiting
                self._apply_queues(kube, ctx, config)
                if self._queue_problem is None:  # JobSets exist only where Kueue runs
                    glance = training.at_a_glance(kube, ctx)
                    self._stored.glance = glance.line
                    self.cos.set_gauges(glance.gauges())
        except NotReadyError:
            return
        except KubeError as e:
            self._api_error = f"Kubernetes API: {e.reason} ({e.status}); retrying"
            logger.warning("reconcile failed: %s", e)

    def _sync_pull_secret(self, kube: Any, ctx: Context, config: Config) -> None:
        """The image pull Secret from config image-pull-secret (registry_auth)."""
        self._sync_secret(
            kube,
            ctx,
            "image-pull-secret",
            config.image_pull_secret,
            registry_auth.secret_name(self.app.name),
            lambda content: registry_auth.manifest(self.app.name, ctx.namespace, content),
        )

    def _sync_dataset_secret(self, kube: Any, ctx: Context, config: Config) -> None:
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
        kube: Any,
        ctx: Context,
        option: str,
        secret: ops.Secret | None,
        name: str,
        build: Callable[[dict[str, str]], dict[str, Any]],
    ) -> None:
        """Write a Kubernetes Secret from a Juju secret config option; delete it once unset.

        Raises:
            SecretConfigError: the Juju secret cannot be read or lacks a key (the message
                names the option and the key, never a value).
        """
        written = set(self._stored.secrets)
        if secret is None:
            if name in written:
                kube.delete("v1", "Secret", name, ctx.namespace)
                self._stored.secrets = sorted(written - {name})
            return
        try:
            content = secret.get_content(refresh=True)
        except (ops.SecretNotFoundError, ops.ModelError):
            raise SecretConfigError(
                f"cannot read the secret in config {option} ({secret.id}); grant it: "
                f"juju grant-secret {secret.id} {self.app.name}"
            ) from None
        try:
            manifest = build(content)
        except ValueError as e:
            raise SecretConfigError(str(e)) from None
        kube.apply(manifest, field_manager=self.app.name)
        self._stored.secrets = sorted(written | {name})

    def _apply_queues(self, kube: Any, ctx: Context, config: Config) -> None:
        """This team's ClusterQueue and LocalQueue, applied when they changed."""
        try:
            self._stored.queues = queues.reconcile(
                kube, self.app.name, ctx.namespace, config.quotas, self._stored.queues
            )
        except queues.NotInstalledError as e:
            self._queue_problem = str(e)

    def _on_cos_agent(self, _: ops.EventBase) -> None:
        # no scrape job: the agent collects this machine's own metrics and logs
        self.cos.update([])

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        try:
            config = self.load_config(Config)
        except ValueError as e:
            event.add_status(ops.BlockedStatus(f"{e}"))
            return
        problem = self._problem()
        if problem is not None:
            status_class, message = problem
            event.add_status(status_class(message))
            return
        if self._secret_problem:
            event.add_status(ops.BlockedStatus(self._secret_problem))
        if self._api_error:
            event.add_status(ops.WaitingStatus(self._api_error))
        if self._queue_problem:
            event.add_status(ops.WaitingStatus(self._queue_problem))
        if self._stored.glance:  # the jobs at a glance, as the last reconcile saw them
            event.add_status(ops.ActiveStatus(f"Ready: {self._stored.glance}"))
        claim = self.storage.claim()
        namespace = self.kube_api.namespace()
        event.add_status(
            ops.ActiveStatus(
                f"Ready: namespace {namespace}, claim {claim.claim_name if claim else '?'}, "
                f"image {mirrored(config.default_image, config.image_registry)}"
            )
        )

    # -- actions

    def _run(
        self,
        event: ops.ActionEvent,
        operation: Callable[..., dict[str, Any]],
        *,
        pull_secret: bool = False,
    ) -> None:
        """Run `operation(kube, ctx)` and set its results; failures become `event.fail`.

        `pull_secret`: the operation makes pods, so the image pull Secret is written first
        (an action can run before any hook after the operator changed the secret).
        """
        from charms.gpu_k8s.v0.kubeclient import KubeError

        try:
            config = self.load_config(Config)
        except ValueError as e:
            event.fail(f"charm config is invalid: {e}")
            return
        try:
            with self._cluster(config) as (kube, ctx):
                if pull_secret:
                    self._sync_pull_secret(kube, ctx, config)
                results = operation(kube, ctx)
        except SecretConfigError as e:
            event.fail(str(e))
            return
        except NotReadyError as e:
            event.fail(f"not ready: {e}")
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
            lambda kube, ctx: training.launch(kube, ctx, request, code, **waits),
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
                kube, ctx, p.job, p.workers, p.timeout, code, **waits
            ),
            pull_secret=True,
        )

    def _on_job_status(self, event: ops.ActionEvent) -> None:
        params = event.load_params(JobParams, errors="fail")
        self._run(event, lambda kube, ctx: training.status(kube, ctx, params.job))

    def _on_list_jobs(self, event: ops.ActionEvent) -> None:
        event.load_params(NoParams, errors="fail")

        def list_jobs(kube: Any, ctx: Context) -> dict[str, Any]:
            found = training.list_jobs(kube, ctx)
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

        def run(kube: Any, ctx: Context) -> dict[str, Any]:
            config = self.load_config(Config)
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

        def run(kube: Any, ctx: Context) -> dict[str, Any]:
            image = training.image_of(kube, ctx, params.job)
            return exports.run(kube, ctx, params, trainer, image, **waits)

        self._run(event, run, pull_secret=True)

    def _on_serve(self, event: ops.ActionEvent) -> None:
        params = event.load_params(serving.ServeParams, errors="fail")
        waits = self._wait_args(event)

        def run(kube: Any, ctx: Context) -> dict[str, Any]:
            config = self.load_config(Config)
            try:
                return serving.serve(kube, ctx, params, config.serving_image, **waits)
            finally:  # the servers' GPUs leave (or rejoin) the team's default quota
                self._apply_queues(kube, ctx, config)

        self._run(event, run, pull_secret=True)

    def _on_unserve(self, event: ops.ActionEvent) -> None:
        params = event.load_params(JobParams, errors="fail")

        def run(kube: Any, ctx: Context) -> dict[str, Any]:
            try:
                return serving.unserve(kube, ctx, params.job)
            finally:
                self._apply_queues(kube, ctx, self.load_config(Config))

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

        def run(kube: Any, ctx: Context) -> dict[str, Any]:
            image = ctx.pulled(ctx.default_image)
            if not params.destination:
                return exports.fetch(kube, ctx, params, image, **waits)
            config = self.load_config(Config)
            self._sync_dataset_secret(kube, ctx, config)
            credentials = config.dataset_credentials is not None
            return exports.upload(
                kube, ctx, params, programs, image, credentials=credentials, **waits
            )

        self._run(event, run, pull_secret=True)


if __name__ == "__main__":  # pragma: nocover
    ops.main(TensorflowCharm)
