"""Retention: delete history older than a horizon, after exporting its audit records, on either store.

The horizon is the later of ``days`` ago and the time of the ``max_records``-th newest record. Older
audit records (never a ``pending`` one), decided incidents with their alerts, notifications, node
implications, reviews and breaker trips are deleted, one transaction per ``BATCH`` records. When
``export_path`` is set, the records a batch deletes (``DELETE ... RETURNING``: exactly those) are
appended there, one JSON object per line (the API's shape), and fsynced before the batch commits: with
it, or with the Loki mirror, the audit trail stays complete (a failed commit at worst exports a record
twice, never loses one).

The statements are the same on both dialects (``?`` placeholders); each runs on its own connection, so
the responder's own lock is not taken.

* SQLite (``prune``): the write lock is held for one short transaction per batch; freed pages go back
  to the file system through ``PRAGMA incremental_vacuum`` (files created since schema version 2).
* PostgreSQL (``prune_postgres``): every batch first takes the transaction-level advisory lock
  ``RETENTION_LOCK`` with ``pg_try_advisory_xact_lock``. Two replicas never prune at once, whatever
  their roles: if another holds it, this run stops and leaves the rest to it (``contended``). Action
  claims of past lease terms go too. Space is reclaimed by PostgreSQL's autovacuum, not here.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from responder.model import AuditRecord
from responder.store.sql import Connection

RETENTION_LOCK = 0x7472_6764_0000_0003  # "trgd" 3: one pruning replica at a time (1: the lease, 2: the schema)


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
    contended: bool = False  # PostgreSQL: another replica held the retention lock; the rest is left to it


def horizon(db: Connection, settings: RetentionSettings, now: float) -> float | None:
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
    """Apply ``settings`` to the SQLite store at ``path``; see the module docstring."""
    db = sqlite3.connect(str(path), isolation_level=None, timeout=busy_timeout_s)
    try:
        cut, totals, _ = _batches(db, lambda: _immediate(db), settings, now)
        before = db.execute("PRAGMA freelist_count").fetchone()[0]
        db.executescript("PRAGMA incremental_vacuum;")  # one page per step: executescript steps to the end
        freed = before - db.execute("PRAGMA freelist_count").fetchone()[0]
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return PruneResult(cut, *totals, freed_pages=freed)


def prune_postgres(
    url: str, settings: RetentionSettings, now: float, busy_timeout_s: float = 5.0, connect_timeout_s: float = 5.0
) -> PruneResult:
    """Apply ``settings`` to the PostgreSQL store at ``url`` under ``RETENTION_LOCK``; see the module docstring."""
    import psycopg  # noqa: PLC0415 - psycopg only where PostgreSQL is configured

    from responder.store.postgres import STALE_CLAIMS, Placeholders  # noqa: PLC0415

    lock_ms = int(busy_timeout_s * 1000)
    # A stalled batch (an export to a hung disk) holds its locks for a minute at most; it then rolls back.
    options = f"-c lock_timeout={lock_ms} -c statement_timeout=60000 -c idle_in_transaction_session_timeout=60000"
    with psycopg.connect(url, autocommit=True, connect_timeout=max(1, round(connect_timeout_s)), options=options,
                         application_name="trainguard-retention") as conn:  # fmt: skip

        @contextmanager
        def locked() -> Iterator[bool]:
            with conn.transaction():
                row = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (RETENTION_LOCK,)).fetchone()
                yield bool(row and row[0])

        cut, totals, contended = _batches(Placeholders(conn), locked, settings, now, (STALE_CLAIMS,))
    return PruneResult(cut, *totals, freed_pages=0, contended=contended)


@contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[bool]:
    """One SQLite write transaction, taken at once (``BEGIN IMMEDIATE``); always granted."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield True
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _batches(
    db: Connection,
    transaction: Callable[[], AbstractContextManager[bool]],
    settings: RetentionSettings,
    now: float,
    extra: Sequence[str] = (),
) -> tuple[float | None, tuple[int, int, int, int], bool]:
    """Delete up to the horizon, ``BATCH`` records per ``transaction``: (horizon, counts, a lock refused)."""
    totals = (0, 0, 0, 0)
    cut = horizon(db, settings, now)
    while cut is not None:
        with transaction() as granted:
            if not granted:
                return cut, totals, True
            row = db.execute("SELECT time FROM records WHERE time < ? ORDER BY time LIMIT 1 OFFSET ?",
                             (cut, BATCH)).fetchone()  # fmt: skip
            step = cut if row is None else float(row[0])
            counts = _delete(db, step, settings.export_path, extra)
        totals = (totals[0] + counts[0], totals[1] + counts[1], totals[2] + counts[2], totals[3] + counts[3])
        if step >= cut:
            break
    return cut, totals, False


def _delete(db: Connection, cut: float, export_path: Path | None, extra: Sequence[str]) -> tuple[int, int, int, int]:
    """Delete what is older than ``cut``, exporting the records first: (records, incidents, alerts, exported)."""
    old = "time < ? AND outcome != 'pending'"
    db.execute(f"DELETE FROM reviews WHERE record_id IN (SELECT id FROM records WHERE {old})", (cut,))  # noqa: S608
    exported = 0
    if export_path is None:
        records = db.execute(f"DELETE FROM records WHERE {old}", (cut,)).rowcount  # noqa: S608
    else:
        deleted = db.execute(f"DELETE FROM records WHERE {old} RETURNING time, body", (cut,)).fetchall()  # noqa: S608
        records = exported = _export(sorted(deleted, key=lambda row: float(row[0])), export_path)
    gone = "SELECT id FROM incidents WHERE state = 'decided' AND decided_at < ?"
    alerts = db.execute(f"DELETE FROM alerts WHERE incident_id IN ({gone})", (cut,)).rowcount  # noqa: S608
    alerts += db.execute("DELETE FROM alerts WHERE incident_id IS NULL AND received_at < ?", (cut,)).rowcount
    incidents = db.execute("DELETE FROM incidents WHERE state = 'decided' AND decided_at < ?", (cut,)).rowcount
    db.execute("DELETE FROM notifications WHERE received_at < ?", (cut,))
    db.execute("DELETE FROM implications WHERE time < ?", (cut,))
    db.execute("DELETE FROM breaker_trips WHERE time < ?", (cut,))
    for statement in extra:
        db.execute(statement, (cut,))
    return records, incidents, alerts, exported


def _export(rows: Sequence[Any], path: Path) -> int:
    """Append each ``(time, body)`` row as a JSON line and fsync; raises if that fails (the batch rolls back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        for _, body in rows:
            out.write(json.dumps(AuditRecord.from_row(json.loads(body)).to_json(), sort_keys=True) + "\n")
        out.flush()
        os.fsync(out.fileno())
    return len(rows)
