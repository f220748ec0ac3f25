"""Kubernetes nodes others took out of service, as evidence (``responder/schedulers/kubernetes/cordons.py``).

No Kubernetes API server can run here: the nodes live in the fake API server of ``tests/fake_k8s.py``
(real ``kubernetes`` client, HTTP on loopback, the real API's Node shapes and merge-patch rules), and
the collector and the adapter's isolation read and patch them through it. Alongside, the alert rule that
makes a cordon evidence is tested by promtool (``alert_rules/tests/scheduler_test.yml``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from responder.model import Action
from responder.schedulers.kubernetes.api import KubeAPI
from responder.schedulers.kubernetes.collector import KubeNodeCollector
from responder.schedulers.kubernetes.cordons import Cordon, cordon_of, isolated_by_other
from responder.schedulers.kubernetes.jobset import JobSetScheduler, JobSetSettings
from responder.schedulers.router import build_schedulers
from responder.settings import Settings
from tests.fake_k8s import FakeKube, FakeServer, build_adapter, k8s_only, make_request

pytestmark = k8s_only()

INCIDENT = "inc_0123456789abcdef"
NVSENTINEL = {
    "k8saas.nvidia.com/cordon-by": "NVSentinel",
    "k8saas.nvidia.com/cordon-reason": "GpuXidError-79",
    "k8saas.nvidia.com/cordon-timestamp": "2026-11-29T10-59-00Z",
}


def _node(**fields: Any) -> dict[str, Any]:
    meta = {"name": "gpu-9", "labels": fields.pop("labels", {}), "annotations": fields.pop("annotations", {})}
    conditions = fields.pop("conditions", [{"type": "Ready", "status": "True"}])
    return {"metadata": meta, "spec": fields, "status": {"conditions": conditions}}


@pytest.fixture
def kube() -> FakeKube:
    kube = FakeKube.four_nodes()
    kube.add_jobset("ml", "llama", replicas=2, nodes=["gpu-1", "gpu-2"])
    return kube


def _relabel(kube: FakeKube, name: str, labels: dict[str, str] | None = None, **spec: Any) -> None:
    """What another owner does to a node (written into the fake's store, as its own client would)."""
    with kube.lock:
        node = kube.objects[("nodes", "", name)]
        node["metadata"].setdefault("labels", {}).update(labels or {})
        node["spec"].update(spec)


def _gauges(server: FakeServer, cluster: str = "k8s") -> dict[str, dict[tuple[str, ...], float]]:
    registry = CollectorRegistry()
    api = KubeAPI(server.api_client(), 5.0, cluster=cluster)
    registry.register(KubeNodeCollector(api, cluster))
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for family in registry.collect():
        for sample in family.samples:
            labels = tuple(v for k, v in sorted(sample.labels.items()) if k != "cluster")
            out.setdefault(sample.name, {})[labels] = sample.value
    return out


def test_whose_cordon_is_parsed_from_the_node() -> None:
    assert cordon_of(_node()) is None
    assert cordon_of(_node(unschedulable=True, labels=NVSENTINEL)) == Cordon("nvsentinel", "GpuXidError-79")
    assert cordon_of(_node(unschedulable=True)) == Cordon("admin", "cordoned")
    why = {"example.com/cordon-reason": "fans\nreplaced   by vendor " + "x" * 100}
    found = cordon_of(_node(unschedulable=True, annotations=why))
    assert found is not None
    assert found.source == "admin"
    assert found.reason.startswith("fans replaced by vendor x")
    assert len(found.reason) == 64
    npd = [{"type": "Ready", "status": "True"}, {"type": "KernelDeadlock", "status": "True", "reason": "DockerHung"}]
    assert cordon_of(_node(conditions=npd)) == Cordon("node_problem", "KernelDeadlock: DockerHung")
    healthy = [{"type": "Ready", "status": "True"}, {"type": "KernelDeadlock", "status": "False"}]
    assert cordon_of(_node(conditions=healthy)) is None
    assert cordon_of(
        _node(conditions=[{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}])
    ) == Cordon("kubernetes", "NotReady: NodeStatusUnknown")
    unreachable = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    assert cordon_of(_node(taints=unreachable)) == Cordon("kubernetes", "unreachable")
    # Not evidence: a dedicated-node taint; a scale-down (the node is going away, not bad).
    assert cordon_of(_node(taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])) is None
    scale_down = [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}]
    assert cordon_of(_node(unschedulable=True, taints=scale_down)) is None


def test_trainguards_own_isolation_is_read_back_never_evidence() -> None:
    ours = _node(
        unschedulable=True,
        taints=[{"key": "trainguard.io/implicated", "value": INCIDENT, "effect": "NoSchedule"}],
        labels={"trainguard.io/isolated-by": "trainguard"},
        annotations={"trainguard.io/cordoned": "true"},
    )
    assert cordon_of(ours) == Cordon("trainguard", "isolated by trainguard")
    assert isolated_by_other(ours) is None
    # trainguard tainted a node someone else had cordoned first: the cordon is still theirs.
    theirs_first = {**ours, "metadata": {**ours["metadata"], "annotations": {"trainguard.io/cordoned": "false"}}}
    assert isolated_by_other(theirs_first) == Cordon("admin", "cordoned")


def test_the_collector_exports_others_cordons_and_counts_its_own(kube: FakeKube, server: FakeServer) -> None:
    _relabel(kube, "gpu-2", NVSENTINEL, unschedulable=True)
    _relabel(kube, "gpu-3", unschedulable=True)
    adapter = build_adapter(JobSetScheduler, JobSetSettings, server, {})
    assert adapter.act(make_request(Action.DRAIN_NODE, "ml/llama", "XID 79", INCIDENT, node="gpu-4")).outcome == "done"

    gauges = _gauges(server)
    assert gauges["trainguard_kubernetes_up"] == {(): 1.0}
    assert gauges["trainguard_kubernetes_node_cordoned_by_other"] == {
        ("gpu-2", "GpuXidError-79", "nvsentinel"): 1.0,
        ("gpu-3", "cordoned", "admin"): 1.0,
    }
    assert gauges["trainguard_kubernetes_nodes_isolated_by_trainguard"] == {(): 1.0}  # gpu-4, its own


def test_trainguard_never_undoes_another_owners_cordon(kube: FakeKube, server: FakeServer) -> None:
    _relabel(kube, "gpu-2", NVSENTINEL, unschedulable=True)
    adapter = build_adapter(JobSetScheduler, JobSetSettings, server, {})
    drained = adapter.act(make_request(Action.DRAIN_NODE, "ml/llama", "XID 79", INCIDENT, node="gpu-2"))
    assert drained.outcome == "done", drained.detail
    assert drained.detail == "gpu-2: tainted trainguard.io/implicated=inc_0123456789abcdef:NoSchedule"  # no cordon
    resumed = adapter.act(make_request(Action.RESUME_NODE, "ml/llama", "repaired", INCIDENT, node="gpu-2"))
    assert resumed.outcome == "done"
    assert "left cordoned" in resumed.detail
    node = kube.objects[("nodes", "", "gpu-2")]
    assert node["spec"]["unschedulable"] is True
    assert {k: node["metadata"]["labels"][k] for k in NVSENTINEL} == NVSENTINEL
    assert not any(t["key"] == "trainguard.io/implicated" for t in node["spec"].get("taints") or [])
    assert _gauges(server)["trainguard_kubernetes_node_cordoned_by_other"] == {
        ("gpu-2", "GpuXidError-79", "nvsentinel"): 1.0
    }


def test_an_unreachable_api_server_is_unknown_not_empty() -> None:
    registry = CollectorRegistry()
    from kubernetes import client  # noqa: PLC0415 - the k8s tests' optional client

    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # discard port: connection refused
    registry.register(KubeNodeCollector(KubeAPI(client.ApiClient(configuration), 2.0), "k8s"))
    names = {s.name: s.value for family in registry.collect() for s in family.samples}
    assert names == {"trainguard_kubernetes_up": 0.0}


def test_the_router_exports_the_cordons_with_the_responders_metrics(
    kube: FakeKube, server: FakeServer, tmp_path: Path
) -> None:
    _relabel(kube, "gpu-3", unschedulable=True)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
        "users": [{"name": "tg", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tg"}}],
        "current-context": "fake",
    }))  # fmt: skip
    registry = CollectorRegistry()
    settings = Settings(clusters={"k8s": {"scheduler": {"kind": "jobset", "kubeconfig": str(kubeconfig)}}})
    schedulers = build_schedulers(settings.schedulers(), registry)
    labels = {"cluster": "k8s", "host": "gpu-3", "source": "admin", "reason": "cordoned"}
    try:
        assert registry.get_sample_value("trainguard_kubernetes_node_cordoned_by_other", labels) == 1.0
    finally:
        adapter = schedulers.adapters["k8s"]
        assert isinstance(adapter, JobSetScheduler)
        adapter.api.close()
