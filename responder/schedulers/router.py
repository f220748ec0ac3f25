"""Per-cluster scheduler adapters behind one ``Scheduler``: the engine never picks an adapter itself.

A cluster without a configured scheduler cannot be acted on: in act mode its actions fail with a
clear reason (and are audited), they are never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from responder.schedulers.base import ActionRequest, ActionResult, Scheduler, SchedulerError, WorkloadObservation
from responder.schedulers.recording import RecordingScheduler
from responder.settings import Settings


class ClusterSchedulers:
    name = "clusters"

    def __init__(self, adapters: Mapping[str, Scheduler]) -> None:
        self.adapters = dict(adapters)

    def _for(self, cluster: str) -> Scheduler:
        adapter = self.adapters.get(cluster)
        if adapter is None:
            raise SchedulerError(f"no scheduler configured for cluster {cluster!r} (set clusters.{cluster}.scheduler)")
        return adapter

    def act(self, request: ActionRequest) -> ActionResult:
        return self._for(request.cluster).act(request)

    def observe(self, cluster: str, workload: str) -> WorkloadObservation:
        return self._for(cluster).observe(cluster, workload)


def build_schedulers(settings: Settings, registry: CollectorRegistry | None = None) -> ClusterSchedulers:
    """Adapters from ``clusters.<name>.scheduler`` ({kind: slurm|jobset|pytorchjob|recording, ...}).

    With a ``registry``, each adapter's command counters and the scheduler's own view (Slurm: job
    and node states of watched workloads) are exported with the responder's metrics.
    """
    adapters: dict[str, Scheduler] = {}
    slurm_metrics = None
    kube_metrics = None
    for name, cluster in settings.clusters.items():
        if cluster.scheduler is None:
            continue
        config = dict(cluster.scheduler)
        kind = config.pop("kind", None)
        if kind == "recording":
            adapters[name] = RecordingScheduler(outcome="done")
        elif kind == "slurm":
            from responder.schedulers.slurm.adapter import SlurmScheduler, SlurmSettings  # noqa: PLC0415
            from responder.schedulers.slurm.collector import SlurmCollector  # noqa: PLC0415
            from responder.schedulers.slurm.commands import SlurmCommandMetrics  # noqa: PLC0415

            if registry is not None and slurm_metrics is None:
                slurm_metrics = SlurmCommandMetrics(registry)
            adapter = SlurmScheduler(SlurmSettings(**{"cluster": name, **config}), metrics=slurm_metrics)
            adapters[name] = adapter
            if registry is not None:
                registry.register(SlurmCollector(adapter, name))
        elif kind in ("jobset", "pytorchjob"):
            from responder.schedulers.kubernetes.api import KubeRequestMetrics  # noqa: PLC0415
            from responder.schedulers.kubernetes.jobset import JobSetScheduler, JobSetSettings  # noqa: PLC0415
            from responder.schedulers.kubernetes.pytorchjob import PyTorchJobScheduler, PyTorchJobSettings  # noqa: PLC0415

            if kube_metrics is None:
                kube_metrics = KubeRequestMetrics(registry)
            if kind == "jobset":
                adapters[name] = JobSetScheduler(JobSetSettings(**{"cluster": name, **config}), metrics=kube_metrics)
            else:
                adapters[name] = PyTorchJobScheduler(
                    PyTorchJobSettings(**{"cluster": name, **config}), metrics=kube_metrics
                )
        else:
            raise ValueError(
                f"clusters.{name}.scheduler.kind: {kind!r} is not one of: slurm, jobset, pytorchjob, recording"
            )
    return ClusterSchedulers(adapters)
