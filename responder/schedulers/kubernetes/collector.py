"""The nodes others took out of service, as Prometheus metrics (``trainguard_kubernetes_node_*``).

A ``prometheus_client`` custom collector: each scrape lists the nodes once through the adapter's seam
and yields fresh families. ``cordons.py`` says whose cordon, taint or condition it is; the alert rule
``TrainguardSchedulerNodeCordonedByOther`` joins a node cordoned by someone else with the watched
workloads whose ranks run there (the exporter's heartbeat), which makes it evidence against the node.
When the API server cannot be asked, only ``trainguard_kubernetes_up 0`` is exported (unknown), never
an empty "nothing cordoned" answer.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from responder.schedulers.base import SchedulerError
from responder.schedulers.kubernetes.api import KubeAPI, metadata
from responder.schedulers.kubernetes.cordons import isolated_by_other
from responder.schedulers.kubernetes.isolation import NodeIsolation


class KubeNodeCollector(Collector):
    def __init__(self, api: KubeAPI, cluster: str) -> None:
        self._api = api
        self._cluster = cluster

    def collect(self) -> Iterator[Metric]:
        c = self._cluster
        up = GaugeMetricFamily(
            "trainguard_kubernetes_up", "1 when the API server answered this scrape's node list.", labels=["cluster"]
        )
        try:
            nodes = self._api.list_nodes()
        except SchedulerError:
            up.add_metric([c], 0)
            yield up
            return
        up.add_metric([c], 1)
        others = GaugeMetricFamily(
            "trainguard_kubernetes_node_cordoned_by_other",
            "1 when someone else (NVSentinel, node-problem-detector, Kubernetes, an admin) cordoned, tainted or "
            "flagged the node; source and a short reason parsed from the node object",
            labels=["cluster", "host", "source", "reason"],
        )
        ours = GaugeMetricFamily(
            "trainguard_kubernetes_nodes_isolated_by_trainguard",
            "Nodes carrying trainguard's own isolation taint or label, cluster-wide (read back, never evidence).",
            labels=["cluster"],
        )
        for node in nodes:
            name = str(metadata(node).get("name", ""))
            found = isolated_by_other(node)
            if name and found is not None:
                others.add_metric([c, name, found.source, found.reason], 1)
        ours.add_metric([c], sum(1 for node in nodes if NodeIsolation.ours(node)))
        yield from (up, others, ours)
