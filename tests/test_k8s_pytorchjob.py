"""PyTorchJob adapter against the fake Kubernetes API server (``tests/fake_k8s.py``), real client.

The fake serves the endpoints over HTTP on a loopback port with the real API's shapes and records
every request; its toy Training Operator re-creates deleted pods. No real API server runs here.
"""

from __future__ import annotations

from typing import Any

import pytest

from responder.model import Action
from responder.schedulers.base import ActionRequest, WorkloadState
from responder.schedulers.kubernetes.pytorchjob import PyTorchJobScheduler, PyTorchJobSettings
from tests.fake_k8s import MERGE, FakeKube, FakeServer, assert_foreground_delete, build_adapter, k8s_only, make_request

pytestmark = k8s_only()

INCIDENT = "inc_00000000000000aa"
PYTORCHJOBS = "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs"


@pytest.fixture
def kube() -> FakeKube:
    kube = FakeKube.four_nodes()
    kube.add_pytorchjob("ml", "bert", workers=2, nodes=["gpu-1", "gpu-2", "gpu-3"])
    return kube


def adapter(server: FakeServer, **settings: Any) -> PyTorchJobScheduler:
    return build_adapter(PyTorchJobScheduler, PyTorchJobSettings, server, settings)


def request(action: Action, **fields: Any) -> ActionRequest:
    return make_request(action, "ml/bert", "NCCL timeout, XID 79 on gpu-2", INCIDENT, **fields)


def test_requeue_excluding_isolates_bumps_the_attempt_and_replaces_pods(kube: FakeKube, server: FakeServer) -> None:
    result = adapter(server).act(request(Action.REQUEUE_EXCLUDING, exclude_nodes=("gpu-2",)))

    assert result.outcome == "done", result.detail
    assert result.verified
    assert result.excluded_nodes == ("gpu-2",)
    summary = [(r.method, r.path, r.content_type) for r in kube.writes()]
    assert summary == [
        ("PATCH", "/api/v1/nodes/gpu-2", MERGE),
        ("PATCH", f"{PYTORCHJOBS}/bert", MERGE),
        ("PATCH", f"{PYTORCHJOBS}/bert", MERGE),
        ("DELETE", "/api/v1/namespaces/ml/pods/bert-master-0", None),
        ("DELETE", "/api/v1/namespaces/ml/pods/bert-worker-0", None),
        ("DELETE", "/api/v1/namespaces/ml/pods/bert-worker-1", None),
    ]
    bump = kube.writes()[2].body
    assert bump["metadata"]["annotations"] == {
        "trainguard.io/attempt": "1",
        "trainguard.io/restarted-at": "2026-11-29T12:00:00Z",
        "trainguard.io/last-incident": INCIDENT,
    }
    assert bump["metadata"]["resourceVersion"]  # a precondition: two responders cannot both bump
    on_pods = {"template": {"metadata": {"annotations": {"trainguard.io/attempt": "1"}}}}
    assert bump["spec"] == {"pytorchReplicaSpecs": {"Master": on_pods, "Worker": on_pods}}
    pods = [r for r in kube.requests if r.path == "/api/v1/namespaces/ml/pods" and r.method == "GET"]
    assert pods[0].query == {"labelSelector": ["training.kubeflow.org/job-name=bert"]}

    seen = adapter(server).observe("lab", "ml/bert")
    assert seen.attempt == 1
    assert "gpu-2" not in seen.nodes
    assert seen.state is WorkloadState.RUNNING


def test_same_attempt_twice_restarts_once(kube: FakeKube, server: FakeServer) -> None:
    sched = adapter(server)
    sched.act(request(Action.REQUEUE))
    second = sched.act(request(Action.REQUEUE))
    assert second.outcome == "done"
    assert "already past attempt 0" in second.detail
    assert len([r for r in kube.writes() if r.method == "DELETE"]) == 3
    bumps = [r for r in kube.writes() if r.path == f"{PYTORCHJOBS}/bert"]
    assert len(bumps) == 1


def test_an_interrupted_restart_is_finished_not_repeated(kube: FakeKube, server: FakeServer) -> None:
    # an earlier try bumped the attempt, then the responder died before deleting the pods
    obj = kube.get("pytorchjobs", "ml", "bert")
    assert obj is not None
    obj["metadata"]["annotations"] = {
        "trainguard.io/attempt": "1",
        "trainguard.io/restarted-at": "2026-11-29T12:00:00Z",
        "trainguard.io/last-incident": INCIDENT,
    }
    kube.add("pytorchjobs", obj)

    result = adapter(server).act(request(Action.REQUEUE))

    assert result.outcome == "done"
    assert result.verified
    assert [r.method for r in kube.writes()] == ["DELETE", "DELETE", "DELETE"]  # no second bump
    final = kube.get("pytorchjobs", "ml", "bert")
    assert final is not None
    assert final["metadata"]["annotations"]["trainguard.io/attempt"] == "1"


def test_stop_suspends_through_run_policy(kube: FakeKube, server: FakeServer) -> None:
    result = adapter(server).act(request(Action.STOP))
    assert result.outcome == "done"
    assert result.verified
    [patch] = kube.writes()
    assert (patch.method, patch.path, patch.content_type) == ("PATCH", f"{PYTORCHJOBS}/bert", MERGE)
    assert patch.body["spec"] == {"runPolicy": {"suspend": True}}
    assert adapter(server).observe("lab", "ml/bert").state is WorkloadState.HELD


def test_stop_delete_mode(kube: FakeKube, server: FakeServer) -> None:
    result = adapter(server, stop_mode="delete").act(request(Action.STOP))
    assert_foreground_delete(kube, result, f"{PYTORCHJOBS}/bert")


def test_hostile_workload_is_refused_before_any_request(kube: FakeKube, server: FakeServer) -> None:
    result = adapter(server).act(request(Action.REQUEUE, workload="ml/bert/../../../../api/v1/nodes"))
    assert result.outcome == "failed"
    assert kube.requests == []


def test_finished_job_is_not_restarted(kube: FakeKube, server: FakeServer) -> None:
    obj = kube.get("pytorchjobs", "ml", "bert")
    assert obj is not None
    obj["status"]["conditions"].append({"type": "Succeeded", "status": "True"})
    kube.add("pytorchjobs", obj)
    result = adapter(server).act(request(Action.REQUEUE))
    assert result.outcome == "skipped"
    assert kube.writes() == []
