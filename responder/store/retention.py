"""Retention: delete history older than a horizon, after exporting its audit records, and give the space back.

The horizon is the later of ``days`` ago and the time of the ``max_records``-th newest record. Older
audit records (never a ``pending`` one), decided incidents with their alerts, notifications, node
implications, reviews and breaker trips are deleted in one transaction. When ``export_path`` is set
the records go there first, one JSON object per line (the API's shape), fsynced before anything is
deleted: with it, or with the Loki mirror, the audit trail stays complete. Freed pages go back to the
file system through ``PRAGMA incremental_vacuum`` (files created since schema version 2).

It runs on its own connection, so the responder's own lock is not taken; SQLite's write lock is held
for one short transaction per ``BATCH`` records.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from responder.model import AuditRecord


class RetentionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    days: float | None = Field(None, gt=0, description="delete history older than this; none: keep forever")
    max_records: int | None = Field(None, ge=1, description="keep at most this many audit records")
    export_path: Path | None = Field(None, description="append deleted records here as JSON lines first")
    interval_s: float = Field(3600.0, ge=1, description="how often retention runs")

    @property
    def enabled(self) -> bool:
        return self.days is not None or self.max_records is not None


@dataclass(frozen=True, slots=True)
class PruneResult:
    horizon: float | None
    records: int
    incidents: int
    alerts: int
    exported: int
    freed_pages: int


def horizon(db: sqlite3.Connection, settings: RetentionSettings, now: float) -> float | None:
    """The time before which history goes; None when nothing is to go."""
    limits = []
    if settings.days is not None:
        limits.append(now - settings.days * 86400)
    if settings.max_records is not None:
        row = db.execute(
            "SELECT time FROM records ORDER BY time DESC LIMIT 1 OFFSET ?", (settings.max_records - 1,)
        ).fetchone()
        if row is not None:
            limits.append(float(row[0]))
    return max(limits) if limits else None


BATCH = 5000  # records per transaction: the write lock is never held long enough to delay the webhook


def prune(path: Path, settings: RetentionSettings, now: float, busy_timeout_s: float = 5.0) -> PruneResult:
    """Apply ``settings`` to the store at ``path``; see the module docstring."""
    db = sqlite3.connect(str(path), isolation_level=None, timeout=busy_timeout_s)
    totals = [0, 0, 0, 0]
    try:
        cut = horizon(db, settings, now)
        while cut is not None:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT time FROM records WHERE time < ? ORDER BY time LIMIT 1 OFFSET ?",
                                 (cut, BATCH)).fetchone()  # fmt: skip
                step = cut if row is None else float(row[0])
                counts = _delete(db, step, settings.export_path)
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            totals = [t + c for t, c in zip(totals, counts, strict=True)]
            if step >= cut:
                break
        before = db.execute("PRAGMA freelist_count").fetchone()[0]
        db.executescript("PRAGMA incremental_vacuum;")  # one page per step: executescript steps to the end
        freed = before - db.execute("PRAGMA freelist_count").fetchone()[0]
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    records, incidents, alerts, exported = totals
    return PruneResult(cut, records, incidents, alerts, exported, freed)


def _delete(db: sqlite3.Connection, cut: float, export_path: Path | None) -> tuple[int, int, int, int]:
    """Delete what is older than ``cut``: (records, incidents, alerts, exported)."""
    old = "time < ? AND outcome != 'pending'"
    exported = 0
    if export_path is not None:
        exported = _export(db.execute(f"SELECT body FROM records WHERE {old} ORDER BY time", (cut,)), export_path)  # noqa: S608
    db.execute(f"DELETE FROM reviews WHERE record_id IN (SELECT id FROM records WHERE {old})", (cut,))  # noqa: S608
    records = db.execute(f"DELETE FROM records WHERE {old}", (cut,)).rowcount  # noqa: S608
    gone = "SELECT id FROM incidents WHERE state = 'decided' AND decided_at < ?"
    alerts = db.execute(f"DELETE FROM alerts WHERE incident_id IN ({gone})", (cut,)).rowcount  # noqa: S608
    alerts += db.execute("DELETE FROM alerts WHERE incident_id IS NULL AND received_at < ?", (cut,)).rowcount
    incidents = db.execute("DELETE FROM incidents WHERE state = 'decided' AND decided_at < ?", (cut,)).rowcount
    db.execute("DELETE FROM notifications WHERE received_at < ?", (cut,))
    db.execute("DELETE FROM implications WHERE time < ?", (cut,))
    db.execute("DELETE FROM breaker_trips WHERE time < ?", (cut,))
    return records, incidents, alerts, exported


def _export(rows: sqlite3.Cursor, path: Path) -> int:
    """Append each record as a JSON line and fsync; raises (and nothing is deleted) if that fails."""
    count = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        for (body,) in rows:
            out.write(json.dumps(AuditRecord.from_row(json.loads(body)).to_json(), sort_keys=True) + "\n")
            count += 1
        out.flush()
        os.fsync(out.fileno())
    return count
