"""`make demo`: replay realistic incidents through a real `trainguard serve` and show each decision.

Starts the responder exactly as a user would (no config file, monitor mode, a fresh SQLite store),
posts Alertmanager v4 notifications built from scripts/demo/incidents.yaml, and prints what the
responder decided and why. Every scene states what it expects; the demo exits non-zero if the
responder decided otherwise, so it doubles as a smoke test.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from responder.clock import format_rfc3339 as iso
from responder.clock import parse_rfc3339
from trainguard.lab.common import free_port

HERE = Path(__file__).resolve().parent

TRAINGUARD = str(Path(sys.executable).parent / "trainguard")
BOLD, DIM, GREEN, RED, YELLOW, RESET = (
    ("\033[1m", "\033[2m", "\033[32m", "\033[31m", "\033[33m", "\033[0m") if sys.stdout.isatty() else ("",) * 6
)


def build_alert(spec: dict[str, Any], scene: dict[str, Any], workload: str) -> dict[str, Any]:
    labels = {"cluster": "demo", "scheduler": "slurm", "workload": workload,
              "attempt": str(scene.get("attempt", "0")), "severity": "critical"}  # fmt: skip
    labels.update({k: str(v) for k, v in spec.items()})
    fingerprint = hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:16]
    return {
        "status": "firing",
        "labels": labels,
        "annotations": {"summary": f"{labels['alertname']} on {labels.get('host', '?')}"},
        "startsAt": iso(time.time() - 0.8),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus.demo/graph",
        "fingerprint": fingerprint,
    }


def scene_alerts(scene: dict[str, Any], workload: str) -> list[dict[str, Any]]:
    alerts = []
    storm = scene.get("storm")
    if storm:
        rank = 0
        for host in storm["hosts"]:
            for _ in range(storm["ranks_per_host"]):
                spec = {k: v for k, v in storm.items() if k not in ("hosts", "ranks_per_host")}
                alerts.append(build_alert({**spec, "host": host, "rank": str(rank)}, scene, workload))
                rank += 1
    alerts += [build_alert(spec, scene, workload) for spec in scene.get("alerts", [])]
    return alerts


def notification(alerts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"version": "4", "groupKey": '{}:{cluster="demo"}', "status": "firing", "receiver": "trainguard",
            "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am.demo",
            "truncatedAlerts": 0, "alerts": alerts}  # fmt: skip


class Demo:
    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=10)
        self.seen: set[str] = set()
        self.failures: list[str] = []
        # What each scene sent, so a re-send is the same notification (same startsAt), as Alertmanager's is.
        self.sent: dict[int, dict[str, Any]] = {}

    def new_records(self, wait_for: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        fresh: list[dict[str, Any]] = []
        while True:
            records = self.client.get("/v1/decisions", params={"limit": "200"}).json()["decisions"]
            fresh = [r for r in reversed(records) if r["id"] not in self.seen]
            if len(fresh) >= wait_for or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.seen.update(r["id"] for r in fresh)
        return fresh

    def check(self, ok: bool, what: str) -> None:
        mark = f"{GREEN}as expected{RESET}" if ok else f"{RED}UNEXPECTED{RESET}"
        print(f"    {mark}: {what}")
        if not ok:
            self.failures.append(what)

    def show(self, record: dict[str, Any]) -> None:
        if record["kind"] == "refusal":
            print(f"    {YELLOW}refused{RESET}  {record['reason']}")
            return
        nodes = f" {','.join(record['excluded_nodes'])}" if record["excluded_nodes"] else ""
        node = f" {record['node']}" if record.get("node") else ""
        colour = YELLOW if record["outcome"] == "skipped" else GREEN
        latency = record_latency(record)
        print(f"    decision {BOLD}{record['action']}{nodes}{node}{RESET}  "
              f"[{record['mode']}, {colour}{record['outcome']}{RESET}]  {DIM}{record['failure_class']}, "
              f"{latency}{RESET}")  # fmt: skip
        print(f"    reason:  {record['reason']}")
        for line in record["attribution"].get("explanation", [])[:4]:
            print(f"    {DIM}- {line}{RESET}")

    def run_scene(self, index: int, scene: dict[str, Any], scenes: list[dict[str, Any]]) -> None:
        print(f"\n{BOLD}[{index + 1}/{len(scenes)}] {scene['title']}{RESET}")
        expect = scene["expect"]
        if "resend_of" in scene:
            original = scenes[scene["resend_of"]]
            payload = self.sent.get(scene["resend_of"]) or notification(scene_alerts(original, original["workload"]))
            for _ in range(scene["times"]):
                body = self.client.post("/v1/alerts", json=payload).json()
                dup = body["duplicates"]
                print(f"    Alertmanager re-sends {body['alerts']} alerts: {dup} recognised as duplicates")
            time.sleep(1.5)
            fresh = self.new_records(0, timeout=0)
            self.check(len(fresh) == expect["new_decisions"], f"{len(fresh)} new decision(s)")
            return
        time.sleep(scene.get("pause_before", 0))
        workloads = scene.get("together") or [scene["workload"]]
        # Workloads that fail together arrive together: one notification (one Alertmanager group).
        alerts = [a for workload in workloads for a in scene_alerts(scene, workload)]
        self.sent[index] = notification(alerts)
        body = self.client.post("/v1/alerts", json=self.sent[index]).json()
        names = ", ".join(map(repr, workloads))
        print(f"    Alertmanager -> POST /v1/alerts: {body['alerts']} alerts for workload(s) {names} "
              f"({body['evidence']} evidence, {body['rejected']} rejected)")  # fmt: skip
        wanted = len(workloads) + (1 if "drain" in expect else 0)
        fresh = self.new_records(wanted)
        for record in fresh:
            self.show(record)
        decisions = [r for r in fresh if r["kind"] == "decision"]
        if "refused" in expect:
            refusals = [r for r in fresh if r["kind"] == "refusal"]
            self.check(len(refusals) == expect["refused"] and not decisions, "refused, nothing acted on")
        if "action" in expect:
            main = decisions[0] if decisions else {}
            self.check(main.get("action") == expect["action"], f"action {main.get('action')}")
            if "excluded_nodes" in expect:
                self.check(main.get("excluded_nodes") == expect["excluded_nodes"],
                           f"excluded {main.get('excluded_nodes')}")  # fmt: skip
        if "drain" in expect:
            drains = [r for r in decisions if r["action"] == "drain_node"]
            self.check(bool(drains) and drains[0]["node"] == expect["drain"], "drain recommended")
        if expect.get("breaker"):
            skipped = [r for r in decisions if r["outcome"] == "skipped" and "breaker" in r["reason"]]
            self.check(len(skipped) == len(workloads), f"breaker refused {len(skipped)} of {len(workloads)}")


def record_latency(record: dict[str, Any]) -> str:
    def ts(value: str | None) -> float | None:
        return parse_rfc3339(value) if value else None

    received, decided = ts(record.get("received_at")), ts(record.get("decided_at"))
    if received is None or decided is None:
        return ""
    return f"decided {decided - received:.2f}s after the first alert arrived"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="leave the responder running at the end")
    args = parser.parse_args()
    scenes = yaml.safe_load((HERE / "demo" / "incidents.yaml").read_text())["scenes"]
    workdir = Path(tempfile.mkdtemp(prefix="trainguard-demo-"))
    db, port = workdir / "trainguard.db", free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "TRAINGUARD_BREAKER__CORRELATED_WINDOW_S": "2"}
    print(f"{BOLD}trainguard demo{RESET}: a real `trainguard serve` on {url}, store {db}")
    print(f"{DIM}monitor mode (the default): every decision is recorded, no scheduler is touched.")
    print("Scenes arrive seconds apart, so the breaker's correlation window is shortened to 2 s for the demo.")
    print(f"{RESET}", end="")
    log = (workdir / "serve.log").open("wb")
    server = subprocess.Popen([TRAINGUARD, "serve", "--port", str(port), "--db", str(db)], stdout=log,
                              stderr=subprocess.STDOUT, env=env)  # fmt: skip
    try:
        demo = Demo(url)
        deadline = time.monotonic() + 20
        while True:
            try:
                if demo.client.get("/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                print((workdir / "serve.log").read_text(), file=sys.stderr)
                return 1
            time.sleep(0.1)
        for index, scene in enumerate(scenes):
            demo.run_scene(index, scene, scenes)
        summary(demo, db)
        if args.keep:
            print(f"\nresponder still running on {url} (pid {server.pid})")
            return 0
    finally:
        if not args.keep:
            server.terminate()
            server.wait(10)
    if demo.failures:
        print(f"\n{RED}{len(demo.failures)} scene(s) did not go as expected:{RESET} {demo.failures}")
        return 1
    print(f"\n{GREEN}all scenes went as expected{RESET}")
    return 0


def summary(demo: Demo, db: Path) -> None:
    metrics = demo.client.get("/metrics").text
    wanted = ("trainguard_responder_alerts_received_total", "trainguard_responder_breaker_open")
    print(f"\n{BOLD}The responder's own metrics{RESET} (GET /metrics, excerpt)")
    for line in metrics.splitlines():
        if line.startswith(wanted) and not line.endswith(" 0.0"):
            print(f"    {line}")
    recs = demo.client.get("/v1/recommendations").json()["count"]
    print(f"\n{BOLD}Advisor API{RESET}: GET /v1/recommendations lists {recs} planned action(s) an operator may apply.")
    print(f"Audit trail: {TRAINGUARD} decisions --db {db}")


if __name__ == "__main__":
    sys.exit(main())
