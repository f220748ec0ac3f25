"""Replica failover benchmark: how long until another replica leads after the leader is killed.

Two real ``trainguard serve`` replicas share a throwaway PostgreSQL (``trainguard.lab.ha``), in act
mode on a durable fake scheduler (a fsynced journal, idempotent per attempt; no Slurm). Each trial:

1. an incident is posted to both replicas (as an Alertmanager pair does); the leader decides it
   (``pending``) and acts: the action is in the journal, the leader is inside the adapter's
   verification pause (``--verify-s``);
2. the leader is killed with SIGKILL there, between the action and its outcome;
3. we measure, from the signal: **takeover**, until the ``leader`` row shows the next term (its
   ``acquired_at``); **finished**, until the incident's record reads ``done`` in the database (the new
   leader resumed the ``pending`` record and the adapter answered; includes one verification pause);
4. the killed replica is started again, as a follower, for the next trial.

With ``--signal stop`` the leader is frozen with SIGSTOP instead (a hung leader: alive, silent, still
connected): the server ends its session after ``lease_s`` of silence, another replica takes over, and
the frozen one, woken with SIGCONT, finds itself deposed; its late outcome write does not count.

Every trial also checks that the journal holds exactly one action per incident. Writes
bench/results/ha.json.

  .venv/bin/python -m bench.ha --trials 10
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.slurm_action import stats
from trainguard.lab import ha
from trainguard.lab.common import poll
from trainguard.lab.payloads import nccl_storm_with_xid

ROOT = Path(__file__).resolve().parent.parent
# Many actions in a few minutes on one fake cluster: the breaker would (rightly) stop them.
NO_BREAKER = {"breaker": {"max_actions": 1000, "max_nodes_without_size": 1000, "correlated_workloads": 1000}}


def trial(rs: ha.ReplicaSet, i: int, sig: signal.Signals) -> dict[str, Any]:
    leader = rs.wait_leader()
    row = rs.leader_row()
    assert row is not None
    workload = str(3000 + i)
    # A node of its own per trial: no node is blamed twice (no drains), each incident one action.
    payload = nccl_storm_with_xid(ranks_per_host=1, hosts=i + 2, bad_host=f"gpu-{i + 2:03d}", workload=workload)
    for name in rs.replicas:
        httpx.post(f"{rs.url(name)}/v1/alerts", json=payload, timeout=10).raise_for_status()
    poll(lambda: any(a["key"][1] == workload for a in rs.actions()), 60, f"the action for {workload}")
    killed_at = rs.kill(leader, sig)
    new = rs.wait_term_after(int(row["term"]))
    poll(lambda: [d["outcome"] for d in rs.decisions(workload)] == ["done"], 60, f"{workload} done")
    finished_s = time.time() - killed_at
    if sig == signal.SIGSTOP:
        rs.kill(leader, signal.SIGCONT)  # wakes up deposed, and follows
        poll(lambda: rs.role(leader) == "follower", 30, f"{leader} to follow")
    else:
        rs.start(leader)  # back as a follower
    return {"workload": workload, "killed": leader, "takeover_s": new["acquired_at"] - killed_at,
            "finished_s": finished_s, "term": new["term"]}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--verify-s", type=float, default=1.0, help="the fake adapter's verification pause")
    parser.add_argument("--signal", choices=("kill", "stop"), default="kill", help="crash or hang the leader")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/ha.json (ha-stop.json)")
    args = parser.parse_args()
    sig = signal.SIGKILL if args.signal == "kill" else signal.SIGSTOP
    out = args.out or ROOT / "bench" / "results" / ("ha.json" if args.signal == "kill" else "ha-stop.json")
    with (
        tempfile.TemporaryDirectory(prefix="tg-ha-") as tmp,
        ha.replica_set(Path(tmp), replicas=2, verify_s=args.verify_s, extra=NO_BREAKER) as rs,
    ):
        trials = []
        for i in range(args.trials):
            trials.append(trial(rs, i, sig))
            print(f"trial {i + 1}: takeover {trials[-1]['takeover_s']:.3f}s, done {trials[-1]['finished_s']:.2f}s")
        per_incident: dict[str, int] = {}
        for action in rs.actions():
            per_incident[action["key"][1]] = per_incident.get(action["key"][1], 0) + 1
        result = {
            "what": f"{sig.name} of the leader between an action and its outcome; two replicas, one PostgreSQL",
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "arch": platform.machine(), "python": platform.python_version()},
            "lease": rs.lease,
            "verify_s": args.verify_s,
            "takeover_s": stats([t["takeover_s"] for t in trials]),
            "finished_s": stats([t["finished_s"] for t in trials]),
            "actions_per_incident": sorted(set(per_incident.values())),
            "incidents": len(per_incident),
            "scheduler_asked": rs.asked(),
            "trials": trials,
        }
    if result["actions_per_incident"] != [1] or result["incidents"] != args.trials:
        print(f"FAILED: actions per incident {per_incident}")
        return 1
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"takeover p50 {result['takeover_s']['median']}s p95 {result['takeover_s']['p95']}s max "
          f"{result['takeover_s']['max']}s; wrote {out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
