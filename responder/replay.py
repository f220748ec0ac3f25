"""Policy replay: what a new configuration would have decided over the stored evidence of past incidents.

Side-effect free by construction: it reads the audit store (alerts, records, reviews) and calls only
the pure stages, ``attribution.attribute`` and ``policy.plan``; no scheduler, no Prometheus, no write.

What it cannot replay, on purpose: Prometheus context (laggards, checkpoint progress) is not stored,
so replay decides from the alerts alone, as a responder without ``prometheus_url`` would; a recorded
decision that used that context may show as changed for that reason (its ``context`` column says so).
The circuit breaker is not replayed either: it depends on the order and time of live actions.

Precision on reviewed decisions: a review judges the recorded action. Where the new policy acts the
same way, the review judges it too; where it would act differently, no review says whether that would
have been right, so it is counted apart (``unjudged``), never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from responder.attribution import attribute
from responder.model import Action, AuditRecord, Kind, Mode
from responder.node_groups import resolve
from responder.policy import plan
from responder.settings import Settings
from responder.store import AuditStore, RecordQuery

ALL = 10_000_000


@dataclass(frozen=True, slots=True)
class ReplayRow:
    id: str
    cluster: str
    workload: str
    attempt: str | None
    time: float
    recorded_action: str
    recorded_nodes: list[str]
    recorded_outcome: str
    new_action: str
    new_nodes: list[str]
    new_reason: str
    review: str | None  # the latest operator verdict: correct, wrong, or none
    context: bool  # the recorded decision had Prometheus context that replay cannot reproduce
    group: str | None = None  # the node group whose policy the new configuration applied (None: the cluster's)

    @property
    def changed(self) -> bool:
        return (self.recorded_action, self.recorded_nodes) != (self.new_action, self.new_nodes)


@dataclass(frozen=True, slots=True)
class Precision:
    reviewed: int  # reviewed decisions that acted (recorded action other than none)
    correct: int  # of the judged, those reviewed correct
    judged: int  # recorded: all reviewed; new policy: those it would act on the same way
    unjudged: int = 0  # reviewed decisions it would act on differently: no review covers them
    dropped_wrong: int = 0  # reviewed wrong, and the new policy would not act: false alarms avoided
    dropped_correct: int = 0  # reviewed correct, and the new policy would not act: recoveries lost

    @property
    def precision(self) -> float | None:
        return self.correct / self.judged if self.judged else None


@dataclass(slots=True)
class ReplayReport:
    rows: list[ReplayRow] = field(default_factory=list)
    recorded: Precision = Precision(0, 0, 0)
    new: Precision = Precision(0, 0, 0)

    @property
    def changed(self) -> list[ReplayRow]:
        return [r for r in self.rows if r.changed]

    def to_json(self) -> dict[str, Any]:
        return {
            "decisions": len(self.rows),
            "changed": [asdict(r) for r in self.changed],
            "precision": {
                "recorded": {**asdict(self.recorded), "precision": self.recorded.precision},
                "new": {**asdict(self.new), "precision": self.new.precision},
            },
        }


def replay(store: AuditStore, settings: Settings, since: float | None = None) -> ReplayReport:
    """Re-decide every decision recorded since ``since`` under ``settings``; nothing is written."""
    history = sorted(store.records(RecordQuery(kind=Kind.DECISION, limit=ALL)), key=lambda r: r.time)
    implicated: dict[tuple[str, str], set[str]] = {}
    report = ReplayReport()
    for record in history:
        key = (record.cluster, record.workload)
        carried = frozenset(implicated.get(key, set()))
        if record.node is None and record.incident_id:
            implicated.setdefault(key, set()).update(record.implicated_nodes)
            if since is None or record.time >= since:
                report.rows.append(_row(store, settings, record, carried))
    report.recorded, report.new = _precision(report.rows)
    return report


def _row(store: AuditStore, settings: Settings, record: AuditRecord, carried: frozenset[str]) -> ReplayRow:
    assert record.incident_id is not None
    # Only the evidence the responder had when it decided: late alerts did not shape the recorded decision.
    alerts = [a for a in store.incident_alerts(record.incident_id) if a.received_at <= record.decided_at]
    verdict = attribute(alerts)
    severities = {a.labels.get("severity", "") for a in alerts} - {""}
    cluster = settings.cluster(record.cluster)
    mode = Mode(store.get_mode(record.cluster) or cluster.mode)
    scope = resolve(cluster, mode, store.group_modes(record.cluster) if cluster.node_groups else {}, alerts)
    chosen = plan(verdict, record.attempt, scope.policy, carried, severities)
    reviews = store.reviews(record.id)
    return ReplayRow(  # which decision (its id, cluster, workload, attempt, time), then what was and would be done
        record.id,
        record.cluster,
        record.workload,
        record.attempt,
        record.time,
        recorded_action=str(record.action),
        recorded_nodes=sorted(record.excluded_nodes),
        recorded_outcome=str(record.outcome),
        new_action=str(chosen.action),
        new_nodes=sorted(chosen.excluded_nodes),
        new_reason=chosen.reason,
        group=scope.group,
        review=str(reviews[-1]["verdict"]) if reviews else None,
        context=_had_context(record),
    )


def _precision(rows: Iterable[ReplayRow]) -> tuple[Precision, Precision]:
    reviewed = [r for r in rows if r.review is not None and r.recorded_action != Action.NONE]
    recorded = Precision(len(reviewed), sum(r.review == "correct" for r in reviewed), len(reviewed))
    same = [r for r in reviewed if not r.changed]
    acting_differently = [r for r in reviewed if r.changed and r.new_action != Action.NONE]
    dropped = [r for r in reviewed if r.changed and r.new_action == Action.NONE]
    new = Precision(
        reviewed=len(reviewed),
        correct=sum(r.review == "correct" for r in same),
        judged=len(same),
        unjudged=len(acting_differently),
        dropped_wrong=sum(r.review == "wrong" for r in dropped),
        dropped_correct=sum(r.review == "correct" for r in dropped),
    )
    return recorded, new


def _had_context(record: AuditRecord) -> bool:
    """Whether the recorded decision saw Prometheus context: its explanation then lacks the "decided from
    the alerts" note that attribution adds when context is unavailable."""
    explanation = record.attribution.get("explanation", [])
    return bool(explanation) and not any("decided from" in line for line in explanation)
