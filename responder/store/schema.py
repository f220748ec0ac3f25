"""The SQLite schema of ``responder.store.sqlite``, and its version.

Every statement is idempotent (``IF NOT EXISTS``), so running the script upgrades an older file; a
migration that needs more than that bumps ``SCHEMA_VERSION`` and says so in docs/operations.md.
The indexes cover every query the decision path runs (``tests/test_query_plans.py`` checks the plans).
"""

from __future__ import annotations

SCHEMA_VERSION = 2  # 2: indexes for every hot query (docs/operations.md, upgrades)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY,
    received_at REAL NOT NULL,
    group_key TEXT NOT NULL,
    receiver TEXT NOT NULL,
    status TEXT NOT NULL,
    alerts INTEGER NOT NULL,
    new_alerts INTEGER NOT NULL,
    truncated INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS alerts (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    starts_at TEXT NOT NULL,
    status TEXT NOT NULL,
    starts_at_ts REAL NOT NULL,
    received_at REAL NOT NULL,
    notification_id INTEGER NOT NULL,
    disposition TEXT NOT NULL,
    reason TEXT NOT NULL,
    cluster TEXT,
    workload TEXT,
    attempt TEXT,
    labels TEXT NOT NULL,
    annotations TEXT NOT NULL,
    incident_id TEXT,
    UNIQUE (fingerprint, starts_at, status)
);
CREATE INDEX IF NOT EXISTS alerts_incident ON alerts (incident_id);
CREATE TABLE IF NOT EXISTS incidents (
    id TEXT PRIMARY KEY,
    cluster TEXT NOT NULL,
    workload TEXT NOT NULL,
    scheduler TEXT,
    attempt TEXT NOT NULL,
    state TEXT NOT NULL,
    opened_at REAL NOT NULL,
    deadline REAL NOT NULL,
    decided_at REAL,
    UNIQUE (cluster, workload, attempt)
);
CREATE INDEX IF NOT EXISTS incidents_open ON incidents (state, deadline);
CREATE INDEX IF NOT EXISTS incidents_cluster_time ON incidents (cluster, opened_at);
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    time REAL NOT NULL,
    cluster TEXT NOT NULL,
    workload TEXT NOT NULL,
    incident_id TEXT,
    action TEXT NOT NULL,
    mode TEXT NOT NULL,
    outcome TEXT NOT NULL,
    node TEXT NOT NULL DEFAULT '',
    body TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS records_once ON records (incident_id, kind, action, node)
    WHERE incident_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS records_time ON records (time);
CREATE INDEX IF NOT EXISTS records_cluster ON records (cluster, time);
CREATE TABLE IF NOT EXISTS implications (
    cluster TEXT NOT NULL,
    node TEXT NOT NULL,
    workload TEXT NOT NULL,
    attempt TEXT NOT NULL,
    incident_id TEXT NOT NULL,
    time REAL NOT NULL,
    weight REAL NOT NULL,
    UNIQUE (incident_id, node)
);
CREATE INDEX IF NOT EXISTS implications_node ON implications (cluster, node, time);
CREATE INDEX IF NOT EXISTS implications_workload ON implications (cluster, workload);
CREATE INDEX IF NOT EXISTS implications_workload_node ON implications (cluster, workload, node);
CREATE INDEX IF NOT EXISTS records_pending ON records (outcome) WHERE outcome = 'pending';
CREATE INDEX IF NOT EXISTS records_awaiting ON records (outcome, time) WHERE outcome = 'awaiting_approval';
CREATE INDEX IF NOT EXISTS records_node ON records (cluster, node, time);
CREATE TABLE IF NOT EXISTS modes (
    cluster TEXT PRIMARY KEY,
    mode TEXT NOT NULL,
    changed_at REAL NOT NULL,
    changed_by TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS group_modes (
    cluster TEXT NOT NULL,
    grp TEXT NOT NULL,
    mode TEXT NOT NULL,
    changed_at REAL NOT NULL,
    changed_by TEXT NOT NULL,
    PRIMARY KEY (cluster, grp)
);
CREATE TABLE IF NOT EXISTS reviews (
    id INTEGER PRIMARY KEY,
    record_id TEXT NOT NULL,
    verdict TEXT NOT NULL,
    note TEXT NOT NULL,
    time REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS breaker_trips (
    cluster TEXT NOT NULL,
    time REAL NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reviews_record ON reviews (record_id);
CREATE INDEX IF NOT EXISTS incidents_decided ON incidents (state, decided_at);
CREATE INDEX IF NOT EXISTS alerts_unattached ON alerts (received_at) WHERE incident_id IS NULL;
CREATE INDEX IF NOT EXISTS notifications_time ON notifications (received_at);
CREATE INDEX IF NOT EXISTS implications_time ON implications (time);
CREATE INDEX IF NOT EXISTS breaker_trips_cluster ON breaker_trips (cluster, time);
"""
