"""Every PromQL expression of every dashboard, run against a real Prometheus (Debian's ``prometheus``).

Prometheus scrapes a prometheus_client registry served from this test with the series the lab's
exporters and the responder publish: ``trainguard_rank_*`` for two workloads, log-pattern and XID
counters, checkpoint gauges, DCGM's ``DCGM_FI_DEV_XID_ERRORS`` and ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL``,
and the responder's own metrics (``ResponderMetrics``, ``LokiMetrics``) fed with a few decisions.
Dashboard variables are substituted the way Grafana would, then each expression must parse and
return at least one series: an empty panel here is a wrong metric name, label or join.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dashboards.generate import DASHBOARDS
from dashboards.grafana import Json, targets_of
from responder.loki import LokiMetrics
from responder.metrics import ResponderMetrics
from tests.services import free_port, require_binary, wait_until
from trainguard.lab.stack import Service, http_get, start_prometheus

pytestmark = pytest.mark.prometheus

IDENTITY = ["cluster", "workload", "scheduler", "attempt", "rank", "host"]
# What Grafana puts in place of its variables for one workload of the lab.
VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "5m",
    "$cluster": "lab",
    "$workload": "4242",
}
SCRAPE_INTERVAL_S = 1


class LabSeries(Collector):
    """The exporter side of the lab: two workloads on four hosts, one slow rank, a few faults."""

    def __init__(self) -> None:
        self.started = time.time() - 600
        self.ranks = [("lab", "4242", "slurm", "1", str(r), f"gpu-00{1 + r // 4}") for r in range(8)]
        self.ranks += [("lab", "ml/llama-70b", "jobset", "0", str(r), f"gpu-00{3 + r // 4}") for r in range(8)]

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        fams = {
            name: GaugeMetricFamily(name, name, labels=IDENTITY)
            for name in ("trainguard_rank_step", "trainguard_rank_last_step_timestamp_seconds",
                         "trainguard_rank_step_duration_seconds", "trainguard_rank_samples_per_second",
                         "trainguard_rank_heartbeat_timestamp_seconds", "trainguard_checkpoint_last_saved_step",
                         "trainguard_checkpoint_last_saved_timestamp_seconds")
        }  # fmt: skip
        logs = CounterMetricFamily(
            "trainguard_log_pattern_matches", "matches", labels=[*IDENTITY, "pattern", "category"]
        )
        xid = CounterMetricFamily("trainguard_gpu_xid_errors", "xid", labels=[*IDENTITY, "gpu", "xid"])
        ecc = CounterMetricFamily("trainguard_gpu_ecc_uncorrected_volatile", "ecc", labels=["cluster", "host", "gpu"])
        dcgm_xid = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "last xid", labels=["Hostname", "gpu", "UUID"])
        dcgm_ecc = GaugeMetricFamily("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "dbe", labels=["Hostname", "gpu", "UUID"])
        for labels in self.ranks:
            duration = 0.9 if labels[4] == "5" else 0.5  # rank 5 straggles
            step = int((now - self.started) / duration)
            fams["trainguard_rank_step"].add_metric(labels, step)
            fams["trainguard_rank_last_step_timestamp_seconds"].add_metric(labels, now - 0.2)
            fams["trainguard_rank_step_duration_seconds"].add_metric(labels, duration + 0.01 * (int(now) % 3))
            fams["trainguard_rank_samples_per_second"].add_metric(labels, 32 / duration)
            fams["trainguard_rank_heartbeat_timestamp_seconds"].add_metric(labels, now)
            fams["trainguard_checkpoint_last_saved_step"].add_metric(labels, step - step % 500)
            fams["trainguard_checkpoint_last_saved_timestamp_seconds"].add_metric(labels, now - 120)
            logs.add_metric([*labels, "nccl_watchdog_timeout", "collective_timeout"], int(now - self.started) // 60)
            logs.add_metric([*labels, "cuda_oom", "app_error"], 0)
        xid.add_metric(["lab", "4242", "slurm", "1", "2", "gpu-001", "3", "79"], 1)
        for host in ("gpu-001", "gpu-002", "gpu-003", "gpu-004"):
            for gpu in ("0", "1"):
                code = 79 if (host, gpu) == ("gpu-001", "1") else 0
                dcgm_xid.add_metric([host, gpu, f"GPU-{host}-{gpu}"], code)
                dcgm_ecc.add_metric([host, gpu, f"GPU-{host}-{gpu}"], 0)
                ecc.add_metric(["lab", host, gpu], 0)
        yield from (*fams.values(), logs, xid, ecc, dcgm_xid, dcgm_ecc)


def responder_series(registry: CollectorRegistry) -> None:
    """The responder's metrics as after a morning of incidents in the lab."""
    m = ResponderMetrics(registry)
    for cluster in ("lab", "prod"):
        m.incidents.labels(cluster).inc(3)
        m.decisions.labels(cluster, "requeue_excluding", "monitor", "planned").inc(2)
        m.decisions.labels(cluster, "stop", "act", "done").inc()
        m.mode.labels(cluster).set(1 if cluster == "prod" else 0)
        m.breaker_open.labels(cluster).set(0)
        m.node_suspicion.labels(cluster, "gpu-002").set(0.17)
        m.goodput_lost.labels(cluster, "xid_79_fallen_off_bus").inc(42)
    m.alerts.labels("new").inc(40)
    m.alerts.labels("duplicate").inc(12)
    m.notifications.labels("stored").inc(9)
    m.open_incidents.set(1)
    for seconds in (0.4, 1.2, 2.5):
        m.detection_latency.observe(seconds * 20)
        m.decision_latency.observe(seconds)
        m.action_latency.observe(seconds * 3)
    m.review_precision.labels("xid_79_fallen_off_bus").set(1.0)
    m.review_precision.labels("nccl_watchdog_timeout").set(0.75)
    m.reviewed.labels("xid_79_fallen_off_bus").set(4)
    m.reviewed.labels("nccl_watchdog_timeout").set(4)
    loki = LokiMetrics(registry)
    loki.pushed.inc(9)
    loki.spooled.inc(2)
    loki.dropped.labels("spool_full").inc(0)
    loki.failures.labels("http_5xx").inc(1)
    loki.queue_depth.set(0)
    loki.spool_files.set(0)
    loki.spool_bytes.set(0)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    require_binary("prometheus")
    registry = CollectorRegistry()
    registry.register(LabSeries())
    responder_series(registry)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    workdir: Path = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
        "scrape_configs": [{
            "job_name": "trainguard-lab", "honor_labels": True,
            "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
        }],
    }  # fmt: skip
    service = start_prometheus(config, workdir)
    try:
        service.wait_ready(30)
        # rate() and increase() need two samples in range: wait for three scrapes.
        wait_until(
            lambda: _values(service, 'count_over_time(up{job="trainguard-lab"}[1m]) >= 3'), 30, 0.2, "three scrapes"
        )
        yield service
    finally:
        service.stop()
        server.shutdown()
        server.server_close()
        thread.join(5)


def _query(service: Service, promql: str) -> tuple[int, dict[str, Any]]:
    status, body = http_get(f"{service.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=5)
    return status, json.loads(body) if body else {}


def _values(service: Service, promql: str) -> list[Any]:
    status, answer = _query(service, promql)
    result: list[Any] = answer.get("data", {}).get("result", []) if status == 200 else []
    return result


def substitute(expr: str) -> str:
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    return expr


def prom_targets() -> list[tuple[str, str, str]]:
    cases = []
    for board_name, build in DASHBOARDS.items():
        for panel, target in targets_of(build()):
            if target["datasource"]["type"] == "prometheus":
                cases.append((board_name, f"{panel['title']} [{target['refId']}]", target["expr"]))
    return cases


def variable_queries() -> list[tuple[str, str, str]]:
    cases = []
    for board_name, build in DASHBOARDS.items():
        board: Json = build()
        for var in board["templating"]["list"]:
            if var["type"] == "query" and var["datasource"]["type"] == "prometheus":
                cases.append((board_name, var["name"], var["definition"]))
    return cases


def test_every_dashboard_has_promql() -> None:
    """Guard against the parametrization below silently covering nothing."""
    boards = {board for board, _, _ in prom_targets()}
    assert boards == {"fleet", "workload"}
    assert len(prom_targets()) > 30


@pytest.mark.parametrize(("board", "panel", "expr"), prom_targets(), ids=lambda v: str(v)[:60])
def test_panel_query_parses_and_returns_series(prometheus: Service, board: str, panel: str, expr: str) -> None:
    promql = substitute(expr)
    assert "$" not in promql.replace('"$1"', ""), f"{board}/{panel}: unknown variable left in {promql}"
    status, answer = _query(prometheus, promql)
    assert status == 200, f"{board}/{panel}: Prometheus said {status} {answer.get('error')}\n{promql}"
    assert answer["status"] == "success"
    assert answer["data"]["result"], f"{board}/{panel}: no series from the lab's metrics\n{promql}"


@pytest.mark.parametrize(("board", "name", "definition"), variable_queries())
def test_variable_query_finds_values(prometheus: Service, board: str, name: str, definition: str) -> None:
    match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", substitute(definition))
    assert match, f"{board}: variable {name}: unexpected query {definition}"
    selector, label = match.groups()
    values = _values(prometheus, f"group by ({label}) ({selector})")
    found = {series["metric"].get(label) for series in values}
    assert VARIABLES[f"${name}"] in found, f"{board}: variable {name} offers {found}"
