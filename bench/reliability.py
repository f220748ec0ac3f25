"""Reliability benchmark: throughput side by side, deciding with years of history, retention, hostile labels.

In-process on a real SQLite file (WAL, ``synchronous=FULL``), through the same engine the server runs,
except throughput, which needs the server's HTTP side and its decision loop running together. Writes
bench/results/reliability.json; ``--sections`` runs some sections and replaces only theirs there.

  throughput: a real ``trainguard serve`` (pinned to one core) takes 8-alert notifications (one new
      incident each) from 8 concurrent senders for a fixed time while its decision loop decides them:
      incidents opened/s and decided/s over the same interval, the undecided backlog, and how long it
      takes to empty once the senders stop (``trainguard.lab.load``);
  history: decision time per incident with 1 M implication rows and 250 k audit records already
      stored (target <= 5 ms);
  retention: store size before and after ``retention.days`` over a history of old incidents;
  cardinality: series added to /metrics by 50,000 alerts with distinct hostile cluster names
      (target: < 100).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from responder.alerts import parse_notification
from responder.clock import FakeClock
from responder.engine import Engine
from responder.metrics import ResponderMetrics
from responder.schedulers.recording import RecordingScheduler
from responder.settings import Settings
from responder.store.retention import RetentionSettings, prune
from responder.store.sqlite import SqliteStore
from trainguard.lab.load import start_server, sustained
from trainguard.lab.payloads import alert, notification

ROOT = Path(__file__).resolve().parent.parent
DAY = 86400.0


def _engine(db: Path, clock: FakeClock) -> tuple[Engine, SqliteStore, CollectorRegistry]:
    settings = Settings(db_path=db, correlation_window_s=1.0, clusters={"lab": {}})
    store, registry = SqliteStore(db), CollectorRegistry()
    return Engine(settings, store, RecordingScheduler("done"), clock, ResponderMetrics(registry)), store, registry


def _bodies(count: int, first: int, clock: FakeClock, cluster: str = "lab") -> list[bytes]:
    out = []
    for i in range(count):
        items = [alert("TrainguardLogCollectiveTimeout", "collective_timeout", cluster=cluster, workload=str(first + i),
                       host=f"n{(i + r) % 64}", rank=str(r), starts_at=clock.now()) for r in range(7)]  # fmt: skip
        items.append(alert("TrainguardGpuXid", "infra_gpu", cluster=cluster, workload=str(first + i),
                           host=f"n{i % 64}", pattern="xid_79_fallen_off_bus", starts_at=clock.now()))  # fmt: skip
        out.append(json.dumps(notification(items)).encode())
    return out


def throughput(work: Path, seconds: float, window_s: float) -> dict[str, Any]:
    """Ingest and decisions at the same time, on a real server: ``trainguard.lab.load.sustained``."""
    proc, url = start_server(work / "throughput.db", window_s)
    try:
        return asyncio.run(sustained(url, seconds, concurrency=8, window_s=window_s))
    finally:
        proc.terminate()
        proc.wait(10)


def history(work: Path, implications: int, records: int, incidents: int) -> dict[str, Any]:
    clock = FakeClock()
    engine, store, _ = _engine(work / "history.db", clock)
    db = store._db  # bulk history straight into the tables: the decide path below is what is measured
    with store._lock:
        db.execute("BEGIN")
        db.executemany("INSERT INTO implications VALUES ('lab', ?, ?, '0', ?, ?, 1.0)",
                       ((f"n{i % 2000}", str(i // 4), f"inc-h{i}", clock.now() - 400 * DAY + i)
                        for i in range(implications)))  # fmt: skip
        db.executemany("INSERT INTO records (id, kind, time, cluster, workload, incident_id, action, mode, outcome,"
                       " node, body) VALUES (?, 'decision', ?, 'lab', ?, ?, 'requeue', 'monitor', 'planned', '', '{}')",
                       ((f"dec-h{i}", clock.now() - 400 * DAY + i, str(i), f"inc-r{i}")
                        for i in range(records)))  # fmt: skip
        db.execute("COMMIT")
        db.execute("ANALYZE")
    for body in _bodies(incidents, 900_000, clock):
        engine.ingest(parse_notification(json.loads(body))[0])
    clock.advance(2)
    t0 = time.perf_counter()
    decided = engine.decide_due()
    per_incident_ms = (time.perf_counter() - t0) * 1000 / incidents
    t0 = time.perf_counter()
    for i in range(100):
        store.workload_nodes("lab", str(i * 997))
    workload_nodes_ms = (time.perf_counter() - t0) * 10
    store.close()
    return {"implication_rows": implications, "record_rows": records, "incidents": incidents,
            "records_written": len(decided), "decision_ms_per_incident": round(per_incident_ms, 3),
            "workload_nodes_query_ms": round(workload_nodes_ms, 4), "target_ms": 5.0,
            "meets_target": per_incident_ms <= 5.0}  # fmt: skip


def _size(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


def retention(work: Path, incidents: int) -> dict[str, Any]:
    clock = FakeClock()
    engine, store, _ = _engine(work / "retention.db", clock)
    for start in range(0, incidents, 1000):
        for body in _bodies(min(1000, incidents - start), 200_000 + start, clock):
            engine.ingest(parse_notification(json.loads(body))[0])
        clock.advance(2)
        engine.decide_due()
        clock.advance(DAY)  # a day of history per 1,000 incidents
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = _size(store.path)
    days = 7.0
    t0 = time.perf_counter()
    result = prune(store.path, RetentionSettings(days=days, export_path=work / "export.jsonl"), clock.now())
    took = time.perf_counter() - t0
    after = _size(store.path)
    store.close()
    return {"incidents": incidents, "alerts": incidents * 8, "retention_days": days,
            "db_bytes_before": before, "db_bytes_after": after, "records_deleted": result.records,
            "records_exported": result.exported, "prune_s": round(took, 2)}  # fmt: skip


def cardinality(work: Path, names: int) -> dict[str, Any]:
    clock = FakeClock()
    engine, store, registry = _engine(work / "cardinality.db", clock)

    def series() -> tuple[int, int]:
        text = generate_latest(registry)
        return sum(1 for line in text.splitlines() if line and not line.startswith(b"#")), len(text)

    before, before_bytes = series()
    for start in range(0, names, 500):
        items = [alert("TrainguardGpuXid", "infra_gpu", cluster=f"evil-{start + i}", workload=str(i + 1),
                       host="n1", pattern="xid_79_fallen_off_bus", starts_at=clock.now())
                 for i in range(500)]  # fmt: skip
        engine.ingest(parse_notification(notification(items))[0])
    clock.advance(2)
    engine.decide_due()
    engine.refresh_gauges()
    after, after_bytes = series()
    store.close()
    return {"hostile_cluster_names": names, "series_before": before, "series_after": after,
            "series_added": after - before, "scrape_bytes": after_bytes, "scrape_bytes_before": before_bytes,
            "target_series_added_below": 100}  # fmt: skip


SECTIONS = ("throughput", "history", "retention", "cardinality")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="throughput: how long the senders send")
    parser.add_argument("--window", type=float, default=1.0, help="throughput: the correlation window (s)")
    parser.add_argument("--implications", type=int, default=1_000_000)
    parser.add_argument("--records", type=int, default=250_000)
    parser.add_argument("--history-incidents", type=int, default=200)
    parser.add_argument("--retention-incidents", type=int, default=20_000)
    parser.add_argument("--hostile-names", type=int, default=50_000)
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "reliability.json")
    args = parser.parse_args()
    runs = {
        "throughput": lambda work: throughput(work, args.seconds, args.window),
        "history": lambda work: history(work, args.implications, args.records, args.history_incidents),
        "retention": lambda work: retention(work, args.retention_incidents),
        "cardinality": lambda work: cardinality(work, args.hostile_names),
    }
    result: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    for name in set(SECTIONS) & set(result):  # sections kept from an earlier run keep that run's time
        result[name] = {"time": result.get("time"), **result[name]}
    now = datetime.now(UTC).isoformat(timespec="seconds")
    result.update({"time": now, "machine": {"python": platform.python_version(),
                                            "cpu": platform.processor() or platform.machine(),
                                            "cpus": os.cpu_count(),
                                            "load_average_at_start": round(os.getloadavg()[0], 2)}})  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="tg-reliability-") as tmp:
        for name in args.sections:
            result[name] = {"time": now, **runs[name](Path(tmp))}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
