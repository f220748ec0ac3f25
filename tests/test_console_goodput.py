"""The console's goodput page over a real responder (SQLite store, FakeClock): restarts, time lost, ETTR."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from responder.clock import FakeClock
from tests.conftest import Responder
from trainguard.lab.payloads import alert, notification

T0 = 1_800_000_000.0


def test_goodput_page_shows_lost_time_and_ettr_per_workload(make_responder: Callable[..., Responder]) -> None:
    r = make_responder(clock=FakeClock(T0))
    # A GPU fault that started 9 s before the responder heard of it; decided after the window (+1.2 s).
    payload = notification([alert("TrainguardLogInfraGpu", "infra_gpu", workload="4242", host="n2", rank="1",
                                  pattern="xid_79", starts_at=T0 - 9)])  # fmt: skip
    assert r.post(payload).status_code == 200
    [decision] = r.decide_now()
    assert decision["action"] == "requeue_excluding"
    assert decision["attribution"]["goodput"]["work_lost_s"] is None  # no Prometheus: the step is unknown
    assert isinstance(r.clock, FakeClock)
    r.clock.advance(100.0 - 10.2)  # 100 s after the fault
    page = r.client.get("/console/goodput")
    assert page.status_code == 200
    text = page.text
    assert "Cluster lab: ETTR 0.898, 10.2s lost in 1 restart(s)" in text  # 1 - 10.2 / 100
    assert "<td><strong>4242</strong></td>" in text
    assert "xid_79 10.2s" in text
    assert 'href="/console/goodput"' in text  # in the navigation
    [cluster] = r.client.get("/v1/goodput").json()["clusters"]
    assert cluster["cluster"] == "lab"
    assert cluster["ettr"] == pytest.approx(0.898)
    assert cluster["lost_by_cause_s"] == {"xid_79": pytest.approx(10.2)}
    assert [w["name"] for w in cluster["workloads"]] == ["4242"]
    assert r.client.get("/v1/goodput", params={"cluster": "no such/cluster"}).status_code == 400
    labels = {"cluster": "lab", "cause": "xid_79"}
    assert r.metric("trainguard_responder_goodput_lost_seconds_total", labels) == pytest.approx(10.2)


def test_goodput_page_without_restarts_says_so(make_responder: Callable[..., Responder]) -> None:
    r = make_responder(clock=FakeClock(T0))
    payload = notification([alert("TrainguardLogAppError", "app_error", host="n1", rank="0", pattern="cuda_oom",
                                  starts_at=T0 - 2)])  # fmt: skip
    assert r.post(payload).status_code == 200
    [decision] = r.decide_now()
    assert decision["action"] == "stop"  # not a restart: no goodput row
    assert "No restart recorded yet." in r.client.get("/console/goodput").text
