"""The durable fake scheduler of the failover test: one journal line per attempt's action, across processes."""

from __future__ import annotations

import json
from pathlib import Path

from responder.model import Action
from responder.schedulers.base import ActionRequest
from responder.schedulers.recording import RecordingScheduler


def _request(workload: str, attempt: str = "0") -> ActionRequest:
    return ActionRequest(action=Action.REQUEUE, cluster="lab", workload=workload, incident_id=f"inc-{workload}",
                         reason="test", attempt=attempt)  # fmt: skip


def test_an_action_is_journaled_once_per_attempt_whoever_asks(tmp_path: Path) -> None:
    journal = tmp_path / "actions.jsonl"
    first, second = RecordingScheduler("done", journal=journal), RecordingScheduler("done", journal=journal)
    assert first.act(_request("7")).detail == "journaled (test scheduler)"
    again = second.act(_request("7"))  # another replica, after a takeover
    assert (again.outcome, again.detail) == ("done", "already done for this attempt (journal)")
    second.act(_request("7", attempt="1"))  # the next attempt is another action
    keys = [json.loads(line)["key"] for line in journal.read_text().splitlines()]
    assert keys == [["lab", "7", "0", "requeue", ""], ["lab", "7", "1", "requeue", ""]]
    assert len(journal.with_name("actions.jsonl.asked").read_text().splitlines()) == 3
