"""Detection at scale: simulated fleets through real Prometheus or VictoriaMetrics+vmalert, real Alertmanager,
into the real responder.

Per fleet size, engine and profile: detection latency (fault -> the responder's ``received_at``)
p50/p95/max over ``--faults`` log-pattern faults on distinct jobs, spread over the measuring window;
mean rule-group evaluation time; mean and max scrape duration; samples ingested per second; the
engine's CPU (cores used over the window) and RSS; and, with ``--storm``, the responder's decisions
per second when 100 jobs fail at once. A size whose targets are not all up within the start-up
allowance is reported as not keeping up, with the fraction that was.

Writes ``--out`` (JSON, rewritten after every configuration, so a partial run keeps what it
measured), then ``scale.md`` and ``scale.png`` beside it (see bench/fleet/report.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.fleet.engines import ENGINES, Engine, start_engine
from bench.fleet.sim import RANKS_PER_NODE, Fleet
from responder.clock import parse_rfc3339
from trainguard.lab.stack import (
    Service,
    StackError,
    alertmanager_config,
    http_get,
    poll,
    query,
    rule_files,
    scrape_interval_s,
    start_alertmanager,
    start_responder,
)

ROOT = Path(__file__).resolve().parents[2]
JOB_NODES = 4


def _value(engine: Engine, promql: str) -> float | None:
    result = query(engine.query, promql)
    return float(result[0]["value"][1]) if result else None


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_s": None, "p95_s": None, "max_s": None}
    ordered = sorted(values)
    return {
        "p50_s": round(statistics.median(ordered), 3),
        "p95_s": round(ordered[max(0, -(-95 * len(ordered) // 100) - 1)], 3),
        "max_s": round(ordered[-1], 3),
    }


def decisions_by_workload(responder: Service) -> dict[str, dict[str, Any]]:
    status, body = http_get(f"{responder.url}/v1/decisions?limit=1000", timeout=10)
    if status != 200:
        return {}
    return {d["workload"]: d for d in json.loads(body).get("decisions", [])}


def wait_detected(responder: Service, injected: dict[str, float], timeout: float) -> dict[str, dict[str, Any]]:
    """Poll the responder until every injected workload has a decision (or ``timeout``)."""
    end = time.time() + timeout
    found: dict[str, dict[str, Any]] = {}
    while time.time() < end:
        found = {w: d for w, d in decisions_by_workload(responder).items() if w in injected}
        if len(found) == len(injected):
            break
        time.sleep(0.25)
    return found


def inject(fleet: Fleet, workloads: list[str], spread_s: float) -> dict[str, float]:
    """One log-pattern match in rank 0 of each workload, evenly over ``spread_s``."""
    injected: dict[str, float] = {}
    t0 = time.time()
    for i, workload in enumerate(workloads):
        delay = t0 + i * spread_s / max(1, len(workloads)) - time.time()
        if delay > 0:
            time.sleep(delay)
        injected[workload] = fleet.log_pattern(workload, 0)
    return injected


def measure(fleet: Fleet, engine: Engine, responder: Service, args: argparse.Namespace) -> dict[str, Any]:
    """The measuring window: faults spread over it, engine counters and meters at both ends."""
    interval = scrape_interval_s(engine.profile)
    c0, (cpu0, _), t0 = engine.counters(), engine.meter(), time.time()
    workloads = sorted(fleet.jobs)[: args.faults]
    injected = inject(fleet, workloads, spread_s=max(4 * interval, 20.0))
    found = wait_detected(responder, injected, timeout=60 + 8 * interval)
    c1, (cpu1, rss), t1 = engine.counters(), engine.meter(), time.time()
    latencies = [parse_rfc3339(d["received_at"]) - injected[w] for w, d in found.items()]
    rule_n = c1["rule_n"] - c0["rule_n"]
    return {
        "faults": len(injected),
        "detected": len(found),
        "detection": _stats(latencies),
        "rule_group_eval_mean_s": round((c1["rule_s"] - c0["rule_s"]) / rule_n, 4) if rule_n else None,
        "rule_groups": engine.groups(),
        "scrape_duration_mean_s": _value(engine, 'avg(scrape_duration_seconds{job="trainguard-exporter"})'),
        "scrape_duration_max_s": _value(engine, 'max(scrape_duration_seconds{job="trainguard-exporter"})'),
        "samples_per_s": round((c1["samples"] - c0["samples"]) / (t1 - t0)),
        "engine_cpu_cores": round((cpu1 - cpu0) / (t1 - t0), 2),
        "engine_rss_mib": round(rss / 1024),
        "window_s": round(t1 - t0, 1),
    }


def storm(fleet: Fleet, responder: Service, jobs: int, interval: float) -> dict[str, Any]:
    """``jobs`` jobs fail together; decisions per second from the first receipt to the last decision."""
    busy = set(decisions_by_workload(responder))
    workloads = [w for w in sorted(fleet.jobs) if w not in busy][-jobs:]
    injected = inject(fleet, workloads, spread_s=0)
    found = wait_detected(responder, injected, timeout=90 + 8 * interval)
    received = [parse_rfc3339(d["received_at"]) for d in found.values()]
    decided = [parse_rfc3339(d["decided_at"]) for d in found.values()]
    span = max(decided) - min(received) if found else 0.0
    return {
        "jobs": len(injected),
        "decided": len(found),
        "span_s": round(span, 2),
        "decisions_per_s": round(len(found) / span, 1) if span > 0 else None,
        "detection": _stats([r - injected[w] for w, r in zip(found, received, strict=True)]),
    }


def rules_digest(profile: str) -> str:
    """Which rule files a run measured (the first 12 hex digits of their SHA-256, in load order)."""
    digest = hashlib.sha256()
    for path in rule_files(profile):
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:12]


def run_one(nodes: int, engine_name: str, profile: str, args: argparse.Namespace) -> dict[str, Any]:
    entry: dict[str, Any] = {"nodes": nodes, "gpus": nodes * RANKS_PER_NODE, "engine": engine_name, "profile": profile}
    entry["rules_sha256"] = rules_digest(profile)
    fleet = Fleet(nodes)
    for first in range(0, nodes - JOB_NODES + 1, JOB_NODES):
        fleet.start_job(f"job-{first // JOB_NODES:05d}", list(range(first, first + JOB_NODES)))
    entry["series_served"] = fleet.series()
    interval = scrape_interval_s(profile)
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix=f"scale-{nodes}-") as tmp:
        work = Path(tmp)
        fleet.start()
        stack.callback(fleet.stop)
        token = secrets.token_urlsafe(16)
        (work / "token").write_text(token + "\n")
        responder = start_responder(work / "responder", token)
        stack.callback(responder.stop)
        responder.wait_ready()
        am = start_alertmanager(alertmanager_config(profile, f"{responder.url}/v1/alerts", work / "token"), work / "am")
        stack.callback(am.stop)
        engine = start_engine(engine_name, profile, fleet.file_sd(work / "targets.yml"), am.port, work)
        for service in reversed(engine.processes):
            stack.callback(service.stop)
        am.wait_ready()
        for service in engine.processes:
            service.wait_ready(timeout=60)
        started = time.time()
        up_query = 'count(up{job="trainguard-exporter"} == 1)'
        try:
            poll(lambda: (_value(engine, up_query) or 0) >= nodes or None, 60 + 4 * interval, "all targets up", 1.0)
        except StackError:
            entry["kept_up"] = False
            entry["targets_up_fraction"] = round((_value(engine, up_query) or 0) / nodes, 3)
        entry["targets_up_s"] = round(time.time() - started, 1)
        time.sleep(3 * interval)  # every counter's 0 sample is in before any fault
        entry.update(measure(fleet, engine, responder, args))
        entry.setdefault("kept_up", entry["detected"] == entry["faults"])
        if args.storm and len(fleet.jobs) >= args.storm + args.faults:
            entry["storm"] = storm(fleet, responder, args.storm, interval)
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", default="100,500,1250,4000", help="comma-separated fleet sizes")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--profiles", default="fast,production")
    parser.add_argument("--faults", type=int, default=12, help="faults per configuration (distinct jobs)")
    parser.add_argument("--storm", type=int, default=0, help="jobs failing together after the faults (0: none)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scale.json")
    parser.add_argument("--append", action="store_true", help="keep the runs already in --out")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "benchmark": "detection at scale: fleet simulator -> engine -> Alertmanager -> responder",
        "machine": {"platform": platform.platform(), "cpus": len(os.sched_getaffinity(0))},
        "runs": [],
    }
    if args.append and args.out.exists():
        report = json.loads(args.out.read_text())
    for nodes in (int(n) for n in args.nodes.split(",")):
        for engine in args.engines.split(","):
            for profile in args.profiles.split(","):
                print(f"scale: {nodes} nodes, {engine}, {profile}", file=sys.stderr, flush=True)
                load = os.getloadavg()[0]
                try:
                    entry = run_one(nodes, engine, profile, args)
                except (StackError, OSError) as exc:
                    entry = {"nodes": nodes, "engine": engine, "profile": profile, "error": str(exc)[-500:]}
                entry["time"] = datetime.now(UTC).isoformat(timespec="seconds")
                entry["loadavg_1m_before"] = round(load, 2)
                entry["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
                report["runs"].append(entry)
                args.out.write_text(json.dumps(report, indent=2) + "\n")
                print(json.dumps(entry), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
