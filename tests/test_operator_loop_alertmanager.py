"""The operator's loop on real Alertmanager (0.25): approval waits, the responder's own alerts through
the shipped sub-route, silences while acting, proven with ``amtool``.

The responder runs in process (``create_app``) with the project's ``RecordingScheduler``; Alertmanager,
``amtool`` and (for the productive check) Prometheus are the real Debian packages. The routing tree is
``alert_rules/alertmanager/production.yml`` as shipped, its receivers pointed at two local webhook
receivers: the team's root receiver and the trainguard-operator-loop sub-route.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from responder.alertmanager import AlertmanagerSettings, SilenceSettings
from responder.approval import ApprovalSettings
from responder.clock import rfc3339
from responder.settings import ClusterSettings
from tests.conftest import Responder
from tests.services import require_binary, wait_until
from trainguard.lab.payloads import nccl_storm_with_xid
from trainguard.lab.stack import (
    RULES_DIR,
    LabExporter,
    Service,
    WebhookReceiver,
    exporter_scrape_config,
    query,
    start_alertmanager,
    start_prometheus,
)

pytestmark = pytest.mark.prometheus
TOKEN = "operator-loop-test-token"


class Stack:
    def __init__(self, am: Service, team: WebhookReceiver, ops: WebhookReceiver) -> None:
        self.am, self.team, self.ops = am, team, ops

    def amtool(self, *args: str) -> Any:
        argv = [require_binary("amtool"), f"--alertmanager.url={self.am.url}", *args, "-o", "json"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
        return json.loads(done.stdout)

    def push(self, **labels: str) -> None:
        alert = {"labels": {"alertname": "TeamAlert", "severity": "critical", **labels},
                 "startsAt": rfc3339(time.time())}  # fmt: skip
        httpx.post(f"{self.am.url}/api/v2/alerts", json=[alert], timeout=5).raise_for_status()

    def ops_alerts(self, alertname: str, status: str = "firing") -> list[Any]:
        return [a for a in self.ops.received() if a.labels["alertname"] == alertname and a.status == status]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    require_binary("prometheus-alertmanager")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    team, ops = WebhookReceiver(TOKEN), WebhookReceiver(TOKEN)
    team.start()
    ops.start()
    config: dict[str, Any] = yaml.safe_load((RULES_DIR / "alertmanager" / "production.yml").read_text())
    config["route"]["group_interval"] = "1s"
    for route in config["route"]["routes"]:
        route["group_interval"] = "1s"
    hooks = {"trainguard-responder": team.url, "trainguard-operator-loop": ops.url}
    for receiver in config["receivers"]:
        if receiver["name"] in hooks:
            auth = {"authorization": {"type": "Bearer", "credentials_file": str(token_file)}}
            receiver["webhook_configs"] = [{"url": hooks[receiver["name"]], "send_resolved": True, "http_config": auth}]
    am = start_alertmanager(config, tmp_path / "am")
    try:
        am.wait_ready()
        yield Stack(am, team, ops)
    finally:
        am.stop()
        team.stop()
        ops.stop()


def responder_on(make: Callable[..., Responder], stack: Stack, cluster: ClusterSettings, **extra: Any) -> Responder:
    am = AlertmanagerSettings(url=stack.am.url, console_url="http://tg.example:9480", check_interval_s=0.2)
    return make(alertmanager=am, clusters={"lab": cluster}, **extra)


def decision(r: Responder, outcome: str) -> dict[str, Any]:
    found = wait_until(lambda: [d for d in r.decisions() if d["outcome"] == outcome], 20, what=f"a {outcome} decision")
    assert isinstance(found, list)
    return dict(found[0])


def test_approval_flow_routes_own_alerts_to_the_sub_route_and_silences_the_attempt(
    make_responder: Callable[..., Responder], stack: Stack
) -> None:
    cluster = ClusterSettings(mode="approve", silences=SilenceSettings(enabled=True, max_s=600))
    r = responder_on(make_responder, stack, cluster)
    assert r.post(nccl_storm_with_xid(ranks_per_host=2, hosts=2, bad_host="gpu-002")).status_code == 200
    waiting = decision(r, "awaiting_approval")
    wait_until(lambda: stack.ops_alerts("TrainguardDecisionPending"), 20, what="pending alert at the sub-route")
    [pending] = stack.ops_alerts("TrainguardDecisionPending")
    assert pending.labels["decision_id"] == waiting["id"]
    assert (pending.labels["cluster"], pending.labels["workload"], pending.labels["attempt"]) == ("lab", "4242", "0")
    assert pending.annotations["console_url"] == f"http://tg.example:9480/console/decisions/{waiting['id']}"
    assert r.scheduler.requests == []
    assert stack.amtool("silence", "query") == []  # nothing done, nothing silenced

    approved = r.client.post(f"/v1/decisions/{waiting['id']}/approve", json={"by": "alice"})
    assert approved.status_code == 200
    decision(r, "done")
    wait_until(lambda: stack.ops_alerts("TrainguardDecisionPending", "resolved"), 20, what="pending alert resolved")
    wait_until(lambda: stack.ops_alerts("TrainguardActionDone"), 20, what="action-done alert")
    # The team's own receiver (the responder's webhook in production.yml) never saw trainguard's alerts.
    assert not [a for a in stack.team.received() if a.labels.get("trainguard_source")]

    silences = wait_until(lambda: stack.amtool("silence", "query"), 20, what="a silence for the acted-on attempt")
    assert isinstance(silences, list)
    [silence] = silences
    matchers = {(m["name"], m["value"], m["isRegex"], m.get("isEqual", True)) for m in silence["matchers"]}
    assert matchers == {
        ("cluster", "lab", False, True),
        ("workload", "4242", False, True),
        ("attempt", "0", False, True),
        ("trainguard_source", "responder", False, False),  # never the responder's own alerts
    }
    assert waiting["id"] in silence["comment"]
    record = r.client.get(f"/v1/decisions/{waiting['id']}").json()
    assert record["silence"]["id"] == silence["id"]
    assert record["approval"]["by"] == "alice"


def test_unapproved_decision_expires_resolves_its_alert_and_does_nothing(
    make_responder: Callable[..., Responder], stack: Stack
) -> None:
    cluster = ClusterSettings(mode="approve", approval=ApprovalSettings(timeout_s=2),
                              silences=SilenceSettings(enabled=True))  # fmt: skip
    r = responder_on(make_responder, stack, cluster)
    assert r.post(nccl_storm_with_xid(ranks_per_host=1, hosts=2, bad_host="gpu-001")).status_code == 200
    waiting = decision(r, "awaiting_approval")
    wait_until(lambda: stack.ops_alerts("TrainguardDecisionPending"), 20, what="pending alert")
    expired = decision(r, "expired")
    assert expired["id"] == waiting["id"]
    assert expired["approval"]["state"] == "expired"
    wait_until(lambda: stack.ops_alerts("TrainguardDecisionPending", "resolved"), 20, what="pending alert resolved")
    assert r.scheduler.requests == []
    assert not stack.ops_alerts("TrainguardActionDone")
    assert stack.amtool("silence", "query") == []
    assert r.client.post(f"/v1/decisions/{waiting['id']}/approve").status_code == 409


def test_silence_covers_only_that_attempt_and_lifts_when_the_next_attempt_is_productive(
    make_responder: Callable[..., Responder], stack: Stack, tmp_path: Path
) -> None:
    exporter = LabExporter()
    port = exporter.start()
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [exporter_scrape_config(port)]}  # fmt: skip
    prometheus = start_prometheus(config, tmp_path / "prom")
    try:
        prometheus.wait_ready()
        cluster = ClusterSettings(mode="act", silences=SilenceSettings(enabled=True, max_s=600))
        r = responder_on(make_responder, stack, cluster, prometheus_url=prometheus.url)
        assert r.post(nccl_storm_with_xid(ranks_per_host=1, hosts=2, bad_host="gpu-002")).status_code == 200
        done = decision(r, "done")
        wait_until(lambda: stack.amtool("silence", "query"), 20, what="the silence")
        [silence] = stack.amtool("silence", "query")

        stack.push(cluster="lab", workload="4242", attempt="0", host="gpu-001")  # the acted-on attempt
        stack.push(cluster="lab", workload="4343", attempt="0", host="gpu-001")  # another workload
        stack.push(cluster="lab", host="gpu-002", alertname="NodeDown")  # node-level, another team's
        stack.push(cluster="lab", workload="4242", attempt="1", host="gpu-003")  # the next attempt

        def states() -> dict[tuple[str, str, str], list[str]]:
            alerts = [a for a in stack.amtool("alert", "query", "--active", "--silenced")
                      if a["labels"]["alertname"] in {"TeamAlert", "NodeDown"}]  # fmt: skip
            return {(a["labels"].get("workload", ""), a["labels"].get("attempt", ""), a["labels"]["alertname"]):
                    a["status"]["silencedBy"] for a in alerts}  # fmt: skip

        wait_until(lambda: len(states()) == 4, 20, what="the four pushed alerts")
        assert states() == {
            ("4242", "0", "TeamAlert"): [silence["id"]],
            ("4343", "0", "TeamAlert"): [],
            ("", "", "NodeDown"): [],
            ("4242", "1", "TeamAlert"): [],
        }

        # The next attempt trains: its rank steps after the action, Prometheus sees it, the silence lifts.
        exporter.add_rank("4242", 0, "gpu-003", attempt="1", step_duration=0.2)
        wait_until(lambda: query(prometheus, 'trainguard_rank_step{workload="4242",attempt="1"}'), 20)
        wait_until(lambda: stack.amtool("silence", "query") == [], 30, what="the silence to be expired")
        expired = stack.amtool("silence", "query", "--expired")
        assert [s["id"] for s in expired] == [silence["id"]]
        record = r.client.get(f"/v1/decisions/{done['id']}").json()
        assert record["silence"]["state"] == "lifted"
        assert "training step" in record["silence"]["why"]
        wait_until(lambda: states()[("4242", "0", "TeamAlert")] == [], 20, what="the attempt's alert unsilenced")
    finally:
        prometheus.stop()
        exporter.stop()
