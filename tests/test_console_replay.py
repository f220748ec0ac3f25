"""The console's replay page (responder/console_replay.py) through Starlette's TestClient.

The history is the one of tests/test_replay.py, built by the real engine on a fake clock: six decisions
in monitor mode, five reviewed. A candidate that lowers ``max_attempts`` from 5 to 3, pasted into the
page, flips exactly the decisions of attempts 2 and 3, and the page shows recorded precision 0.60 and
new 0.67 (2 of 3 judged). The page writes nothing and calls no scheduler; its POST passes the console's
origin and CSRF checks, and the read token where one is set.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from responder.breaker import BreakerSettings
from responder.clock import FakeClock
from responder.settings import ClusterSettings
from responder.store import RecordQuery
from tests.conftest import Responder
from tests.test_replay import HISTORY
from trainguard.lab.payloads import alert, notification

READ_TOKEN = "read-secret"


def with_history(make_responder: Callable[..., Responder], **settings: Any) -> tuple[Responder, dict[str, str]]:
    clock = FakeClock()
    scheduler_cluster = ClusterSettings(scheduler={"kind": "slurm", "slurm_conf": "/etc/slurm/secret-path.conf"})
    r = make_responder(clock=clock, clusters={"lab": scheduler_cluster}, correlation_window_s=1.0,
                       breaker=BreakerSettings(correlated_workloads=10), **settings)  # fmt: skip
    ids = {}
    for workload, attempt, host, category, pattern, review in HISTORY:
        fault = alert("TrainguardFault", category, workload=workload, attempt=attempt, host=host, pattern=pattern,
                      starts_at=clock.now())  # fmt: skip
        assert r.post(notification([fault]), headers=_auth(settings)).status_code == 200
        clock.advance(2)
        r.engine.decide_due()  # or the app's loop did first: either way it is committed once this returns
        [record] = [x for x in r.store.records(RecordQuery(workload=workload, kind="decision")) if x.attempt == attempt]
        if review:
            r.store.add_review(record.id, review, "", clock.now())
        ids[f"{workload}#{attempt}"] = record.id
        clock.advance(3600)
    return r, ids


def _auth(settings: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {READ_TOKEN}"} if settings.get("read_token") else {}


def form(r: Responder, headers: dict[str, str] | None = None) -> tuple[str, str]:
    page = r.client.get("/console/replay", headers=headers or {})
    assert page.status_code == 200, page.text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    text = re.search(r'<textarea[^>]*name="config"[^>]*>(.*?)</textarea>', page.text, re.S)
    assert csrf
    assert text
    return csrf.group(1), text.group(1).replace("&quot;", '"').replace("&#x27;", "'")


def test_the_page_is_prefilled_with_the_running_policy_and_nothing_else(
    make_responder: Callable[..., Responder],
) -> None:
    r, _ = with_history(make_responder)
    _, text = form(r)
    running = yaml.safe_load(text)
    assert running["clusters"]["lab"]["policy"]["max_attempts"] == 5
    assert set(running["clusters"]["lab"]) == {"policy"}
    assert "secret-path" not in text
    assert "slurm" not in text


def test_a_lower_attempt_cap_flips_exactly_attempts_two_and_three(make_responder: Callable[..., Responder]) -> None:
    r, ids = with_history(make_responder)
    csrf, text = form(r)
    before = [x.to_json() for x in r.store.records(RecordQuery(limit=100))]
    candidate = text.replace("max_attempts: 5", "max_attempts: 3")
    assert candidate != text
    response = r.client.post("/console/replay", data={"csrf": csrf, "config": candidate, "since": ""})
    assert response.status_code == 200, response.text
    page = response.text
    assert "6 decisions replayed, 2 would change" in page
    changed = re.findall(r'<tr class="changed">(.*?)</tr>', page, re.S)
    assert sorted(re.search(r"(dec_[0-9a-f]+)</a>", row).group(1) for row in changed) == sorted(  # type: ignore[union-attr]
        [ids["102#2"], ids["103#3"]]
    )
    for row in changed:
        assert "requeue_excluding [gpu-00" in row
        assert "<strong>stop</strong>" in row
        assert "cap is 3 attempts" in row
    recorded = re.search(r'id="precision-recorded">.*?class="num precision">([^<]+)<', page, re.S)
    new = re.search(r'id="precision-new">.*?class="num precision">([^<]+)<', page, re.S)
    assert recorded
    assert new
    assert (recorded.group(1), new.group(1)) == ("0.60", "0.67")
    assert "2 would act differently" in page
    # No side effects: the store and the scheduler are as they were, the running policy unchanged.
    assert [x.to_json() for x in r.store.records(RecordQuery(limit=100))] == before
    assert r.scheduler.requests == []
    assert r.engine.settings.cluster("lab").policy.max_attempts == 5


def test_a_partial_candidate_keeps_the_rest_and_since_limits(make_responder: Callable[..., Responder]) -> None:
    r, _ = with_history(make_responder)
    csrf, _ = form(r)
    response = r.client.post(
        "/console/replay",
        data={"csrf": csrf, "since": "3h", "config": "clusters: {lab: {policy: {infra_with_nodes: none}}}"},
    )
    assert response.status_code == 200, response.text
    # Only the last two decisions (3600 s apart, the last 3600 s ago) fall within 3 h;
    # 109#0 (infra, no review) flips to none.
    assert "2 decisions replayed since 3h, 1 would change" in response.text
    assert len(re.findall(r'<tr class="changed">', response.text)) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters: {lab: {policy: {max_attempts: 0}}}", "clusters.lab.policy.max_attempts"),
        ("clusters: {lab: {scheduler: {kind: slurm}}}", "clusters.lab.scheduler: Extra inputs are not permitted"),
        ("db_path: /tmp/x", "db_path: Extra inputs are not permitted"),
        ("clusters: {lab: {node_groups: [{name: c}]}}", "clusters.lab.node_groups.0"),
        ("clusters: {'bad name': {}}", "clusters.bad name"),
        ("a: &x [1]\nb: *x", "aliases"),
        ("clusters: [", "not valid YAML"),
    ],
)
def test_bad_candidates_are_refused_with_the_key_path(
    make_responder: Callable[..., Responder], text: str, message: str
) -> None:
    r, _ = with_history(make_responder)
    csrf, _ = form(r)
    response = r.client.post("/console/replay", data={"csrf": csrf, "config": text})
    assert response.status_code == 400
    assert message in response.text.replace("&#x27;", "'")


def test_the_post_passes_the_console_write_checks(make_responder: Callable[..., Responder]) -> None:
    r, _ = with_history(make_responder)
    csrf, text = form(r)
    assert r.client.post("/console/replay", data={"csrf": "0" * 64, "config": text}).status_code == 403
    assert r.client.post("/console/replay", data={"config": text}).status_code == 403
    foreign = r.client.post("/console/replay", data={"csrf": csrf, "config": text},
                            headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})  # fmt: skip
    assert foreign.status_code == 403
    huge = r.client.post("/console/replay", data={"csrf": csrf, "config": "#" * (300 * 1024)})
    assert huge.status_code == 413


def test_with_a_read_token_the_post_needs_it_too(make_responder: Callable[..., Responder]) -> None:
    r, _ = with_history(make_responder, read_token=READ_TOKEN)
    auth = {"Authorization": f"Bearer {READ_TOKEN}"}
    assert r.client.get("/console/replay").status_code == 401
    csrf, text = form(r, auth)
    assert r.client.post("/console/replay", data={"csrf": csrf, "config": text}).status_code == 401
    ok = r.client.post("/console/replay", data={"csrf": csrf, "config": text}, headers=auth)
    assert ok.status_code == 200
    assert "6 decisions replayed, 0 would change" in ok.text
