"""The circuit breaker and the isolation ledger, driven through the engine on a fake clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from responder import isolation
from responder.alerts import Notification
from responder.breaker import BreakerSettings
from responder.clock import FakeClock
from responder.engine import Engine
from responder.isolation import LedgerSettings
from responder.metrics import ResponderMetrics
from responder.model import AuditRecord, Mode
from responder.schedulers.recording import RecordingScheduler
from responder.settings import ClusterSettings, Settings
from responder.store.sqlite import SqliteStore
from trainguard.lab.payloads import alert, notification


class Harness:
    def __init__(self, tmp_path: Path, **settings: Any) -> None:
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.store = SqliteStore(tmp_path / "tg.db")
        self.settings = Settings(db_path=tmp_path / "tg.db", correlation_window_s=1.0, **settings)
        self.engine = Engine(
            self.settings, self.store, RecordingScheduler("done"), self.clock, ResponderMetrics(self.registry)
        )

    def fault(self, workload: str, host: str, attempt: str = "0") -> list[AuditRecord]:
        xid = alert("TrainguardGpuXid", "infra_gpu", workload=workload, host=host, attempt=attempt,
                    pattern="xid_79_fallen_off_bus", starts_at=self.clock.now())  # fmt: skip
        self.engine.ingest(Notification.model_validate(notification([xid])))
        self.clock.advance(1.5)
        return self.engine.decide_due()


def test_correlated_failures_trip_the_breaker_then_it_closes(tmp_path: Path) -> None:
    h = Harness(
        tmp_path,
        breaker=BreakerSettings(correlated_workloads=3, correlated_window_s=60, cooldown_s=300),
        clusters={"lab": ClusterSettings()},  # metrics name configured clusters only
    )
    assert h.fault("101", "n1")[0].outcome == "planned"
    assert h.fault("102", "n2")[0].outcome == "planned"
    [third] = h.fault("103", "n3")
    assert third.outcome == "skipped"
    assert "shared cause" in third.reason
    assert third.safety["allowed"] is False
    assert h.registry.get_sample_value("trainguard_responder_breaker_open", {"cluster": "lab"}) == 1
    h.clock.advance(100)
    [during] = h.fault("104", "n4")
    assert during.outcome == "skipped"
    assert "open since" in during.reason
    h.clock.advance(400)
    [after] = h.fault("105", "n5")
    assert after.outcome == "planned"


def test_node_share_limit_refuses_isolating_more_nodes(tmp_path: Path) -> None:
    h = Harness(tmp_path, clusters={"lab": ClusterSettings(nodes=10)},
                breaker=BreakerSettings(max_node_fraction=0.1, correlated_workloads=10))  # fmt: skip
    assert h.fault("101", "n1")[0].outcome == "planned"
    [refused] = h.fault("102", "n2")
    assert refused.outcome == "skipped"
    assert "limit 1" in refused.reason
    # The same node again is not a new isolation.
    assert h.fault("103", "n1")[0].outcome == "planned"


def test_actions_per_window(tmp_path: Path) -> None:
    h = Harness(tmp_path, breaker=BreakerSettings(max_actions=2, window_s=600, correlated_workloads=10,
                                                  max_nodes_without_size=100))  # fmt: skip
    outcomes = [h.fault(str(100 + i), f"n{i}")[0].outcome for i in range(3)]
    assert outcomes == ["planned", "planned", "skipped"]
    h.clock.advance(700)
    assert h.fault("200", "n9")[0].outcome == "planned"


def test_node_blamed_by_two_workloads_gets_one_drain_recommendation(tmp_path: Path) -> None:
    h = Harness(tmp_path, breaker=BreakerSettings(correlated_workloads=10, max_nodes_without_size=100),
                ledger=LedgerSettings(drain_after_workloads=2))  # fmt: skip
    assert [r.action for r in h.fault("101", "n7")] == ["requeue_excluding"]
    second = h.fault("102", "n7")
    assert [r.action for r in second] == ["requeue_excluding", "drain_node"]
    drain = second[1]
    assert drain.node == "n7"
    assert "101" in drain.reason
    assert "102" in drain.reason
    assert [r.action for r in h.fault("103", "n7")] == ["requeue_excluding"]  # already recommended


def test_a_drain_only_planned_in_monitor_mode_is_sent_after_switching_to_act(tmp_path: Path) -> None:
    h = Harness(tmp_path, breaker=BreakerSettings(correlated_workloads=10, max_nodes_without_size=100),
                ledger=LedgerSettings(drain_after_workloads=2))  # fmt: skip
    h.fault("101", "n7")
    planned = h.fault("102", "n7")
    assert [(r.action, r.outcome) for r in planned] == [("requeue_excluding", "planned"), ("drain_node", "planned")]
    h.engine.set_mode("lab", Mode.ACT, "test")
    acted = h.fault("103", "n7")
    assert [(r.action, r.outcome) for r in acted] == [("requeue_excluding", "pending"), ("drain_node", "pending")]
    assert acted[1].node == "n7"  # sent to the scheduler (pending until its answer), not only planned
    # Once sent, it is not sent again.
    assert [r.action for r in h.fault("104", "n7")] == ["requeue_excluding"]


def test_reputation_decays_with_half_life(tmp_path: Path) -> None:
    h = Harness(tmp_path, breaker=BreakerSettings(correlated_workloads=10))
    h.fault("101", "n3")
    ledger = LedgerSettings(reputation_half_life_s=3600)
    assert isolation.reputation(h.store, "lab", h.clock.now(), ledger)["n3"] == pytest.approx(1.0)
    h.clock.advance(3600)
    assert isolation.reputation(h.store, "lab", h.clock.now(), ledger)["n3"] == pytest.approx(0.5)


def test_sinks_see_every_record_and_a_failing_sink_harms_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path, breaker=BreakerSettings(correlated_workloads=10))
    seen: list[str] = []

    def broken(record: AuditRecord) -> None:
        raise RuntimeError("sink down")

    h.engine.sinks += [broken, lambda record: seen.append(record.action)]
    records = h.fault("101", "n1")
    assert [r.action for r in records] == ["requeue_excluding"]
    assert seen == ["requeue_excluding"]
