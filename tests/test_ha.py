"""Failover: two responder replicas on a real PostgreSQL behind a real two-peer Alertmanager cluster.

Both replicas (real ``trainguard serve`` processes) ingest; the holder of the advisory-lock lease
decides and acts. The scheduler is the durable fake ``{kind: recording, journal: ...}`` (no Slurm
here): a fsynced journal that processes share, idempotent per attempt like the real adapters, with a
3 s pause between the action and its answer. The leader is killed with SIGKILL inside that pause,
so it dies between ``pending`` and the outcome, its action already done.

Skips with the reason where PostgreSQL, psycopg or Alertmanager is missing; fails instead under
TRAINGUARD_REQUIRE_SERVICES=1 (CI). The takeover time is printed (``-s``) and measured over ten trials
by ``bench/ha.py``.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.services import require_binary, unavailable, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.prometheus, pytest.mark.timeout(240)]


def test_leader_killed_between_pending_and_outcome_acts_once_and_loses_no_alert(tmp_path: Path) -> None:
    try:
        import psycopg  # noqa: F401, PLC0415
    except ImportError:
        unavailable("psycopg not installed: pip install 'trainguard[postgres]'")
    from trainguard.lab import ha, postgres  # noqa: PLC0415

    if postgres.server_bin() is None:
        unavailable("PostgreSQL not found: apt-get install postgresql")
    require_binary("prometheus-alertmanager")

    with ha.replica_set(tmp_path, replicas=2, verify_s=3.0) as rs:
        peers = ha.start_alertmanager_pair(tmp_path, [f"{rs.url(n)}/v1/alerts" for n in rs.replicas])
        try:
            leader = rs.wait_leader()
            term = rs.leader_row()["term"]  # type: ignore[index]
            first = ha.incident_alerts("1001")
            ha.post_alerts(peers, first)
            # The leader decided (pending) and acted; it is inside the adapter's verification now.
            wait_until(rs.actions, 30, what="the leader's action in the journal")
            [(_, outcome)] = [(d["id"], d["outcome"]) for d in rs.decisions("1001")]
            assert outcome == "pending"
            killed_at = rs.kill(leader)

            second = ha.incident_alerts("1002", bad_host="gpu-001")  # not gpu-002 again: no drain
            ha.post_alerts(peers, second)  # an incident that arrives while the leader is gone
            row = rs.wait_term_after(term)
            takeover_s = row["acquired_at"] - killed_at
            survivor = rs.wait_leader()
            assert survivor != leader
            metrics = httpx.get(f"{rs.url(survivor)}/metrics", timeout=5).text
            assert "trainguard_responder_leader 1.0" in metrics

            def outcomes(workload: str) -> list[str]:
                return [d["outcome"] for d in rs.decisions(workload)]

            wait_until(lambda: outcomes("1001") == ["done"] and outcomes("1002") == ["done"], 60,
                       what="both incidents decided once and done")  # fmt: skip
            finished_s = time.time() - killed_at
            actions = rs.actions()
            # Exactly one action per incident, though the survivor asked again for the first one.
            assert sorted(a["key"][1] for a in actions) == ["1001", "1002"]
            assert rs.asked() == 3
            # No accepted alert lost: every alert sent to the Alertmanagers is stored, once.
            assert rs.stored_alerts("1001") == len(first)
            assert rs.stored_alerts("1002") == len(second)
            print(f"\ntakeover {takeover_s:.2f}s after SIGKILL (lease_s {rs.lease['lease_s']:g}, poll_s "
                  f"{rs.lease['poll_s']:g}); both incidents done {finished_s:.1f}s after it")  # fmt: skip
            assert takeover_s < rs.lease["lease_s"]
        finally:
            for am in peers:
                am.stop()
