"""A scheduler that records what it is asked and touches nothing.

Tests use it to assert exactly which actions the engine asked for, and ``{kind: recording}`` gives a
demo cluster whose actions are recorded as done. (Monitor mode needs no such stand-in: the engine
calls no scheduler at all there.)

With ``journal`` it is a durable fake that processes share (the replica failover test, ``bench/ha.py``):
each action is appended to that file as one fsynced JSON line, and, like the real adapters, it is
idempotent per attempt: an action already in the journal is answered ``done`` and not written again.
Each request, repeated or not, is counted in ``<journal>.asked``. ``verify_s`` stands for a real
adapter's verification after the command: a pause after the write, before the answer (the window in
which a killed leader leaves a ``pending`` record behind an action that was already done).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from responder.schedulers.base import ActionRequest, ActionResult, WorkloadObservation, WorkloadState


class RecordingSettings(BaseModel):
    """``{kind: recording}``: a cluster whose actions are recorded as done and touch nothing (demos, tests)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["recording"] = "recording"
    journal: Path | None = Field(None, description="append each action here (fsynced, once per attempt)")
    verify_s: float = Field(0.0, ge=0, le=60, description="pause after each journaled action (tests)")


class RecordingScheduler:
    name = "recording"

    def __init__(
        self,
        outcome: str = "planned",
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        journal: Path | None = None,
        verify_s: float = 0.0,
    ) -> None:
        self._outcome = outcome
        self._now = now
        self._lock = threading.Lock()
        self.requests: list[ActionRequest] = []
        self.journal = journal
        self.verify_s = verify_s

    def act(self, request: ActionRequest) -> ActionResult:
        with self._lock:
            self.requests.append(request)
        if self.journal is not None:
            return self._journaled(self.journal, request)
        if self._outcome == "done":
            return ActionResult("done", "recorded (test scheduler)", True, self._now(), request.exclude_nodes)
        return ActionResult(
            "planned", "monitor mode: recorded, scheduler untouched", False, None, request.exclude_nodes
        )

    def _journaled(self, journal: Path, request: ActionRequest) -> ActionResult:
        key = [request.cluster, request.workload, request.attempt, str(request.action), request.node or ""]
        with journal.with_name(journal.name + ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one writer at a time across processes
            _append(journal.with_name(journal.name + ".asked"), {"key": key, "time": time.time()})
            done = journal.exists() and any(json.loads(line)["key"] == key for line in journal.read_text().splitlines())
            if not done:
                _append(journal, {"key": key, "incident_id": request.incident_id, "time": time.time(),
                                  "pid": os.getpid()})  # fmt: skip
        time.sleep(self.verify_s)
        detail = "already done for this attempt (journal)" if done else "journaled (test scheduler)"
        return ActionResult("done", detail, True, self._now(), request.exclude_nodes)

    def observe(self, cluster: str, workload: str) -> WorkloadObservation:
        return WorkloadObservation(workload=workload, state=WorkloadState.UNKNOWN, reason="recording scheduler")


def _append(path: Path, entry: dict[str, object]) -> None:
    with path.open("a") as out:
        out.write(json.dumps(entry) + "\n")
        out.flush()
        os.fsync(out.fileno())
