"""Turn a restart into an experiment when the verdict names no node (``responder.localize`` does the maths).

The belief is rebuilt from the audit trail at every decision, never kept in memory: each earlier record
of the workload that carries a ``localization`` section says which nodes that attempt ran on and that it
failed. So a restart of the responder loses nothing, and the record explains every step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from responder import localize
from responder.attribution import Verdict
from responder.localize import LocalizeSettings
from responder.model import Action, AuditRecord, FailureClass, Mode, Outcome, new_id
from responder.policy import Plan

HISTORY = 50  # most earlier records of one workload read back
TOP = 5  # suspects listed in the record


@dataclass(frozen=True, slots=True)
class Experiment:
    plan: Plan
    blamed: tuple[str, ...]  # nodes whose posterior reached blame_at: implicated from now on
    section: dict[str, Any]  # the record's attribution["localization"]


def applies(verdict: Verdict, chosen: Plan, settings: LocalizeSettings) -> bool:
    """Only where evidence names no node and the policy restarts anyway: clear evidence keeps its path."""
    return (
        settings.enabled
        and not verdict.implicated
        and verdict.failure_class in (FailureClass.INFRA, FailureClass.UNKNOWN)
        and chosen.action in (Action.REQUEUE, Action.REQUEUE_EXCLUDING)
    )


def allocation(verdict: Verdict, hosts: Collection[str], observed: Collection[str]) -> tuple[str, ...]:
    """The nodes this attempt ran on: the scheduler's view when there is one, else every host seen."""
    return tuple(sorted(set(observed) or (set(hosts) | set(verdict.scores))))


def design(
    verdict: Verdict, chosen: Plan, ran_on: Sequence[str], history: Sequence[AuditRecord],
    carried: Collection[str], settings: LocalizeSettings, capacity: int | None = None,
) -> Experiment | None:  # fmt: skip
    """The next attempt's exclusions: earlier ones kept, plus the split; the waiting note before enough failures."""
    runs = [*_runs(history), (list(ran_on), True)]
    failures = sum(failed for _, failed in runs)
    universe = sorted({n for run, _ in runs for n in run} | set(carried))
    if failures < settings.after_failures or len(universe) < 2:  # one node: nothing to split
        waiting = f"failure {failures} without a named node; splitting starts at {settings.after_failures}"
        return Experiment(chosen, (), {"ran_on": list(ran_on), "failed": True, "steps": [waiting]})
    named = {h for h, s in verdict.scores.items() if s > 0}
    belief = _belief(runs, universe, named, settings)
    kept = [n for n in chosen.excluded_nodes if n not in belief.blamed]
    split, section = _next(belief, universe, kept, settings, capacity)
    section = {"ran_on": list(ran_on), "failed": True, "attempts_failed": failures, **section}
    if belief.blamed:
        reason = f"{chosen.reason}; localized by restarts: {', '.join(belief.blamed)} excluded for good"
    else:
        reason = f"{chosen.reason}; experiment: {split.reason}"
    excluded = tuple(dict.fromkeys([*kept, *split.excluded]))
    action = Action.REQUEUE_EXCLUDING if excluded else Action.REQUEUE
    return Experiment(Plan(action, reason, excluded), belief.blamed, section)


def may_have_run_clean(latest: AuditRecord, now: float, settings: LocalizeSettings) -> bool:
    """Whether ``latest`` is a restart-as-experiment that may have run clean by now. Cheap: the loop asks
    it of every workload's newest decision before reading that workload's history for ``clean_run``."""
    started = max(latest.acted_at or 0.0, latest.decided_at)
    if not _section(latest).get("split") or latest.action != Action.REQUEUE_EXCLUDING:
        return False
    # only a restart that happened can run clean (never a planned one)
    return latest.outcome == Outcome.DONE and now - started >= settings.clean_after_s


def clean_run(
    latest: AuditRecord, history: Sequence[AuditRecord], now: float, settings: LocalizeSettings,
    capacity: int | None = None,
) -> Experiment | None:  # fmt: skip
    """The follow-up of an experiment that has run ``clean_after_s`` without failing, or None.

    ``latest`` is the workload's newest decision. The clean run is evidence like a failure; with
    ``probe`` and no node blamed yet, the follow-up restarts at once with the next split.
    """
    if not may_have_run_clean(latest, now, settings):
        return None
    found = _section(latest)
    started = max(latest.acted_at or 0.0, latest.decided_at)
    runs = _runs(history)
    universe = sorted({n for run, _ in runs for n in run})
    running = [n for n in universe if n not in latest.excluded_nodes]
    runs.append((running, False))
    belief = _belief(runs, universe, set(), settings)
    kept = [n for n in latest.excluded_nodes if n not in belief.blamed and n not in found.get("split", [])]
    split, section = _next(belief, universe, kept, settings, capacity)
    clean = f"ran clean for {now - started:.0f}s without {', '.join(latest.excluded_nodes)}"
    section = {"ran_on": running, "failed": False, **section, "steps": [clean, *section["steps"]]}
    if belief.blamed or not settings.probe:
        if not belief.blamed:
            section["split"] = []  # no restart: the running attempt keeps its exclusions
        why = f"localized by restarts: {', '.join(belief.blamed)}" if belief.blamed else "no restart (probe off)"
        return Experiment(Plan(Action.NONE, f"{clean}; {why}"), belief.blamed, section)
    excluded = tuple(dict.fromkeys([*kept, *split.excluded]))
    return Experiment(Plan(Action.REQUEUE_EXCLUDING, f"{clean}; probe: {split.reason}", excluded), (), section)


def follow_up(
    latest: AuditRecord, follow: Experiment, mode: Mode, now: float, allowed: bool, refused: str | None
) -> AuditRecord:
    """The record of a clean run's follow-up; it concerns the attempt that ran clean."""
    action, reason = follow.plan.action, follow.plan.reason
    if action == Action.NONE:
        outcome = Outcome.SKIPPED
    elif not allowed:
        outcome, reason = Outcome.SKIPPED, f"{refused} (wanted: {action.value}, because {reason})"
    else:
        outcome = Outcome.PENDING if mode == Mode.ACT else Outcome.PLANNED
    attempt = str(int(latest.attempt) + 1) if latest.attempt and latest.attempt.isdigit() else latest.attempt
    attribution = {"summary": "experiment ran clean", "localization": {**follow.section, "after": latest.id}}
    return dataclasses.replace(
        latest, id=new_id("dec"), time=now, attempt=attempt, incident_id=None, patterns=[], evidence=[], action=action,
        implicated_nodes=list(follow.blamed), excluded_nodes=list(follow.plan.excluded_nodes), mode=mode,
        outcome=outcome, reason=reason, detected_at=None, received_at=None, decided_at=now, acted_at=None,
        node=None, attribution=attribution, safety={"breaker": refused or "ok", "allowed": allowed}, detail="",
        verified=False, actor="responder",
    )  # fmt: skip


def clean_nodes(records: Iterable[AuditRecord]) -> list[tuple[str, float]]:
    """``(node, when)`` for every node of every experiment that ran clean (node suspicion goes down)."""
    out: list[tuple[str, float]] = []
    for record in records:
        found = _section(record)
        if found.get("failed") is False:
            out.extend((node, record.time) for node in found.get("ran_on", []))
    return out


def _runs(history: Sequence[AuditRecord]) -> list[tuple[list[str], bool]]:
    """(nodes, failed) of each earlier experiment, oldest first (the store lists newest first)."""
    out = []
    for record in reversed(history):
        found = _section(record)
        if found.get("ran_on"):
            out.append((list(found["ran_on"]), bool(found.get("failed", True))))
    return out


def _belief(
    runs: Sequence[tuple[list[str], bool]], universe: Sequence[str], named: Collection[str],
    settings: LocalizeSettings,
) -> localize.Belief:  # fmt: skip
    belief = localize.start(universe, named, settings)
    for run, failed in runs:
        belief = localize.observe(belief, run, failed, settings)
    while True:
        belief, culprit = localize.conclude(belief, settings)
        if culprit is None:
            return belief


def _next(
    belief: localize.Belief,
    universe: Sequence[str],
    kept: Sequence[str],
    settings: LocalizeSettings,
    capacity: int | None,
) -> tuple[localize.Split, dict[str, Any]]:
    """The split within what the budget leaves after ``kept``, and the record's section."""
    budget = settings.model_copy(update={"spare_nodes": max(0, settings.spare_nodes - len(kept))})
    room = None if capacity is None else capacity - len(kept)
    split = localize.choose(belief, [n for n in universe if n not in kept], budget, room)
    ranked = sorted((n for n in belief.posterior if n != localize.NONE), key=lambda n: -belief.posterior[n])
    return split, {
        "suspects": {n: round(belief.posterior[n], 3) for n in ranked[:TOP]},
        "none": round(belief.posterior[localize.NONE], 3),
        "blamed": list(belief.blamed),
        "split": list(split.excluded),
        "expected_bits": round(split.gain_bits, 3),
        "steps": [*belief.steps, split.reason],
    }


def _section(record: AuditRecord) -> dict[str, Any]:
    found = (record.attribution or {}).get("localization")
    return found if isinstance(found, dict) else {}
