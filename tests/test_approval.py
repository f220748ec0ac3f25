"""Approve mode through the HTTP API on a fake clock: waits, approvals, rejections, expiry, auto-approval.

The scheduler is the project's ``RecordingScheduler`` (it records what it was asked); the real Slurm
path of an approved action is the lab demo's (``scripts/lab/demo.py --mode approve``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from responder.approval import ApprovalSettings
from responder.clock import FakeClock
from responder.model import Action
from responder.settings import ClusterSettings
from tests.conftest import Responder
from tests.services import wait_until
from trainguard.lab.payloads import alert, nccl_storm_with_xid, notification


def approving(make_responder: Callable[..., Responder], **approval: Any) -> Responder:
    cluster = ClusterSettings(mode="approve", approval=ApprovalSettings(**approval))
    return make_responder(clock=FakeClock(), clusters={"lab": cluster})


def one_waiting(r: Responder, bad_host: str = "gpu-001", workload: str = "4242") -> dict[str, Any]:
    payload = nccl_storm_with_xid(ranks_per_host=2, hosts=2, bad_host=bad_host, workload=workload)
    assert r.post(payload).status_code == 200
    [decision] = [d for d in r.decide_now() if d["workload"] == workload]
    return decision


def test_a_decision_waits_and_nothing_reaches_the_scheduler(make_responder: Callable[..., Responder]) -> None:
    r = approving(make_responder, timeout_s=600)
    decision = one_waiting(r)
    assert decision["mode"] == "approve"
    assert decision["outcome"] == "awaiting_approval"
    assert decision["action"] == "requeue_excluding"
    assert decision["approval"]["expires_at"] == decision["approval"]["requested_at"] + 600
    r.clock.advance(599)  # type: ignore[attr-defined]
    assert r.engine.expire_due() == []
    assert r.scheduler.requests == []


def test_approval_carries_out_the_action_and_records_who(make_responder: Callable[..., Responder]) -> None:
    r = approving(make_responder)
    decision = one_waiting(r)
    response = r.client.post(f"/v1/decisions/{decision['id']}/approve", json={"by": "alice", "note": "bad GPU"})
    assert response.status_code == 200, response.text
    approval = response.json()["approval"]
    assert (approval["state"], approval["by"], approval["note"]) == ("approved", "alice", "bad GPU")
    assert approval["identity"].startswith("loopback client")
    assert approval["at"] == r.clock.now()
    wait_until(lambda: r.scheduler.requests, 10, what="the approved action reaches the scheduler")
    [request] = r.scheduler.requests
    assert request.action == Action.REQUEUE_EXCLUDING
    assert request.exclude_nodes == ("gpu-001",)
    wait_until(lambda: r.client.get(f"/v1/decisions/{decision['id']}").json()["outcome"] == "done", 10)
    # A second answer is refused and does nothing more.
    again = r.client.post(f"/v1/decisions/{decision['id']}/approve")
    assert again.status_code == 409
    assert len(r.scheduler.requests) == 1


def test_rejection_does_nothing_and_is_recorded(make_responder: Callable[..., Responder]) -> None:
    r = approving(make_responder)
    decision = one_waiting(r)
    response = r.client.post(f"/v1/decisions/{decision['id']}/reject", json={"by": "bob", "note": "known maintenance"})
    assert response.status_code == 200
    stored = r.client.get(f"/v1/decisions/{decision['id']}").json()
    assert stored["outcome"] == "rejected"
    assert stored["approval"]["by"] == "bob"
    assert "known maintenance" in stored["detail"]
    assert r.client.post(f"/v1/decisions/{decision['id']}/approve").status_code == 409
    assert r.scheduler.requests == []


def test_unanswered_decision_expires_and_cannot_be_approved_later(make_responder: Callable[..., Responder]) -> None:
    r = approving(make_responder, timeout_s=300)
    decision = one_waiting(r)
    r.clock.advance(301)  # type: ignore[attr-defined]
    # the app's own loop checks the waits every second and may settle it first: either way, once
    assert [x.id for x in r.engine.expire_due()] in ([decision["id"]], [])
    expired = r.client.get(f"/v1/decisions/{decision['id']}").json()
    assert expired["outcome"] == "expired"
    assert expired["approval"]["state"] == "expired"
    assert "nothing was done" in expired["detail"]
    assert r.engine.expire_due() == []  # settled once only
    late = r.client.post(f"/v1/decisions/{decision['id']}/approve")
    assert late.status_code == 409
    assert "expired" in late.json()["detail"]
    assert r.scheduler.requests == []


def test_an_approval_after_the_deadline_but_before_the_sweep_is_refused(
    make_responder: Callable[..., Responder],
) -> None:
    r = approving(make_responder, timeout_s=60)
    decision = one_waiting(r)
    r.clock.advance(61)  # type: ignore[attr-defined]
    assert r.client.post(f"/v1/decisions/{decision['id']}/approve").status_code == 409
    assert r.client.get(f"/v1/decisions/{decision['id']}").json()["outcome"] == "expired"
    assert r.scheduler.requests == []


def test_low_blast_requeue_is_auto_approved_and_the_rest_waits(make_responder: Callable[..., Responder]) -> None:
    r = approving(make_responder, auto_approve=["requeue_excluding", "drain_node"], auto_max_nodes=1)
    one = one_waiting(r, bad_host="gpu-001", workload="1")
    assert one["outcome"] == "pending"  # no wait: decide_now leaves acting to us, as the loop would
    assert one["approval"]["by"] == "policy"
    [done] = r.engine.resume_pending()
    assert done.outcome == "done"
    assert len(r.scheduler.requests) == 1
    # Two XIDs on two hosts: two nodes excluded, above auto_max_nodes: it waits.
    xids = [alert("TrainguardGpuXid", "infra_gpu", workload="2", host=h, pattern="xid_79_fallen_off_bus")
            for h in ("gpu-005", "gpu-006")]  # fmt: skip
    assert r.post(notification(xids)).status_code == 200
    [two] = [d for d in r.decide_now() if d["workload"] == "2"]
    assert len(two["excluded_nodes"]) == 2
    assert two["outcome"] == "awaiting_approval"
    assert len(r.scheduler.requests) == 1


def test_approval_needs_the_operator_token_when_one_is_set(make_responder: Callable[..., Responder]) -> None:
    cluster = ClusterSettings(mode="approve")
    r = make_responder(clock=FakeClock(), clusters={"lab": cluster}, operator_token="s3cret")
    decision = one_waiting(r)
    assert r.client.post(f"/v1/decisions/{decision['id']}/approve").status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert r.client.post(f"/v1/decisions/{decision['id']}/approve", headers=wrong).status_code == 401
    assert r.client.get(f"/v1/decisions/{decision['id']}").json()["outcome"] == "awaiting_approval"
    ok = r.client.post(f"/v1/decisions/{decision['id']}/approve", headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    assert ok.json()["approval"]["identity"] == "operator token"


def test_bad_answers_are_clear_errors(make_responder: Callable[..., Responder]) -> None:
    r = approving(make_responder)
    decision = one_waiting(r)
    assert r.client.post("/v1/decisions/dec_nope/approve").status_code == 404
    bad = r.client.post(f"/v1/decisions/{decision['id']}/approve", json={"who": "x"})
    assert bad.status_code == 400
    assert r.client.get(f"/v1/decisions/{decision['id']}").json()["outcome"] == "awaiting_approval"


def test_monitor_mode_decisions_cannot_be_approved(make_responder: Callable[..., Responder]) -> None:
    r = make_responder(clock=FakeClock())
    decision = one_waiting(r)
    assert decision["outcome"] == "planned"
    assert r.client.post(f"/v1/decisions/{decision['id']}/approve").status_code == 409
    assert r.scheduler.requests == []


def test_lab_report_shows_the_approval_wait_apart_from_time_to_productive() -> None:
    from trainguard.lab.faults import TrialResult  # noqa: PLC0415 - the lab harness, only here
    from trainguard.lab.report import trial_markdown  # noqa: PLC0415

    waited = trial_markdown(TrialResult("xid", "approve", "7", "n2", productive_s=42.0, approval_s=6.5), None, None)
    assert "| of which the approval wait (decision → operator's approval) | 6.50 |" in waited
    assert "| time to productive without the approval wait | 35.50 |" in waited
    acted = trial_markdown(TrialResult("xid", "act", "7", "n2", productive_s=42.0), None, None)
    assert "approval wait" not in acted
