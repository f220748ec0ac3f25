"""An action whose scheduler cannot be asked stays ``pending`` and is tried again (``responder/acting.py``).

The scheduler here is a stand-in that answers "could not ask Slurm" a set number of times; the real
case, slurmctld killed mid-incident, is tests/test_slurmctld_killed.py.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from responder import acting
from responder.alerts import Notification
from responder.clock import Clock, FakeClock, SystemClock
from responder.engine import Engine
from responder.metrics import ResponderMetrics
from responder.model import AuditRecord
from responder.schedulers.base import ActionRequest, ActionResult, WorkloadObservation, WorkloadState
from responder.settings import ClusterSettings, Settings
from responder.store.sqlite import SqliteStore
from trainguard.lab.payloads import alert, notification


class Unreachable:
    """Answers like an adapter whose scheduler is down (``retry``) for the first ``down`` calls, then acts."""

    name = "unreachable"

    def __init__(self, down: int) -> None:
        self.down = down
        self.calls: list[ActionRequest] = []
        self._lock = threading.Lock()

    def act(self, request: ActionRequest) -> ActionResult:
        with self._lock:
            self.calls.append(request)
            if len(self.calls) <= self.down:
                return ActionResult("failed", "slurm: squeue --json: Unable to contact slurm controller", retry=True)
        return ActionResult("done", "requeued", verified=True, excluded_nodes=request.exclude_nodes)

    def observe(self, cluster: str, workload: str) -> WorkloadObservation:
        return WorkloadObservation(workload=workload, state=WorkloadState.UNKNOWN)


def build(tmp_path: Path, scheduler: Unreachable, clock: Clock, **settings: Any) -> tuple[Engine, CollectorRegistry]:
    registry = CollectorRegistry()
    config = Settings(db_path=tmp_path / "tg.db", correlation_window_s=0.0,
                      clusters={"lab": ClusterSettings(mode="act", nodes=8)}, **settings)  # fmt: skip
    return Engine(config, SqliteStore(tmp_path / "tg.db"), scheduler, clock, ResponderMetrics(registry)), registry


def decided(engine: Engine, clock: Clock) -> AuditRecord:
    xid = alert("TrainguardGpuXid", "infra_gpu", host="n2", pattern="xid_79_fallen_off_bus", starts_at=clock.now())
    engine.ingest(Notification.model_validate(notification([xid])))
    [record] = engine.decide_due()
    assert record.outcome == "pending"
    return record


def retries(registry: CollectorRegistry) -> float:
    labels = {"cluster": "lab", "action": "requeue_excluding"}
    return registry.get_sample_value("trainguard_responder_action_retries_total", labels) or 0.0


def test_kept_pending_while_unreachable_then_failed_after_action_retry_s(tmp_path: Path) -> None:
    clock = FakeClock()
    engine, registry = build(tmp_path, Unreachable(down=1000), clock, action_retry_s=60)
    record = decided(engine, clock)
    for _ in range(3):
        record = engine.act(record)
        assert record.outcome == "pending"
        assert "trying again until" in record.detail
        assert engine.store.record(record.id).outcome == "pending"  # type: ignore[union-attr]
        clock.advance(20)
    assert retries(registry) == 3
    record = engine.act(record)  # 60 s after the decision: given up
    assert record.outcome == "failed"
    assert "Unable to contact slurm controller" in record.detail
    failed = {"cluster": "lab", "action": "requeue_excluding"}
    assert registry.get_sample_value("trainguard_responder_actions_failed_total", failed) == 1


def test_zero_action_retry_s_fails_at_once(tmp_path: Path) -> None:
    clock = FakeClock()
    engine, registry = build(tmp_path, Unreachable(down=1), clock, action_retry_s=0)
    assert engine.act(decided(engine, clock)).outcome == "failed"
    assert retries(registry) == 0


def test_the_loop_tries_again_and_acts_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(acting, "RETRY_PAUSE_S", 0.01)
    scheduler = Unreachable(down=3)
    engine, registry = build(tmp_path, scheduler, SystemClock())
    record = decided(engine, SystemClock())

    async def main() -> None:
        loop = asyncio.create_task(engine.run())  # resumes the pending record, then tries it again
        for _ in range(500):
            stored = await asyncio.to_thread(engine.store.record, record.id)
            if stored is not None and stored.outcome != "pending":
                break
            await asyncio.sleep(0.01)
        loop.cancel()
        await engine.drain()

    asyncio.run(main())
    done = engine.store.record(record.id)
    assert done is not None
    assert (done.outcome, done.verified, done.excluded_nodes) == ("done", True, ["n2"])
    assert len(scheduler.calls) == 4  # three tries found Slurm down, the fourth acted; nothing after
    assert retries(registry) == 3


def test_shutdown_leaves_a_waiting_action_pending_for_the_next_start(tmp_path: Path) -> None:
    down = Unreachable(down=1000)
    engine, _ = build(tmp_path, down, SystemClock())
    record = decided(engine, SystemClock())

    async def main() -> float:
        loop = asyncio.create_task(engine.run())
        for _ in range(500):
            if down.calls:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # now in the pause before the next try
        loop.cancel()
        started = asyncio.get_running_loop().time()
        await engine.drain()
        return asyncio.get_running_loop().time() - started

    assert asyncio.run(main()) < acting.RETRY_PAUSE_S  # the pause does not hold the shutdown
    assert engine.store.record(record.id).outcome == "pending"  # type: ignore[union-attr]

    scheduler = Unreachable(down=0)
    second, _ = build(tmp_path, scheduler, SystemClock())
    [finished] = second.resume_pending()
    assert finished.outcome == "done"
    assert len(scheduler.calls) == 1
