"""The lab fault class ``intermittent``: one node makes the whole job time out, every attempt it is in.

Every rank of an attempt that runs on the bad node prints the same NCCL watchdog timeout and exits, so
no line names a node; attempts without it train clean. trainguard can only find the node through the
restarts (``responder/experiments.py``): the trial follows the job's decisions until one blames a node,
or time runs out, and counts the attempts and the goodput they cost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from responder.schedulers.base import WorkloadState
from responder.schedulers.slurm.parse import expand_hostlist, parse_job
from trainguard.lab.faults import TrialResult
from trainguard.lab.slurm import LAB_BREAKER, Lab

TIMEOUT_LINE = (
    "[rank{rank}]:[E1129 10:01:02.123456 1234 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
    "600060 milliseconds before timing out."
)
# Experiments on a 4-node lab with a 2-node job: at most 2 nodes out; splitting from the first failure
# (every failure here is the bad node's; the default waits for a second, one may be transient); a clean
# run after 45 s (a failed attempt's successor strikes about 35 s after its restart on this machine: a
# shorter wait would call an attempt clean before it could fail); a probe restart when a clean run
# leaves the search open (the lab cannot wait for restarts that happen anyway); room for the attempts.
POLICY: dict[str, Any] = {
    "max_attempts": 12,
    "localize": {"after_failures": 1, "spare_nodes": 2, "min_nodes": 2, "clean_after_s": 45, "probe": True},
}
# Restarts as experiments rotate the excluded nodes: the suspect, then a pinned healthy node to force the
# next attempt onto the other suspects. On the lab's 4 nodes that is 3 distinct nodes within a minute when
# attempts fail fast, which the lab's breaker (2 of 4 per 60 s) refuses (a safe refusal, audited). The
# spare budget (2) still bounds what is excluded at once; the breaker here allows 3 of 4 per minute.
BREAKER: dict[str, Any] = {**LAB_BREAKER, "max_node_fraction": 0.75}
NODES_PER_JOB = 2
STEPS_BEFORE_FAULT = 8


def run_intermittent(lab: Lab, say: Callable[[str], None] = print, timeout_s: float = 420) -> TrialResult:
    """Submit a 2-node job; whenever an attempt runs on the bad node, time the whole job out."""
    job = lab.submit(nodes=NODES_PER_JOB)
    try:
        started = lab.wait_productive(job, 0, NODES_PER_JOB, STEPS_BEFORE_FAULT, timeout=120)
        bad = expand_hostlist(str((lab.squeue(job) or {}).get("nodes", "")))[-1]
        result = TrialResult("intermittent", lab.mode, job, bad, expected_action="requeue_excluding")
        result.expected_nodes = [bad]
        t0 = time.time()
        say(f"  +{0:6.2f}s  {bad} is bad: every attempt on it times out on every rank")
        result.events.append((0.0, f"{bad} is bad: every attempt on it times out on every rank"))
        _follow(lab, job, bad, result, t0, started, timeout_s, say)
        return result
    finally:
        lab.cancel(job)


def _follow(
    lab: Lab, job: str, bad: str, result: TrialResult, t0: float, started: float, timeout_s: float,
    say: Callable[[str], None],
) -> None:  # fmt: skip
    faulted: set[int] = set()
    checkpoints: dict[int, int] = {}  # attempt -> the newest checkpoint when it was first seen running
    down: list[tuple[int, float]] = []  # (failed attempt, when); downtime ends at the next attempt's first step
    lost = 0.0
    while time.time() - t0 < timeout_s:
        for failed, when in list(down):
            back = [t for a in range(failed + 1, failed + 4) for _, t in lab.steps(job, a).values()]
            if back:
                lost += min(back) - when
                down.remove((failed, when))
        blamed = _blamed(lab, job)
        if blamed is not None:
            result.implicated, result.excluded = blamed, _excluded_after(lab, job)
            result.action, result.ok = "requeue_excluding", blamed == [bad] and bad in result.excluded
            result.note = (
                f"blamed {', '.join(blamed)} after {len(faulted)} failed attempt(s); "
                f"Slurm's ExcNodeList then: {','.join(result.excluded) or 'empty'}"
            )
            result.events.append((time.time() - t0, result.note))
            say(f"  +{time.time() - t0:6.2f}s  {result.note}")
            break
        attempt, nodes = _running(lab, job)
        if attempt is None or attempt in faulted or bad not in nodes:
            time.sleep(0.5)
            continue
        steps = lab.steps(job, attempt)
        floor = checkpoints.setdefault(attempt, lab.checkpoint_step(job) or 0)
        newest = lab.checkpoint_step(job) or 0
        # Each attempt first writes a newer checkpoint: an intermittent fault lets training progress, and
        # attempts without one would rightly be stopped as unproductive (policy no_progress).
        if len(steps) < NODES_PER_JOB or min(s for s, _ in steps.values()) < STEPS_BEFORE_FAULT or newest <= floor:
            time.sleep(0.2)
            continue
        _time_out_everyone(lab, job, attempt, nodes)
        faulted.add(attempt)
        down.append((attempt, time.time()))
        at = time.time() - t0
        result.events.append((at, f"attempt {attempt} on {','.join(nodes)}: every rank times out"))
        say(f"  +{at:6.2f}s  attempt {attempt} on {','.join(nodes)}: every rank times out")
    else:
        result.note = f"no node blamed within {timeout_s:.0f}s ({len(faulted)} failed attempt(s))"
    result.decisions = len(lab.decisions(job))
    result.trained_s = time.time() - started
    # For this class: the downtime of all failed attempts together (each fault -> the next attempt's first step).
    result.productive_s = lost if faulted and not down else None


def _time_out_everyone(lab: Lab, job: str, attempt: int, nodes: list[str]) -> None:
    """Every rank prints the same watchdog timeout, then all are killed at once (as the watchdog's abort
    does): no rank lives on to print a follow-on error of its own."""
    control = lab.root / "control" / job
    ranks = {node: lab.rank_on(job, attempt, node) for node in nodes}
    lines = [control / f"line-r{state['identity']['rank']}" for state in ranks.values()]
    for path in lines:
        path.write_text(TIMEOUT_LINE.format(rank=path.name.removeprefix("line-r")))
    deadline = time.time() + 5
    while time.time() < deadline and any(path.exists() for path in lines):
        time.sleep(0.05)  # each rank prints its line at its next step
    for state in ranks.values():
        with contextlib.suppress(ProcessLookupError, ValueError, KeyError):
            os.kill(int(state["pid"]), signal.SIGKILL)


def _running(lab: Lab, job: str) -> tuple[int | None, list[str]]:
    info = lab.squeue(job)
    if info is None:
        return None, []
    parsed = parse_job(info)
    if parsed.state is not WorkloadState.RUNNING:
        return None, []
    return parsed.restart_cnt, list(parsed.nodes)


def _excluded_after(lab: Lab, job: str, timeout_s: float = 30) -> list[str]:
    """The job's ExcNodeList read back from Slurm once the decisions that blamed a node are carried out
    (a blame at a failure restarts the job without it; one after a clean run keeps the running attempt,
    still without the nodes its experiment pinned out, until its next restart)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline and any(r["outcome"] == "pending" for r in lab.decisions(job)):
        time.sleep(0.5)
    info = lab.squeue(job)
    return sorted(parse_job(info).excluded_nodes) if info is not None else []


def _blamed(lab: Lab, job: str) -> list[str] | None:
    for record in lab.decisions(job):
        section = (record.get("attribution") or {}).get("localization") or {}
        if section.get("blamed"):
            return list(section["blamed"])
    return None
