"""Prometheus and Alertmanager SIGKILLed mid-incident, on the real pipeline (exporter -> Prometheus ->
Alertmanager -> ``trainguard serve``), then started again on the same data.

The kill lands after the responder acknowledged the incident's alerts and before its correlation
window closed: the responder decides it by itself, once; once both are back and Alertmanager resends,
nothing is decided twice and the responder stayed healthy throughout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.services import require_binary, wait_until
from trainguard.lab.stack import (
    RESEND_DELAY,
    LabExporter,
    alertmanager_config,
    decisions,
    exporter_scrape_config,
    http_get,
    pipeline,
    prometheus_config,
    responder_available,
    scraped_value,
    start_alertmanager,
    start_prometheus,
)

pytestmark = pytest.mark.prometheus

WINDOW_S = 8.0


def _open_incidents(url: str) -> float:
    return scraped_value(url, "trainguard_responder_open_incidents")


def _notifications(url: str) -> float:
    return scraped_value(url, 'trainguard_responder_notifications_total{result="stored"}')


def test_prometheus_and_alertmanager_killed_mid_incident(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for binary in ("prometheus", "prometheus-alertmanager"):
        require_binary(binary)
    if not responder_available():
        pytest.fail("trainguard serve is not available: make install")
    monkeypatch.setenv("TRAINGUARD_CORRELATION_WINDOW_S", str(WINDOW_S))
    exporter = LabExporter()
    exporter.add_rank("77", 0, "gpu-001")
    exporter.add_rank("77", 1, "gpu-002")
    exporter.add_gpu("gpu-002", 0)
    with pipeline("fast", tmp_path, exporter, responder=True) as stack:
        responder = stack.responder
        assert responder is not None
        stack.exporter.xid("gpu-002", 0, 79)
        wait_until(lambda: _open_incidents(responder.url) >= 1, 30, interval=0.1, what="the incident stored")
        assert not decisions(responder, workload="77"), "the kill must land inside the correlation window"
        stack.prometheus.proc.kill()
        stack.alertmanager.proc.kill()
        stack.prometheus.proc.wait(10)
        stack.alertmanager.proc.wait(10)

        found = wait_until(lambda: decisions(responder, workload="77"), WINDOW_S + 15, what="the decision")
        assert isinstance(found, list)
        [decision] = [d for d in found if d["kind"] == "decision" and d["action"] != "drain_node"]
        assert decision["implicated_nodes"] == ["gpu-002"]

        # Both come back on the same data; Alertmanager delivers again; nothing is decided twice.
        token_file = tmp_path / "webhook.token"
        am = start_alertmanager(
            alertmanager_config("fast", f"{responder.url}/v1/alerts", token_file),
            tmp_path / "am",
            port=stack.alertmanager.port,
        )
        prom = start_prometheus(
            prometheus_config("fast", [exporter_scrape_config(stack.exporter.port)], am.port),
            tmp_path / "prom",
            resend_delay=RESEND_DELAY["fast"],
            port=stack.prometheus.port,
        )
        try:
            am.wait_ready()
            prom.wait_ready()
            stored = _notifications(responder.url)
            wait_until(lambda: _notifications(responder.url) > stored, 60, interval=0.5, what="a resend delivered")
            status, body = http_get(f"{responder.url}/healthz")
            assert status == 200, body
            assert json.loads(body)["loop"]["consecutive_failures"] == 0
            again = [d for d in decisions(responder, workload="77") if d["action"] != "drain_node"]
            assert [d["id"] for d in again] == [decision["id"]], "decided once, whatever was resent"
        finally:
            prom.stop()
            am.stop()
