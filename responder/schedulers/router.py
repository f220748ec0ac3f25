"""Per-cluster scheduler adapters behind one ``Scheduler``: the engine never picks an adapter itself.

A cluster without a configured scheduler cannot be acted on: in act mode its actions fail with a
clear reason (and are audited), they are never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from prometheus_client import CollectorRegistry
from pydantic import Field

from responder.schedulers.base import ActionRequest, ActionResult, Scheduler, SchedulerError, WorkloadObservation
from responder.schedulers.kubernetes.api import KubeRequestMetrics
from responder.schedulers.kubernetes.collector import KubeNodeCollector
from responder.schedulers.kubernetes.jobset import JobSetScheduler, JobSetSettings
from responder.schedulers.kubernetes.pytorchjob import PyTorchJobScheduler, PyTorchJobSettings
from responder.schedulers.recording import RecordingScheduler, RecordingSettings
from responder.schedulers.slurm.adapter import SlurmScheduler
from responder.schedulers.slurm.collector import SlurmCollector
from responder.schedulers.slurm.commands import SlurmCommandMetrics
from responder.schedulers.slurm.settings import SlurmSettings

# ``clusters.<name>.scheduler``: one adapter's settings, chosen by ``kind``. A bad value is reported with
# its whole key path (``clusters.lab.scheduler.slurm.transport``).
SchedulerSettings = Annotated[
    RecordingSettings | SlurmSettings | JobSetSettings | PyTorchJobSettings, Field(discriminator="kind")
]


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


def build_schedulers(
    clusters: Mapping[str, SchedulerSettings | None], registry: CollectorRegistry | None = None
) -> ClusterSchedulers:
    """One adapter per cluster from its ``clusters.<name>.scheduler`` settings (none: not acted on).

    With a ``registry``, each adapter's command counters and the scheduler's own view (Slurm: job
    and node states of watched workloads; Kubernetes: the nodes others cordoned) are exported with the
    responder's metrics. An adapter's ``cluster`` defaults to the name it is configured under.
    """
    adapters: dict[str, Scheduler] = {}
    slurm_metrics = None
    kube_metrics = None
    for name, config in clusters.items():
        if config is None:
            continue
        if isinstance(config, RecordingSettings):
            adapters[name] = RecordingScheduler(outcome="done", journal=config.journal, verify_s=config.verify_s)
            continue
        if config.cluster is None:
            config = config.model_copy(update={"cluster": name})  # noqa: PLW2901 - the named copy
        if isinstance(config, SlurmSettings):
            if registry is not None and slurm_metrics is None:
                slurm_metrics = SlurmCommandMetrics(registry)
            adapter = SlurmScheduler(config, metrics=slurm_metrics)
            adapters[name] = adapter
            if registry is not None:
                registry.register(SlurmCollector(adapter, name))
            continue
        if kube_metrics is None:
            kube_metrics = KubeRequestMetrics(registry)
        if isinstance(config, JobSetSettings):
            kube: JobSetScheduler | PyTorchJobScheduler = JobSetScheduler(config, metrics=kube_metrics)
        else:
            kube = PyTorchJobScheduler(config, metrics=kube_metrics)
        adapters[name] = kube
        if registry is not None:
            registry.register(KubeNodeCollector(kube.api, name))
    return ClusterSchedulers(adapters)
