"""JobSet adapter against a fake Kubernetes API server (``tests/fake_k8s.py``) through the real client.

No API server can run here: the fake serves the endpoints the adapter uses over HTTP on a loopback
port with the real API's response shapes, and records every request, so these tests assert the exact
verbs, paths, patch bodies and content types a real API server would receive.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from responder.model import Action
from responder.schedulers.base import ActionRequest, SchedulerError, WorkloadState
from responder.schedulers.kubernetes.api import KubeRequestMetrics
from responder.schedulers.kubernetes.jobset import JobSetScheduler, JobSetSettings
from tests.fake_k8s import MERGE, FakeKube, FakeServer, assert_foreground_delete, build_adapter, k8s_only, make_request

pytestmark = k8s_only()

INCIDENT = "inc_0123456789abcdef"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets"


@pytest.fixture
def kube() -> FakeKube:
    kube = FakeKube.four_nodes(
        {"gpu-2": [{"key": "example.com/maintenance", "value": "soon", "effect": "PreferNoSchedule"}]}
    )
    kube.add_jobset("ml", "llama", replicas=2, nodes=["gpu-1", "gpu-2"])
    return kube


def adapter(server: FakeServer, **settings: Any) -> JobSetScheduler:
    return build_adapter(JobSetScheduler, JobSetSettings, server, settings)


def request(action: Action, **fields: Any) -> ActionRequest:
    return make_request(action, "ml/llama", "XID 79 on gpu-2", INCIDENT, **fields)


def writes(kube: FakeKube) -> list[tuple[str, str, str | None, Any]]:
    return [(r.method, r.path, r.content_type, r.body) for r in kube.writes()]


def test_requeue_excluding_cordons_taints_and_restarts_verified(kube: FakeKube, server: FakeServer) -> None:
    result = adapter(server).act(request(Action.REQUEUE_EXCLUDING, exclude_nodes=("gpu-2",)))

    assert result.outcome == "done", result.detail
    assert result.verified
    assert result.excluded_nodes == ("gpu-2",)
    assert "status.restarts 0 -> 1" in result.detail
    assert writes(kube) == [
        (
            "PATCH",
            "/api/v1/nodes/gpu-2",
            MERGE,
            {
                "metadata": {
                    "resourceVersion": "1001",
                    "labels": {"trainguard.io/isolated-by": "trainguard"},
                    "annotations": {
                        "trainguard.io/incident": INCIDENT,
                        "trainguard.io/isolation-reason": "XID 79 on gpu-2",
                        "trainguard.io/isolated-at": "2026-11-29T12:00:00Z",
                        "trainguard.io/cordoned": "true",
                    },
                },
                "spec": {
                    "unschedulable": True,
                    "taints": [  # the taints read first, then ours: the list is replaced as a whole
                        {"key": "example.com/maintenance", "value": "soon", "effect": "PreferNoSchedule"},
                        {"key": "trainguard.io/implicated", "value": INCIDENT, "effect": "NoSchedule"},
                    ],
                },
            },
        ),
        ("PATCH", f"{JOBSETS}/llama", MERGE, {"metadata": {"annotations": {"trainguard.io/excluded-nodes": "gpu-2"}}}),
        (
            "PATCH",
            "/apis/batch/v1/namespaces/ml/jobs/llama-workers-1",  # the child Job with a pod on gpu-2
            MERGE,
            {
                "metadata": {
                    "annotations": {
                        "trainguard.io/failed-by": INCIDENT,
                        "trainguard.io/failed-at": "2026-11-29T12:00:00Z",
                    }
                },
                "spec": {"activeDeadlineSeconds": 1},
            },
        ),
    ]
    # the node was read before it was patched, and the restart was confirmed from the status subresource
    methods = [(r.method, r.path) for r in kube.requests]
    assert methods.index(("GET", "/api/v1/nodes/gpu-2")) < methods.index(("PATCH", "/api/v1/nodes/gpu-2"))
    assert methods[-1] == ("GET", f"{JOBSETS}/llama/status")

    node = kube.get("nodes", "", "gpu-2")
    assert node is not None
    assert node["spec"]["unschedulable"] is True
    seen = adapter(server).observe("lab", "ml/llama")
    assert seen.attempt == 1
    assert seen.state is WorkloadState.RUNNING
    assert "gpu-2" not in seen.nodes  # the restarted pods avoided the tainted node
    assert seen.excluded_nodes == ("gpu-2",)
    assert seen.opted_in is True


def test_same_attempt_twice_restarts_once(kube: FakeKube, server: FakeServer) -> None:
    sched = adapter(server)
    first = sched.act(request(Action.REQUEUE_EXCLUDING, exclude_nodes=("gpu-2",)))
    second = sched.act(request(Action.REQUEUE_EXCLUDING, exclude_nodes=("gpu-2",)))

    assert first.outcome == second.outcome == "done"
    assert second.verified
    assert "already past attempt 0" in second.detail
    job_patches = [r for r in kube.writes() if "/jobs/" in r.path]
    node_patches = [r for r in kube.writes() if r.path.startswith("/api/v1/nodes/")]
    assert len(job_patches) == 1
    assert len(node_patches) == 1
    jobset = kube.get("jobsets", "ml", "llama")
    assert jobset is not None
    assert jobset["status"]["restarts"] == 1


def test_request_for_a_later_attempt_is_skipped(kube: FakeKube, server: FakeServer) -> None:
    result = adapter(server).act(request(Action.REQUEUE, attempt="3"))
    assert result.outcome == "skipped"
    assert kube.writes() == []


def test_plain_requeue_touches_no_node(kube: FakeKube, server: FakeServer) -> None:
    result = adapter(server).act(request(Action.REQUEUE))
    assert result.outcome == "done"
    assert result.verified
    assert [r.path for r in kube.writes()] == ["/apis/batch/v1/namespaces/ml/jobs/llama-workers-0"]


def test_stop_suspends_the_jobset(kube: FakeKube, server: FakeServer) -> None:
    result = adapter(server).act(request(Action.STOP, reason="application error"))

    assert result.outcome == "done"
    assert result.verified
    assert writes(kube) == [
        (
            "PATCH",
            f"{JOBSETS}/llama",
            MERGE,
            {
                "spec": {"suspend": True},
                "metadata": {
                    "annotations": {
                        "trainguard.io/stopped-at": "2026-11-29T12:00:00Z",
                        "trainguard.io/last-incident": INCIDENT,
                    }
                },
            },
        )
    ]
    assert adapter(server).observe("lab", "ml/llama").state is WorkloadState.HELD


def test_stop_delete_mode_deletes_in_foreground(kube: FakeKube, server: FakeServer) -> None:
    result = adapter(server, stop_mode="delete").act(request(Action.STOP))
    assert_foreground_delete(kube, result, f"{JOBSETS}/llama")
    assert kube.get("jobsets", "ml", "llama") is None


def test_resume_node_undoes_the_isolation(kube: FakeKube, server: FakeServer) -> None:
    sched = adapter(server)
    sched.act(request(Action.REQUEUE_EXCLUDING, exclude_nodes=("gpu-2",)))
    kube.requests.clear()

    result = sched.act(request(Action.RESUME_NODE, node="gpu-2", reason="operator: GPU replaced"))

    assert result.outcome == "done"
    assert result.verified
    [patch] = kube.writes()
    assert (patch.method, patch.path, patch.content_type) == ("PATCH", "/api/v1/nodes/gpu-2", MERGE)
    assert patch.body["spec"] == {
        "taints": [{"key": "example.com/maintenance", "value": "soon", "effect": "PreferNoSchedule"}],
        "unschedulable": None,  # merge patch: null removes the field, the node is schedulable again
    }
    assert patch.body["metadata"]["labels"] == {"trainguard.io/isolated-by": None}
    node = kube.get("nodes", "", "gpu-2")
    assert node is not None
    assert "unschedulable" not in node["spec"]
    assert node["metadata"]["annotations"] == {}


def test_resume_leaves_a_cordon_that_is_not_ours(kube: FakeKube, server: FakeServer) -> None:
    kube.add_node("gpu-5", unschedulable=True)  # cordoned by an operator before trainguard came
    sched = adapter(server)
    assert sched.act(request(Action.DRAIN_NODE, node="gpu-5")).outcome == "done"
    node = kube.get("nodes", "", "gpu-5")
    assert node is not None
    assert node["metadata"]["annotations"]["trainguard.io/cordoned"] == "false"

    result = sched.act(request(Action.RESUME_NODE, node="gpu-5"))

    assert result.outcome == "done"
    assert "left cordoned" in result.detail
    node = kube.get("nodes", "", "gpu-5")
    assert node is not None
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == []


def test_resume_of_a_node_we_did_not_isolate_changes_nothing(kube: FakeKube, server: FakeServer) -> None:
    result = adapter(server).act(request(Action.RESUME_NODE, node="gpu-3"))
    assert result.outcome == "done"
    assert kube.writes() == []


@pytest.mark.parametrize(
    "fields",
    [
        {"workload": "ml/llama/../../../api/v1/nodes"},
        {"workload": "ml/llama?dryRun=All"},
        {"workload": "ML/Llama"},
        {"workload": "ml/llama;rm -rf /"},
        {"workload": "llama"},
        {"workload": "ml/" + "a" * 254},
        {"exclude_nodes": ("gpu-1/../../namespaces",)},
        {"exclude_nodes": ("$(reboot)",)},
        {"action": Action.DRAIN_NODE, "node": "gpu-1?fieldSelector=x"},
        {"action": Action.RESUME_NODE, "node": None},
        {"incident_id": "inc 1:NoExecute"},
        {"attempt": "1e9"},
        {"cluster": "other"},
    ],
)
def test_hostile_values_are_refused_before_any_request(
    kube: FakeKube, server: FakeServer, fields: dict[str, Any]
) -> None:
    action = fields.pop("action", Action.REQUEUE_EXCLUDING)
    result = adapter(server, cluster="lab").act(request(action, **fields))
    assert result.outcome == "failed"
    assert result.detail.startswith("refused before any request")
    assert kube.requests == []


def test_a_workload_that_did_not_opt_in_is_only_observed(kube: FakeKube, server: FakeServer) -> None:
    kube.add_jobset("ml", "private", opt_in=False)
    sched = adapter(server)
    result = sched.act(request(Action.REQUEUE_EXCLUDING, workload="ml/private", exclude_nodes=("gpu-2",)))
    assert result.outcome == "skipped"
    assert "did not opt in" in result.detail
    assert kube.writes() == []
    assert sched.observe("lab", "ml/private").opted_in is False


@pytest.mark.parametrize(
    ("policy", "restarts", "blocked"),
    [
        ({"maxRestarts": 0}, 0, "restart budget spent"),
        ({"maxRestarts": 2}, 2, "restart budget spent"),
        (
            {
                "maxRestarts": 5,
                "rules": [
                    {"name": "noRetryOnDeadline", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]}
                ],
            },
            0,
            "noRetryOnDeadline",
        ),
    ],
)
def test_a_restart_that_would_fail_the_jobset_is_refused(
    kube: FakeKube, server: FakeServer, policy: dict[str, Any], restarts: int, blocked: str
) -> None:
    kube.add_jobset("ml", "tight", failure_policy=policy, restarts=restarts)
    result = adapter(server).act(request(Action.REQUEUE, workload="ml/tight", attempt=str(restarts)))
    assert result.outcome == "skipped"
    assert blocked in result.detail
    assert kube.writes() == []


def test_a_rule_that_ignores_max_restarts_is_not_charged(kube: FakeKube, server: FakeServer) -> None:
    policy = {
        "maxRestarts": 1,
        "rules": [
            {"name": "other", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]},
            {
                "name": "trainguard",
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["DeadlineExceeded"],
            },
        ],
    }
    kube.add_jobset("ml", "free", failure_policy=policy, restarts=1)
    result = adapter(server).act(request(Action.REQUEUE, workload="ml/free", attempt="1"))
    assert result.outcome == "done"
    assert result.verified
    jobset = kube.get("jobsets", "ml", "free")
    assert jobset is not None
    assert (jobset["status"]["restarts"], jobset["status"]["restartsCountTowardsMax"]) == (2, 1)


def test_circuit_breaker_limits_isolated_nodes(kube: FakeKube, server: FakeServer) -> None:
    result = adapter(server, max_isolated_fraction=0.25).act(
        request(Action.REQUEUE_EXCLUDING, exclude_nodes=("gpu-2", "gpu-1"))
    )
    assert result.outcome == "done"
    assert result.excluded_nodes == ("gpu-2",)
    assert "circuit breaker" in result.detail
    assert [r.path for r in kube.writes() if r.path.startswith("/api/v1/nodes")] == ["/api/v1/nodes/gpu-2"]


def test_a_conflicting_node_update_is_retried_on_a_fresh_read(kube: FakeKube, server: FakeServer) -> None:
    kube.fail_next[("PATCH", "/api/v1/nodes/gpu-2")] = 409
    result = adapter(server).act(request(Action.DRAIN_NODE, node="gpu-2"))
    assert result.outcome == "done"
    reads = [r for r in kube.requests if r.path == "/api/v1/nodes/gpu-2"]
    assert [r.method for r in reads][:4] == ["GET", "PATCH", "GET", "PATCH"]


def test_hold_and_release(kube: FakeKube, server: FakeServer) -> None:
    sched = adapter(server)
    assert sched.act(request(Action.HOLD)).outcome == "done"
    assert sched.observe("lab", "ml/llama").state is WorkloadState.HELD
    released = sched.act(request(Action.RELEASE))
    assert released.outcome == "done"
    assert released.verified
    assert kube.writes()[-1].body == {
        "spec": {"suspend": False},
        "metadata": {"annotations": {"trainguard.io/held-at": None}},
    }


def test_release_does_not_undo_a_stop(kube: FakeKube, server: FakeServer) -> None:
    sched = adapter(server)
    sched.act(request(Action.STOP))
    result = sched.act(request(Action.RELEASE))
    assert result.outcome == "skipped"


def test_api_failure_is_a_failure_not_an_empty_answer(kube: FakeKube, server: FakeServer) -> None:
    registry = CollectorRegistry()
    sched = JobSetScheduler(
        JobSetSettings(cluster="lab"), api_client=server.api_client(), metrics=KubeRequestMetrics(registry)
    )
    kube.fail_next[("GET", f"{JOBSETS}/llama")] = 500
    result = sched.act(request(Action.REQUEUE))
    assert result.outcome == "failed"
    assert "HTTP 500" in result.detail
    assert result.retry, "the API server failed: the engine may try again"
    labels = {"cluster": "lab", "call": "get jobsets"}
    assert registry.get_sample_value("trainguard_kubernetes_request_failures_total", {**labels, "reason": "500"}) == 1
    assert registry.get_sample_value("trainguard_kubernetes_requests_total", {**labels, "result": "error"}) == 1
    kube.fail_next[("GET", f"{JOBSETS}/llama")] = 503
    with pytest.raises(SchedulerError):
        adapter(server).observe("lab", "ml/llama")
    kube.fail_next[("GET", f"{JOBSETS}/llama")] = 403
    refused = sched.act(request(Action.REQUEUE))
    assert (refused.outcome, refused.retry) == ("failed", False), "a refusal is final"


def test_observe_a_missing_jobset_is_unknown(server: FakeServer) -> None:
    seen = adapter(server).observe("lab", "ml/gone")
    assert seen.state is WorkloadState.UNKNOWN


def test_why_the_adapter_names_the_patch_content_type(server: FakeServer, kube: FakeKube) -> None:
    """The generated client picks a patch type by itself (strategic merge for a dict body on a built-in
    kind), and a custom resource has no strategic merge patch: a real API server answers 415. The
    adapter names ``application/merge-patch+json`` on every patch, one semantics for all kinds."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    client.CoreV1Api(server.api_client()).patch_node("gpu-3", {"metadata": {"labels": {"a": "b"}}})
    assert kube.requests[-1].content_type == "application/strategic-merge-patch+json"
    with pytest.raises(ApiException) as caught:
        client.CustomObjectsApi(server.api_client()).patch_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "ml", "jobsets", "llama", {"spec": {"suspend": True}},
            _content_type="application/strategic-merge-patch+json",
        )  # fmt: skip
    assert caught.value.status == 415
