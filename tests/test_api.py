"""The responder through its HTTP API: the behaviours issue 2 must show, end to end in one process."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from responder.clock import FakeClock
from tests.conftest import Responder
from trainguard.lab.payloads import alert, nccl_storm_with_xid, notification


def test_storm_of_nccl_timeouts_plus_one_xid_excludes_only_that_host(responder: Responder) -> None:
    response = responder.post(nccl_storm_with_xid(ranks_per_host=8, hosts=4, bad_host="gpu-002"))
    assert response.status_code == 200, response.text
    assert response.json()["evidence"] == 33

    [decision] = responder.wait_decisions()
    assert decision["action"] == "requeue_excluding"
    assert decision["excluded_nodes"] == ["gpu-002"]
    assert decision["implicated_nodes"] == ["gpu-002"]
    assert decision["failure_class"] == "infra"
    assert decision["mode"] == "monitor"
    assert decision["outcome"] == "planned"
    assert "xid_79_fallen_off_bus" in decision["patterns"]
    assert "nccl_watchdog_timeout" in decision["patterns"]
    explanation = " ".join(decision["attribution"]["explanation"])
    assert "symptom" in explanation
    # Monitor mode: nothing reached the scheduler.
    assert responder.scheduler.requests == []


def test_oom_on_every_rank_stops_without_blaming_a_node(responder: Responder) -> None:
    alerts = [alert("TrainguardAppError", "app_error", host=f"gpu-{r // 4}", rank=str(r), pattern="cuda_oom")
              for r in range(8)]  # fmt: skip
    assert responder.post(notification(alerts)).status_code == 200
    [decision] = responder.wait_decisions()
    assert decision["action"] == "stop"
    assert decision["failure_class"] == "app"
    assert decision["implicated_nodes"] == []
    assert decision["excluded_nodes"] == []


def test_same_notification_three_times_gives_one_decision(make_responder: Callable[..., Responder]) -> None:
    responder = make_responder(clock=FakeClock())
    payload = nccl_storm_with_xid(ranks_per_host=2, hosts=2, bad_host="gpu-001")
    bodies = [responder.post(payload).json() for _ in range(3)]
    assert bodies[0]["new"] == 5
    assert bodies[1]["duplicates"] == 5
    assert bodies[2]["duplicates"] == 5
    assert len(responder.decide_now()) == 1
    responder.post(payload)  # and once more after the decision
    assert len(responder.decide_now()) == 1
    assert responder.metric("trainguard_responder_alerts_received_total", {"outcome": "duplicate"}) == 15


@pytest.mark.parametrize(
    ("label", "value"),
    [("workload", "12; rm -rf /"), ("host", "n1 && reboot"), ("workload", "$(reboot)"), ("host", "-rf"),
     ("attempt", "0 1"), ("cluster", "lab\nx"), ("host", "n[1-3]")],
)  # fmt: skip
def test_hostile_label_values_cause_no_action_and_are_audited(
    make_responder: Callable[..., Responder], label: str, value: str
) -> None:
    responder = make_responder(clock=FakeClock())
    hostile = alert("TrainguardGpuXid", "infra_gpu", host="gpu-001", rank="0", pattern="xid_79_fallen_off_bus")
    hostile["labels"][label] = value
    response = responder.post(notification([hostile]))
    assert response.status_code == 200
    assert response.json()["rejected"] == 1
    assert responder.decide_now() == []
    refusals = responder.client.get("/v1/decisions", params={"kind": "refusal"}).json()["decisions"]
    assert len(refusals) == 1
    assert refusals[0]["action"] == "none"
    assert refusals[0]["outcome"] == "skipped"
    assert label in refusals[0]["reason"]
    assert responder.scheduler.requests == []


def test_hostile_alert_does_not_stop_its_valid_siblings(responder: Responder) -> None:
    good = alert("TrainguardGpuXid", "infra_gpu", host="gpu-001", rank="0", pattern="xid_79_fallen_off_bus")
    bad = alert("TrainguardGpuXid", "infra_gpu", host="n1 && reboot", rank="1", pattern="xid_79_fallen_off_bus")
    assert responder.post(notification([good, bad])).json()["rejected"] == 1
    [decision] = responder.wait_decisions()
    assert decision["excluded_nodes"] == ["gpu-001"]


def test_other_teams_alerts_are_accepted_and_ignored(make_responder: Callable[..., Responder]) -> None:
    responder = make_responder(clock=FakeClock())
    other = {"status": "firing", "labels": {"alertname": "KubePodCrashLooping", "namespace": "web"},
             "annotations": {}, "startsAt": "2026-11-29T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
             "generatorURL": "", "fingerprint": "abc123"}  # fmt: skip
    response = responder.post(notification([other]))
    assert response.status_code == 200
    assert response.json()["ignored"] == 1
    assert responder.decide_now() == []
    assert responder.client.get("/v1/decisions").json()["count"] == 0


def test_malformed_json_is_a_400_with_a_json_error(responder: Responder) -> None:
    response = responder.client.post(
        "/v1/alerts", content=b'{"version": "4", "alerts": [', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"] == "bad request"
    assert "not JSON" in response.json()["detail"]


def test_wrong_shape_is_a_400_naming_the_field(responder: Responder) -> None:
    response = responder.client.post("/v1/alerts", json={"version": "3", "alerts": "nope"})
    assert response.status_code == 400
    fields = {e["loc"] for e in response.json()["detail"]}
    assert "version" in fields
    assert "alerts" in fields


def test_oversized_body_is_a_413_before_it_is_read(make_responder: Callable[..., Responder]) -> None:
    responder = make_responder(max_body_bytes=4096)
    big = notification([alert("TrainguardCollectiveTimeout", "collective_timeout", rank=str(r), host="gpu-001")
                        for r in range(100)])  # fmt: skip
    response = responder.post(big)
    assert response.status_code == 413
    assert response.json()["error"] == "payload too large"

    # Without a Content-Length (chunked), the stream is cut at the limit too.
    def chunks() -> object:
        body = json.dumps(big).encode()
        for i in range(0, len(body), 1000):
            yield body[i : i + 1000]

    response = responder.client.post("/v1/alerts", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_missing_or_wrong_token_is_a_401(make_responder: Callable[..., Responder]) -> None:
    responder = make_responder(webhook_token="s3cret")
    payload = nccl_storm_with_xid(ranks_per_host=1, hosts=2)
    assert responder.post(payload).status_code == 401
    assert responder.post(payload, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert responder.post(payload, headers={"Authorization": "Basic s3cret"}).status_code == 401
    ok = responder.post(payload, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    assert ok.json()["new"] == 3


def test_mode_is_monitor_by_default_persisted_and_switchable(make_responder: Callable[..., Responder]) -> None:
    responder = make_responder(operator_token="op")
    assert responder.client.get("/v1/clusters/lab/mode").json() == {"cluster": "lab", "mode": "monitor", "known": False}
    assert responder.client.put("/v1/clusters/lab/mode", json={"mode": "act"}).status_code == 401
    bad = responder.client.put("/v1/clusters/lab/mode", json={"mode": "yolo"}, headers={"Authorization": "Bearer op"})
    assert bad.status_code == 400
    ok = responder.client.put(
        "/v1/clusters/lab/mode", json={"mode": "act", "create": True}, headers={"Authorization": "Bearer op"}
    )
    assert ok.status_code == 200
    assert responder.store.get_mode("lab") == "act"
    assert responder.metric("trainguard_responder_mode_act", {"cluster": "lab"}) == 1
    assert responder.client.get("/v1/clusters/bad name/mode").status_code == 400


def test_act_mode_calls_the_scheduler_once_and_records_done(responder: Responder) -> None:
    assert responder.client.put("/v1/clusters/lab/mode", json={"mode": "act", "create": True}).status_code == 200
    responder.post(nccl_storm_with_xid(ranks_per_host=2, hosts=3, bad_host="gpu-003"))
    wait = lambda: [d for d in responder.decisions() if d["outcome"] == "done"]  # noqa: E731
    from tests.services import wait_until  # noqa: PLC0415

    wait_until(wait, 10, what="a done decision")
    [decision] = responder.decisions()
    assert decision["mode"] == "act"
    assert decision["acted_at"] is not None
    [request] = responder.scheduler.requests
    assert request.action == "requeue_excluding"
    assert request.exclude_nodes == ("gpu-003",)
    assert request.workload == "4242"
    assert request.attempt == "0"


def test_late_alerts_join_the_incident_without_a_second_action(make_responder: Callable[..., Responder]) -> None:
    responder = make_responder(clock=FakeClock())
    responder.post(nccl_storm_with_xid(ranks_per_host=1, hosts=2, bad_host="gpu-001"))
    [decision] = responder.decide_now()
    responder.clock.advance(0.5)  # type: ignore[attr-defined]  # a FakeClock
    late = alert("TrainguardGpuXid", "infra_gpu", host="gpu-002", pattern="xid_48_double_bit_ecc")
    assert responder.post(notification([late])).json()["new"] == 1
    assert len(responder.decide_now()) == 1
    full = responder.client.get(f"/v1/decisions/{decision['id']}").json()
    assert [e["labels"]["host"] for e in full["late_evidence"]] == ["gpu-002"]


def test_new_attempt_is_a_new_incident_and_carries_earlier_exclusions(responder: Responder) -> None:
    responder.post(nccl_storm_with_xid(ranks_per_host=1, hosts=3, bad_host="gpu-001"))
    responder.wait_decisions(1)
    second = alert("TrainguardGpuXid", "infra_gpu", attempt="1", host="gpu-003", pattern="xid_95_uncontained_ecc")
    responder.post(notification([second]))
    first_again, newest = responder.wait_decisions(2)[1], responder.wait_decisions(2)[0]
    assert first_again["attempt"] == "0"
    assert newest["attempt"] == "1"
    assert newest["excluded_nodes"] == ["gpu-003", "gpu-001"]


def test_decision_query_filters_and_validation(responder: Responder) -> None:
    responder.post(nccl_storm_with_xid(ranks_per_host=1, hosts=2))
    responder.wait_decisions()
    client = responder.client
    assert client.get("/v1/decisions", params={"cluster": "other"}).json()["count"] == 0
    assert client.get("/v1/decisions", params={"action": "requeue_excluding"}).json()["count"] == 1
    assert client.get("/v1/decisions", params={"since": "2099-01-01T00:00:00Z"}).json()["count"] == 0
    assert client.get("/v1/decisions", params={"since": "yesterday"}).status_code == 400
    assert client.get("/v1/decisions", params={"limit": "0"}).status_code == 400
    assert client.get("/v1/decisions", params={"colour": "red"}).status_code == 400
    assert client.get("/v1/decisions/dec_nope").status_code == 404
    assert client.get("/v1/nowhere").json()["error"] == "Not Found"


def test_recommendations_and_reviews_feed_precision(responder: Responder) -> None:
    responder.post(nccl_storm_with_xid(ranks_per_host=1, hosts=2, bad_host="gpu-002"))
    [decision] = responder.wait_decisions()
    recs = responder.client.get("/v1/recommendations").json()["recommendations"]
    assert [r["id"] for r in recs] == [decision["id"]]
    review = responder.client.post(f"/v1/decisions/{decision['id']}/review", json={"verdict": "correct", "note": "ok"})
    assert review.status_code == 200
    precision = responder.client.get("/v1/review/precision").json()["patterns"]
    assert precision["xid_79_fallen_off_bus"] == {"reviewed": 1, "correct": 1, "precision": 1.0}
    assert responder.metric("trainguard_responder_review_precision", {"pattern": "xid_79_fallen_off_bus"}) == 1.0
    bad = responder.client.post(f"/v1/decisions/{decision['id']}/review", json={"verdict": "maybe"})
    assert bad.status_code == 400


def test_health_ready_and_metrics(make_responder: Callable[..., Responder]) -> None:
    responder = make_responder(clusters={"lab": {}})  # metrics name configured clusters only
    assert responder.client.get("/healthz").json()["status"] == "ok"
    assert responder.client.get("/readyz").status_code == 200
    responder.post(nccl_storm_with_xid(ranks_per_host=1, hosts=2))
    responder.wait_decisions()
    text = responder.client.get("/metrics").text
    assert "trainguard_responder_alerts_received_total" in text
    assert responder.metric("trainguard_responder_decisions_total",
                            {"cluster": "lab", "action": "requeue_excluding", "mode": "monitor",
                             "outcome": "planned"}) == 1  # fmt: skip
    assert responder.metric("trainguard_responder_decision_latency_seconds_count") == 1
    assert responder.metric("trainguard_responder_detection_latency_seconds_count") >= 1
    assert responder.metric("trainguard_responder_detection_latency_seconds_sum") > 0


def test_unreachable_prometheus_means_deciding_from_alerts_and_saying_so(
    make_responder: Callable[..., Responder],
) -> None:
    from tests.services import free_port  # noqa: PLC0415

    responder = make_responder(prometheus_url=f"http://127.0.0.1:{free_port()}", prometheus_timeout_s=0.5)
    responder.post(nccl_storm_with_xid(ranks_per_host=1, hosts=2, bad_host="gpu-002"))
    [decision] = responder.wait_decisions()
    assert decision["action"] == "requeue_excluding"
    assert decision["excluded_nodes"] == ["gpu-002"]
    assert any("Prometheus unreachable" in line for line in decision["attribution"]["explanation"])


def test_store_failure_is_a_503_so_alertmanager_resends(tmp_path: Path) -> None:
    """Only a failure to store is a 5xx: Alertmanager retries 5xx, so nothing accepted is lost."""
    import sqlite3  # noqa: PLC0415

    from prometheus_client import CollectorRegistry  # noqa: PLC0415
    from starlette.testclient import TestClient  # noqa: PLC0415

    from responder.app import create_app  # noqa: PLC0415
    from responder.clock import SystemClock  # noqa: PLC0415
    from responder.schedulers.recording import RecordingScheduler  # noqa: PLC0415
    from responder.settings import Settings  # noqa: PLC0415
    from responder.store.sqlite import SqliteStore  # noqa: PLC0415

    class FullDisk(SqliteStore):
        def ingest(self, *args: object, **kwargs: object) -> Any:
            raise sqlite3.OperationalError("database or disk is full")

    store = FullDisk(tmp_path / "tg.db")
    app = create_app(Settings(db_path=tmp_path / "tg.db"), store, RecordingScheduler(), SystemClock(),
                     registry=CollectorRegistry())  # fmt: skip
    with TestClient(app, base_url="http://127.0.0.1") as client:
        response = client.post("/v1/alerts", json=nccl_storm_with_xid(ranks_per_host=1, hosts=2))
    store.close()
    assert response.status_code == 503
    assert "disk is full" in response.json()["detail"]
