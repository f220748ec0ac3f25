"""The audit records of one incident's decision, built from the parts they share (incident, alerts,
verdict, mode, time) plus each record's own action, reason, exclusions and the breaker's verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from responder.attribution import Verdict
from responder.breaker import BreakerCheck
from responder.model import Action, AuditRecord, Incident, Kind, Mode, Outcome, StoredAlert, new_id


@dataclass(frozen=True, slots=True)
class RecordBuilder:
    """Builds the records of one incident from the parts they share."""

    incident: Incident
    alerts: Sequence[StoredAlert]
    verdict: Verdict
    mode: Mode
    now: float
    node_group: dict[str, Any] = field(default_factory=dict)

    def record(
        self,
        action: Action,
        reason: str,
        excluded: tuple[str, ...],
        safety: BreakerCheck,
        node: str | None = None,
    ) -> AuditRecord:
        inc, verdict = self.incident, self.verdict
        if action == Action.NONE:
            outcome = Outcome.SKIPPED
        elif not safety.allowed:
            outcome, reason = Outcome.SKIPPED, f"{safety.reason} (wanted: {action.value}, because {reason})"
        else:
            outcome = Outcome.PENDING if self.mode in (Mode.ACT, Mode.APPROVE) else Outcome.PLANNED
        return AuditRecord(
            id=new_id("dec"),
            kind=Kind.DECISION,
            time=self.now,
            cluster=inc.cluster,
            workload=inc.workload,
            scheduler=inc.scheduler,
            attempt=inc.attempt or None,
            incident_id=inc.id,
            patterns=list(verdict.patterns),
            evidence=[a.evidence() for a in self.alerts[:200]],
            failure_class=verdict.failure_class,
            implicated_nodes=[node] if node else list(verdict.implicated),
            action=action,
            excluded_nodes=list(excluded),
            mode=self.mode,
            outcome=outcome,
            reason=reason,
            detected_at=min((a.starts_at_ts for a in self.alerts), default=None),
            received_at=min((a.received_at for a in self.alerts), default=None),
            decided_at=self.now,
            node=node,
            attribution={
                "summary": verdict.summary,
                "scores": verdict.scores,
                "explanation": list(verdict.explanation),
                "alerts": len(self.alerts),
            },
            safety={"breaker": safety.reason or "ok", "allowed": safety.allowed, "tripped": safety.tripped},
            node_group=dict(self.node_group),
        )
