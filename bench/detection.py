"""Detection latency per fault class: fault injected -> alert received at the webhook.

Runs the real path of trainguard/lab/stack.py (a lab exporter -> real Prometheus with the profile's rules and
example config -> real Alertmanager with the profile's example config -> the webhook) once
per profile and injects, per fault class, ``--trials`` faults at random moments (so every phase of
scrape and evaluation is sampled). Every trial uses its own workload and host, so every alert opens
its own Alertmanager group: the numbers are the latency of the first alert of an incident. Classes
run concurrently.

Latency ends when the webhook receives the alert: by default the real responder (`trainguard serve`,
its decision's `received_at`; the time to the decision is reported too), or with `--receiver recorder`
a recording receiver.

Classes (alert expected):
  log             one matching log line, pattern counter 0 -> 1     TrainguardLogCollectiveTimeout
  xid             DCGM_FI_DEV_XID_ERRORS 0 -> 79                     TrainguardGpuXid
  crash_liveness  trainguard_rank_process_alive 1 -> 0 (the exporter's liveness gauge)
                                                                     TrainguardRankCrashed
  crash_heartbeat heartbeat frozen, no liveness gauge (the profile's heartbeat timeout applies)
                                                                     TrainguardRankCrashed
  hang            last-step time frozen, process alive (the profile's hang floor applies)
                                                                     TrainguardRankHang

For crash_heartbeat and hang the latency beyond the threshold is reported too.
Writes bench/results/detection.json (or --out).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from responder.clock import parse_rfc3339
from trainguard.lab.stack import (
    RESEND_DELAY,
    RULES_DIR,
    LabExporter,
    Service,
    Stack,
    decisions,
    find_binary,
    pipeline,
    scrape_interval_s,
)

ROOT = Path(__file__).resolve().parent.parent

CLASSES = ("log", "xid", "crash_liveness", "crash_heartbeat", "hang")
ALERT = {
    "log": "TrainguardLogCollectiveTimeout",
    "xid": "TrainguardGpuXid",
    "crash_liveness": "TrainguardRankCrashed",
    "crash_heartbeat": "TrainguardRankCrashed",
    "hang": "TrainguardRankHang",
}
PATTERN = ("nccl_watchdog_timeout", "collective_timeout")


def profile_params(profile: str) -> dict[str, float]:
    """The profile file's recorded parameters (hang floor, heartbeat timeout, ...), by name."""
    doc = yaml.safe_load((RULES_DIR / "profiles" / f"{profile}.yml").read_text())
    params = {}
    for group in doc["groups"]:
        for rule in group["rules"]:
            params[rule["record"].removeprefix("trainguard:config:")] = float(
                rule["expr"].removeprefix("vector(").removesuffix(")")
            )
    return params


def alertmanager_timing(profile: str) -> dict[str, Any]:
    route = yaml.safe_load((RULES_DIR / "alertmanager" / f"{profile}.yml").read_text())["route"]
    return {k: route[k] for k in ("group_by", "group_wait", "group_interval", "repeat_interval")}


@dataclass
class Trial:
    cls: str
    index: int
    workload: str
    host: str
    inject: Callable[[], float]
    t_inject: float | None = None
    t_recv: float | None = None
    t_decided: float | None = None


@dataclass
class Plan:
    trials: list[Trial] = field(default_factory=list)


def build(exporter: LabExporter, trials: int, classes: tuple[str, ...]) -> Plan:
    plan = Plan()
    for cls in classes:
        for i in range(trials):
            workload, host = f"bench-{cls}-{i}", f"{cls.replace('_', '-')}-{i:03d}"
            key = exporter.add_rank(
                workload, 0, host, patterns=[PATTERN] if cls == "log" else (), liveness=cls == "crash_liveness"
            )
            inject: Callable[[], float]
            if cls == "log":
                inject = functools.partial(exporter.match_pattern, key, *PATTERN)
            elif cls == "xid":
                exporter.add_gpu(host, 0)
                inject = functools.partial(exporter.xid, host, 0, 79)
            elif cls.startswith("crash"):
                inject = functools.partial(exporter.crash, key)
            else:
                inject = functools.partial(exporter.hang, key)
            plan.trials.append(Trial(cls, i, workload, host, inject))
    return plan


def run_profile(
    profile: str, trials: int, classes: tuple[str, ...], spread_s: float, seed: int, receiver: str
) -> dict[str, Any]:
    rng = random.Random(seed)
    params = profile_params(profile)
    scrape = scrape_interval_s(profile)
    thresholds = {
        "crash_heartbeat": params["heartbeat_timeout_seconds"],
        "hang": params["hang_floor_seconds"],
    }
    exporter = LabExporter()
    plan = build(exporter, trials, classes)
    schedule = sorted(((rng.uniform(0, spread_s), t) for t in plan.trials), key=lambda x: x[0])
    deadline_after = max(thresholds.get(c, 0.0) for c in classes) + 4 * scrape + 15
    with tempfile.TemporaryDirectory(prefix=f"detection-{profile}-") as tmp:
        started = time.monotonic()
        with pipeline(profile, Path(tmp), exporter, responder=receiver == "responder") as stack:
            ready_s = time.monotonic() - started
            t0 = time.time()
            for offset, trial in schedule:
                delay = t0 + offset - time.time()
                if delay > 0:
                    time.sleep(delay)
                trial.t_inject = trial.inject()
            end = time.time() + deadline_after
            while time.time() < end and not _collect(stack, plan):
                time.sleep(0.2)
            _collect(stack, plan)
    results: dict[str, Any] = {}
    for cls in classes:
        done = [t for t in plan.trials if t.cls == cls]
        lat = sorted(t.t_recv - t.t_inject for t in done if t.t_recv is not None and t.t_inject is not None)
        entry: dict[str, Any] = {"alert": ALERT[cls], "trials": len(done), "detected": len(lat), **_stats(lat)}
        if cls in thresholds:
            entry["threshold_s"] = thresholds[cls]
            entry["beyond_threshold"] = _stats([x - thresholds[cls] for x in lat])
        decided = sorted(t.t_decided - t.t_inject for t in done if t.t_decided is not None and t.t_inject is not None)
        if decided:
            entry["to_decision"] = _stats(decided)
        entry["latencies_s"] = [round(x, 3) for x in lat]
        results[cls] = entry
    return {
        "profile": profile,
        "receiver": receiver,
        "scrape_interval_s": scrape,
        "evaluation_interval_s": scrape,
        "resend_delay": RESEND_DELAY[profile],
        "alertmanager": alertmanager_timing(profile),
        "parameters": params,
        "injection_spread_s": spread_s,
        "stack_ready_s": round(ready_s, 2),
        "classes": results,
    }


def _collect(stack: Stack, plan: Plan) -> bool:
    """Match received alerts to trials; True once every injected trial is detected."""
    if stack.responder is not None:
        return _collect_decisions(stack.responder, plan)
    firing = [a for a in stack.receiver.received() if a.status == "firing"]
    for trial in plan.trials:
        if trial.t_recv is not None or trial.t_inject is None:
            continue
        for alert in firing:
            if alert.labels.get("alertname") == ALERT[trial.cls] and alert.labels.get("host") == trial.host:
                trial.t_recv = alert.t_recv
                break
    return all(t.t_recv is not None for t in plan.trials)


def _collect_decisions(responder: Service, plan: Plan) -> bool:
    """With the real responder: a trial is received when its workload has a decision whose evidence
    holds the expected alert; ``received_at`` is when the responder got the incident's first alert."""
    by_workload = {d["workload"]: d for d in decisions(responder, limit="1000")}
    for trial in plan.trials:
        record = by_workload.get(trial.workload)
        if trial.t_recv is not None or trial.t_inject is None or record is None:
            continue
        if any(e["labels"].get("alertname") == ALERT[trial.cls] for e in record.get("evidence", [])):
            trial.t_recv = _epoch(record["received_at"])
            trial.t_decided = _epoch(record["decided_at"])
    return all(t.t_recv is not None for t in plan.trials)


def _epoch(rfc3339: str) -> float:
    return parse_rfc3339(rfc3339)


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"min_s": None, "median_s": None, "p95_s": None, "max_s": None}
    ordered = sorted(values)
    p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]  # nearest rank
    return {
        "min_s": round(ordered[0], 3),
        "median_s": round(statistics.median(ordered), 3),
        "p95_s": round(p95, 3),
        "max_s": round(ordered[-1], 3),
    }


def _version(binary: str) -> str:
    try:
        out = subprocess.run(
            [find_binary(binary), "--version"], check=False, capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.splitlines()[0] if out else "unknown"


def table(report: dict[str, Any]) -> str:
    lines = [
        "| profile | receiver | fault class | alert | detected | min | median | p95 | max "
        "| beyond threshold (median / p95) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for prof in report["profiles"]:
        for cls, r in prof["classes"].items():
            beyond = r.get("beyond_threshold")
            extra = f"{beyond['median_s']} / {beyond['p95_s']} (threshold {r['threshold_s']:g} s)" if beyond else ""
            lines.append(
                f"| {prof['profile']} | {prof['receiver']} | {cls} | {r['alert']} | {r['detected']}/{r['trials']} "
                f"| {r['min_s']} | {r['median_s']} | {r['p95_s']} | {r['max_s']} | {extra} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--profile", choices=["fast", "production", "both"], default="both")
    parser.add_argument("--trials", type=int, default=20, help="faults per class and profile (default 20)")
    parser.add_argument("--classes", default=",".join(CLASSES), help=f"comma-separated subset of {CLASSES}")
    parser.add_argument(
        "--spread", type=float, default=None, help="inject over this many seconds (default: 20 x scrape interval)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--receiver",
        choices=["recorder", "responder"],
        default="responder",
        help="webhook end: the real `trainguard serve` (default) or a recording receiver",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "detection.json")
    args = parser.parse_args(argv)
    classes = tuple(c for c in args.classes.split(",") if c)
    unknown = set(classes) - set(CLASSES)
    if unknown:
        parser.error(f"unknown classes {sorted(unknown)}; choose from {CLASSES}")
    profiles = ["fast", "production"] if args.profile == "both" else [args.profile]
    report: dict[str, Any] = {
        "benchmark": "detection latency, fault injected -> webhook received",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": len(os.sched_getaffinity(0)),
            "python": platform.python_version(),
        },
        "prometheus": _version("prometheus"),
        "alertmanager": _version("prometheus-alertmanager"),
        "profiles": [],
    }
    for i, profile in enumerate(profiles):
        spread = args.spread if args.spread is not None else 20 * scrape_interval_s(profile)
        print(f"detection: profile {profile}, {args.trials} trials x {len(classes)} classes", file=sys.stderr)
        report["profiles"].append(run_profile(profile, args.trials, classes, spread, args.seed + i, args.receiver))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
