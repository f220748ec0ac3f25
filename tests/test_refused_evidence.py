"""A decision the breaker refused is evidence of nothing: its nodes never become a workload's earlier
exclusions nor count toward a drain."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from responder.alerts import Notification
from responder.breaker import BreakerSettings
from responder.clock import FakeClock
from responder.engine import Engine
from responder.metrics import ResponderMetrics
from responder.model import AuditRecord
from responder.schedulers.recording import RecordingScheduler
from responder.settings import Settings
from responder.store.sqlite import SqliteStore
from trainguard.lab.payloads import alert, notification


def test_nodes_of_refused_decisions_are_never_carried_or_counted(tmp_path: Path) -> None:
    clock = FakeClock()
    store = SqliteStore(tmp_path / "tg.db")
    breaker = BreakerSettings(correlated_workloads=2, correlated_window_s=60, cooldown_s=600)
    settings = Settings(db_path=tmp_path / "tg.db", correlation_window_s=1.0, breaker=breaker)
    engine = Engine(settings, store, RecordingScheduler("done"), clock, ResponderMetrics(CollectorRegistry()))

    def fault(workload: str, host: str, attempt: str = "0") -> list[AuditRecord]:
        xid = alert("TrainguardGpuXid", "infra_gpu", workload=workload, host=host, attempt=attempt,
                    pattern="xid_79_fallen_off_bus", starts_at=clock.now())  # fmt: skip
        engine.ingest(Notification.model_validate(notification([xid])))
        clock.advance(1.5)
        return engine.decide_due()

    assert fault("101", "n1")[0].outcome == "planned"
    [refused] = fault("102", "n2")  # the second correlated failure trips the breaker
    assert refused.outcome == "skipped"
    assert refused.safety["allowed"] is False
    assert store.workload_nodes("lab", "102") == set(), "a refused decision's node is no earlier exclusion"
    assert store.node_workloads_since("lab", "n2", 0) == set(), "nor drain evidence"
    clock.advance(700)  # the breaker closes: workload 102's next attempt carries nothing refused
    [retry] = fault("102", "n3", attempt="1")
    assert retry.outcome == "planned"
    assert retry.excluded_nodes == ["n3"]
    store.close()
