"""The durable store on SQLite: accepted alerts, incidents, audit records, cluster modes, reviews, node ledger.

SQLite in WAL mode with ``synchronous=FULL``: a notification is answered 2xx only after its alerts
are committed to disk, so neither a crash nor a power loss loses an accepted alert. Exactly-once
decisions rest on two constraints, not on timing: alerts are unique per
``(fingerprint, startsAt, status)`` (Alertmanager's re-sends and repeats collapse into one row) and
incidents are unique per ``(cluster, workload, attempt)`` and move from ``open`` to ``decided``
once, in the same transaction that writes the decision.

``SqliteStore`` implements every protocol of ``responder.store``; a Postgres store for replicated
deployments can replace it without touching the engine.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

from pydantic_core import to_json

from responder.alerts import ClassifiedAlert, Notification
from responder.model import AuditRecord, Incident, StoredAlert, new_id
from responder.store import IngestResult, RecordQuery
from responder.store.schema import SCHEMA, SCHEMA_VERSION

_RECORD_FIELDS = tuple(f.name for f in fields(AuditRecord))


class SqliteStore:
    """Every store of ``responder.store`` on one SQLite file. Thread-safe: one connection behind a lock.

    ``busy_timeout_s`` bounds every wait, for SQLite's file lock and for this object's own lock: a store
    that cannot write raises within it (the webhook answers 503 and Alertmanager retries) and never hangs.
    """

    def __init__(self, path: Path | str, busy_timeout_s: float = 2.0) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._in_batch = False
        self.busy_timeout_s = busy_timeout_s
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=busy_timeout_s)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # takes effect on a new file (retention frees pages)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise RuntimeError(f"{path}: schema version {row[0]} is newer than this trainguard ({SCHEMA_VERSION})")
        elif int(row[0]) < SCHEMA_VERSION:  # every migration so far only adds indexes (the script above)
            self._db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        if not self._lock.acquire(timeout=self.busy_timeout_s):
            raise sqlite3.OperationalError(f"store busy: no turn within {self.busy_timeout_s:g}s")
        try:
            yield self._db
        finally:
            self._lock.release()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction (one commit, one fsync) around many writes; each write inside is a savepoint."""
        with self._locked() as db:
            if self._in_batch:
                yield
                return
            db.execute("BEGIN IMMEDIATE")
            self._in_batch = True
            try:
                yield
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                self._in_batch = False
            db.execute("COMMIT")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._locked() as db:
            if self._in_batch:  # inside batch(): this thread holds the lock and the transaction
                db.execute("SAVEPOINT tx")
                try:
                    yield db
                except BaseException:
                    db.execute("ROLLBACK TO tx")
                    db.execute("RELEASE tx")
                    raise
                db.execute("RELEASE tx")
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:  # a failed COMMIT (disk full) may have rolled back already
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._locked() as db:
            return db.execute(sql, tuple(params)).fetchall()

    # -- ingest ---------------------------------------------------------------------------------

    def ingest(
        self,
        notification: Notification,
        alerts: Sequence[ClassifiedAlert],
        now: float,
        window: float,
        refusals: Mapping[tuple[str, str, str], AuditRecord],
    ) -> IngestResult:
        """Store every alert once; open incidents for new evidence; audit new rejections. Atomic.

        ``refusals``: the audit record of each rejected alert, by its key; only those of alerts not
        seen before are written (and returned).
        """
        opened: list[str] = []
        written: list[AuditRecord] = []
        counts = dict.fromkeys(("evidence", "rejected", "ignored", "resolved"), 0)
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO notifications (received_at, group_key, receiver, status, alerts, new_alerts, truncated)"
                " VALUES (?, ?, ?, ?, ?, 0, ?)",
                (now, notification.groupKey, notification.receiver, notification.status, len(alerts),
                 notification.truncatedAlerts),
            )  # fmt: skip
            notification_id = cur.lastrowid
            # One look-up for the whole notification; the lock and BEGIN IMMEDIATE rule out races.
            seen = self._existing_keys(db, alerts)
            fresh: list[ClassifiedAlert] = []
            for item in alerts:
                if item.key not in seen:
                    seen.add(item.key)
                    fresh.append(item)
            incident_for: dict[tuple[str, str, str], str] = {}
            rows = []
            for item in fresh:
                ident, a = item.identity, item.alert
                incident_id: str | None = None
                if item.disposition == "evidence" and ident is not None:
                    key = (ident.cluster, ident.workload, ident.attempt or "")
                    incident_id = incident_for.get(key)
                    if incident_id is None:
                        incident_id, was_opened = self._incident_for(db, key, ident.scheduler, now, window)
                        incident_for[key] = incident_id
                        if was_opened:
                            opened.append(incident_id)
                counts[item.disposition] += 1
                record = refusals.get(item.key) if item.disposition == "rejected" else None
                if record is not None:
                    self._insert_record(db, record)
                    written.append(record)
                rows.append((
                    a.fingerprint, a.startsAt, a.status, item.starts_at, now, notification_id, item.disposition,
                    item.reason, ident.cluster if ident else a.labels.get("cluster"),
                    ident.workload if ident else a.labels.get("workload"),
                    ident.attempt if ident else a.labels.get("attempt"),
                    to_json(a.labels).decode(), to_json(a.annotations).decode(), incident_id,
                ))  # fmt: skip
            db.executemany(
                "INSERT INTO alerts (fingerprint, starts_at, status, starts_at_ts, received_at, notification_id,"
                " disposition, reason, cluster, workload, attempt, labels, annotations, incident_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                rows,
            )
            db.execute("UPDATE notifications SET new_alerts=? WHERE id=?", (len(fresh), notification_id))
        return IngestResult(
            len(fresh), len(alerts) - len(fresh), counts["evidence"], counts["rejected"], counts["ignored"],
            counts["resolved"], tuple(opened), tuple(written),
        )  # fmt: skip

    @staticmethod
    def _existing_keys(db: sqlite3.Connection, alerts: Sequence[ClassifiedAlert]) -> set[tuple[str, str, str]]:
        fingerprints = sorted({item.alert.fingerprint for item in alerts})
        found: set[tuple[str, str, str]] = set()
        for i in range(0, len(fingerprints), 500):
            chunk = fingerprints[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for row in db.execute(
                f"SELECT fingerprint, starts_at, status FROM alerts WHERE fingerprint IN ({marks})",  # noqa: S608
                chunk,
            ):
                found.add((row[0], row[1], row[2]))
        return found

    def _incident_for(
        self, db: sqlite3.Connection, key: tuple[str, str, str], scheduler: str | None, now: float, window: float
    ) -> tuple[str, bool]:
        row = db.execute("SELECT id FROM incidents WHERE cluster=? AND workload=? AND attempt=?", key).fetchone()
        if row is not None:
            return str(row["id"]), False
        incident_id = new_id("inc")
        db.execute(
            "INSERT INTO incidents (id, cluster, workload, attempt, scheduler, state, opened_at, deadline)"
            " VALUES (?, ?, ?, ?, ?, 'open', ?, ?)",
            (incident_id, *key, scheduler, now, now + window),
        )
        return incident_id, True

    # -- incidents ------------------------------------------------------------------------------

    def due_incidents(self, now: float) -> list[Incident]:
        rows = self._query("SELECT * FROM incidents WHERE state='open' AND deadline <= ? ORDER BY deadline", (now,))
        return [Incident(**dict(r)) for r in rows]

    def next_deadline(self) -> float | None:
        rows = self._query("SELECT MIN(deadline) FROM incidents WHERE state='open'")
        value = rows[0][0] if rows else None
        return float(value) if value is not None else None

    def postpone(self, incident_id: str, until: float) -> None:
        with self._tx() as db:
            db.execute("UPDATE incidents SET deadline=? WHERE id=? AND state='open'", (until, incident_id))

    def incident(self, incident_id: str) -> Incident | None:
        rows = self._query("SELECT * FROM incidents WHERE id=?", (incident_id,))
        return Incident(**dict(rows[0])) if rows else None

    def incident_alerts(self, incident_id: str) -> list[StoredAlert]:
        rows = self._query(
            "SELECT fingerprint, starts_at, starts_at_ts, status, received_at, labels, annotations"
            " FROM alerts WHERE incident_id=? ORDER BY id",
            (incident_id,),
        )
        return [
            StoredAlert(
                r["fingerprint"], r["starts_at"], r["starts_at_ts"], r["status"], r["received_at"],
                json.loads(r["labels"]), json.loads(r["annotations"]),
            )
            for r in rows
        ]  # fmt: skip

    def decide(
        self, incident: Incident, records: Sequence[AuditRecord], implicated: dict[str, float], now: float
    ) -> bool:
        """Close ``incident`` and write its records at once; False if it was already decided."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE incidents SET state='decided', decided_at=? WHERE id=? AND state='open'", (now, incident.id)
            )
            if cur.rowcount == 0:
                return False
            for record in records:
                self._insert_record(db, record)
            for node, weight in implicated.items():
                db.execute(
                    "INSERT INTO implications VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (incident.cluster, node, incident.workload, incident.attempt, incident.id, now, weight),
                )
        return True

    # -- records --------------------------------------------------------------------------------

    def _insert_record(self, db: sqlite3.Connection, record: AuditRecord) -> None:
        db.execute(
            "INSERT INTO records (id, kind, time, cluster, workload, incident_id, action, mode, outcome, node, body)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.id, record.kind, record.time, record.cluster, record.workload, record.incident_id,
                record.action, record.mode, record.outcome, record.node or "", _dump(record),
            ),
        )  # fmt: skip

    def add_record(self, record: AuditRecord) -> None:
        """Write one record outside an incident (a localization follow-up: an attempt that ran clean)."""
        with self._tx() as db:
            self._insert_record(db, record)

    def update_outcome(self, record: AuditRecord) -> None:
        with self._tx() as db:
            db.execute("UPDATE records SET outcome=?, body=? WHERE id=?", (record.outcome, _dump(record), record.id))

    def update_outcome_if(self, record: AuditRecord, expected: str) -> bool:
        """Write ``record`` only if its stored outcome is still ``expected``: one approval wins, once."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE records SET outcome=?, body=? WHERE id=? AND outcome=?",
                (record.outcome, _dump(record), record.id, expected),
            )
            return cur.rowcount == 1

    def pending_records(self) -> list[AuditRecord]:
        rows = self._query("SELECT body FROM records WHERE outcome='pending' ORDER BY time")
        return [_load(r["body"]) for r in rows]

    def records(self, query: RecordQuery) -> list[AuditRecord]:
        where, params = [], []
        for column in ("cluster", "workload", "action", "mode", "kind", "outcome"):
            value = getattr(query, column)
            if value is not None:
                where.append(f"{column}=?")
                params.append(value)
        if query.since is not None:
            where.append("time >= ?")
            params.append(query.since)
        sql = "SELECT body FROM records"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY time DESC, rowid DESC LIMIT ?"
        params.append(query.limit)
        return [_load(r["body"]) for r in self._query(sql, params)]

    def record(self, record_id: str) -> AuditRecord | None:
        rows = self._query("SELECT body FROM records WHERE id=?", (record_id,))
        return _load(rows[0]["body"]) if rows else None

    # -- modes and reviews ----------------------------------------------------------------------

    def get_mode(self, cluster: str) -> str | None:
        rows = self._query("SELECT mode FROM modes WHERE cluster=?", (cluster,))
        return str(rows[0]["mode"]) if rows else None

    def set_mode(self, cluster: str, mode: str, now: float, changed_by: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO modes VALUES (?, ?, ?, ?) ON CONFLICT (cluster) DO UPDATE SET"
                " mode=excluded.mode, changed_at=excluded.changed_at, changed_by=excluded.changed_by",
                (cluster, mode, now, changed_by),
            )

    def modes(self) -> dict[str, str]:
        return {r["cluster"]: r["mode"] for r in self._query("SELECT cluster, mode FROM modes")}

    def add_review(self, record_id: str, verdict: str, note: str, now: float) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO reviews (record_id, verdict, note, time) VALUES (?, ?, ?, ?)",
                (record_id, verdict, note, now),
            )

    def reviews(self, record_id: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT verdict, note, time FROM reviews WHERE record_id=? ORDER BY id", (record_id,))
        return [dict(r) for r in rows]

    def precision_by_pattern(self) -> dict[str, dict[str, float]]:
        """Per detection pattern: reviewed decisions, how many were right, and the share."""
        rows = self._query(
            "SELECT r.body, v.verdict FROM reviews v JOIN records r ON r.id = v.record_id"
            " WHERE v.id IN (SELECT MAX(id) FROM reviews GROUP BY record_id)"
        )
        tally: dict[str, list[int]] = {}
        for row in rows:
            record = _load(row["body"])
            for pattern in set(record.patterns):
                counts = tally.setdefault(pattern, [0, 0])
                counts[0] += 1
                counts[1] += row["verdict"] == "correct"
        return {p: {"reviewed": n, "correct": c, "precision": c / n} for p, (n, c) in sorted(tally.items())}

    # -- ledger and breaker ---------------------------------------------------------------------

    def workload_nodes(self, cluster: str, workload: str) -> set[str]:
        rows = self._query("SELECT DISTINCT node FROM implications WHERE cluster=? AND workload=?", (cluster, workload))
        return {r["node"] for r in rows}

    def node_workloads_since(self, cluster: str, node: str, since: float) -> set[str]:
        rows = self._query(
            "SELECT DISTINCT workload FROM implications WHERE cluster=? AND node=? AND time >= ?",
            (cluster, node, since),
        )
        return {r["workload"] for r in rows}

    def implications_since(self, cluster: str, since: float) -> list[tuple[str, float, float]]:
        rows = self._query(
            "SELECT node, time, weight FROM implications WHERE cluster=? AND time >= ?", (cluster, since)
        )
        return [(r["node"], r["time"], r["weight"]) for r in rows]

    def drain_recorded_since(self, cluster: str, node: str, since: float) -> bool:
        rows = self._query(
            "SELECT 1 FROM records WHERE cluster=? AND node=? AND action='drain_node' AND kind='decision'"
            " AND time >= ? LIMIT 1",
            (cluster, node, since),
        )
        return bool(rows)

    def actions_since(self, cluster: str, mode: str, since: float) -> int:
        rows = self._query(
            "SELECT COUNT(*) FROM records WHERE cluster=? AND mode=? AND kind='decision' AND action != 'none'"
            " AND outcome != 'skipped' AND time >= ?",
            (cluster, mode, since),
        )
        return int(rows[0][0])

    def isolated_nodes_since(self, cluster: str, mode: str, since: float) -> set[str]:
        rows = self._query(
            "SELECT body FROM records WHERE cluster=? AND mode=? AND kind='decision' AND outcome != 'skipped'"
            " AND action IN ('requeue_excluding', 'drain_node') AND time >= ?",
            (cluster, mode, since),
        )
        nodes: set[str] = set()
        for row in rows:
            record = _load(row["body"])
            nodes.update(record.excluded_nodes)
            if record.node:
                nodes.add(record.node)
        return nodes

    def workloads_failing_since(self, cluster: str, since: float) -> set[str]:
        rows = self._query(
            "SELECT DISTINCT workload FROM incidents WHERE cluster=? AND opened_at >= ?", (cluster, since)
        )
        return {r["workload"] for r in rows}

    def last_trip(self, cluster: str) -> tuple[float, str] | None:
        rows = self._query("SELECT time, reason FROM breaker_trips WHERE cluster=? ORDER BY time DESC LIMIT 1",
                           (cluster,))  # fmt: skip
        return (rows[0]["time"], rows[0]["reason"]) if rows else None

    def tripped_clusters(self) -> list[str]:
        return [r["cluster"] for r in self._query("SELECT DISTINCT cluster FROM breaker_trips")]

    def record_trip(self, cluster: str, now: float, reason: str) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO breaker_trips VALUES (?, ?, ?)", (cluster, now, reason))

    # -- health ---------------------------------------------------------------------------------

    def open_incident_count(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM incidents WHERE state='open'")[0][0])

    def ping(self) -> None:
        """Raises unless the store can commit a write now (a read-only or full store is not ready)."""
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('ping', ?)", (str(time.time()),))

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _dump(record: AuditRecord) -> str:
    return json.dumps({name: getattr(record, name) for name in _RECORD_FIELDS}, sort_keys=True)


def _load(body: str) -> AuditRecord:
    return AuditRecord.from_row(json.loads(body))
