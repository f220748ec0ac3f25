"""Retention on a real store: old history is exported as JSON lines, then deleted, and the file shrinks;
recent history, pending actions and the audit API are untouched."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import cast

from responder.clock import FakeClock
from responder.settings import Settings
from responder.store.retention import RetentionSettings, prune
from tests.conftest import Responder
from trainguard.lab.payloads import alert, notification

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
    r.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
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
    r.store._db.execute("UPDATE records SET outcome='pending' WHERE workload='1000'")

    prune(cast(Settings, r.engine.settings).db_path, RetentionSettings(max_records=5), clock.now())

    workloads = {d["workload"] for d in r.decisions(limit="1000")}
    assert workloads == {str(3000 + i) for i in range(5)} | {"1000"}
    assert [p.workload for p in r.store.pending_records()] == ["1000"]


def test_retention_is_off_by_default() -> None:
    assert not RetentionSettings().enabled
