"""Builders for Alertmanager v4 webhook payloads, shaped like real Alertmanager notifications."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from responder.clock import format_rfc3339

ZERO_TIME = "0001-01-01T00:00:00Z"


def fingerprint(labels: dict[str, str]) -> str:
    text = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def iso(ts: float) -> str:
    return format_rfc3339(ts)


def alert(
    alertname: str,
    category: str,
    *,
    cluster: str = "lab",
    workload: str = "4242",
    attempt: str | None = "0",
    host: str | None = None,
    rank: str | None = None,
    pattern: str | None = None,
    severity: str = "critical",
    status: str = "firing",
    starts_at: float | None = None,
    scheduler: str | None = "slurm",
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {"alertname": alertname, "category": category, "severity": severity, "cluster": cluster,
              "workload": workload}  # fmt: skip
    for key, value in (("attempt", attempt), ("host", host), ("rank", rank), ("pattern", pattern),
                       ("scheduler", scheduler)):  # fmt: skip
        if value is not None:
            labels[key] = value
    labels.update(extra or {})
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": f"{alertname} on {host or '?'} rank {rank or '?'}"},
        "startsAt": iso(starts_at if starts_at is not None else datetime.now(UTC).timestamp() - 1.0),
        "endsAt": ZERO_TIME,
        "generatorURL": "http://prometheus.test/graph",
        "fingerprint": fingerprint(labels),
    }


def notification(alerts: list[dict[str, Any]], group_key: str = '{}:{alertname="X"}') -> dict[str, Any]:
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    common = dict(alerts[0]["labels"]) if alerts else {}
    for a in alerts[1:]:
        common = {k: v for k, v in common.items() if a["labels"].get(k) == v}
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "trainguard",
        "groupLabels": {},
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.test",
        "alerts": alerts,
    }


def nccl_storm_with_xid(
    ranks_per_host: int = 8, hosts: int = 4, bad_host: str = "gpu-002", workload: str = "4242"
) -> dict[str, Any]:
    """NCCL watchdog timeouts on every rank, plus one XID 79 on one host: the classic node fault."""
    alerts = []
    for h in range(hosts):
        host = f"gpu-{h + 1:03d}"
        for r in range(ranks_per_host):
            rank = str(h * ranks_per_host + r)
            alerts.append(alert("TrainguardCollectiveTimeout", "collective_timeout", host=host, rank=rank,
                                pattern="nccl_watchdog_timeout", workload=workload))  # fmt: skip
    alerts.append(alert("TrainguardGpuXid", "infra_gpu", host=bad_host, pattern="xid_79_fallen_off_bus",
                        extra={"gpu": "3"}, workload=workload))  # fmt: skip
    return notification(alerts)
