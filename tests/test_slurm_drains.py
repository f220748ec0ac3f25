"""Drains by others as evidence: the reason parsed into its owner, on recorded reasons and on a REAL Slurm.

The real-Slurm test acts as NHC: ``scontrol update state=drain reason="NHC: ..."`` on a node a watched
job runs on. The collector must export it as drained by ``nhc`` (the metric the alert rule
``TrainguardSchedulerNodeDrainedByOther`` joins with the job's nodes, tested by promtool in
alert_rules/tests/scheduler_test.yml), and trainguard must leave that reason alone.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from responder.model import Action
from responder.schedulers.slurm import drains
from responder.schedulers.slurm.collector import SlurmCollector
from responder.schedulers.slurm.parse import SlurmNode
from tests.services import wait_until
from tests.test_slurm_lab import Lab, lab, request, wait_running

__all__ = ["lab"]  # the real-Slurm fixture, shared with tests/test_slurm_lab.py


@pytest.mark.parametrize(
    ("reason", "owner"),
    [
        ("NHC: check_fs_mount:  /scratch not mounted", "nhc"),
        ("nhc: nv_health failed", "nhc"),
        ("HealthCheckProgram: gpu count 7 of 8", "health_check"),
        ("Not responding", "slurm"),
        ("Kill task failed", "slurm"),
        ("replacing DIMM B3 (ticket 4411)", "admin"),
        ("trainguard: inc_42", "trainguard"),
    ],
)
def test_the_reason_names_its_owner(reason: str, owner: str) -> None:
    assert drains.source(reason) == owner


def test_only_drains_and_downs_by_others_are_evidence() -> None:
    def node(state: str, flags: set[str], reason: str) -> SlurmNode:
        return SlurmNode("n1", state, frozenset(flags), reason, ("batch",))

    assert drains.drained_by_other(node("idle", {"DRAIN"}, "NHC: ib0 down")) == "nhc"
    assert drains.drained_by_other(node("down", set(), "Not responding")) == "slurm"
    assert drains.drained_by_other(node("mixed", {"DRAIN"}, "trainguard: inc_1")) is None  # its own, read back
    assert drains.drained_by_other(node("allocated", set(), "")) is None


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_a_drain_by_nhc_on_real_slurm_is_evidence_and_left_alone(lab: Lab) -> None:
    s = lab.scheduler()
    job = lab.submit(1, "-w", "n3")
    registry = CollectorRegistry()
    registry.register(SlurmCollector(s, "lab", workloads=lambda: [job]))
    reason = "NHC: check_hw_ib: No IB port mlx5_0:1 is ACTIVE"
    try:
        wait_running(lab, s, job, 0, 1, 0)
        metric, labels = "trainguard_slurm_node_drained_by_other", {"cluster": "lab", "host": "n3", "source": "nhc"}
        assert registry.get_sample_value(metric, labels) is None
        lab.sh("scontrol", "update", "nodename=n3", "state=drain", f"reason={reason}")  # acting as NHC
        wait_until(lambda: registry.get_sample_value(metric, labels) == 1, timeout=20, interval=0.5,
                   what=f"n3 drained by nhc in {metric}")  # fmt: skip
        assert registry.get_sample_value("trainguard_slurm_job_node", {"cluster": "lab", "workload": job,
                                         "scheduler": "slurm", "attempt": "0", "host": "n3"}) == 1  # fmt: skip
        # trainguard's own drain of that node is skipped: the owner's reason stays as it was.
        result = s.act(request(Action.DRAIN_NODE, job, "inc-nhc", node="n3"))
        assert result.outcome == "skipped"
        assert "someone else" in result.detail
        assert s.list_nodes()["n3"].reason == reason
    finally:
        lab.cancel(job)
        lab.sh("scontrol", "update", "nodename=n3", "state=resume", check=False)
        wait_until(lambda: not s.list_nodes()["n3"].drain, timeout=30, interval=0.5, what="n3 resumed")
