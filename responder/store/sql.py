"""The store's SQL, shared by its two dialects: ``sqlite.SqliteStore`` (the default) and ``postgres.PostgresStore``.

Exactly-once decisions rest on constraints, not on timing, and hold with one writer or several (two
replicas on one PostgreSQL): alerts are unique per ``(fingerprint, startsAt, status)`` (Alertmanager's
re-sends and repeats, and the same notification sent to both replicas, collapse into one row),
incidents are unique per ``(cluster, workload, attempt)`` and move from ``open`` to ``decided`` once,
in the same transaction that writes the decision (a conditional ``UPDATE``: of two concurrent
deciders, one changes the row and the other none).

The statements are written once, with ``?`` placeholders and named columns; a dialect supplies the
connection (``_tx``, ``_query``, ``batch``), the tie-break column of the audit order and the fence
(``_fenced``: whether this process may still finish ``pending`` actions; always on SQLite's one writer).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import fields
from typing import Any, Protocol

from pydantic_core import to_json

from responder.alerts import ClassifiedAlert, Notification
from responder.model import AuditRecord, Incident, Outcome, StoredAlert, new_id
from responder.store import IngestResult, RecordQuery, Refusals

_RECORD_FIELDS = tuple(f.name for f in fields(AuditRecord))


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the shared statements need of a connection: ``?`` placeholders, rows addressed by column name."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor: ...
    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Any: ...


class SqlStore:
    """Every store of ``responder.store`` over a ``Connection``; a dialect subclass supplies the connection."""

    # The audit order's tie-break among records of the same time: the insertion order.
    _SEQUENCE = "rowid"
    # The JSON labels of an alert, read in the dialect: the distinct categories (comma-joined) and the host.
    _SIGNALS = "group_concat(DISTINCT json_extract(a.labels, '$.category'))"
    _HOST = "json_extract(a.labels, '$.host')"

    def _tx(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def batch(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def ping(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _fenced(self, db: Connection) -> bool:
        """Whether this process may still move a ``pending`` record on (a deposed leader may not)."""
        return True

    # -- ingest ---------------------------------------------------------------------------------

    def ingest(
        self, notification: Notification, alerts: list[ClassifiedAlert], now: float, window: float, refusals: Refusals
    ) -> IngestResult:
        """Store every alert once; open incidents for new evidence; audit new rejections. Atomic.

        ``refusals``: the audit record of each rejected alert, by its key; only those of alerts not
        seen before are written (and returned).
        """
        opened: list[str] = []
        written: list[AuditRecord] = []
        counts = dict.fromkeys(("evidence", "rejected", "ignored", "resolved"), 0)
        with self._tx() as db:
            notification_id = db.execute(
                "INSERT INTO notifications (received_at, group_key, receiver, status, alerts, new_alerts, truncated)"
                " VALUES (?, ?, ?, ?, ?, 0, ?) RETURNING id",
                (now, notification.groupKey, notification.receiver, notification.status, len(alerts),
                 notification.truncatedAlerts),
            ).fetchone()["id"]  # fmt: skip
            # One look-up for the whole notification; a concurrent writer's row is skipped by ON CONFLICT.
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
    def _existing_keys(db: Connection, alerts: Sequence[ClassifiedAlert]) -> set[tuple[str, str, str]]:
        fingerprints = sorted({item.alert.fingerprint for item in alerts})
        found: set[tuple[str, str, str]] = set()
        for i in range(0, len(fingerprints), 500):
            chunk = fingerprints[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for row in db.execute(
                f"SELECT fingerprint, starts_at, status FROM alerts WHERE fingerprint IN ({marks})",  # noqa: S608
                chunk,
            ):
                found.add((row["fingerprint"], row["starts_at"], row["status"]))
        return found

    def _incident_for(
        self, db: Connection, key: tuple[str, str, str], scheduler: str | None, now: float, window: float
    ) -> tuple[str, bool]:
        row = db.execute("SELECT id FROM incidents WHERE cluster=? AND workload=? AND attempt=?", key).fetchone()
        if row is not None:
            return str(row["id"]), False
        # Another replica may open the same incident now: the unique key decides, and its row is used.
        row = db.execute(
            "INSERT INTO incidents (id, cluster, workload, attempt, scheduler, state, opened_at, deadline)"
            " VALUES (?, ?, ?, ?, ?, 'open', ?, ?) ON CONFLICT (cluster, workload, attempt) DO NOTHING RETURNING id",
            (new_id("inc"), *key, scheduler, now, now + window),
        ).fetchone()
        if row is not None:
            return str(row["id"]), True
        row = db.execute("SELECT id FROM incidents WHERE cluster=? AND workload=? AND attempt=?", key).fetchone()
        return str(row["id"]), False

    # -- incidents ------------------------------------------------------------------------------

    def due_incidents(self, now: float) -> list[Incident]:
        rows = self._query("SELECT * FROM incidents WHERE state='open' AND deadline <= ? ORDER BY deadline", (now,))
        return [Incident(**dict(r)) for r in rows]

    def next_deadline(self) -> float | None:
        rows = self._query("SELECT MIN(deadline) AS d FROM incidents WHERE state='open'")
        value = rows[0]["d"] if rows else None
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
        """Close ``incident`` and write its records at once; False if it was already decided (or deposed)."""
        with self._tx() as db:
            if not self._fenced(db):
                return False
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

    def _insert_record(self, db: Connection, record: AuditRecord) -> None:
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
        """Write ``record``'s outcome. Without the fence (a follower, a deposed leader) only what annotates
        a record (its silence) may change: never its outcome, and nothing on a ``pending`` record."""
        with self._tx() as db:
            if self._fenced(db):
                db.execute(
                    "UPDATE records SET outcome=?, body=? WHERE id=?", (record.outcome, _dump(record), record.id)
                )
            elif record.outcome != Outcome.PENDING:
                db.execute("UPDATE records SET body=? WHERE id=? AND outcome=?",
                           (_dump(record), record.id, record.outcome))  # fmt: skip

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
        return [load_record(r["body"]) for r in rows]

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
        sql += f" ORDER BY time DESC, {self._SEQUENCE} DESC LIMIT ?"
        params.append(query.limit)
        return [load_record(r["body"]) for r in self._query(sql, params)]

    def record(self, record_id: str) -> AuditRecord | None:
        rows = self._query("SELECT body FROM records WHERE id=?", (record_id,))
        return load_record(rows[0]["body"]) if rows else None

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

    def group_modes(self, cluster: str) -> dict[str, str]:
        rows = self._query("SELECT grp, mode FROM group_modes WHERE cluster=?", (cluster,))
        return {r["grp"]: r["mode"] for r in rows}

    def set_group_mode(self, cluster: str, group: str, mode: str, now: float, changed_by: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO group_modes VALUES (?, ?, ?, ?, ?) ON CONFLICT (cluster, grp) DO UPDATE SET"
                " mode=excluded.mode, changed_at=excluded.changed_at, changed_by=excluded.changed_by",
                (cluster, group, mode, now, changed_by),
            )

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
            record = load_record(row["body"])
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

    def implication_signals_since(self, cluster: str, since: float) -> list[tuple[str, float, float, tuple[str, ...]]]:
        """``implications_since`` plus the categories of the incident's alerts that named the node."""
        rows = self._query(
            f"SELECT i.node, i.time, i.weight, (SELECT {self._SIGNALS} FROM alerts a"  # noqa: S608 (dialect constants)
            f" WHERE a.incident_id = i.incident_id AND {self._HOST} = i.node) AS signals"
            " FROM implications i WHERE i.cluster=? AND i.time >= ?",
            (cluster, since),
        )
        return [(r["node"], r["time"], r["weight"], _signals(r["signals"])) for r in rows]

    def reviewed_decisions(self, limit: int = 5000) -> list[tuple[AuditRecord, str]]:
        """The newest ``limit`` reviews' decisions with each one's latest verdict (a later review overrides)."""
        rows = self._query(
            "SELECT v.record_id, v.verdict, r.body FROM reviews v JOIN records r ON r.id = v.record_id"
            " WHERE v.id > (SELECT COALESCE(MAX(id), 0) FROM reviews) - ? AND r.kind = 'decision' ORDER BY v.id",
            (limit,),
        )
        latest = {r["record_id"]: (r["body"], r["verdict"]) for r in rows}
        return [(load_record(body), verdict) for body, verdict in latest.values()]

    def drain_recorded_since(self, cluster: str, node: str, since: float, real_only: bool = False) -> bool:
        rows = self._query(
            "SELECT 1 FROM records WHERE cluster=? AND node=? AND action='drain_node' AND kind='decision'"
            " AND time >= ? AND (? = 0 OR outcome IN ('pending', 'done', 'awaiting_approval')) LIMIT 1",
            (cluster, node, since, int(real_only)),
        )
        return bool(rows)

    def actions_since(self, cluster: str, mode: str, since: float) -> int:
        rows = self._query(
            "SELECT COUNT(*) AS n FROM records WHERE cluster=? AND mode=? AND kind='decision' AND action != 'none'"
            " AND outcome != 'skipped' AND time >= ?",
            (cluster, mode, since),
        )
        return int(rows[0]["n"])

    def isolated_nodes_since(self, cluster: str, mode: str, since: float) -> set[str]:
        rows = self._query(
            "SELECT body FROM records WHERE cluster=? AND mode=? AND kind='decision' AND outcome != 'skipped'"
            " AND action IN ('requeue_excluding', 'drain_node') AND time >= ?",
            (cluster, mode, since),
        )
        nodes: set[str] = set()
        for row in rows:
            record = load_record(row["body"])
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
        return int(self._query("SELECT COUNT(*) AS n FROM incidents WHERE state='open'")[0]["n"])


def _dump(record: AuditRecord) -> str:
    return json.dumps({name: getattr(record, name) for name in _RECORD_FIELDS}, sort_keys=True)


def load_record(body: str) -> AuditRecord:
    return AuditRecord.from_row(json.loads(body))


def _signals(joined: str | None) -> tuple[str, ...]:
    return tuple(sorted(set((joined or "").split(",")) - {""}))
