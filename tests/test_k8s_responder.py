"""The responder, in act mode, recovering a JobSet through the JobSet adapter and the fake API server.

One alert through the real HTTP API of the responder (Alertmanager webhook payload), the decision
core attributes it to a node and decides ``requeue_excluding``, and the JobSet adapter carries it out
against ``tests/fake_k8s.py`` (an HTTP-level fake of the Kubernetes API server on a loopback port,
real ``kubernetes`` client): the node ends cordoned and tainted, the JobSet restarted, the decision
recorded ``done`` and verified. Also: the adapter built from a kubeconfig file, as the router builds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from starlette.testclient import TestClient

from responder.app import create_app
from responder.clock import SystemClock
from responder.schedulers.kubernetes.jobset import JobSetScheduler, JobSetSettings
from responder.schedulers.kubernetes.pytorchjob import PyTorchJobScheduler
from responder.schedulers.router import ClusterSchedulers, build_schedulers
from responder.settings import Settings
from responder.store.sqlite import SqliteStore
from tests.fake_k8s import FakeKube, FakeServer, k8s_only
from tests.services import LOOPBACK, wait_until
from trainguard.lab.payloads import alert, notification

pytestmark = k8s_only()


@pytest.fixture
def kube() -> FakeKube:
    kube = FakeKube.four_nodes()
    kube.add_jobset("ml", "llama", nodes=["gpu-1", "gpu-2"])
    return kube


def test_an_xid_alert_ends_in_a_verified_restart_away_from_the_node(
    kube: FakeKube, server: FakeServer, tmp_path: Path
) -> None:
    adapter = JobSetScheduler(
        JobSetSettings(cluster="lab", verify_timeout_s=5, poll_interval_s=0.02, max_isolated_fraction=0.5),
        api_client=server.api_client(),
    )
    settings = Settings(
        correlation_window_s=0.2, db_path=tmp_path / "tg.db", clusters={"lab": {"mode": "act", "nodes": 4}}
    )
    store = SqliteStore(settings.db_path)
    app = create_app(settings, store, ClusterSchedulers({"lab": adapter}), SystemClock(), registry=CollectorRegistry())
    labels: dict[str, Any] = {"cluster": "lab", "workload": "ml/llama", "scheduler": "jobset", "attempt": "0"}
    alerts = [alert("TrainguardGpuXid", "infra_gpu", host="gpu-2", rank="1", pattern="xid_79_fallen_off_bus", **labels)]
    alerts += [
        alert("TrainguardNcclTimeout", "collective_timeout", host=h, rank=r, pattern="nccl_watchdog_timeout", **labels)
        for h, r in (("gpu-1", "0"), ("gpu-2", "1"))
    ]
    with TestClient(app, client=LOOPBACK, base_url="http://127.0.0.1") as client:
        assert client.post("/v1/alerts", json=notification(alerts)).status_code == 200

        def done() -> list[dict[str, Any]]:
            records: list[dict[str, Any]] = client.get("/v1/decisions").json()["decisions"]
            return [r for r in records if r["outcome"] in ("done", "failed", "skipped")]

        wait_until(done, 20, what="the decision carried out")
        [record] = done()
    store.close()

    assert record["action"] == "requeue_excluding", record
    assert record["outcome"] == "done", record
    assert record["excluded_nodes"] == ["gpu-2"]
    node = kube.get("nodes", "", "gpu-2")
    assert node is not None
    assert node["spec"]["unschedulable"] is True
    assert [t["key"] for t in node["spec"]["taints"]] == ["trainguard.io/implicated"]
    assert node["metadata"]["annotations"]["trainguard.io/incident"] == record["incident_id"]
    jobset = kube.get("jobsets", "ml", "llama")
    assert jobset is not None
    assert jobset["status"]["restarts"] == 1


def test_the_adapter_connects_through_a_kubeconfig(kube: FakeKube, server: FakeServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
                "users": [{"name": "trainguard", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "trainguard"}}],
                "current-context": "fake",
            }
        )
    )
    adapter = JobSetScheduler(JobSetSettings(kubeconfig=kubeconfig, context="fake"))
    try:
        seen = adapter.observe("lab", "ml/llama")
    finally:
        adapter.api.close()
    assert seen.attempt == 0
    assert seen.nodes == ("gpu-1", "gpu-2")
    assert kube.requests[0].path == "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/llama"
    assert kube.requests[0].authorization == "Bearer t0ken"


def test_the_router_builds_both_adapters_from_the_configuration(server: FakeServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
                "users": [{"name": "tg", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tg"}}],
                "current-context": "fake",
            }
        )
    )
    settings = Settings(
        clusters={
            "a": {"scheduler": {"kind": "jobset", "kubeconfig": str(kubeconfig), "stop_mode": "delete"}},
            "b": {"scheduler": {"kind": "pytorchjob", "kubeconfig": str(kubeconfig)}},
        }
    )
    registry = CollectorRegistry()
    schedulers = build_schedulers(settings.schedulers(), registry)
    jobset, pytorchjob = schedulers.adapters["a"], schedulers.adapters["b"]
    assert isinstance(jobset, JobSetScheduler)
    assert isinstance(pytorchjob, PyTorchJobScheduler)
    try:
        assert jobset.settings.cluster == "a"
        assert jobset.settings.stop_mode == "delete"
        assert schedulers.observe("a", "ml/llama").attempt == 0
        assert (
            registry.get_sample_value(
                "trainguard_kubernetes_requests_total", {"cluster": "a", "call": "get jobsets", "result": "ok"}
            )
            == 1
        )
    finally:
        jobset.api.close()
        pytorchjob.api.close()
