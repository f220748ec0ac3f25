"""Node groups on a REAL Slurm (slurm/lab.sh): the cluster monitors, its canary partition (n1, n2) acts.

Two jobs run at once: one in the ``canary`` partition, one in ``debug`` on n4. The same fault on each
(an XID on the job's node, as the alert rules send it, with the ``partition`` label a scrape relabel
adds) is decided by the real engine with the real Slurm adapter: the canary job is requeued without
its node and runs again on the other canary node; the other job's decision is only recorded and Slurm
never touches it (same attempt, same node). Alertmanager is not in this loop: the test posts the
notifications itself, as in tests/test_slurm_lab.py.
"""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry

from responder.alerts import Notification
from responder.breaker import BreakerSettings
from responder.clock import SystemClock
from responder.engine import Engine
from responder.metrics import ResponderMetrics
from responder.model import Outcome
from responder.settings import Settings
from responder.store.sqlite import SqliteStore
from tests.test_slurm_lab import Lab, lab, wait_running
from trainguard.lab.payloads import alert, notification

__all__ = ["lab"]  # the real-Slurm fixture, shared with tests/test_slurm_lab.py

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]


def fault(job: str, node: str, partition: str) -> Notification:
    extra = {"partition": partition}
    alerts = [
        alert("TrainguardCollectiveTimeout", "collective_timeout", workload=job, host=node, rank="0",
              pattern="nccl_watchdog_timeout", extra=extra),
        alert("TrainguardGpuXid", "infra_gpu", workload=job, host=node, pattern="xid_79_fallen_off_bus",
              extra={**extra, "gpu": "0"}),
    ]  # fmt: skip
    return Notification.model_validate(notification(alerts))


def test_the_canary_partition_acts_and_the_rest_only_records(lab: Lab, tmp_path: object) -> None:
    s = lab.scheduler()
    settings = Settings.model_validate({
        "db_path": f"{tmp_path}/tg.db", "correlation_window_s": 0,
        "breaker": BreakerSettings(max_node_fraction=0.5, correlated_workloads=10),
        "clusters": {"lab": {"mode": "monitor", "nodes": 4, "node_groups": [
            {"name": "canary", "partitions": ["canary"], "nodes": ["n[12]"], "mode": "act"},
        ]}},
    })  # fmt: skip
    store = SqliteStore(settings.db_path)
    engine = Engine(settings, store, s, SystemClock(), ResponderMetrics(CollectorRegistry()))
    canary_job = lab.submit(1, "-p", "canary")
    other_job = lab.submit(1, "-p", "debug", "-w", "n4")
    try:
        [canary_node] = wait_running(lab, s, canary_job, 0, 1, 0)
        assert canary_node in {"n1", "n2"}
        assert wait_running(lab, s, other_job, 0, 1, 0) == {"n4"}
        engine.ingest(fault(canary_job, canary_node, "canary"))
        engine.ingest(fault(other_job, "n4", "debug"))
        decided = time.time()
        records = {r.workload: r for r in engine.decide_due()}
        acted, recorded = records[canary_job], records[other_job]

        assert (acted.mode, acted.outcome, acted.excluded_nodes) == ("act", Outcome.PENDING, [canary_node])
        assert acted.node_group["group"] == "canary"
        assert "node group canary: mode act (configured)" in acted.node_group["reason"]
        assert (recorded.mode, recorded.outcome, recorded.action) == ("monitor", Outcome.PLANNED, "requeue_excluding")
        assert recorded.node_group["group"] is None

        done = engine.act(acted)
        assert (done.outcome, done.verified) == (Outcome.DONE, True), done.detail
        other_node = ({"n1", "n2"} - {canary_node}).pop()
        assert wait_running(lab, s, canary_job, 1, 1, decided) == {other_node}
        untouched = s.observe("lab", other_job)
        assert (untouched.attempt, untouched.nodes, untouched.excluded_nodes) == (0, ("n4",), ())
        assert [r.outcome for r in store.pending_records()] == []
    finally:
        lab.cancel(canary_job)
        lab.cancel(other_job)
        store.close()
