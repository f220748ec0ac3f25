"""The durable store on SQLite, the default: one file, one writer process (``responder.store.sql`` has the SQL).

SQLite in WAL mode with ``synchronous=FULL``: a notification is answered 2xx only after its alerts
are committed to disk, so neither a crash nor a power loss loses an accepted alert. Two replicas
cannot share the file; a replicated deployment uses ``postgres.PostgresStore`` (docs/ha.md).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from responder.store.schema import SCHEMA, SCHEMA_VERSION
from responder.store.sql import Connection, SqlStore


class SqliteStore(SqlStore):
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
    def _tx(self) -> Iterator[Connection]:
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

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        with self._locked() as db:
            return db.execute(sql, tuple(params)).fetchall()

    def ping(self) -> None:
        """Raises unless the store can commit a write now (a read-only or full store is not ready)."""
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('ping', ?)", (str(time.time()),))

    def close(self) -> None:
        with self._lock:
            self._db.close()
