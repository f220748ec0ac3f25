"""``trainguard decisions`` read straight from a store: a SQLite file (``--db``) or a PostgreSQL database
(``--store-url``, a throwaway real server; skipped with the reason where it is missing, required under
TRAINGUARD_REQUIRE_SERVICES=1). The same records give the same output from either."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from responder.alerts import Notification
from responder.clock import FakeClock
from responder.engine import Engine
from responder.metrics import ResponderMetrics
from responder.model import AuditRecord
from responder.schedulers.recording import RecordingScheduler
from responder.settings import Settings
from responder.store.sqlite import SqliteStore
from tests import pg
from trainguard import cli
from trainguard.lab.payloads import nccl_storm_with_xid


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    yield from pg.server()


def _decisions(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["decisions", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _sqlite_history(path: Path) -> list[AuditRecord]:
    """Three decided incidents on two clusters, in a SQLite store at ``path``: their records."""
    store, clock = SqliteStore(path), FakeClock()
    settings = Settings(db_path=path, correlation_window_s=1.0, clusters={"lab": {}, "prod": {}})
    engine = Engine(settings, store, RecordingScheduler("done"), clock, ResponderMetrics(CollectorRegistry()))
    for workload, cluster in (("11", "lab"), ("12", "lab"), ("13", "prod")):
        storm = nccl_storm_with_xid(2, 2, workload=workload)
        for a in storm["alerts"]:
            a["labels"]["cluster"] = cluster
        engine.ingest(Notification.model_validate(storm))
        clock.advance(60)
    clock.advance(2)
    records = engine.decide_due()
    store.close()
    return records


@pytest.mark.postgres
def test_a_postgresql_store_reads_as_the_same_records_in_sqlite_do(
    postgres: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from responder.store.postgres import PostgresStore  # noqa: PLC0415

    db = tmp_path / "tg.db"
    records = _sqlite_history(db)
    url = pg.fresh_database(postgres)
    shared = PostgresStore(url)
    for record in records:
        shared.add_record(record)
    shared.close()

    for args in ([], ["--json"], ["--cluster", "prod", "--json"], ["--workload", "12"], ["--limit", "1"],
                 ["--id", records[0].id]):  # fmt: skip
        from_sqlite = _decisions(capsys, "--db", str(db), *args)
        from_postgres = _decisions(capsys, "--store-url", url, *args)
        assert from_sqlite[0] == 0, from_sqlite
        assert from_postgres == from_sqlite, args
    code, out, _ = _decisions(capsys, "--store-url", url, "--json")
    assert (code, len(out.splitlines())) == (0, len(records))
    assert _decisions(capsys, "--store-url", url, "--id", "nope")[0] == 1


@pytest.mark.postgres
def test_store_url_reads_and_never_writes(postgres: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import psycopg  # noqa: PLC0415

    empty = pg.fresh_database(postgres)
    code, _, err = _decisions(capsys, "--store-url", empty)
    assert code == 1
    assert "no trainguard store" in err
    with psycopg.connect(empty) as conn:
        row = conn.execute("SELECT to_regclass('meta') IS NULL").fetchone()
    assert row == (True,), "a read gave the database no schema"
    unreachable = empty.rsplit("@", 1)[0] + "@127.0.0.1:9/none"
    code, _, err = _decisions(capsys, "--store-url", unreachable)
    assert (code, "cannot read" in err) == (1, True)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://db/trainguard", "--store-url must be postgresql://"),
        ("postgresql://tg:secret@db/trainguard", "must not hold a password"),
        ("postgresql://tg@db", "must name the database"),
    ],
)
def test_store_url_is_validated(url: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _decisions(capsys, "--store-url", url)
    assert (code, out) == (2, "")
    assert message in err


def test_db_and_store_url_are_exclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["decisions", "--db", str(tmp_path / "tg.db"), "--store-url", "postgresql://tg@db/trainguard"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
