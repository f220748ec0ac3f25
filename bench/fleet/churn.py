"""Churn run: detection latency over a long run while jobs start and end (the "later trials are slower" check).

A simulated fleet (bench/fleet/sim.py) -> real Prometheus (the profile's rules, file_sd targets) ->
real Alertmanager -> the real responder (``trainguard serve``, monitor mode, SQLite). Jobs of
``--job-nodes`` nodes live a random 1-4 minutes and are replaced by jobs with new workload ids, so
finished jobs' series go stale continuously. Every ``--every`` seconds one running job gets a fault
(log pattern and XID alternately); latency is fault -> the responder's ``received_at`` for that
workload. A faulted job ends once detected (or after 60 s), as a failed job would.

Writes one JSON line per trial and per minute of engine/responder figures to ``--out`` (JSON lines,
flushed at once, so a partial run still yields data) and a summary JSON (``--summary``) every minute:
detection p50 of the first and last 10 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.fleet.sim import RANKS_PER_NODE, Fleet
from responder.clock import parse_rfc3339
from trainguard.lab.common import free_port
from trainguard.lab.stack import (
    RESEND_DELAY,
    TSDB_FLAGS,
    Service,
    alertmanager_config,
    http_get,
    poll,
    prometheus_config,
    query,
    start_alertmanager,
    start_prometheus,
    start_responder,
)

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Trial:
    kind: str
    workload: str
    t_inject: float
    t_recv: float | None = None


def scrape_configs(sd_file: Path, self_port: int) -> list[dict[str, Any]]:
    return [
        {
            "job_name": "prometheus",
            "scrape_interval": "5s",
            "static_configs": [{"targets": [f"127.0.0.1:{self_port}"]}],
        },
        {
            "job_name": "trainguard-exporter",
            "honor_labels": True,
            "file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": "5s"}],
        },
    ]


def start_stack(
    fleet: Fleet, profile: str, work: Path, stack: ExitStack, tsdb_flags: tuple[str, ...]
) -> tuple[Service, Service, Service]:
    """Responder, Alertmanager and Prometheus on the fleet; returns once the fleet is scraped."""
    token = secrets.token_urlsafe(16)
    token_file = work / "webhook.token"
    token_file.write_text(token + "\n")
    responder = start_responder(work / "responder", token)
    stack.callback(responder.stop)
    responder.wait_ready()
    am = start_alertmanager(alertmanager_config(profile, f"{responder.url}/v1/alerts", token_file), work / "am")
    stack.callback(am.stop)
    sd = fleet.file_sd(work / "targets.yml")
    port = free_port()
    config = prometheus_config(profile, scrape_configs(sd, port), am.port)
    prom = start_prometheus(config, work / "prom", RESEND_DELAY[profile], port=port, tsdb_flags=tsdb_flags)
    stack.callback(prom.stop)
    am.wait_ready()
    prom.wait_ready()
    n = len(fleet.nodes)
    poll(lambda: _count(prom, 'count(up{job="trainguard-exporter"} == 1)') >= n or None, 120, "all targets up")
    return responder, am, prom


def _count(prom: Service, promql: str) -> float:
    result = query(prom, promql)
    return float(result[0]["value"][1]) if result else 0.0


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine_sample(prom: Service, responder: Service, t0: float) -> dict[str, Any]:
    """Per-minute figures that would show a cause: head series, rule time, responder size."""
    return {
        "type": "sample",
        "t_s": round(time.time() - t0, 1),
        "head_series": _count(prom, "prometheus_tsdb_head_series"),
        "rule_group_last_duration_max_s": _count(prom, "max(prometheus_rule_group_last_duration_seconds)"),
        "rule_group_last_duration_sum_s": _count(prom, "sum(prometheus_rule_group_last_duration_seconds)"),
        "alerts_active": _count(prom, "count(ALERTS)"),
        "prometheus_rss_kib": rss_kib(prom.proc.pid),
        "prometheus_cpu_s": round(cpu_s(prom.proc.pid), 1),
        "responder_rss_kib": rss_kib(responder.proc.pid),
        "responder_cpu_s": round(cpu_s(responder.proc.pid), 1),
        "responder_db_bytes": sum(f.stat().st_size for f in responder.workdir.glob("trainguard.db*")),
        "loadavg_1m": os.getloadavg()[0],
    }


def received_at(responder: Service, workload: str) -> float | None:
    status, body = http_get(f"{responder.url}/v1/decisions?workload={workload}&limit=5")
    if status != 200:
        return None
    found = json.loads(body).get("decisions", [])
    return min((parse_rfc3339(d["received_at"]) for d in found), default=None)


class Churn:
    """The run's job schedule: ends expired jobs, starts replacements with new workload ids."""

    def __init__(self, fleet: Fleet, job_nodes: int, rng: random.Random) -> None:
        self.fleet, self.job_nodes, self.rng = fleet, job_nodes, rng
        self.seq = 0
        self.ends: dict[str, float] = {}
        for first in range(0, len(fleet.nodes) - job_nodes + 1, job_nodes):
            self.start(list(range(first, first + job_nodes)))

    def start(self, nodes: list[int]) -> str:
        self.seq += 1
        workload = f"job-{self.seq:06d}"
        self.fleet.start_job(workload, nodes)
        self.ends[workload] = time.time() + self.rng.uniform(60, 240)
        return workload

    def replace(self, workload: str) -> None:
        nodes = self.fleet.jobs[workload].nodes
        self.fleet.end_job(workload)
        self.ends.pop(workload, None)
        self.start(nodes)

    def tick(self, busy: set[str]) -> int:
        now = time.time()
        expired = [w for w, end in self.ends.items() if end <= now and w not in busy]
        for workload in expired:
            self.replace(workload)
        return len(expired)


def run(args: argparse.Namespace, out: Any) -> list[Trial]:
    rng = random.Random(args.seed)
    fleet = Fleet(args.nodes)
    fleet.start()
    trials: list[Trial] = []
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="churn-") as tmp:
        stack.callback(fleet.stop)
        churn = Churn(fleet, args.job_nodes, rng)
        tsdb_flags = (
            TSDB_FLAGS[args.profile]
            if args.min_block_duration is None
            else (f"--storage.tsdb.min-block-duration={args.min_block_duration}",)
        )
        responder, _am, prom = start_stack(fleet, args.profile, Path(tmp), stack, tsdb_flags)
        _emit(out, {"type": "config", "tsdb_flags": list(tsdb_flags), "nodes": args.nodes, "profile": args.profile})
        t0 = time.time()
        # Faults are ``--every`` apart plus a random part of a second: a fixed period locks the injection
        # to one phase of the 1 s scrape and evaluation ticks, and p50 then jumps by a whole tick when the
        # phase drifts (latencies sit ~0.6 s or ~1.6 s from the tick), which is noise, not a slowdown.
        base = t0 + 5
        next_fault, next_sample = base + rng.random(), t0
        pending: list[Trial] = []
        while time.time() - t0 < args.minutes * 60:
            now = time.time()
            if now >= next_sample:
                _emit(out, engine_sample(prom, responder, t0) | {"ended_jobs_total": churn.seq - len(fleet.jobs)})
                next_sample += 60
            if now >= next_fault:
                trial = _inject(fleet, churn, rng, len(trials), {t.workload for t in pending})
                trials.append(trial)
                pending.append(trial)
                base += args.every
                next_fault = base + rng.random()
            pending = _settle(pending, responder, churn, out, t0)
            churn.tick({t.workload for t in pending})
            time.sleep(0.2)
    return trials


def _inject(fleet: Fleet, churn: Churn, rng: random.Random, i: int, busy: set[str]) -> Trial:
    workload = rng.choice(sorted(set(fleet.jobs) - busy))
    kind = "log" if i % 2 == 0 else "xid"
    if kind == "log":
        t = fleet.log_pattern(workload, rng.randrange(churn.job_nodes * RANKS_PER_NODE))
    else:
        t = fleet.xid(fleet.jobs[workload].nodes[0], rng.randrange(RANKS_PER_NODE))
    return Trial(kind, workload, t)


def _settle(pending: list[Trial], responder: Service, churn: Churn, out: Any, t0: float) -> list[Trial]:
    still = []
    for trial in pending:
        trial.t_recv = received_at(responder, trial.workload)
        if trial.t_recv is None and time.time() - trial.t_inject < 60:
            still.append(trial)
            continue
        latency = None if trial.t_recv is None else round(trial.t_recv - trial.t_inject, 3)
        _emit(out, {"type": "trial", "t_s": round(trial.t_inject - t0, 1), "kind": trial.kind, "latency_s": latency})
        churn.replace(trial.workload)
    return still


def _emit(out: Any, record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def summarize(lines_path: Path, minutes: float) -> dict[str, Any]:
    records = [json.loads(line) for line in lines_path.read_text().splitlines() if line.strip()]
    trials = [r for r in records if r["type"] == "trial"]
    span = max((r["t_s"] for r in trials), default=0.0)

    def window(lo: float, hi: float, stat: Callable[[list[float]], float]) -> float | None:
        xs = [r["latency_s"] for r in trials if lo <= r["t_s"] < hi and r["latency_s"] is not None]
        return round(stat(xs), 3) if xs else None

    def p50(lo: float, hi: float) -> float | None:
        return window(lo, hi, statistics.median)

    def mean(lo: float, hi: float) -> float | None:
        return window(lo, hi, statistics.mean)

    first, last = p50(0, 600), p50(span - 600, span + 1)
    return {
        "benchmark": "churn: detection latency over a long run with jobs starting and ending",
        "planned_minutes": minutes,
        "observed_minutes": round(span / 60, 1),
        "trials": len(trials),
        "missed": sum(1 for r in trials if r["latency_s"] is None),
        "p50_first_10min_s": first,
        "p50_last_10min_s": last,
        "last_vs_first": round(last / first - 1, 3) if first and last else None,
        "mean_first_10min_s": mean(0, 600),
        "mean_last_10min_s": mean(span - 600, span + 1),
        "samples": [r for r in records if r["type"] == "sample"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--job-nodes", type=int, default=4, help="nodes per job (8 ranks each)")
    parser.add_argument("--profile", choices=["fast", "production"], default="fast")
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--every", type=float, default=15, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--min-block-duration",
        help="Prometheus head block length (default: the profile's, 5m for fast); 2h reproduces the slowdown",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "churn.jsonl")
    parser.add_argument("--summary", type=Path, default=ROOT / "bench" / "results" / "churn.json")
    args = parser.parse_args(argv)
    if args.nodes < args.job_nodes * 2:
        parser.error("--nodes must hold at least two jobs")
    with args.out.open("w") as out:
        run(args, out)
    args.summary.write_text(json.dumps(summarize(args.out, args.minutes), indent=2) + "\n")
    print(args.summary.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
