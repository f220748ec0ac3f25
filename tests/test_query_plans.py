"""``EXPLAIN QUERY PLAN`` over every query the decision path really runs: none scans a growing table.

The queries are captured from a real ingest-and-decide pass (SQLite's trace callback), so a new query
is checked without being listed here. The plan that hurt before (``workload_nodes`` searching every
implication of the cluster, 1.6 s per query at 1 M rows) is pinned by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from responder.clock import FakeClock
from tests.conftest import Responder
from tests.services import wait_until
from trainguard.lab.payloads import alert, notification

GROWING = ("alerts", "incidents", "records", "implications", "notifications", "reviews")


def _plan(r: Responder, sql: str) -> list[str]:
    with r.store._locked() as conn:  # the app's own decision loop shares this connection
        return [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]


def test_no_hot_query_scans_a_growing_table(make_responder: Callable[..., Responder]) -> None:
    clock = FakeClock()
    r = make_responder(clusters={"lab": {}}, clock=clock)
    seen: list[str] = []
    r.store._db.set_trace_callback(seen.append)
    try:
        for workload in ("101", "102"):
            r.post(notification([alert("TrainguardGpuXid", "infra_gpu", workload=workload, host="n1",
                                       pattern="xid_79_fallen_off_bus")]))  # fmt: skip
        clock.advance(r.engine.settings.correlation_window_s + 1)
        r.engine.decide_due()  # or the app's own loop got there first: the trace sees both (one connection)
        wait_until(lambda: r.store.open_incident_count() == 0, 10, what="both incidents decided")
    finally:
        r.store._db.set_trace_callback(None)
    selects = {sql for sql in seen if sql.lstrip().upper().startswith("SELECT")}
    assert any("FROM implications" in sql for sql in selects), "the ledger's queries ran"
    for sql in selects:
        for step in _plan(r, sql):
            table = re.match(r"SCAN (\w+)", step)
            assert not (table and table.group(1) in GROWING and "COVERING INDEX" not in step), (sql, step)


def test_workload_nodes_searches_by_workload(responder: Responder) -> None:
    plan = " ".join(_plan(responder, "SELECT DISTINCT node FROM implications WHERE cluster='c' AND workload='w'"))
    assert "workload=?" in plan, plan
