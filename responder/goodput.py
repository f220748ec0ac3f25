"""Goodput accounting: what an incident cost, and the effective-training-time ratio (ETTR).

An incident costs the wall time from the fault until training is productive again, plus the work
done since the last checkpoint that the restart throws away (steps x step time), and the attempts it
used. ETTR over a span is the share of that span spent on training that was kept.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass


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
