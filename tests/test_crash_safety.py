"""Crash safety: an accepted alert is never lost and an action is never repeated, whatever is killed when."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry

from responder.clock import FakeClock
from responder.engine import Engine
from responder.metrics import ResponderMetrics
from responder.schedulers.recording import RecordingScheduler
from responder.settings import Settings
from responder.store.sqlite import SqliteStore
from tests.services import wait_until
from trainguard.lab.payloads import nccl_storm_with_xid
from trainguard.lab.server import ServerProcess
from trainguard.lab.stack import scraped_value


def _records(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT kind, action FROM records").fetchall()


def _decisions(url: str) -> list[dict[str, object]]:
    body = httpx.get(f"{url}/v1/decisions", timeout=5).json()
    return [d for d in body["decisions"] if d["kind"] == "decision"]


def _open_incidents(url: str) -> float:
    return scraped_value(url, "trainguard_responder_open_incidents")


def test_sigkill_after_accept_before_decide_gives_exactly_one_decision(tmp_path: Path) -> None:
    db = tmp_path / "tg.db"
    payload = nccl_storm_with_xid(ranks_per_host=4, hosts=4, bad_host="gpu-004")
    # A long correlation window keeps the incident open while we kill the server.
    server = ServerProcess(db, env={"TRAINGUARD_CORRELATION_WINDOW_S": "4"})
    response = httpx.post(f"{server.url}/v1/alerts", json=payload, timeout=10)
    assert response.status_code == 200
    assert response.json()["new"] == 17
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    assert _records(db) == []  # accepted, not yet decided

    restarted = ServerProcess(db, env={"TRAINGUARD_CORRELATION_WINDOW_S": "4"})
    try:
        # Alertmanager re-sends the group after the outage: still duplicates.
        again = httpx.post(f"{restarted.url}/v1/alerts", json=payload, timeout=10).json()
        assert again["duplicates"] == 17
        # Decided once the incident is no longer open: nothing more can be decided for it.
        wait_until(lambda: _decisions(restarted.url) and not _open_incidents(restarted.url), 15, what="the decision")
        [decision] = _decisions(restarted.url)
        assert decision["action"] == "requeue_excluding"
        assert decision["excluded_nodes"] == ["gpu-004"]
    finally:
        restarted.kill()

    # Killed after the decision: a third life decides nothing new.
    third = ServerProcess(db)
    try:
        resent = httpx.post(f"{third.url}/v1/alerts", json=payload, timeout=10).json()
        assert (resent["duplicates"], resent["incidents_opened"]) == (17, [])  # so nothing is left to decide
        assert _open_incidents(third.url) == 0
        assert len(_decisions(third.url)) == 1
    finally:
        third.stop()


def test_action_interrupted_after_decision_is_finished_once_on_restart(tmp_path: Path) -> None:
    """A crash between writing a ``pending`` act-mode record and the scheduler call: the next start
    carries the action out once; a further restart does not repeat it."""
    db = tmp_path / "tg.db"
    settings = Settings(db_path=db, correlation_window_s=0.0)
    clock = FakeClock()

    def engine(scheduler: RecordingScheduler) -> tuple[Engine, SqliteStore]:
        store = SqliteStore(db)
        return Engine(settings, store, scheduler, clock, ResponderMetrics(CollectorRegistry())), store

    first_scheduler = RecordingScheduler(outcome="done")
    first, store = engine(first_scheduler)
    first.set_mode("lab", "act", "test")
    from responder.alerts import Notification  # noqa: PLC0415

    first.ingest(Notification.model_validate(nccl_storm_with_xid(ranks_per_host=1, hosts=2, bad_host="gpu-001")))
    [record] = first.decide_due()  # decided and written as pending ...
    assert record.outcome == "pending"
    store.close()  # ... and the process dies before calling the scheduler.
    assert first_scheduler.requests == []

    second_scheduler = RecordingScheduler(outcome="done")
    second, store = engine(second_scheduler)
    [finished] = second.resume_pending()
    assert finished.outcome == "done"
    assert len(second_scheduler.requests) == 1
    assert second.decide_due() == []
    store.close()

    third_scheduler = RecordingScheduler(outcome="done")
    third, store = engine(third_scheduler)
    assert third.resume_pending() == []
    assert third_scheduler.requests == []
    store.close()
