"""Retention on a real store: old history is exported as JSON lines, then deleted, and the file shrinks;
recent history, pending actions and the audit API are untouched. The same deletions run on SQLite and on a
throwaway real PostgreSQL (skipped with the reason where it is missing; required under
TRAINGUARD_REQUIRE_SERVICES=1), where two replicas never prune at once."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from responder.alerts import Notification
from responder.clock import FakeClock
from responder.engine import Engine
from responder.housekeeping import retention_loop
from responder.lease import Leadership
from responder.metrics import ResponderMetrics
from responder.model import AuditRecord
from responder.schedulers.recording import RecordingScheduler
from responder.services import Services
from responder.settings import Settings
from responder.store import RecordQuery, retention
from responder.store.config import StoreSettings
from responder.store.retention import RETENTION_LOCK, PruneResult, RetentionSettings, prune, prune_postgres
from responder.store.sql import SqlStore
from responder.store.sqlite import SqliteStore
from tests import pg
from tests.conftest import Responder
from trainguard.lab.payloads import alert, nccl_storm_with_xid, notification

DAY = 86400.0


def _history(r: Responder, clock: FakeClock, incidents: int, first: int = 1000) -> None:
    for i in range(incidents):
        items = [alert("TrainguardGpuXid", "infra_gpu", workload=str(first + i), host=f"n{i % 7}",
                       pattern="xid_79_fallen_off_bus", starts_at=clock.now(), extra={"pad": "x" * 2000})]  # fmt: skip
        assert r.post(notification(items)).status_code == 200
    clock.advance(r.engine.settings.correlation_window_s + 1)
    r.engine.decide_due()


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def test_old_history_is_exported_then_deleted_and_the_file_shrinks(
    make_responder: Callable[..., Responder], tmp_path: Path
) -> None:
    clock = FakeClock()
    r = make_responder(clock=clock)
    _history(r, clock, 300)
    old_ids = {d["id"] for d in r.decisions(limit="1000")}
    clock.advance(10 * DAY)
    _history(r, clock, 5, first=5000)
    db = cast(Settings, r.engine.settings).db_path
    with r.store._locked() as conn:  # the app's own decision loop shares this connection
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = _size(db)
    export = tmp_path / "archive" / "records.jsonl"

    result = prune(db, RetentionSettings(days=7, export_path=export), clock.now())

    assert result.records == len(old_ids)
    assert result.incidents == 300
    exported = [json.loads(line) for line in export.read_text().splitlines()]
    assert {e["id"] for e in exported} == old_ids, "every deleted record is in the export first"
    remaining = r.decisions(limit="1000")
    assert {d["workload"] for d in remaining} == {str(5000 + i) for i in range(5)}
    assert r.client.get(f"/v1/decisions/{remaining[0]['id']}").status_code == 200
    assert result.freed_pages > 0
    assert _size(db) < before / 2, (before, _size(db))


def test_max_records_keeps_the_newest_and_never_a_pending_one(make_responder: Callable[..., Responder]) -> None:
    clock = FakeClock()
    r = make_responder(clock=clock)
    _history(r, clock, 20)
    clock.advance(60)
    _history(r, clock, 5, first=3000)
    with r.store._locked() as conn:
        conn.execute("UPDATE records SET outcome='pending' WHERE workload='1000'")

    prune(cast(Settings, r.engine.settings).db_path, RetentionSettings(max_records=5), clock.now())

    workloads = {d["workload"] for d in r.decisions(limit="1000")}
    assert workloads == {str(3000 + i) for i in range(5)} | {"1000"}
    assert [p.workload for p in r.store.pending_records()] == ["1000"]


def test_retention_is_off_by_default() -> None:
    assert not RetentionSettings().enabled


# -- both dialects: the same deletions on SQLite and on a real PostgreSQL -------------------------------


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    yield from pg.server()


@dataclass
class Store:
    """A fresh store of one dialect, an engine writing into it, and that dialect's ``prune``."""

    store: SqlStore
    engine: Engine
    clock: FakeClock
    prune: Callable[[RetentionSettings], PruneResult]

    @classmethod
    def open(cls, store: SqlStore, prune: Callable[[SqlStore, RetentionSettings, float], PruneResult]) -> Store:
        clock = FakeClock()
        settings = Settings(db_path=Path("unused.db"), correlation_window_s=1.0, clusters={"lab": {"mode": "monitor"}})
        engine = Engine(settings, store, RecordingScheduler("done"), clock, ResponderMetrics(CollectorRegistry()))
        return cls(store, engine, clock, lambda retain: prune(store, retain, clock.now()))

    def history(self, first: int, incidents: int) -> list[AuditRecord]:
        """``incidents`` decided incidents, of workloads (Slurm job ids) from ``first`` on: their records."""
        for i in range(incidents):
            self.engine.ingest(Notification.model_validate(nccl_storm_with_xid(2, 2, workload=str(first + i))))
        self.clock.advance(2)
        return self.engine.decide_due()

    def count(self, table: str) -> int:
        with self.store._tx() as db:
            return int(db.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"])  # noqa: S608

    def workloads(self) -> set[str]:
        return {r.workload for r in self.store.records(RecordQuery(limit=1000))}


def _sqlite(store: SqlStore, settings: RetentionSettings, now: float) -> PruneResult:
    assert isinstance(store, SqliteStore)
    return prune(store.path, settings, now)


def _postgres(store: SqlStore, settings: RetentionSettings, now: float) -> PruneResult:
    return prune_postgres(cast(Any, store).url, settings, now)


def _postgres_store(server: Any) -> Store:
    from responder.store.postgres import PostgresStore  # noqa: PLC0415

    return Store.open(PostgresStore(pg.fresh_database(server)), _postgres)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def dialect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        opened = Store.open(SqliteStore(tmp_path / "tg.db"), _sqlite)
    else:
        opened = _postgres_store(request.getfixturevalue("postgres"))
    yield opened
    opened.store.close()


def test_old_records_are_exported_then_deleted_and_a_pending_one_stays(dialect: Store, tmp_path: Path) -> None:
    old = dialect.history(100, 6)
    with dialect.store._tx() as db:
        db.execute("UPDATE records SET outcome='pending' WHERE workload='100'")
    dialect.clock.advance(10 * DAY)
    new = dialect.history(900, 3)
    export = tmp_path / "archive" / "records.jsonl"

    result = dialect.prune(RetentionSettings(days=7, export_path=export))

    gone = {r.id for r in old if r.workload != "100"}
    assert (result.records, result.exported, result.incidents, result.alerts) == (len(gone), len(gone), 6, 6 * 5)
    exported = [json.loads(line) for line in export.read_text().splitlines()]
    assert {e["id"] for e in exported} == gone, "exactly the deleted records, exported"
    assert [e["time"] for e in exported] == sorted(e["time"] for e in exported)
    assert {r.id for r in dialect.store.records(RecordQuery(limit=1000))} == {r.id for r in new} | {
        r.id for r in old if r.workload == "100"
    }
    assert {p.workload for p in dialect.store.pending_records()} == {"100"}
    assert all(dialect.store.incident(r.incident_id or "") is None for r in old)
    assert (dialect.count("alerts"), dialect.count("notifications")) == (3 * 5, 3), "the new ones are left"


def test_an_export_that_fails_deletes_nothing(dialect: Store, tmp_path: Path) -> None:
    dialect.history(100, 4)
    dialect.clock.advance(10 * DAY)
    unwritable = tmp_path / "export-is-a-directory"
    unwritable.mkdir()

    with pytest.raises(IsADirectoryError):
        dialect.prune(RetentionSettings(days=7, export_path=unwritable))

    assert dialect.workloads() == {str(100 + i) for i in range(4)}
    assert (dialect.count("alerts"), dialect.count("incidents")) == (4 * 5, 4)


def test_batches_export_each_record_once(dialect: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "BATCH", 3)
    old = []
    for day in range(4):  # records at four times: batches end between them
        old += dialect.history(100 + 10 * day, 3)
        dialect.clock.advance(DAY)
    dialect.clock.advance(10 * DAY)
    kept = dialect.history(900, 2)
    export = tmp_path / "records.jsonl"

    result = dialect.prune(RetentionSettings(days=7, export_path=export))

    ids = [json.loads(line)["id"] for line in export.read_text().splitlines()]
    assert result.records == len(ids) == len(old)
    assert sorted(ids) == sorted(r.id for r in old), "each deleted record exported once"
    assert {r.id for r in dialect.store.records(RecordQuery(limit=100))} == {r.id for r in kept}


def test_max_records_keeps_the_newest(dialect: Store) -> None:
    dialect.history(100, 4)
    dialect.clock.advance(60)
    newest = dialect.history(200, 3)

    dialect.prune(RetentionSettings(max_records=len(newest)))

    assert dialect.workloads() == {"200", "201", "202"}


def test_with_replicas_only_the_lease_holder_prunes(tmp_path: Path) -> None:
    opened = Store.open(SqliteStore(tmp_path / "tg.db"), _sqlite)
    opened.history(100, 2)
    opened.clock.advance(10 * DAY)
    registry = CollectorRegistry()
    lease = cast(Any, SimpleNamespace(holder="replica-a", settings=StoreSettings()))
    leadership = Leadership(lease, opened.clock, registry)
    settings = Settings(db_path=tmp_path / "tg.db", retention={"days": 7})
    svc = Services(settings, opened.store, opened.engine, opened.clock, ResponderMetrics(registry), registry,
                   None, None, leadership=leadership)  # fmt: skip

    async def run_for(seconds: float, until: Callable[[], bool]) -> None:
        task = asyncio.create_task(retention_loop(svc))
        for _ in range(round(seconds / 0.05)):
            if until():
                break
            await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(run_for(0.5, lambda: False))
    assert opened.workloads() == {"100", "101"}, "a follower leaves the store alone"
    leadership.became("leader", 1)
    asyncio.run(run_for(10, lambda: not opened.workloads()))
    assert opened.workloads() == set()
    opened.store.close()


# -- PostgreSQL's own: one pruning replica at a time, claims of past terms --------------------------------


@pytest.mark.postgres
def test_on_postgresql_a_replica_pruning_holds_another_off(postgres: Any, tmp_path: Path) -> None:
    import psycopg  # noqa: PLC0415

    opened = _postgres_store(postgres)
    url = cast(Any, opened.store).url
    old = opened.history(100, 2)
    opened.clock.advance(10 * DAY)
    settings = RetentionSettings(days=7, export_path=tmp_path / "x.jsonl")
    with psycopg.connect(url, autocommit=True) as other, other.transaction():
        other.execute("SELECT pg_advisory_xact_lock(%s)", (RETENTION_LOCK,))  # another replica, mid-batch
        held_off = opened.prune(settings)
    assert (held_off.contended, held_off.records, held_off.incidents) == (True, 0, 0)
    assert not (tmp_path / "x.jsonl").exists(), "nothing exported while another replica prunes"
    after = opened.prune(settings)
    opened.store.close()

    assert (after.contended, after.records, after.incidents) == (False, len(old), 2)
    assert len((tmp_path / "x.jsonl").read_text().splitlines()) == len(old)


@pytest.mark.postgres
def test_on_postgresql_claims_of_past_terms_go_and_the_current_terms_stay(postgres: Any) -> None:
    from responder.store.pg_lease import PostgresLease  # noqa: PLC0415
    from responder.store.postgres import PostgresStore  # noqa: PLC0415

    url = pg.fresh_database(postgres)
    store = PostgresStore(url)
    lease = PostgresLease(store, StoreSettings(url=url), "a")
    assert lease.try_acquire() == 1
    assert lease.claim("old/requeue/")
    lease.close()
    assert lease.try_acquire() == 2
    assert lease.claim("now/requeue/")

    prune_postgres(url, RetentionSettings(days=1), time.time() + 2 * DAY)
    claims = {row["key"] for row in store._query("SELECT key FROM action_claims")}
    lease.close()
    store.close()

    assert claims == {"now/requeue/"}
