"""The real detection path: exporter series -> Prometheus (fast profile rules) -> Alertmanager -> webhook.

The receiver is the recording Starlette receiver of trainguard/lab/stack.py (``trainguard serve`` was not
available when this was written); it checks the bearer token Alertmanager reads from its file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import require_binary, wait_until
from trainguard.lab.stack import LabExporter, Received, Stack, pipeline, xid_alert_labels

pytestmark = pytest.mark.prometheus

PATTERNS = [("nccl_watchdog_timeout", "collective_timeout"), ("cuda_oom", "app_error")]
WORKLOAD = "4242"
IDENT = {"cluster": "lab", "workload": WORKLOAD, "scheduler": "slurm", "attempt": "0"}
# fast profile: scrape 1 s + eval 1 s + group_wait 0 s, plus slack for 2 shared cores
SLACK_S = 4.0
HANG_FLOOR_S = 10.0
HEARTBEAT_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    for binary in ("prometheus", "prometheus-alertmanager"):
        require_binary(binary)
    exporter = LabExporter()
    for rank, host in ((0, "gpu-001"), (1, "gpu-001"), (2, "gpu-002"), (3, "gpu-002")):
        exporter.add_rank(WORKLOAD, rank, host, patterns=PATTERNS)
    exporter.add_gpu("gpu-002", 0)
    workdir: Path = tmp_path_factory.mktemp("pipeline")
    with pipeline("fast", workdir, exporter) as s:
        yield s


def _wait(stack: Stack, timeout: float, **labels: str) -> Received:
    found = wait_until(
        lambda: stack.receiver.first(**labels), timeout, interval=0.05, what=f"alert {labels}\n{stack.logs()}"
    )
    assert isinstance(found, Received)
    return found


def _rank_alert(alertname: str, rank: str, host: str, category: str) -> dict[str, str]:
    """The labels of a critical per-rank alert on the lab's workload."""
    return {"alertname": alertname, **IDENT, "rank": rank, "host": host, "category": category, "severity": "critical"}


def test_faults_arrive_as_alerts_with_contract_labels(stack: Stack) -> None:
    ex = stack.exporter
    t_log = ex.match_pattern((WORKLOAD, "0", "1"), "nccl_watchdog_timeout", "collective_timeout")
    t_xid = ex.xid("gpu-002", 0, 79)
    t_crash = ex.crash((WORKLOAD, "0", "3"))
    t_hang = ex.hang((WORKLOAD, "0", "2"))

    log = _wait(stack, SLACK_S + 2, alertname="TrainguardLogCollectiveTimeout")
    assert log.labels == {
        "alertname": "TrainguardLogCollectiveTimeout",
        **IDENT,
        "rank": "1",
        "host": "gpu-001",
        "pattern": "nccl_watchdog_timeout",
        "category": "collective_timeout",
        "severity": "critical",
    }
    assert log.annotations["runbook_url"].endswith("runbook.md#trainguardlogcollectivetimeout")
    assert log.annotations["summary"] == "Collective timeout (nccl_watchdog_timeout) in 4242 rank 1"
    assert log.t_recv - t_log < SLACK_S

    xid = _wait(stack, SLACK_S, alertname="TrainguardGpuXid")
    assert xid.labels == xid_alert_labels(IDENT, "gpu-002")
    assert xid.t_recv - t_xid < SLACK_S

    crash = _wait(stack, HEARTBEAT_TIMEOUT_S + SLACK_S, alertname="TrainguardRankCrashed")
    assert crash.labels == _rank_alert("TrainguardRankCrashed", "3", "gpu-002", "crash")
    assert HEARTBEAT_TIMEOUT_S <= crash.t_recv - t_crash < HEARTBEAT_TIMEOUT_S + SLACK_S

    hang = _wait(stack, HANG_FLOOR_S + SLACK_S, alertname="TrainguardRankHang")
    assert hang.labels == _rank_alert("TrainguardRankHang", "2", "gpu-002", "hang")
    assert HANG_FLOOR_S <= hang.t_recv - t_hang < HANG_FLOOR_S + SLACK_S

    # nothing about the healthy rank 0, no hang for the crashed rank 3, every post authorised
    received = stack.receiver.received()
    assert not [a for a in received if a.labels.get("rank") == "0"]
    assert not [a for a in received if a.labels["alertname"] == "TrainguardRankHang" and a.labels["rank"] == "3"]
    assert stack.receiver.rejected == 0
