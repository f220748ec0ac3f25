"""The decision lease on PostgreSQL: a session advisory lock, bounded by ``idle_session_timeout``.

The leader holds ``pg_advisory_lock(LOCK_KEY)`` on a connection of its own and touches it every
``renew_s``. The lock goes with the session, so it is free again:

* at once when the leader's process dies (``kill -9``: the kernel closes the socket, the server ends
  the session);
* within ``lease_s`` when the leader hangs or is cut off: the server ends a session idle that long
  (``idle_session_timeout``, PostgreSQL 14+), and the leader steps down on its own before then.

Each grant bumps ``leader.term``: the fence ``PostgresStore`` checks before it decides, claims an action
or finishes one, so a deposed leader that wakes up late writes nothing that counts.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from typing import Any

import psycopg
from psycopg.rows import dict_row

from responder.model import AuditRecord
from responder.store.config import StoreSettings
from responder.store.postgres import LEASE_NAME, PostgresStore

LOCK_KEY = 0x7472_6764_0000_0001  # "trgd" 1: the decision lease


def holder_name() -> str:
    """This process, as the ``leader`` row and the logs name it: host, pid, and a nonce against pid reuse."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class PostgresLease:
    """The advisory-lock lease; each method is one short round trip (call it from a worker thread)."""

    def __init__(self, store: PostgresStore, settings: StoreSettings, holder: str | None = None) -> None:
        self.store = store
        self.settings = settings
        self.holder = holder or holder_name()
        self._conn: psycopg.Connection[dict[str, Any]] | None = None
        store.fence_term = -1  # a replica: no deciding or finishing actions until a term is granted

    def _connection(self) -> psycopg.Connection[dict[str, Any]]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            idle_ms = int(self.settings.lease_s * 1000)
            statement_ms = int(self.settings.renew_s * 1000)
            self._conn = psycopg.connect(
                self.store.url,
                autocommit=True,
                row_factory=dict_row,
                connect_timeout=max(1, round(self.settings.connect_timeout_s)),
                options=f"-c idle_session_timeout={idle_ms} -c statement_timeout={statement_ms}",
                application_name=f"trainguard-lease {self.holder}"[:63],
            )
        return self._conn

    def try_acquire(self) -> int | None:
        """The new term if this process now holds the lease, else None. Raises when PostgreSQL is out of reach."""
        conn = self._connection()
        row = conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (LOCK_KEY,)).fetchone()
        if row is None or not row["got"]:
            return None
        now = time.time()
        with conn.transaction():
            term = conn.execute(
                "INSERT INTO leader (name, holder, term, acquired_at, renewed_at) VALUES (%s, %s, 1, %s, %s)"
                " ON CONFLICT (name) DO UPDATE SET holder=excluded.holder, term=leader.term + 1,"
                " acquired_at=excluded.acquired_at, renewed_at=excluded.renewed_at RETURNING term",
                (LEASE_NAME, self.holder, now, now),
            ).fetchone()
        assert term is not None
        self.store.fence_term = int(term["term"])
        return self.store.fence_term

    def renew(self) -> bool:
        """True while this session still holds the lock under this process's term (one statement)."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return False  # a new session would not hold the lock
        try:
            row = conn.execute(
                "UPDATE leader SET renewed_at=%s WHERE name=%s AND term=%s AND holder=%s RETURNING term",
                (time.time(), LEASE_NAME, self.store.fence_term, self.holder),
            ).fetchone()
        except psycopg.Error:
            self.close()  # a session that failed may have lost the lock: never reuse it as a leader's
            return False
        return row is not None

    def claim(self, key: str) -> bool:
        return self.store.claim_action(key, self.holder)

    def orphans(self, before: float) -> list[AuditRecord]:
        return self.store.unclaimed_pending(before)

    def current(self) -> dict[str, Any] | None:
        return self.store.leader()

    def close(self) -> None:
        """Give the lease up (ending the session frees the lock at once)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                if not conn.broken:
                    conn.execute("SELECT pg_advisory_unlock_all()")  # free now, not when the backend exits
                conn.close()
            except psycopg.Error:
                conn.close()
