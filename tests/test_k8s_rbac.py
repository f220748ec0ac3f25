"""The chart's RBAC grants exactly what the adapters use: no verb missing, none to spare.

Every action of both adapters runs against the fake API server (``tests/fake_k8s.py``, real client
over loopback HTTP); the (API group, resource, verb) of each recorded request, as the API server's
authorizer would see it, is compared with ``PERMISSIONS`` and with the chart's rule files
(``k8s/trainguard/files/rbac/``; the ClusterRole template includes them verbatim, and
``tests/test_k8s_chart.py`` checks the rendered ClusterRole too). Needs no Helm engine.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from responder.model import Action
from responder.schedulers.base import ActionRequest
from responder.schedulers.kubernetes.api import PERMISSIONS
from responder.schedulers.kubernetes.jobset import JobSetScheduler, JobSetSettings
from responder.schedulers.kubernetes.pytorchjob import PyTorchJobScheduler, PyTorchJobSettings
from responder.schedulers.kubernetes.workload import KubeWorkloadScheduler
from tests.fake_k8s import FakeKube, FakeServer, k8s_only

pytestmark = k8s_only()

RBAC_DIR = Path(__file__).resolve().parent.parent / "k8s" / "trainguard" / "files" / "rbac"
Permission = tuple[str, str, str]


def rule_file(name: str) -> set[Permission]:
    rules: list[dict[str, Any]] = yaml.safe_load((RBAC_DIR / f"{name}.yaml").read_text())
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.fixture
def kube() -> FakeKube:
    kube = FakeKube.four_nodes()
    for name in ("a", "b"):
        kube.add_jobset("ml", name, nodes=["gpu-1", "gpu-2"])
        kube.add_pytorchjob("ml", name, nodes=["gpu-1", "gpu-2", "gpu-3"])
    return kube


def exercise(sched: KubeWorkloadScheduler[Any], delete: KubeWorkloadScheduler[Any]) -> None:
    """Every verb: observe, restart excluding a node, hold, release, stop (both modes), drain, resume."""

    def req(action: Action, workload: str = "ml/a", **fields: Any) -> ActionRequest:
        return ActionRequest(action, "lab", workload, "inc_1", "test", attempt="0", **fields)

    sched.observe("lab", "ml/a")
    outcomes = [
        sched.act(req(Action.REQUEUE_EXCLUDING, exclude_nodes=("gpu-2",))),
        sched.act(req(Action.HOLD, "ml/b")),
        sched.act(req(Action.RELEASE, "ml/b")),
        sched.act(req(Action.STOP, "ml/b")),
        delete.act(req(Action.STOP)),
        sched.act(req(Action.DRAIN_NODE, node="gpu-3")),
        sched.act(req(Action.RESUME_NODE, node="gpu-2")),
    ]
    assert [o.outcome for o in outcomes] == ["done"] * len(outcomes), [o.detail for o in outcomes]


def make(kind: type[KubeWorkloadScheduler[Any]], server: FakeServer, **settings: Any) -> KubeWorkloadScheduler[Any]:
    model = JobSetSettings if kind is JobSetScheduler else PyTorchJobSettings
    options: dict[str, Any] = {"verify_timeout_s": 2.0, "poll_interval_s": 0.01, "max_isolated_fraction": 0.5}
    return kind(
        model(**options, **settings), api_client=server.api_client(), now=lambda: datetime(2026, 11, 29, 12, tzinfo=UTC)
    )


@pytest.mark.parametrize(("kind", "rules"), [(JobSetScheduler, "jobset"), (PyTorchJobScheduler, "pytorchjob")])
def test_each_adapter_uses_exactly_the_chart_rules_for_its_kind(
    kube: FakeKube, server: FakeServer, kind: type[KubeWorkloadScheduler[Any]], rules: str
) -> None:
    exercise(make(kind, server), make(kind, server, stop_mode="delete"))
    used = kube.permissions()
    granted = rule_file("common") | rule_file(rules)
    assert used == granted, f"missing from the chart: {used - granted}; granted but unused: {granted - used}"


def test_permissions_constant_is_the_union_of_the_chart_rules() -> None:
    assert rule_file("common") | rule_file("jobset") | rule_file("pytorchjob") == PERMISSIONS
    # least privilege: nothing that creates, updates, escalates, reads secrets or watches
    verbs = {verb for _, _, verb in PERMISSIONS}
    assert verbs <= {"get", "list", "patch", "delete"}
    assert not {resource for _, resource, _ in PERMISSIONS} & {"secrets", "pods/exec", "pods/eviction", "*"}
