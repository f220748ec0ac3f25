"""The console's Replay page in a real headless Chromium (Debian's ``chromium``): the browser's own form post
(with its ``Origin`` and ``Sec-Fetch-Site``) passes the guard and the CSRF check, the page shows the changed
decision, and nothing is written.

Follows tests/test_console_browser.py (its DevTools ``Browser`` and its ``LiveResponder``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.services import wait_until
from tests.test_console_browser import Browser, LiveResponder, browser  # noqa: F401 - the fixture
from trainguard.lab.payloads import nccl_storm_with_xid


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveResponder]:
    responder = LiveResponder(tmp_path_factory.mktemp("replay") / "trainguard.db")
    try:
        yield responder
    finally:
        responder.stop()


def test_a_candidate_replayed_in_the_browser_shows_the_change_and_writes_nothing(
    live: LiveResponder,
    browser: Browser,  # noqa: F811
) -> None:
    assert live.http.post("/v1/alerts", json=nccl_storm_with_xid(1, 2, workload="7101")).status_code == 200
    found = wait_until(lambda: [d for d in live.decisions() if d["workload"] == "7101"], 10, what="a decision")
    assert isinstance(found, list)
    [decision] = found
    assert (decision["action"], decision["outcome"]) == ("requeue_excluding", "planned")
    before = live.decisions()

    browser.open(f"{live.url}/console/replay")
    assert "Candidate policy" in browser.text()
    assert "infra_with_nodes: requeue_excluding" in str(browser.evaluate("document.querySelector('textarea').value"))
    candidate = "clusters: {lab: {policy: {infra_with_nodes: stop}}}"
    browser.evaluate(f"document.querySelector('textarea[name=config]').value = {json.dumps(candidate)}")
    browser.click("form.replay button[type=submit]")
    wait_until(lambda: "would change" in browser.text(), 15, what="the replay report")
    text = browser.text()
    assert "1 decisions replayed since 7d, 1 would change" in text  # the form comes with since 7d
    assert decision["id"] in text
    assert "requeue_excluding [gpu-002] (planned)" in text
    assert str(browser.evaluate("document.querySelector('tr.changed strong').textContent")) == "stop"
    assert live.decisions() == before
    assert live.mode("lab") == "monitor"
