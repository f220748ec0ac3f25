"""Approve mode's console buttons in a real headless Chromium (Debian's ``chromium``), with the guards.

Follows tests/test_console_browser.py (its DevTools ``Browser`` and its ``LiveResponder``); the cluster
is switched to approve mode through the API, then a fault makes a decision wait.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.services import wait_until
from tests.test_console import OPERATOR_TOKEN
from tests.test_console_browser import Browser, LiveResponder, browser  # noqa: F401 - the fixture
from trainguard.lab.payloads import nccl_storm_with_xid

AUTH = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveResponder]:
    responder = LiveResponder(tmp_path_factory.mktemp("approve") / "trainguard.db")
    # Three workloads fail here within a minute: lift the correlated-failure trip, which is not under test.
    responder.settings.breaker.correlated_workloads = 10
    try:
        assert responder.http.put("/v1/clusters/lab/mode", json={"mode": "approve"}, headers=AUTH).status_code == 200
        yield responder
    finally:
        responder.stop()


def waiting(live: LiveResponder, workload: str) -> dict[str, Any]:
    assert live.http.post("/v1/alerts", json=nccl_storm_with_xid(1, 2, workload=workload)).status_code == 200
    found = wait_until(
        lambda: [d for d in live.decisions() if d["workload"] == workload and d["outcome"] == "awaiting_approval"],
        10, what="a waiting decision",
    )  # fmt: skip
    assert isinstance(found, list)
    return dict(found[0])


def outcome(live: LiveResponder, record_id: str) -> str:
    return str(live.http.get(f"/v1/decisions/{record_id}").json()["outcome"])


def test_approve_through_the_page_needs_the_token_and_records_who(live: LiveResponder, browser: Browser) -> None:  # noqa: F811
    record = waiting(live, "5101")
    page = f"{live.url}/console/decisions/{record['id']}"
    browser.open(page)
    assert "Waiting for approval" in browser.text()
    browser.type("form.approval input[name=token]", "not-the-token")
    browser.click("form.approval button[value=approve]")
    wait_until(lambda: "Not answered" in browser.text(), 10, what="the refusal page")
    assert "token is missing or wrong" in browser.text()
    assert outcome(live, record["id"]) == "awaiting_approval"

    browser.open(page)
    browser.type("form.approval input[name=token]", OPERATOR_TOKEN)
    browser.type("form.approval input[name=by]", "alice")
    browser.click("form.approval button[value=approve]")
    wait_until(lambda: "answered=approved" in browser.location(), 10, what="the redirect after approval")
    assert "Waiting for approval" not in browser.text()
    wait_until(lambda: outcome(live, record["id"]) == "done", 10, what="the approved action carried out")
    approval = live.http.get(f"/v1/decisions/{record['id']}").json()["approval"]
    assert (approval["state"], approval["by"], approval["identity"]) == (
        "approved",
        "alice",
        "operator token (console)",
    )


def test_reject_through_the_page(live: LiveResponder, browser: Browser) -> None:  # noqa: F811
    record = waiting(live, "5102")
    browser.open(f"{live.url}/console/decisions/{record['id']}")
    browser.type("form.approval input[name=token]", OPERATOR_TOKEN)
    browser.click("form.approval button[value=reject]")
    wait_until(lambda: "answered=rejected" in browser.location(), 10, what="the redirect after rejection")
    assert outcome(live, record["id"]) == "rejected"


def test_forms_from_another_origin_or_without_the_csrf_token_change_nothing(live: LiveResponder) -> None:
    record = waiting(live, "5103")
    target = f"{live.url}/console/decisions/{record['id']}/answer"
    page = httpx.get(f"{live.url}/console/decisions/{record['id']}").text
    csrf = page.split('name="csrf" value="')[1].split('"')[0]
    form = {"csrf": csrf, "token": OPERATOR_TOKEN, "answer": "approve"}
    cross = httpx.post(target, data=form, headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403
    assert "another site" in cross.text or "another origin" in cross.text  # the console's check or the guard's
    site = httpx.post(target, data=form, headers={"Sec-Fetch-Site": "cross-site"})
    assert site.status_code == 403
    stale = httpx.post(target, data={**form, "csrf": "forged"})
    assert stale.status_code == 403
    assert "stale" in stale.text
    assert outcome(live, record["id"]) == "awaiting_approval"
    ok = httpx.post(target, data=form, headers={"Origin": live.url})
    assert ok.status_code == 303
    assert outcome(live, record["id"]) in {"pending", "done"}
