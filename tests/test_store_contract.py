"""The store contract on both dialects: SQLite (always) and PostgreSQL (a throwaway real server).

PostgreSQL tests skip with the reason where PostgreSQL or psycopg is missing, and fail instead under
TRAINGUARD_REQUIRE_SERVICES=1 (CI). The last tests are PostgreSQL's alone: two writers, the lease and
its fence (what makes two replicas on one database safe).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from responder import lease
from responder.alerts import Notification
from responder.clock import FakeClock
from responder.engine import Engine
from responder.errors import ConfigError
from responder.metrics import ResponderMetrics
from responder.model import Action, AuditRecord, Outcome
from responder.schedulers.recording import RecordingScheduler
from responder.settings import Settings, load_settings
from responder.store import RecordQuery
from responder.store.config import StoreSettings
from responder.store.sql import SqlStore
from responder.store.sqlite import SqliteStore
from tests import pg
from trainguard.lab.payloads import alert, nccl_storm_with_xid, notification


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    yield from pg.server()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], SqlStore]]:
    """A function that opens another handle on one fresh store (several handles: several writers)."""
    opened: list[SqlStore] = []
    if request.param == "sqlite":

        def build() -> SqlStore:
            opened.append(SqliteStore(tmp_path / "tg.db"))
            return opened[-1]
    else:
        from responder.store.postgres import PostgresStore  # noqa: PLC0415

        url = pg.fresh_database(request.getfixturevalue("postgres"))

        def build() -> SqlStore:
            opened.append(PostgresStore(url))
            return opened[-1]

    yield build
    for store in opened:
        store.close()


def _engine(store: SqlStore, clock: FakeClock, mode: str = "monitor") -> Engine:
    settings = Settings(db_path=Path("unused.db"), correlation_window_s=1.0, clusters={"lab": {"mode": mode}})
    return Engine(settings, store, RecordingScheduler("done"), clock, ResponderMetrics(CollectorRegistry()))


def _storm(workload: str = "4242", bad_host: str = "gpu-002") -> Notification:
    return Notification.model_validate(nccl_storm_with_xid(ranks_per_host=2, hosts=2, bad_host=bad_host,
                                                           workload=workload))  # fmt: skip


def test_ingest_stores_each_alert_once_and_opens_one_incident(open_store: Callable[[], SqlStore]) -> None:
    store, clock = open_store(), FakeClock()
    engine = _engine(store, clock)
    storm = _storm()
    first = engine.ingest(storm)
    again = engine.ingest(storm)  # Alertmanager's re-send
    assert (first.new, first.duplicates, len(first.opened_incidents)) == (5, 0, 1)
    assert (again.new, again.duplicates, again.opened_incidents) == (0, 5, ())
    assert store.open_incident_count() == 1
    [incident_id] = first.opened_incidents
    assert len(store.incident_alerts(incident_id)) == 5
    assert store.next_deadline() == pytest.approx(clock.now() + 1.0)
    assert store.due_incidents(clock.now()) == []


def test_decisions_are_written_once_and_read_back_newest_first(open_store: Callable[[], SqlStore]) -> None:
    store, clock = open_store(), FakeClock()
    engine = _engine(store, clock, mode="act")
    engine.ingest(_storm("1"))
    clock.advance(0.5)
    engine.ingest(_storm("2", bad_host="gpu-001"))  # another node: no drain from two workloads' blame
    clock.advance(2)
    records = engine.decide_due()
    assert [r.workload for r in records] == ["1", "2"]
    assert all(r.outcome == Outcome.PENDING for r in records)
    assert [r.workload for r in store.pending_records()] == ["1", "2"]
    incident = store.incident(records[0].incident_id or "")
    assert incident is not None
    assert incident.state == "decided"
    assert store.decide(incident, [], {}, clock.now()) is False  # never decided twice
    assert [r.workload for r in store.records(RecordQuery(kind="decision"))] == ["2", "1"]
    assert [r.workload for r in store.records(RecordQuery(kind="decision", workload="1"))] == ["1"]
    done = engine.act(records[0])
    assert done.outcome == Outcome.DONE
    stored = store.record(done.id)
    assert stored is not None
    assert stored.outcome == Outcome.DONE
    assert [r.workload for r in store.pending_records()] == ["2"]
    assert store.update_outcome_if(records[1], expected=Outcome.AWAITING) is False
    assert store.workload_nodes("lab", "1") == {"gpu-002"}
    assert store.actions_since("lab", "act", 0) == 2
    assert store.workloads_failing_since("lab", 0) == {"1", "2"}


def test_modes_reviews_breaker(open_store: Callable[[], SqlStore]) -> None:
    store = open_store()
    assert store.get_mode("lab") is None
    store.set_mode("lab", "act", 1.0, "test")
    store.set_mode("lab", "approve", 2.0, "test")
    assert store.modes() == {"lab": "approve"}
    clock = FakeClock()
    engine = _engine(store, clock)
    engine.ingest(_storm())
    clock.advance(2)
    [record] = engine.decide_due()
    store.add_review(record.id, "wrong", "", 3.0)
    store.add_review(record.id, "correct", "second look", 4.0)
    assert [r["verdict"] for r in store.reviews(record.id)] == ["wrong", "correct"]
    precision = store.precision_by_pattern()
    assert set(precision) == set(record.patterns)
    assert all(p == {"reviewed": 1, "correct": 1, "precision": 1.0} for p in precision.values())
    assert store.last_trip("lab") is None
    store.record_trip("lab", 5.0, "too many actions")
    assert store.last_trip("lab") == (5.0, "too many actions")
    assert store.tripped_clusters() == ["lab"]
    store.ping()


def test_group_modes_signals_reviewed_decisions_and_drains(open_store: Callable[[], SqlStore]) -> None:
    """The ledger's and node groups' queries, which use each dialect's JSON functions."""
    store, clock = open_store(), FakeClock()
    store.set_group_mode("lab", "canary", "act", 1.0, "test")
    store.set_group_mode("lab", "canary", "monitor", 2.0, "test")
    assert store.group_modes("lab") == {"canary": "monitor"}
    assert store.group_modes("other") == {}
    engine = _engine(store, clock)
    engine.ingest(_storm())
    clock.advance(2)
    [record] = engine.decide_due()
    signals = {node: cats for node, _, _, cats in store.implication_signals_since("lab", 0)}
    assert signals == {"gpu-002": ("collective_timeout", "infra_gpu")}  # its XID and its own ranks' timeout
    store.add_review(record.id, "wrong", "", 3.0)
    store.add_review(record.id, "correct", "", 4.0)
    assert [(r.id, verdict) for r, verdict in store.reviewed_decisions()] == [(record.id, "correct")]
    assert store.drain_recorded_since("lab", "gpu-002", 0) is False
    planned = dataclasses.replace(record, id="drain-1", action=Action.DRAIN_NODE, node="gpu-002",
                                  outcome=Outcome.PLANNED)  # fmt: skip
    store.add_record(planned)
    assert store.drain_recorded_since("lab", "gpu-002", 0) is True
    assert store.drain_recorded_since("lab", "gpu-002", 0, real_only=True) is False  # only planned (monitor)
    store.add_record(dataclasses.replace(planned, id="drain-2", incident_id="inc-2", outcome=Outcome.DONE))
    assert store.drain_recorded_since("lab", "gpu-002", 0, real_only=True) is True


def test_two_writers_decide_an_incident_once(open_store: Callable[[], SqlStore]) -> None:
    """Two handles (two replicas) ingest the same alerts and race to decide: one decision, one incident."""
    clock = FakeClock()
    engines = [_engine(open_store(), clock, mode="act") for _ in range(2)]
    storm = _storm()
    for engine in engines:
        engine.ingest(storm)
    clock.advance(2)
    barrier = threading.Barrier(2)
    results: list[list[AuditRecord]] = []

    def replica(engine: Engine) -> None:
        barrier.wait()
        results.append(engine.decide_due())

    threads = [threading.Thread(target=replica, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(len(r) for r in results) == [0, 1]
    store = engines[0].store
    assert store.open_incident_count() == 0
    [decision] = store.records(RecordQuery(kind="decision"))
    assert len(store.incident_alerts(decision.incident_id or "")) == 5


# -- PostgreSQL's own: the lease and its fence -----------------------------------------------------


@pytest.fixture
def pg_url(postgres: Any) -> str:
    """A fresh database; the tests that use it are marked ``postgres`` below."""
    return pg.fresh_database(postgres)


@pytest.mark.postgres
def test_lease_is_held_by_one_and_taken_over_with_a_new_term(pg_url: str) -> None:
    from responder.store.pg_lease import PostgresLease  # noqa: PLC0415
    from responder.store.postgres import PostgresStore  # noqa: PLC0415

    settings = StoreSettings(url=pg_url, lease_s=6, renew_s=1, poll_s=0.5)
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    lease_a, lease_b = PostgresLease(a, settings, "a"), PostgresLease(b, settings, "b")
    try:
        assert lease_a.try_acquire() == 1
        assert lease_b.try_acquire() is None
        assert lease_a.renew() is True
        row = lease_b.current()
        assert row is not None
        assert (row["holder"], row["term"]) == ("a", 1)
        lease_a.close()  # the session ends: the lock is free at once
        assert lease_b.try_acquire() == 2
        assert lease_a.renew() is False
    finally:
        lease_a.close()
        lease_b.close()
        a.close()
        b.close()


@pytest.mark.postgres
def test_a_deposed_leader_cannot_decide_claim_or_finish(pg_url: str) -> None:
    """The fence: after a new term, the old leader's decision, claim and outcome write do not count."""
    from responder.store.pg_lease import PostgresLease  # noqa: PLC0415
    from responder.store.postgres import PostgresStore  # noqa: PLC0415

    settings = StoreSettings(url=pg_url, lease_s=6, renew_s=1, poll_s=0.5)
    old, new = PostgresStore(pg_url), PostgresStore(pg_url)
    old_lease, new_lease = PostgresLease(old, settings, "old"), PostgresLease(new, settings, "new")
    clock = FakeClock()
    try:
        assert old_lease.try_acquire() == 1
        engine = _engine(old, clock, mode="act")
        engine.ingest(_storm("1"))
        engine.ingest(_storm("2", bad_host="gpu-001"))
        clock.advance(2)
        first = engine.decide(old.due_incidents(clock.now())[0])
        [pending] = first
        # Not yet claimed: an orphan to the leader (as an approval answered on a follower would be).
        assert [r.id for r in old.unclaimed_pending(clock.now() + 1)] == [pending.id]
        assert old.unclaimed_pending(clock.now() - 1) == []
        assert old_lease.claim(f"{pending.incident_id}/{pending.action}/") is True
        assert old.unclaimed_pending(clock.now() + 1) == []
        assert old_lease.claim("k1") is True
        old_lease.close()
        assert new_lease.try_acquire() == 2
        # The old leader wakes up: it may not decide, claim, or finish the pending action.
        assert engine.decide(old.due_incidents(clock.now())[0]) == []
        assert old.claim_action("k1", "old") is False
        assert old.claim_action("k2", "old") is False
        pending.outcome = Outcome.FAILED
        old.update_outcome(pending)
        assert new.record(pending.id).outcome == Outcome.PENDING  # type: ignore[union-attr]
        # The new leader claims the same action (a later term wins) and finishes it.
        assert new_lease.claim("k1") is True
        assert new_lease.claim("k1") is True  # the same term may retry its own claim
        [resumed] = _engine(new, clock, mode="act").resume_pending()
        assert resumed.outcome == Outcome.DONE
        assert new.record(pending.id).outcome == Outcome.DONE  # type: ignore[union-attr]
        # Late, the old leader's adapter call fails: its outcome does not replace the new leader's.
        old.update_outcome(pending)
        assert new.record(pending.id).outcome == Outcome.DONE  # type: ignore[union-attr]
    finally:
        old_lease.close()
        new_lease.close()
        old.close()
        new.close()


@pytest.mark.postgres
def test_alerts_of_a_notification_sent_to_both_replicas_are_stored_once(pg_url: str) -> None:
    from responder.store.postgres import PostgresStore  # noqa: PLC0415

    stores = [PostgresStore(pg_url), PostgresStore(pg_url)]
    clock = FakeClock()
    payload = Notification.model_validate(notification([alert("TrainguardRankHang", "hang", host="gpu-001")]))
    try:
        results = [_engine(s, clock).ingest(payload) for s in stores]
        assert [(r.new, r.duplicates) for r in results] == [(1, 0), (0, 1)]
        assert stores[1].open_incident_count() == 1
    finally:
        for store in stores:
            store.close()


@pytest.mark.parametrize(
    ("url", "extra", "message"),
    [
        ("mysql://db/trainguard", {}, r"store\.url: .*postgresql://"),
        ("postgresql://tg:secret@db/trainguard", {}, r"store\.url: .*must not hold a password"),
        ("postgresql://tg@db", {}, r"store\.url: .*name the database"),
        ("postgresql://tg@db/trainguard", {"TRAINGUARD_STORE__RENEW_S": "5"}, r"store: .*renew_s \(5\)"),
    ],
)
def test_store_settings_are_validated_with_the_key_named(
    monkeypatch: pytest.MonkeyPatch, url: str, extra: dict[str, str], message: str
) -> None:
    monkeypatch.setenv("TRAINGUARD_STORE__URL", url)
    for key, value in extra.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=message):
        load_settings()


def test_without_a_store_url_the_store_is_sqlite_and_there_is_no_lease(tmp_path: Path) -> None:
    store, no_lease = lease.open_store(Settings(db_path=tmp_path / "tg.db"))
    try:
        assert isinstance(store, SqliteStore)
        assert no_lease is None
    finally:
        store.close()
