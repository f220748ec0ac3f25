"""Replicas on one PostgreSQL, behind a two-peer Alertmanager cluster: the failover test's and bench's harness.

``ReplicaSet`` runs real ``trainguard serve`` processes that share a throwaway PostgreSQL
(``trainguard.lab.postgres``), all in act mode on cluster ``lab`` whose scheduler is the durable fake
``{kind: recording, journal: ...}`` (``responder/schedulers/recording.py``: one fsynced line per action,
idempotent per attempt like the real adapters, ``verify_s`` a pause between the action and its answer).
It kills a replica with SIGKILL and reads the truth from the database and the journal, never from
the replica that was killed. ``start_alertmanager_pair`` starts two real Alertmanagers gossiping as one
cluster (``--cluster.listen-address``/``--cluster.peer``), each sending every group to every replica.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml
from psycopg.rows import dict_row

from trainguard.lab.common import free_port, poll
from trainguard.lab.payloads import nccl_storm_with_xid
from trainguard.lab.postgres import Postgres, start_postgres
from trainguard.lab.server import ServerProcess
from trainguard.lab.stack import Service, _spawn

CLUSTER = "lab"


@dataclass
class ReplicaSet:
    pg: Postgres
    workdir: Path
    verify_s: float = 3.0
    lease: dict[str, float] = field(default_factory=lambda: {"lease_s": 6.0, "renew_s": 1.0, "poll_s": 0.2})
    replicas: dict[str, ServerProcess] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # more settings (bench: a breaker that never trips)

    @property
    def journal(self) -> Path:
        return self.workdir / "actions.jsonl"

    def config(self) -> Path:
        path = self.workdir / "trainguard.yml"
        scheduler = {"kind": "recording", "journal": str(self.journal), "verify_s": self.verify_s}
        config = {
            "correlation_window_s": 1.0,
            "clusters": {CLUSTER: {"mode": "act", "scheduler": scheduler}},
            "store": {"url": self.pg.url, **self.lease},
            **self.extra,
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def start(self, name: str) -> ServerProcess:
        server = ServerProcess(self.workdir / f"{name}.db", args=["--config", str(self.config())])
        self.replicas[name] = server
        return server

    def url(self, name: str) -> str:
        return self.replicas[name].url

    def role(self, name: str) -> str | None:
        try:
            body = httpx.get(f"{self.url(name)}/healthz", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return None
        role: str | None = body.get("loop", {}).get("lease", {}).get("role")
        return role

    def wait_leader(self, timeout: float = 30.0) -> str:
        """The one live replica that says it leads (and no other does)."""

        def one() -> str | None:
            leaders = [n for n, s in self.replicas.items() if s.proc.poll() is None and self.role(n) == "leader"]
            return leaders[0] if len(leaders) == 1 else None

        return poll(one, timeout, "one leader among the replicas")

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> float:
        """Send ``sig`` to replica ``name`` (SIGKILL: and reap it); the time just before the signal.

        SIGSTOP stands for a hung leader (a stalled VM, a long GC pause): alive, holding its session,
        silent; SIGCONT wakes it up, deposed.
        """
        at = time.time()
        self.replicas[name].proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.replicas[name].proc.wait(10)
        return at

    def stop(self) -> None:
        for server in self.replicas.values():
            server.stop()

    # -- the truth, from the database and the journal --------------------------------------------

    def sql(self, query: str, *params: object) -> list[dict[str, Any]]:
        with psycopg.connect(self.pg.url, row_factory=dict_row, connect_timeout=5) as conn:
            return conn.execute(query.encode(), params).fetchall()

    def leader_row(self) -> dict[str, Any] | None:
        rows = self.sql("SELECT holder, term, acquired_at, renewed_at FROM leader WHERE name='decisions'")
        return rows[0] if rows else None

    def wait_term_after(self, term: int, timeout: float = 30.0) -> dict[str, Any]:
        """The leader row once a term later than ``term`` is granted."""
        return poll(lambda: (r := self.leader_row()) and r["term"] > term and r, timeout, f"a term after {term}")

    def decisions(self, workload: str) -> list[dict[str, Any]]:
        return self.sql(
            "SELECT id, outcome, body FROM records WHERE kind='decision' AND workload=%s ORDER BY seq", workload
        )

    def actions(self) -> list[dict[str, Any]]:
        """The journal: every action the fake scheduler carried out (at most once per attempt)."""
        if not self.journal.exists():
            return []
        return [json.loads(line) for line in self.journal.read_text().splitlines()]

    def asked(self) -> int:
        """How many times replicas asked the scheduler, repeats of a done action included."""
        path = self.journal.with_name(self.journal.name + ".asked")
        return len(path.read_text().splitlines()) if path.exists() else 0

    def stored_alerts(self, workload: str) -> int:
        return int(self.sql("SELECT COUNT(*) AS n FROM alerts WHERE workload=%s", workload)[0]["n"])


@contextmanager
def replica_set(
    workdir: Path, replicas: int = 2, verify_s: float = 3.0, extra: dict[str, Any] | None = None
) -> Iterator[ReplicaSet]:
    """A PostgreSQL and ``replicas`` responders on it, all stopped (and the database deleted) at the end."""
    workdir.mkdir(parents=True, exist_ok=True)
    pg = start_postgres()
    rs = ReplicaSet(pg, workdir, verify_s, extra=extra or {})
    try:
        for i in range(replicas):
            rs.start(f"r{i + 1}")
        yield rs
    finally:
        rs.stop()
        pg.stop()


def alertmanager_pair_config(webhook_urls: list[str]) -> dict[str, Any]:
    """Every group to every replica, quickly (group_wait 1s), never repeated during a test."""
    return {
        "route": {"receiver": "trainguard", "group_by": ["cluster", "workload", "attempt"], "group_wait": "1s",
                  "group_interval": "2s", "repeat_interval": "1h"},
        "receivers": [{"name": "trainguard", "webhook_configs": [
            {"url": url, "send_resolved": False, "max_alerts": 0} for url in webhook_urls]}],
    }  # fmt: skip


def start_alertmanager_pair(workdir: Path, webhook_urls: list[str]) -> list[Service]:
    """Two Alertmanagers gossiping as one cluster; returns once both see two peers."""
    gossip = [free_port(), free_port()]
    config = workdir / "alertmanager.yml"
    config.write_text(yaml.safe_dump(alertmanager_pair_config(webhook_urls)))
    peers = []
    for i in range(2):
        port = free_port()
        data = workdir / f"am{i}"
        data.mkdir(parents=True, exist_ok=True)
        argv = ["prometheus-alertmanager", f"--config.file={config}", f"--storage.path={data}",
                f"--web.listen-address=127.0.0.1:{port}", f"--cluster.listen-address=127.0.0.1:{gossip[i]}",
                f"--cluster.peer=127.0.0.1:{gossip[1 - i]}", "--cluster.peer-timeout=2s",
                "--cluster.gossip-interval=100ms", "--cluster.pushpull-interval=2s"]  # fmt: skip
        peers.append(_spawn(f"alertmanager{i}", argv, workdir, port))
    for am in peers:
        am.wait_ready()
    poll(lambda: all(len(_peers(am)) == 2 for am in peers), 30, "the two Alertmanagers to gossip")
    return peers


def _peers(am: Service) -> list[Any]:
    try:
        peers: list[Any] = httpx.get(f"{am.url}/api/v2/status", timeout=2).json()["cluster"].get("peers") or []
    except (httpx.HTTPError, ValueError, KeyError):
        return []
    return peers


def post_alerts(peers: list[Service], alerts: list[dict[str, Any]]) -> None:
    """What Prometheus does: send the same alerts to every Alertmanager of the cluster."""
    body = [{k: a[k] for k in ("labels", "annotations", "startsAt", "generatorURL")} for a in alerts]
    for am in peers:
        httpx.post(f"{am.url}/api/v2/alerts", json=body, timeout=5).raise_for_status()


def incident_alerts(
    workload: str, bad_host: str = "gpu-002", hosts: int = 2, ranks_per_host: int = 2
) -> list[dict[str, Any]]:
    """A node fault in ``workload`` (attempt 0): NCCL timeouts on every rank and an XID 79 on ``bad_host``."""
    storm = nccl_storm_with_xid(ranks_per_host, hosts, bad_host=bad_host, workload=workload)
    alerts: list[dict[str, Any]] = storm["alerts"]
    assert all(a["labels"]["cluster"] == CLUSTER for a in alerts)
    return alerts
