"""slurmctld SIGKILLed mid-incident, on a REAL Slurm (slurm/lab.sh) with ``trainguard serve`` in act mode.

Three running jobs each get a fault (an XID 79 on one of their nodes, every rank timing out). The
responder acknowledges the alerts; then slurmctld is killed while the incidents' correlation windows
are still open, so every decision falls due, and every action is tried, while Slurm cannot be asked.
slurmctld comes back after a while, recovering its saved state (the jobs kept running under slurmd).

What must hold: the webhook and ``/healthz`` stay up throughout; no acknowledged alert is lost; the
actions wait (``pending``, retried with backoff) instead of failing for good; once slurmctld is back
each incident is carried out exactly once (each job requeued once, excluding the faulty node), and a
resend of the same alerts decides nothing again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from responder.model import Action
from responder.schedulers.base import WorkloadState
from tests.services import wait_until
from tests.test_slurm_lab import LAB, Lab, lab, wait_running
from trainguard.lab.payloads import alert, notification
from trainguard.lab.server import ServerProcess

__all__ = ["lab"]  # the real-Slurm fixture, shared with tests/test_slurm_lab.py

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

WINDOW_S = 3.0
DOWN_S = 12.0  # slurmctld stays down this long after the first action was tried


def fault(job: str, nodes: list[str], bad: str) -> dict[str, Any]:
    """What Alertmanager sends for a node fault of ``job``: every rank times out, ``bad`` logged XID 79."""
    alerts = [
        alert(
            "TrainguardCollectiveTimeout",
            "collective_timeout",
            workload=job,
            host=node,
            rank=str(rank),
            pattern="nccl_watchdog_timeout",
        )
        for rank, node in enumerate(nodes)
    ]
    alerts.append(alert("TrainguardGpuXid", "infra_gpu", workload=job, host=bad, pattern="xid_79_fallen_off_bus",
                        extra={"gpu": "0"}))  # fmt: skip
    return notification(alerts, group_key=f'{{}}:{{workload="{job}"}}')


def responder(lab: Lab, tmp_path: Path) -> ServerProcess:
    config = {
        "correlation_window_s": WINDOW_S,
        "clusters": {
            "lab": {
                "mode": "act",
                "nodes": 4,
                "scheduler": {
                    "kind": "slurm",
                    "transport": "local",
                    "slurm_conf": str(lab.conf),
                    "command_timeout_s": 10,
                },
            }
        },
        # Three workloads fail together on purpose here: the correlated-failure breaker must not refuse them.
        "breaker": {"correlated_workloads": 10, "max_node_fraction": 1.0},
        "ledger": {"drain_after_workloads": 1000},  # one requeue per incident, no drain beside it
    }
    path = tmp_path / "trainguard.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {"SLURM_CONF": str(lab.conf), "PATH": lab.env["PATH"]}
    return ServerProcess(tmp_path / "tg.db", env=env, args=["--config", str(path)])


def decisions(url: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{url}/v1/decisions", params={"kind": "decision", "limit": "1000"}, timeout=10).json()
    return [d for d in body["decisions"] if d["action"] != Action.DRAIN_NODE]


def metric(url: str, prefix: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def test_slurmctld_killed_mid_incident(lab: Lab, tmp_path: Path) -> None:
    scheduler = lab.scheduler()
    jobs = [lab.submit(2) for _ in range(3)]
    server = responder(lab, tmp_path)
    try:
        bad: dict[str, str] = {}
        for job in jobs:
            ran_on = sorted(wait_running(lab, scheduler, job, 0, 2, 0))
            bad[job] = ran_on[-1]
        # slurmctld writes its state file a few seconds after a change; the restart must find the jobs running
        # in it, so make a change now (a job's name) and wait for the save that follows.
        running_at = time.time()
        lab.sh("scontrol", "update", f"JobId={jobs[-1]}", "Name=hb-saved")
        job_state = lab.dir / "state" / "job_state"
        wait_until(lambda: job_state.exists() and job_state.stat().st_mtime > running_at, 30, 0.2,
                   "slurmctld to save the running jobs")  # fmt: skip
        sent = {job: fault(job, sorted(scheduler.observe("lab", job).nodes), bad[job]) for job in jobs}
        for job in jobs:
            answer = httpx.post(f"{server.url}/v1/alerts", json=sent[job], timeout=10)
            assert answer.status_code == 200, answer.text
            assert answer.json()["new"] == 3
            assert len(answer.json()["incidents_opened"]) == 1
        lab.sh(str(LAB), "kill-ctld")
        killed = time.monotonic()
        assert decisions(server.url) == [], "the kill must land inside the correlation window"

        # Slurm is unreachable: every incident is decided, its action waits and is retried.
        found = wait_until(lambda: (d := decisions(server.url)) and len(d) == 3 and d, 30, 0.2, "3 decisions")
        assert isinstance(found, list)
        assert {d["workload"] for d in found} == set(jobs)
        assert all(d["action"] == Action.REQUEUE_EXCLUDING for d in found), found
        wait_until(lambda: metric(server.url, "trainguard_responder_action_retries_total") >= 3, 30, 0.2,
                   "every action retried at least once")  # fmt: skip
        time.sleep(max(0.0, DOWN_S - (time.monotonic() - killed)))
        down = decisions(server.url)
        assert all(d["outcome"] == "pending" for d in down), [(d["workload"], d["outcome"], d["detail"]) for d in down]
        health = httpx.get(f"{server.url}/healthz", timeout=5)
        assert health.status_code == 200, health.text
        # The webhook still acknowledges while Slurm is down (a resend: duplicates, nothing new).
        again = httpx.post(f"{server.url}/v1/alerts", json=sent[jobs[0]], timeout=10)
        assert again.status_code == 200, again.text
        assert again.json()["duplicates"] == 3

        lab.sh(str(LAB), "start-ctld")
        done = wait_until(
            lambda: (d := decisions(server.url)) and all(x["outcome"] != "pending" for x in d) and d,
            90, 0.5, "every action finished once slurmctld is back",
        )  # fmt: skip
        assert isinstance(done, list)
        assert [(d["workload"], d["outcome"]) for d in done if d["outcome"] != "done"] == []
        for job in jobs:
            [record] = [d for d in done if d["workload"] == job]
            assert record["excluded_nodes"] == [bad[job]]
            acknowledged = {a["fingerprint"] for a in sent[job]["alerts"]}
            assert {e["fingerprint"] for e in record["evidence"]} == acknowledged, "an acknowledged alert was lost"
            again_on = wait_running(lab, scheduler, job, 1, 2, 0)
            assert bad[job] not in again_on

        # The same alerts again (Alertmanager resends after the outage): nothing is decided or done twice.
        for job in jobs:
            answer = httpx.post(f"{server.url}/v1/alerts", json=sent[job], timeout=10)
            assert answer.status_code == 200
            assert answer.json()["duplicates"] == 3
        time.sleep(WINDOW_S + 2.0)
        assert sorted(d["id"] for d in decisions(server.url)) == sorted(d["id"] for d in done)
        for job in jobs:
            seen = scheduler.observe("lab", job)
            assert seen.attempt == 1, f"job {job} requeued {seen.attempt} times"
            assert seen.state is WorkloadState.RUNNING
        assert httpx.get(f"{server.url}/healthz", timeout=5).json()["loop"]["consecutive_failures"] == 0
    finally:
        lab.sh(str(LAB), "start-ctld", check=False)
        for job in jobs:
            lab.cancel(job)
        server.stop()
