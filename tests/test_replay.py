"""Policy replay over a history with known outcomes, built by the real engine on a fake clock.

Five decisions in monitor mode, four of them reviewed; then a candidate policy lowers ``max_attempts``
from 5 to 3. Exactly the decisions of attempts 2 and 3 flip (to ``stop``), and the precision figures
follow from the reviews by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from responder.alerts import Notification
from responder.clock import FakeClock, rfc3339
from responder.engine import Engine
from responder.metrics import ResponderMetrics
from responder.model import AuditRecord
from responder.policy import PolicySettings
from responder.replay import replay
from responder.replay_cli import parse_since
from responder.schedulers.recording import RecordingScheduler
from responder.settings import ClusterSettings, Settings
from responder.store import RecordQuery
from responder.store.sqlite import SqliteStore
from trainguard import cli
from trainguard.lab.payloads import alert, notification

# workload, attempt, host, category, pattern, review
HISTORY = [
    ("100", "0", "gpu-001", "infra_gpu", "xid_79_fallen_off_bus", "correct"),
    ("100", "1", "gpu-005", "infra_gpu", "xid_79_fallen_off_bus", "wrong"),  # carries gpu-001 from attempt 0
    ("102", "2", "gpu-002", "infra_gpu", "xid_79_fallen_off_bus", "correct"),
    ("103", "3", "gpu-003", "infra_gpu", "xid_79_fallen_off_bus", "wrong"),
    ("104", "4", "gpu-004", "app_error", "cuda_oom", "correct"),
    ("109", "0", "gpu-009", "infra_gpu", "xid_79_fallen_off_bus", None),
]


@pytest.fixture
def history(tmp_path: Path) -> tuple[SqliteStore, dict[str, AuditRecord], Settings]:
    clock = FakeClock()
    settings = Settings(db_path=tmp_path / "tg.db", correlation_window_s=1.0)
    store = SqliteStore(settings.db_path)
    engine = Engine(settings, store, RecordingScheduler("done"), clock, ResponderMetrics(CollectorRegistry()))
    by_workload_attempt = {}
    for workload, attempt, host, category, pattern, review in HISTORY:
        fault = alert("TrainguardFault", category, workload=workload, attempt=attempt, host=host, pattern=pattern,
                      starts_at=clock.now())  # fmt: skip
        engine.ingest(Notification.model_validate(notification([fault])))
        clock.advance(2)
        [record] = engine.decide_due()
        if review:
            store.add_review(record.id, review, "", clock.now())
        by_workload_attempt[f"{workload}#{attempt}"] = record
        clock.advance(3600)
    return store, by_workload_attempt, settings


def candidate(tmp_path: Path, **policy: object) -> Settings:
    return Settings(
        db_path=tmp_path / "tg.db", clusters={"lab": ClusterSettings(policy=PolicySettings.model_validate(policy))}
    )


def test_the_recorded_history_is_what_the_test_assumes(
    history: tuple[SqliteStore, dict[str, AuditRecord], Settings],
) -> None:
    _, records, _ = history
    assert records["100#1"].excluded_nodes == ["gpu-005", "gpu-001"]
    assert [records[k].action for k in ("100#0", "102#2", "103#3", "104#4")] == [
        "requeue_excluding", "requeue_excluding", "requeue_excluding", "stop"
    ]  # fmt: skip


def test_unchanged_config_changes_nothing(history: tuple[SqliteStore, dict[str, AuditRecord], Settings]) -> None:
    store, _, settings = history
    report = replay(store, settings)
    assert len(report.rows) == len(HISTORY)
    assert report.changed == []
    assert report.new.precision == report.recorded.precision == pytest.approx(3 / 5)


def test_lower_attempt_cap_flips_exactly_attempts_two_and_three(
    history: tuple[SqliteStore, dict[str, AuditRecord], Settings], tmp_path: Path
) -> None:
    store, records, _ = history
    before = [r.to_json() for r in store.records(RecordQuery(limit=100))]
    report = replay(store, candidate(tmp_path, max_attempts=3))
    assert {r.id for r in report.changed} == {records["102#2"].id, records["103#3"].id}
    for row in report.changed:
        assert (row.recorded_action, row.new_action, row.new_nodes) == ("requeue_excluding", "stop", [])
        assert "cap is 3 attempts" in row.new_reason
    # Reviewed and acting: 100#0 correct, 100#1 wrong, 102#2 correct, 103#3 wrong, 104#4 correct.
    assert (report.recorded.reviewed, report.recorded.correct, report.recorded.precision) == (5, 3, 3 / 5)
    # New: 102#2 and 103#3 act differently (no review covers a stop); 100#0, 100#1, 104#4 are judged: 2 of 3.
    new = report.new
    assert (new.judged, new.correct, new.unjudged) == (3, 2, 2)
    assert new.precision == pytest.approx(2 / 3)
    # Side-effect free: the store holds exactly what it held.
    assert [r.to_json() for r in store.records(RecordQuery(limit=100))] == before


def test_not_acting_on_infra_counts_false_alarms_avoided_and_recoveries_lost(
    history: tuple[SqliteStore, dict[str, AuditRecord], Settings], tmp_path: Path
) -> None:
    store, records, _ = history
    report = replay(store, candidate(tmp_path, infra_with_nodes="none"))
    flipped = {r.id for r in report.changed}
    assert flipped == {records[k].id for k in ("100#0", "100#1", "102#2", "103#3", "109#0")}
    assert (report.new.dropped_wrong, report.new.dropped_correct) == (2, 2)
    assert (report.new.judged, report.new.correct, report.new.precision) == (1, 1, 1.0)


def test_since_limits_the_replay_but_keeps_earlier_exclusions(
    history: tuple[SqliteStore, dict[str, AuditRecord], Settings],
) -> None:
    store, records, settings = history
    report = replay(store, settings, since=records["100#1"].time)
    assert records["100#0"].id not in {r.id for r in report.rows}
    assert report.changed == []  # 100#1 still carries gpu-001 from the attempt before the window


def test_since_spans_and_bad_input() -> None:
    assert parse_since("7d", 1_000_000.0) == 1_000_000.0 - 7 * 86400
    assert parse_since("90m", 10_000.0) == 10_000.0 - 5400
    assert parse_since("2027-01-01T00:00:00Z", 0) == 1798761600.0
    with pytest.raises(ValueError, match="7d, 12h, 30m"):
        parse_since("last week", 0)


def test_the_command_prints_the_changes_and_writes_nothing(
    history: tuple[SqliteStore, dict[str, AuditRecord], Settings], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, records, _ = history
    config = tmp_path / "new.yaml"
    config.write_text(f"db_path: {tmp_path / 'tg.db'}\nclusters:\n  lab:\n    policy:\n      max_attempts: 3\n")
    since = str(rfc3339(records["100#0"].time))
    assert cli.main(["replay", "--config", str(config), "--since", since]) == 0
    out = capsys.readouterr().out
    assert "6 decisions replayed, 2 would change" in out
    assert records["102#2"].id in out
    assert records["103#3"].id in out
    assert records["100#0"].id not in out
    assert "recorded: 0.60 (3 correct) of 5 reviewed" in out
    assert "new:      0.67 (2 correct) of 3 judged; 2 would act differently" in out
    assert cli.main(["replay", "--config", str(config), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["precision"]["new"]["precision"] == pytest.approx(2 / 3)
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters:\n  lab:\n    policy:\n      max_attempts: 0\n")
    assert cli.main(["replay", "--config", str(bad), "--db", str(tmp_path / "tg.db")]) == 2
    assert "max_attempts" in capsys.readouterr().err
    assert cli.main(["replay", "--config", str(config), "--db", str(tmp_path / "missing.db")]) == 2
    assert not (tmp_path / "missing.db").exists()
