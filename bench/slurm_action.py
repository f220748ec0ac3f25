"""Slurm action benchmark on a real Slurm lab (slurm/lab.sh: 4 slurmd nodes on this machine, root).

For each trial a 3-node heartbeat job is requeued excluding one of its nodes through
``SlurmScheduler.act(requeue_excluding)``, exactly as the responder does it, and we measure:

  decision -> action verified   act() called until it returns verified by a fresh squeue --json
                                (mark, requeuehold, ExcNodeList, release, unmark, verify); target <= 1 s
  decision -> RUNNING again     until squeue shows the job RUNNING on the new attempt (bounded below
                                by the lab's cred_expire, 5 s: Slurm's wait before a requeued job starts)
  decision -> heartbeats        until every task of the new attempt wrote a heartbeat

plus single-shot drain, resume and stop latencies. Writes bench/results/slurm.json.

  sudo .venv/bin/python bench/slurm_action.py --trials 5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from responder.model import Action
from responder.schedulers.base import ActionRequest, WorkloadState
from responder.schedulers.slurm.adapter import SlurmScheduler
from responder.schedulers.slurm.settings import SlurmSettings
from trainguard.lab.common import HEARTBEAT_JOB, free_port, free_port_block, heartbeats

ROOT = Path(__file__).resolve().parent.parent

LAB = ROOT / "slurm" / "lab.sh"


def stats(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]  # nearest rank
    return {
        "n": len(samples),
        "median": round(statistics.median(samples), 4),
        "p95": round(p95, 4),
        "min": round(ordered[0], 4),
        "max": round(ordered[-1], 4),
        "samples": [round(s, 4) for s in samples],
    }


def poll(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> float:
    """Seconds (monotonic clock) at which ``predicate`` first held; raises on timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(interval)
    return time.monotonic()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10, help="requeue trials (default 10)")
    ap.add_argument("--dir", help="lab directory (default: a new one under /tmp, removed afterwards)")
    ap.add_argument("--ctld-port", type=int, help="slurmctld port (default: a free one)")
    ap.add_argument("--node-port-base", type=int, help="slurmd n<i> listens on BASE+i (default: free ports)")
    ap.add_argument("--keep", action="store_true", help="leave the lab running")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "slurm.json"))
    args = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("slurmctld", path=os.environ.get("PATH", "") + ":/usr/sbin"):
        print("needs root and Debian slurm-wlm + munge", file=sys.stderr)
        return 2

    directory = Path(args.dir or tempfile.mkdtemp(prefix="trainguard-slurm-bench-", dir="/tmp"))
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)
    env = {
        **os.environ,
        "SLURM_LAB_DIR": str(directory),
        "SLURM_LAB_CTLD_PORT": str(args.ctld_port or free_port()),
        "SLURM_LAB_NODE_PORT_BASE": str(args.node_port_base or free_port_block(4)),
        "PATH": os.environ.get("PATH", "") + ":/usr/sbin",
    }
    conf = directory / "etc" / "slurm.conf"
    env["SLURM_CONF"] = str(conf)
    t0 = time.monotonic()
    subprocess.run([str(LAB), "up"], env=env, check=True, timeout=180)
    lab_up_s = time.monotonic() - t0
    s = SlurmScheduler(SlurmSettings(cluster="lab", slurm_conf=conf), registry=CollectorRegistry())
    hb = directory / "hb"
    script = directory / "jobs" / "bench.sh"
    script.write_text(HEARTBEAT_JOB.format(hb=hb, interval=0.2), encoding="utf-8")

    def act(action: Action, job: str, **kw: Any) -> tuple[float, Any]:
        request = ActionRequest(action, "lab", job, "bench", "benchmark", **kw)
        start = time.monotonic()
        result = s.act(request)
        elapsed = time.monotonic() - start
        if result.outcome != "done" or not result.verified:
            raise RuntimeError(f"{action}: {result}")
        return elapsed, result

    verified: list[float] = []
    running: list[float] = []
    beats: list[float] = []
    try:
        out = subprocess.run(
            ["sbatch", "--parsable", "-N3", "--ntasks-per-node=1", "--requeue", "--comment=trainguard:policy=bench",
             f"-o{directory}/jobs/%j.out", "--open-mode=append", f"-D{directory}/jobs", str(script)],
            env=env, check=True, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        job = out.stdout.strip()
        poll(lambda: len(heartbeats(hb, job, 0, 0)) == 3, 60)
        for attempt in range(args.trials):
            obs = s.observe("lab", job)
            victim = obs.nodes[attempt % len(obs.nodes)]
            wall = time.time()
            took, _ = act(Action.REQUEUE_EXCLUDING, job, attempt=str(attempt), exclude_nodes=(victim,))
            start = time.monotonic() - took
            verified.append(took)

            def is_running(a: int = attempt + 1) -> bool:
                o = s.observe("lab", job)
                return o.state is WorkloadState.RUNNING and o.attempt == a

            running.append(poll(is_running, 60) - start)

            def all_beating(a: int = attempt + 1, w: float = wall) -> bool:
                return len(heartbeats(hb, job, a, w)) == 3

            beats.append(poll(all_beating, 60) - start)
            print(
                f"trial {attempt + 1}/{args.trials}: excluded {victim}: verified {verified[-1]:.3f}s, "
                f"RUNNING {running[-1]:.2f}s, heartbeats {beats[-1]:.2f}s",
                flush=True,
            )
        drain_s, _ = act(Action.DRAIN_NODE, job, node="n4")
        resume_s, _ = act(Action.RESUME_NODE, job, node="n4")
        stop_s, _ = act(Action.STOP, job)
        version = subprocess.run(["sinfo", "--version"], env=env, capture_output=True, text=True, check=False)
        result = {
            "benchmark": "slurm_action",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "slurm": version.stdout.strip(),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "lab": {"nodes": 4, "job_nodes": 3, "cred_expire_s": 5, "up_s": round(lab_up_s, 2)},
            "trials": args.trials,
            "decision_to_verified_s": stats(verified),
            "decision_to_running_s": stats(running),
            "decision_to_heartbeats_s": stats(beats),
            "drain_verified_s": round(drain_s, 4),
            "resume_verified_s": round(resume_s, 4),
            "stop_verified_s": round(stop_s, 4),
            "target_verified_s": 1.0,
            "target_met": statistics.median(verified) <= 1.0 and stats(verified)["p95"] <= 1.0,
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(json.dumps({k: result[k] for k in ("decision_to_verified_s", "decision_to_running_s")}, indent=1))
        print(f"wrote {args.out}")
    finally:
        if not args.keep:
            subprocess.run([str(LAB), "down"], env=env, check=False, timeout=120)
            if not args.dir:
                shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
