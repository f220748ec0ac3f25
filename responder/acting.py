"""One decided action: the request the scheduler gets, the outcome written back, and when to try again.

A scheduler that cannot be asked while acting (slurmctld killed or restarting, an API server that does
not answer) leaves the action's effect unknown. Writing it ``failed`` would lose the remediation for
good: the incident is closed and no alert comes again for it. So the adapter says ``retry`` and the
record stays ``pending``; the decision loop tries again after a growing pause (``RETRY_PAUSE_S``
doubling up to ``MAX_RETRY_PAUSE_S``) until ``action_retry_s`` after the decision, and only then writes
it ``failed``. Trying again is safe because adapters are idempotent per attempt (``schedulers/base.py``):
a job that an earlier try already requeued is not requeued again. A ``pending`` record also survives a
restart of the responder, which resumes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from responder.clock import rfc3339
from responder.model import Action, AuditRecord, Outcome
from responder.schedulers.base import ActionRequest, ActionResult

RETRY_PAUSE_S = 1.0
MAX_RETRY_PAUSE_S = 30.0


def request_for(record: AuditRecord) -> ActionRequest:
    """What the scheduler is asked to do for a ``pending`` record."""
    return ActionRequest(
        action=Action(record.action),
        cluster=record.cluster,
        workload=record.workload,
        incident_id=record.incident_id or record.id,
        reason=record.reason,
        attempt=record.attempt,
        exclude_nodes=tuple(record.excluded_nodes),
        node=record.node,
    )


def keep_pending(record: AuditRecord, result: ActionResult, now: float, retry_s: float) -> bool:
    """Whether ``record`` stays ``pending`` to be tried again (its detail then says why and until when)."""
    until = record.decided_at + retry_s
    if not result.retry or now >= until:
        return False
    record.detail = f"scheduler unreachable; trying again until {rfc3339(until)}: {result.detail}"[:1000]
    return True


def apply(record: AuditRecord, result: ActionResult, now: float) -> None:
    """Write the scheduler's final answer into ``record``."""
    record.outcome = Outcome.DONE if result.outcome == "planned" else Outcome(result.outcome)
    record.detail = result.detail
    record.verified = result.verified
    record.acted_at = _ts(result.acted_at) or now
    if result.excluded_nodes or record.action == Action.REQUEUE_EXCLUDING:
        record.excluded_nodes = list(result.excluded_nodes)


def pauses() -> Iterator[float]:
    """The pauses between tries of one action: 1 s, 2 s, 4 s ... then every ``MAX_RETRY_PAUSE_S``."""
    pause = RETRY_PAUSE_S
    while True:
        yield pause
        pause = min(MAX_RETRY_PAUSE_S, pause * 2)


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None
