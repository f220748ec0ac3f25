"""A scheduler that records what it is asked and touches nothing.

Tests use it to assert exactly which actions the engine asked for, and ``{kind: recording}`` gives a
demo cluster whose actions are recorded as done. (Monitor mode needs no such stand-in: the engine
calls no scheduler at all there.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from responder.schedulers.base import ActionRequest, ActionResult, WorkloadObservation, WorkloadState


class RecordingSettings(BaseModel):
    """``{kind: recording}``: a cluster whose actions are recorded as done and touch nothing (demos, tests)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["recording"] = "recording"


class RecordingScheduler:
    name = "recording"

    def __init__(self, outcome: str = "planned", now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._outcome = outcome
        self._now = now
        self._lock = threading.Lock()
        self.requests: list[ActionRequest] = []

    def act(self, request: ActionRequest) -> ActionResult:
        with self._lock:
            self.requests.append(request)
        if self._outcome == "done":
            return ActionResult("done", "recorded (test scheduler)", True, self._now(), request.exclude_nodes)
        return ActionResult(
            "planned", "monitor mode: recorded, scheduler untouched", False, None, request.exclude_nodes
        )

    def observe(self, cluster: str, workload: str) -> WorkloadObservation:
        return WorkloadObservation(workload=workload, state=WorkloadState.UNKNOWN, reason="recording scheduler")
