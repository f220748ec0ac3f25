"""Enrichment against a REAL Prometheus (Debian package): the queries parse, and their answers find a
hang's laggard, XIDs on the workload's hosts and each attempt's checkpoint progress."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from responder.attribution import attribute
from responder.enrichment import PrometheusEnricher
from responder.model import Incident, StoredAlert
from tests.services import free_port, require_binary
from trainguard.lab.stack import Service, poll, query, start_prometheus

pytestmark = pytest.mark.prometheus
IDENTITY = ["cluster", "workload", "scheduler", "attempt", "rank", "host"]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    require_binary("prometheus")
    registry = CollectorRegistry()
    step = Gauge("trainguard_rank_step", "step", IDENTITY, registry=registry)
    last = Gauge("trainguard_rank_last_step_timestamp_seconds", "t", IDENTITY, registry=registry)
    stuck = Gauge("trainguard_rank_process_stuck", "stuck", IDENTITY, registry=registry)
    ckpt = Gauge("trainguard_checkpoint_last_saved_step", "ckpt", IDENTITY, registry=registry)
    xids = Gauge("DCGM_FI_DEV_XID_ERRORS", "xid", ["Hostname", "gpu"], registry=registry)
    xids.labels("n3", "0").set(0)  # DCGM exports 0 until an XID arrives
    now = time.time()
    for attempt in ("0", "1"):
        for rank, host in (("0", "n1"), ("1", "n2"), ("2", "n3")):
            labels = ["lab", "77", "slurm", attempt, rank, host]
            step.labels(*labels).set(40 if attempt == "0" else 55)
            last.labels(*labels).set(now)
            stuck.labels(*labels).set(1 if (attempt, rank) == ("1", "1") else 0)
            if attempt == "0":
                ckpt.labels(*labels).set(30)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    scrape = [{"job_name": "trainguard-exporter", "honor_labels": True,
               "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]  # fmt: skip
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": scrape}
    prom = start_prometheus(config, tmp_path_factory.mktemp("prom"))
    try:
        prom.wait_ready()
        _wait_scraped(prom)
        xids.labels("n3", "0").set(79)  # an XID appears after the first scrape: a change Prometheus sees
        time.sleep(2.5)
        yield prom
    finally:
        prom.stop()
        server.shutdown()
        server.server_close()
        thread.join(5)


def _wait_scraped(prom: Service) -> None:
    poll(lambda: query(prom, 'up{job="trainguard-exporter"} == 1'), 30, "first scrape")


def _alert(host: str, rank: str, attempt: str = "1") -> StoredAlert:
    labels = {"alertname": "TrainguardRankHang", "category": "hang", "cluster": "lab", "workload": "77",
              "attempt": attempt, "host": host, "rank": rank}  # fmt: skip
    return StoredAlert("f" + rank, "2026-11-29T00:00:00Z", 0.0, "firing", 0.0, labels, {})


def test_enrichment_finds_laggard_xids_and_checkpoint_history(prometheus: Service, tmp_path: Path) -> None:
    enricher = PrometheusEnricher(prometheus.url, timeout_s=1.5)
    incident = Incident("inc_x", "lab", "77", "slurm", "1", "open", 0.0, 0.0, None)
    alerts = [_alert(h, r) for r, h in (("0", "n1"), ("1", "n2"), ("2", "n3"))]
    context = enricher.context(incident, alerts)
    enricher.close()
    assert context.available, context.note
    assert {p.rank for p in context.progress} == {"0", "1", "2"}
    assert [p.host for p in context.progress if p.stuck] == ["n2"]
    assert "n3" in context.xid_hosts
    assert context.attempts[0].checkpoint_step == 30
    assert context.attempts[1].checkpoint_step is None
    assert context.attempts[1].last_step == 55
    verdict = attribute(alerts, context)
    assert "n2" in verdict.implicated
    assert "n3" in verdict.implicated  # the XID Prometheus saw on a host of the workload


def test_unreachable_or_slow_prometheus_is_reported_not_raised() -> None:
    enricher = PrometheusEnricher(f"http://127.0.0.1:{free_port()}", timeout_s=0.3)
    incident = Incident("inc_y", "lab", "77", "slurm", "0", "open", 0.0, 0.0, None)
    started = time.monotonic()
    context = enricher.context(incident, [])
    enricher.close()
    assert time.monotonic() - started < 2  # no retry backoff delays the decision
    assert not context.available
    assert "unreachable" in context.note
