"""What a hostile web page can and cannot do to a responder on an operator's machine (responder.guard).

No operator token is set in these tests, so loopback clients may change state: exactly the setup a
DNS-rebinding page or a cross-site form post exploits.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

from tests.conftest import Responder
from trainguard.lab.payloads import alert, notification

JSON = {"content-type": "application/json"}


def _decision(r: Responder) -> str:
    r.post(notification([alert("TrainguardGpuXid", "infra_gpu", host="n1", pattern="xid_79_fallen_off_bus")]))
    return str(r.wait_decisions()[0]["id"])


def test_dns_rebinding_cannot_switch_a_cluster_to_act(responder: Responder) -> None:
    # The attacker's name now resolves to 127.0.0.1; the browser still sends the attacker's Host.
    evil = {**JSON, "host": "evil.example:9480"}
    switched = responder.client.put("/v1/clusters/lab/mode", json={"mode": "act"}, headers=evil)
    assert switched.status_code == 421
    assert "allowed_hosts" in switched.json()["detail"]
    assert responder.client.get("/v1/clusters/lab/mode").json()["mode"] == "monitor"
    assert responder.client.get("/v1/decisions", headers={"host": "evil.example"}).status_code == 421
    # IP literals and localhost are served (no rebinding attack can use them).
    assert responder.client.get("/v1/decisions", headers={"host": "localhost:9480"}).status_code == 200
    assert responder.client.get("/v1/decisions", headers={"host": "[::1]:9480"}).status_code == 200


def test_configured_host_names_are_served(make_responder: Callable[..., Responder]) -> None:
    r = make_responder(allowed_hosts=["trainguard.internal", "*.svc.cluster.local"])
    assert r.client.get("/v1/decisions", headers={"host": "trainguard.internal"}).status_code == 200
    assert r.client.get("/v1/decisions", headers={"host": "tg.mon.svc.cluster.local:9480"}).status_code == 200
    assert r.client.get("/v1/decisions", headers={"host": "trainguard.internal.evil"}).status_code == 421


def test_cross_site_simple_posts_are_refused(responder: Responder) -> None:
    decision = _decision(responder)
    url = f"/v1/decisions/{decision}/review"
    body = b'{"verdict": "wrong"}'
    # A <form enctype="text/plain"> or fetch(mode: "no-cors") from any page: a "simple" request.
    simple = responder.client.post(url, content=body, headers={"content-type": "text/plain"})
    assert simple.status_code == 415
    # A browser marks a cross-site request, whatever its content type.
    marked = responder.client.post(url, content=body, headers={**JSON, "sec-fetch-site": "cross-site"})
    assert marked.status_code == 403
    foreign = responder.client.post(url, content=body, headers={**JSON, "origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert responder.client.get(f"/v1/decisions/{decision}").json()["reviews"] == []
    # The webhook the same way: nothing is stored from a cross-site text/plain post.
    stored = responder.metric("trainguard_responder_notifications_total", {"result": "stored"})
    payload = notification([alert("TrainguardGpuXid", "infra_gpu", workload="77", host="n2")])
    hook = responder.client.post("/v1/alerts", content=json.dumps(payload), headers={"content-type": "text/plain"})
    assert hook.status_code == 415
    assert responder.metric("trainguard_responder_notifications_total", {"result": "stored"}) == stored
    # The operator's own tools (curl, the CLI) send JSON without browser headers: accepted.
    ok = responder.client.post(url, content=body, headers=JSON)
    assert ok.status_code == 200


def test_reads_need_the_read_token_when_one_is_set(make_responder: Callable[..., Responder]) -> None:
    r = make_responder(read_token="r3ad-token", operator_token="op-token")
    for path in ("/v1/decisions", "/v1/recommendations", "/v1/clusters", "/console/decisions"):
        refused = r.client.get(path)
        assert refused.status_code == 401, path
        assert refused.headers["www-authenticate"].startswith("Basic")
        assert r.client.get(path, headers={"authorization": "Bearer wrong"}).status_code == 401
        assert r.client.get(path, headers={"authorization": "Bearer r3ad-token"}).status_code == 200, path
    basic = base64.b64encode(b"anyone:r3ad-token").decode()
    assert r.client.get("/console/decisions", headers={"authorization": f"Basic {basic}"}).status_code == 200
    assert r.client.get("/v1/decisions", headers={"authorization": "Bearer op-token"}).status_code == 200
    # Health, metrics and the webhook stay as they were.
    for path in ("/healthz", "/readyz", "/metrics"):
        assert r.client.get(path).status_code == 200, path
    assert r.post(notification([alert("TrainguardGpuXid", "infra_gpu", host="n1")])).status_code == 200


def test_reads_are_open_without_a_read_token(responder: Responder) -> None:
    assert responder.client.get("/v1/decisions").status_code == 200
