"""Goodput accounting: what an incident cost, and the effective-training-time ratio (ETTR).

An incident costs the wall time from the fault until training is productive again, plus the work
done since the last checkpoint that the restart throws away (steps x step time), and the attempts it
used. ETTR over a span is the share of that span spent on training that was kept.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from responder.model import AuditRecord

RESTARTS = frozenset({"requeue", "requeue_excluding"})


@dataclass(frozen=True, slots=True)
class Goodput:
    """One incident's cost; ``time_lost_s`` None while training is not productive again."""

    cause: str
    time_lost_s: float | None  # fault -> first step of the next attempt
    work_lost_s: float | None  # steps since the last checkpoint x step time
    attempts: int

    @property
    def lost_s(self) -> float | None:
        """Both losses together; None when the time lost is not known yet."""
        if self.time_lost_s is None:
            return None
        return self.time_lost_s + (self.work_lost_s or 0.0)


def incident(
    cause: str, fault_ts: float, productive_ts: float | None, step_at_fault: float | None,
    checkpoint_step: float | None, step_s: float | None, attempts: int = 1,
) -> Goodput:  # fmt: skip
    """The cost of one incident; work lost is unknown without the step, the checkpoint or the step time."""
    if productive_ts is not None and productive_ts < fault_ts:
        raise ValueError(f"productive again at {productive_ts} before the fault at {fault_ts}")
    if attempts < 1:
        raise ValueError("an incident uses at least one attempt")
    time_lost = None if productive_ts is None else productive_ts - fault_ts
    work_lost = None
    if step_at_fault is not None and step_s is not None:
        work_lost = max(0.0, step_at_fault - (checkpoint_step or 0.0)) * step_s
    return Goodput(cause, time_lost, work_lost, attempts)


def ettr(span_s: float, lost: Iterable[Goodput]) -> float | None:
    """Effective-training-time ratio over ``span_s``: 1 - (time and work lost) / span; None if unknown."""
    if span_s <= 0:
        raise ValueError("ETTR needs a positive span")
    total = 0.0
    for g in lost:
        if g.lost_s is None:
            return None
        total += g.lost_s
    return max(0.0, 1.0 - total / span_s)


def lost_by_cause(items: Iterable[Goodput]) -> dict[str, float]:
    """Seconds of goodput lost per cause (incidents not productive again yet are left out)."""
    out: dict[str, float] = defaultdict(float)
    for g in items:
        if g.lost_s is not None:
            out[g.cause] += g.lost_s
    return dict(sorted(out.items()))


def section(steps: Sequence[float], step_durations: Sequence[float], checkpoint_step: float | None) -> dict[str, Any]:
    """The record's ``goodput`` part at decision time: where training was, and what a restart throws away."""
    step = max(steps, default=None)
    step_s = median(step_durations) if step_durations else None
    work = None if step is None or step_s is None else max(0.0, step - (checkpoint_step or 0.0)) * step_s
    return {"step": step, "checkpoint_step": checkpoint_step, "step_s": step_s, "work_lost_s": work}


def from_record(record: AuditRecord) -> Goodput | None:
    """A restart decision's cost as the responder sees it: fault (first alert's start) -> restart ordered
    (verified in act mode, decided in monitor mode), plus the work since the checkpoint; None otherwise."""
    if str(record.action) not in RESTARTS or record.detected_at is None:
        return None
    restarted = record.acted_at or record.decided_at
    part: Mapping[str, Any] = record.attribution.get("goodput") or {}
    work = part.get("work_lost_s")
    cause = record.failure_class if not record.patterns else record.patterns[0]
    return Goodput(str(cause), max(0.0, restarted - record.detected_at), work, 1)


@dataclass(frozen=True, slots=True)
class Summary:
    """Per workload or cluster: incidents, attempts, time lost, ETTR since the first fault."""

    name: str
    incidents: int
    lost_s: float
    ettr: float | None
    by_cause: dict[str, float]


def summarise(name: str, records: Iterable[AuditRecord], now: float) -> Summary | None:
    costs = [(r, g) for r in records if (g := from_record(r)) is not None]
    if not costs:
        return None
    first = min(r.detected_at or r.decided_at for r, _ in costs)
    items = [g for _, g in costs]
    span = now - first
    return Summary(name, len(items), sum(g.lost_s or 0.0 for g in items), ettr(span, items) if span > 0 else None,
                   lost_by_cause(items))  # fmt: skip
