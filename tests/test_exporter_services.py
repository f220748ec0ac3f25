"""The exporter against the real services it talks to: Prometheus scrapes it, Alertmanager takes its fast path.

Marked ``prometheus``: skipped (with the package to install) where the Debian binaries are missing,
failed instead under TRAINGUARD_REQUIRE_SERVICES=1 (CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from exporters.fastpath import FastPath
from tests.services import free_port, require_binary, wait_until
from trainguard.lab.common import terminate

pytestmark = pytest.mark.prometheus
ROOT = Path(__file__).resolve().parents[1]
XID79 = "[ 8901.2] NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, name=python3, GPU has fallen off the bus.\n"


def _spawn(argv: list[str], workdir: Path, name: str) -> subprocess.Popen[bytes]:
    with (workdir / f"{name}.log").open("wb") as log:
        return subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)


def _get(url: str, params: dict[str, str] | None = None) -> Any:
    try:
        r = httpx.get(url, params=params, timeout=2)
    except httpx.TransportError:
        return None
    return r.json() if r.status_code == 200 else None


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    binary = require_binary("prometheus-alertmanager")
    port = free_port()
    config = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}]}
    (tmp_path / "am.yml").write_text(yaml.safe_dump(config))
    argv = [
        binary,
        f"--config.file={tmp_path / 'am.yml'}",
        f"--storage.path={tmp_path / 'amdata'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    proc = _spawn(argv, tmp_path, "alertmanager")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(url) or proc.poll() is not None, 30, what="Alertmanager ready")
        assert proc.poll() is None, (tmp_path / "alertmanager.log").read_text()
        yield url
    finally:
        terminate(proc)


def test_fast_path_alert_lands_in_alertmanager_and_merges(alertmanager: str) -> None:
    labels = {
        "alertname": "TrainguardLogInfraGpu",
        "cluster": "lab",
        "workload": "4242",
        "scheduler": "slurm",
        "attempt": "0",
        "rank": "",  # dropped, as Prometheus and Alertmanager drop empty labels
        "host": "gpu-017",
        "pattern": "xid_79_fallen_off_bus",
        "category": "infra_gpu",
        "severity": "critical",
    }
    fp = FastPath(alertmanager, resend_interval=0.0)
    fp.start()
    try:
        assert fp.submit(labels, {"summary": "first"})
        assert fp.submit(labels, {"summary": "again"})  # same label set: Alertmanager merges the two
        wait_until(lambda: fp.stats["sent"] == 2, 15, what="two posts")
    finally:
        fp.stop()
    alerts = _get(f"{alertmanager}/api/v2/alerts")
    assert len(alerts) == 1
    expected = {k: v for k, v in labels.items() if v}
    assert alerts[0]["labels"] == expected
    assert alerts[0]["status"]["state"] == "active"


@pytest.fixture
def exporter_and_prometheus(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    prometheus = require_binary("prometheus")
    (tmp_path / "logs").mkdir()
    eport, pport = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TRAINGUARD_"))}
    argv = [
        sys.executable, "-m", "trainguard.cli", "exporter", "--cluster", "lab", "--node", "gpu-017",
        "--port", str(eport), "--log", str(tmp_path / "logs" / "*.log"), "--kernel-log", str(tmp_path / "kern.log"),
        "--progress-dir", str(tmp_path / "progress"), "--poll-interval", "0.2",
        "--workload", "4242", "--scheduler", "slurm", "--no-nvml",
    ]  # fmt: skip
    exporter = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (tmp_path / "kern.log").write_text("")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "trainguard-exporter", "static_configs": [{"targets": [f"127.0.0.1:{eport}"]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    prom = _spawn(
        [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{pport}",
        ],
        tmp_path,
        "prometheus",
    )
    url = f"http://127.0.0.1:{pport}"
    try:
        wait_until(lambda: _ready(url) or prom.poll() is not None, 60, what="Prometheus ready")
        assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()
        yield tmp_path, url
    finally:
        terminate(prom)
        terminate(exporter)


def _query(url: str, promql: str) -> list[dict[str, Any]]:
    body = _get(f"{url}/api/v1/query", {"query": promql})
    return list(body["data"]["result"]) if body else []


def test_prometheus_sees_a_kernel_xid_as_an_increase(exporter_and_prometheus: tuple[Path, str]) -> None:
    tmp_path, url = exporter_and_prometheus
    series = 'trainguard_log_pattern_matches_total{pattern="xid_79_fallen_off_bus"}'
    # the pre-created 0 is scraped first, so the first match is an increase Prometheus can see
    wait_until(lambda: _query(url, f"{series} == 0"), 60, what="the pre-created counter at 0")
    with (tmp_path / "kern.log").open("a") as f:
        f.write(XID79)
    result = wait_until(lambda: _query(url, f"increase({series}[1m]) > 0"), 60, what="the increase")
    assert isinstance(result, list)
    labels = result[0]["metric"]
    assert labels["cluster"] == "lab"
    assert labels["workload"] == "4242"
    assert labels["host"] == "gpu-017"
    assert labels["category"] == "infra_gpu"
    assert "rank" not in labels, "an empty rank is no label in Prometheus"
    assert not _query(url, "count({__name__=~'trainguard_.*_created'})")
