"""Slurm's own view of the watched workloads, as Prometheus metrics (``trainguard_slurm_*``).

A ``prometheus_client`` custom collector: each scrape runs one ``squeue --json`` and one
``sinfo --json`` through the adapter's seam and yields fresh metric families, so rules can see a job
that failed, was requeued or lost a node even when no rank could say so. When Slurm cannot be asked,
only ``trainguard_slurm_up 0`` is exported (unknown), never an empty "no jobs" answer.

Watched workloads: the ids returned by ``workloads()``, or, when it is None, every job that opted in.
Labels are the identity labels of docs/interfaces.md §1 plus bounded Slurm enums (state, reason). The catalogue
is in ``docs/slurm.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Final

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from responder.schedulers.base import SchedulerError, WorkloadState
from responder.schedulers.slurm.adapter import SlurmScheduler
from responder.schedulers.slurm.drains import drained_by_other
from responder.schedulers.slurm.parse import SlurmJob, SlurmNode

JOB_STATES = (
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
    "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REQUEUED", "REQUEUE_HOLD",
    "SPECIAL_EXIT", "CONFIGURING", "RESIZING", "STOPPED", "SIGNALING", "STAGE_OUT", "REVOKED",
)  # fmt: skip
_MAX_REASON = 64


# The watched jobs' families, in the order they are collected: trainguard_slurm_job_<key> -> (help, labels
# after the job's cluster, workload and scheduler).
_JOB_LABELS: Final = ("cluster", "workload", "scheduler")
_JOB_FAMILIES: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    "state": ("1 for the Slurm base state the watched job is in (squeue job_state).", ("state",)),
    "reason": ("1 for Slurm's current reason for the job's state (squeue state_reason; None when none).", ("reason",)),
    "restart_count": ("Times Slurm requeued the job (restart_cnt, the trainguard attempt).", ()),
    "held": ("1 when the job is held; trainguard=1 when the hold carries trainguard's mark.", ("trainguard",)),
    "trainguard_held_timestamp_seconds": (
        "Unix time trainguard held the job (present only while its hold mark is set).",
        (),
    ),
    "node": ("1 for each node allocated to the job (join with trainguard_slurm_node_* on host).", ("attempt", "host")),
    "excluded_nodes": ("Number of nodes in the job's ExcNodeList.", ()),
}


class SlurmCollector(Collector):
    def __init__(
        self,
        scheduler: SlurmScheduler,
        cluster: str,
        workloads: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._cluster = cluster
        self._workloads = workloads

    def describe(self) -> Iterable[Metric]:
        return []  # scrape-time only: do not run Slurm commands at registration

    def _watched(self, jobs: dict[str, SlurmJob]) -> list[SlurmJob]:
        if self._workloads is None:
            return [j for j in jobs.values() if self._scheduler.opted_in(j)]
        return [jobs[w] for w in dict.fromkeys(self._workloads()) if w in jobs]

    def collect(self) -> Iterator[Metric]:
        c = self._cluster
        up = GaugeMetricFamily(
            "trainguard_slurm_up", "1 when squeue and sinfo answered this scrape.", labels=["cluster"]
        )
        took = GaugeMetricFamily(
            "trainguard_slurm_scrape_duration_seconds", "Time to ask Slurm at this scrape.", labels=["cluster"]
        )
        started = time.monotonic()
        try:
            jobs = self._scheduler.list_jobs()
            nodes = self._scheduler.list_nodes()
        except SchedulerError:
            up.add_metric([c], 0)
            took.add_metric([c], time.monotonic() - started)
            yield up
            yield took
            return
        up.add_metric([c], 1)
        took.add_metric([c], time.monotonic() - started)
        yield up
        yield took

        families, relevant = self._job_metrics(c, jobs)
        yield from families
        yield from self._node_metrics(c, nodes, relevant)

    def _job_metrics(self, c: str, jobs: dict[str, SlurmJob]) -> tuple[list[Metric], set[str]]:
        """The watched jobs' families, and the nodes they run on or exclude."""
        g = {
            key: GaugeMetricFamily(f"trainguard_slurm_job_{key}", doc, labels=[*_JOB_LABELS, *extra])
            for key, (doc, extra) in _JOB_FAMILIES.items()
        }
        relevant: set[str] = set()
        for j in self._watched(jobs):
            base = j.slurm_state if j.slurm_state in JOB_STATES else "OTHER"
            ids = [c, j.job_id, "slurm"]
            g["state"].add_metric([*ids, base], 1)
            why = j.reason if j.reason and len(j.reason) <= _MAX_REASON and j.reason.isidentifier() else "Other"
            g["reason"].add_metric([*ids, why], 1)
            g["restart_count"].add_metric(ids, j.restart_cnt)
            if j.held:
                g["held"].add_metric([*ids, "1" if j.marker.held_at is not None else "0"], 1)
            if j.marker.held_at is not None:
                g["trainguard_held_timestamp_seconds"].add_metric(ids, j.marker.held_at)
            # Only a running job's allocation is its current attempt's: a COMPLETING or requeued job still
            # lists the nodes of the attempt that ended, under the new restart count.
            if j.state is WorkloadState.RUNNING:
                for n in j.nodes:
                    g["node"].add_metric([*ids, str(j.restart_cnt), n], 1)
            g["excluded_nodes"].add_metric(ids, len(j.excluded_nodes))
            relevant.update(j.nodes)
            relevant.update(j.excluded_nodes)
        return list(g.values()), relevant

    @staticmethod
    def _node_metrics(c: str, nodes: dict[str, SlurmNode], relevant: set[str]) -> Iterator[Metric]:
        labels = ["cluster", "host"]
        down = GaugeMetricFamily("trainguard_slurm_node_down", "1 when Slurm says the node is DOWN.", labels=labels)
        drain = GaugeMetricFamily(
            "trainguard_slurm_node_drain", "1 when the node is draining or drained.", labels=[*labels, "trainguard"]
        )
        unresponsive = GaugeMetricFamily(
            "trainguard_slurm_node_not_responding", "1 when slurmctld cannot reach the node's slurmd.", labels=labels
        )
        node_state = GaugeMetricFamily(
            "trainguard_slurm_node_state", "1 for the node's Slurm base state.", labels=[*labels, "state"]
        )
        others = GaugeMetricFamily(
            "trainguard_slurm_node_drained_by_other",
            "1 when someone else (NHC, HealthCheckProgram, Slurm, an admin) drained or downed the node; source parsed "
            "from the reason",
            labels=[*labels, "source"],
        )
        for name in sorted(relevant):
            node = nodes.get(name)
            if node is None:
                continue
            owner = drained_by_other(node)
            if owner is not None:
                others.add_metric([c, name, owner], 1)
            down.add_metric([c, name], 1 if node.down else 0)
            drain.add_metric([c, name, "1" if node.drained_by_trainguard else "0"], 1 if node.drain else 0)
            unresponsive.add_metric([c, name], 1 if node.not_responding else 0)
            node_state.add_metric([c, name, node.state], 1)
        ours = GaugeMetricFamily(
            "trainguard_slurm_nodes_drained_by_trainguard",
            "Nodes drained with a 'trainguard:' reason, cluster-wide (the drain circuit breaker's count).",
            labels=["cluster"],
        )
        ours.add_metric([c], sum(1 for n in nodes.values() if n.drained_by_trainguard))
        total = GaugeMetricFamily("trainguard_slurm_nodes", "Nodes Slurm knows, cluster-wide.", labels=["cluster"])
        total.add_metric([c], len(nodes))
        yield from (down, drain, unresponsive, node_state, ours, total, others)
