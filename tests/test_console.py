"""The console at /console over HTTP: pages, escaping, and the mode switch's safety rules.

The real browser drives the same pages in ``test_console_browser.py``; here TestClient checks what a
browser cannot easily show: CSRF and origin refusals, the token check, no state change on GET, and
that hostile label values come out escaped.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.testclient import TestClient

from responder.app import create_app
from responder.clock import SystemClock
from responder.schedulers.recording import RecordingScheduler
from responder.settings import ClusterSettings, Settings
from responder.store.sqlite import SqliteStore
from tests.services import LOOPBACK, wait_until
from trainguard.lab import payloads

OPERATOR_TOKEN = "op-s3cret"


def console_app(settings: Settings, store: SqliteStore) -> Starlette:
    """The responder app, which serves its console at /console."""
    return create_app(settings, store, RecordingScheduler(outcome="done"), SystemClock(), registry=CollectorRegistry())


def lab_settings(db: Path, **values: Any) -> Settings:
    clusters = {"lab": ClusterSettings(nodes=64), "prod": ClusterSettings(mode="act", nodes=512)}
    return Settings(db_path=db, correlation_window_s=0.2, clusters=clusters, **values)


def seed(post: Any, decisions: Any) -> None:
    """Two workloads blaming gpu-002 (a drain follows), and a refusal of hostile labels."""
    assert post(payloads.nccl_storm_with_xid(ranks_per_host=2, workload="4242")).status_code == 200
    wait_until(lambda: len(decisions()) >= 1, 10, what="the first decision")
    assert post(payloads.nccl_storm_with_xid(ranks_per_host=2, workload="4343")).status_code == 200
    wait_until(lambda: any(d["action"] == "drain_node" for d in decisions()), 10, what="the drain decision")
    hostile = payloads.alert("TrainguardCrash", "crash", workload="<script>alert(1)</script>")
    assert post(payloads.notification([hostile])).status_code == 200


@dataclass
class Console:
    client: TestClient
    store: SqliteStore

    def csrf(self) -> str:
        match = re.search(r'name="csrf" value="([0-9a-f]+)"', self.client.get("/console").text)
        assert match
        return match.group(1)

    def mode(self, cluster: str) -> str:
        mode: str = self.client.get(f"/v1/clusters/{cluster}/mode").json()["mode"]
        return mode


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    settings = lab_settings(tmp_path / "trainguard.db", operator_token=OPERATOR_TOKEN)
    store = SqliteStore(settings.db_path)
    with TestClient(
        console_app(settings, store), follow_redirects=False, client=LOOPBACK, base_url="http://127.0.0.1"
    ) as client:
        c = Console(client, store)

        def decisions() -> list[dict[str, Any]]:
            records: list[dict[str, Any]] = client.get("/v1/decisions", params={"kind": "decision"}).json()["decisions"]
            return records

        seed(lambda payload: client.post("/v1/alerts", json=payload), decisions)
        yield c
    store.close()


def test_overview_shows_clusters_workloads_incidents_and_decisions(console: Console) -> None:
    page = console.client.get("/console")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    text = page.text
    for expected in ("Clusters", "lab", "prod", "4242", "4343", "Recent incidents", "requeue_excluding",
                     "drain_node", "gpu-002", "Switch to act", "Switch to monitor"):  # fmt: skip
        assert expected in text, expected
    assert 'id="cluster-prod"' in text
    assert re.search(r'id="cluster-prod".*?data-mode="act"', text, re.S)


def test_every_page_escapes_label_values(console: Console) -> None:
    """A hostile workload label is shown as text, never as markup."""
    for path in ("/console", "/console/decisions?kind=refusal"):
        text = console.client.get(path).text
        assert "<script>" not in text
    refusals = console.client.get("/console/decisions?kind=refusal").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in refusals


def test_pages_forbid_scripts_framing_and_caching(console: Console) -> None:
    for path in ("/console", "/console/decisions", "/console/nodes"):
        response = console.client.get(path)
        assert response.status_code == 200
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp
        assert "frame-ancestors 'none'" in csp
        assert "script-src" not in csp
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["cache-control"] == "no-store"


def test_decision_page_shows_the_evidence(console: Console) -> None:
    (record,) = [d for d in console.client.get("/v1/decisions").json()["decisions"] if d["workload"] == "4242"]
    page = console.client.get(f"/console/decisions/{record['id']}")
    assert page.status_code == 200
    assert f"Evidence ({len(record['evidence'])} alerts)" in page.text
    assert "TrainguardGpuXid" in page.text
    assert "xid_79_fallen_off_bus" in page.text
    assert record["reason"].split(" (")[0][:40] in page.text.replace("&#x27;", "'")
    assert console.client.get("/console/decisions/dec_nope").status_code == 404


def test_node_ledger_shows_reputation_and_drain(console: Console) -> None:
    page = console.client.get("/console/nodes")
    assert page.status_code == 200
    row = re.search(r"<tr><td><strong>gpu-002</strong>.*?</tr>", page.text, re.S)
    assert row, page.text
    assert "4242, 4343" in row.group(0)
    assert "drain recorded" in row.group(0)


def test_get_never_changes_a_mode(console: Console) -> None:
    assert console.client.get("/console/clusters/lab/mode?mode=act").status_code == 405
    assert console.mode("lab") == "monitor"


def test_switch_needs_the_csrf_token_from_the_page(console: Console) -> None:
    response = console.client.post("/console/clusters/lab/mode", data={"mode": "act", "token": OPERATOR_TOKEN})
    assert response.status_code == 403
    assert "stale" in response.text
    assert console.mode("lab") == "monitor"


def test_switch_from_another_origin_is_refused(console: Console) -> None:
    form = {"mode": "act", "token": OPERATOR_TOKEN, "csrf": console.csrf()}
    for headers in ({"origin": "https://evil.example"}, {"sec-fetch-site": "cross-site"}):
        response = console.client.post("/console/clusters/lab/mode", data=form, headers=headers)
        assert response.status_code == 403
    assert console.mode("lab") == "monitor"


def test_switch_needs_the_operator_token(console: Console) -> None:
    csrf = console.csrf()
    for token in ("", "wrong"):
        response = console.client.post("/console/clusters/lab/mode", data={"mode": "act", "token": token, "csrf": csrf})
        assert response.status_code == 401
        assert "token is missing or wrong" in response.text
    assert console.mode("lab") == "monitor"


def test_switch_with_token_changes_the_mode_and_says_so(console: Console) -> None:
    form = {"mode": "act", "token": OPERATOR_TOKEN, "csrf": console.csrf()}
    response = console.client.post(
        "/console/clusters/lab/mode",
        data=form,
        headers={"origin": "http://127.0.0.1", "sec-fetch-site": "same-origin"},
    )
    assert response.status_code == 303
    assert response.headers["location"].startswith("/console?changed=lab")
    assert console.mode("lab") == "act"
    page = console.client.get(response.headers["location"])
    assert "Cluster lab is now in" in page.text
    assert re.search(r'id="cluster-lab".*?data-mode="act"', page.text, re.S)


def test_switch_rejects_bad_input(console: Console) -> None:
    csrf = console.csrf()
    bad_mode = console.client.post("/console/clusters/lab/mode", data={"mode": "yolo", "token": OPERATOR_TOKEN,
                                                                      "csrf": csrf})  # fmt: skip
    assert bad_mode.status_code == 400
    bad_cluster = console.client.post("/console/clusters/-bad-/mode", data={"mode": "act", "csrf": csrf})
    assert bad_cluster.status_code == 400
    huge = console.client.post("/console/clusters/lab/mode", content=b"x" * 10_000,
                               headers={"content-type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert huge.status_code == 413


def test_without_operator_token_the_loopback_rule_applies(tmp_path: Path) -> None:
    """No token configured: the form has no token field and the API's loopback rule decides."""
    settings = lab_settings(tmp_path / "trainguard.db")
    store = SqliteStore(settings.db_path)
    try:
        with TestClient(
            console_app(settings, store), follow_redirects=False, client=LOOPBACK, base_url="http://127.0.0.1"
        ) as client:
            page = client.get("/console").text
            assert 'name="token"' not in page
            assert "loopback" in page
            csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
            assert csrf
            response = client.post("/console/clusters/lab/mode", data={"mode": "act", "csrf": csrf.group(1)})
            assert response.status_code == 303
            assert client.get("/v1/clusters/lab/mode").json()["mode"] == "act"
    finally:
        store.close()


def test_console_pages_are_fast_enough(console: Console) -> None:
    started = time.perf_counter()
    for path in ("/console", "/console/decisions", "/console/nodes"):
        assert console.client.get(path).status_code == 200
    assert time.perf_counter() - started < 2.0
