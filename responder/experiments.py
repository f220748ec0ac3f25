"""Turn a restart into an experiment when the verdict names no node (``responder.localize`` does the maths).

The belief is rebuilt from the audit trail at every decision, never kept in memory: each earlier record
of the workload that carries a ``localization`` section says which nodes that attempt ran on and that it
failed. So a restart of the responder loses nothing, and the record explains every step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Sequence
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
    carried: Collection[str], settings: LocalizeSettings, capacity: int | None = None, attempt: str | None = None,
) -> Experiment | None:  # fmt: skip
    """The next attempt's exclusions: earlier ones kept, plus the split; the waiting note before enough failures.

    The end of an attempt that trainguard's own probe restarted (``clean_run``) is no failure: its
    ranks die of the restart. Its incident gets no action and no part in the belief.
    """
    if attempt and any(_probed(r, attempt) for r in history):
        note = f"attempt {attempt} ran clean and was restarted by trainguard's probe: its end is no failure"
        return Experiment(Plan(Action.NONE, note), (), {"superseded": True, "steps": [note]})
    runs = [*_runs(history), (list(ran_on), True)]
    failures = sum(failed for _, failed in runs)
    universe = sorted({n for run, _ in runs for n in run} | set(carried))
    if failures < settings.after_failures or len(universe) < 2:  # one node: nothing to split
        waiting = f"failure {failures} without a named node; splitting starts at {settings.after_failures}"
        return Experiment(chosen, (), {"ran_on": list(ran_on), "failed": True, "steps": [waiting]})
    named = _named(history) | {h for h, s in verdict.scores.items() if s > 0}
    belief = _belief(runs, universe, named, settings)
    kept = [n for n in chosen.excluded_nodes if n not in belief.blamed]
    split, section = _next(belief, universe, kept, settings, capacity, len(ran_on))
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
    capacity: int | None = None, running_on: Callable[[], Sequence[str] | None] = lambda: (),
) -> Experiment | None:  # fmt: skip
    """The follow-up of an experiment that has run ``clean_after_s`` without failing, or None.

    ``latest`` is the workload's newest decision. The clean run is evidence like a failure; with
    ``probe`` and no node blamed yet, the follow-up restarts at once with the next split.
    ``running_on`` asks the scheduler, once the run is due, which nodes the attempt runs on: None when
    it no longer runs (a workload that ended says nothing), empty when it cannot say. The attempt may
    run on spares never seen before and without suspects that were not excluded, so the nodes seen so
    far minus the exclusions are only the fallback.
    """
    if not settings.enabled or not may_have_run_clean(latest, now, settings):
        return None
    found = _section(latest)
    started = max(latest.acted_at or 0.0, latest.decided_at)
    observed = running_on()
    if observed is None:
        return None
    runs = _runs(history)
    seen = {n for run, _ in runs for n in run}
    running = sorted(set(observed)) or [n for n in sorted(seen) if n not in latest.excluded_nodes]
    universe = sorted(seen | set(running))
    runs.append((running, False))
    belief = _belief(runs, universe, _named(history), settings)
    kept = [n for n in latest.excluded_nodes if n not in belief.blamed and n not in found.get("split", [])]
    split, section = _next(belief, universe, kept, settings, capacity, len(running))
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


def superseded(record: AuditRecord) -> bool:
    """The record of an attempt that trainguard's probe restarted: not the workload's newest experiment."""
    return bool(_section(record).get("superseded"))


def _probed(record: AuditRecord, attempt: str) -> bool:
    """``record`` is the probe that restarted ``attempt`` after it ran clean."""
    found = _section(record)
    restarted = record.action == Action.REQUEUE_EXCLUDING and record.outcome in (Outcome.DONE, Outcome.PENDING)
    return record.attempt == attempt and found.get("failed") is False and restarted


def _named(history: Sequence[AuditRecord]) -> set[str]:
    """Hosts the evidence of earlier failed experiments named: the same prior at every decision."""
    return {
        host
        for record in history
        if _section(record).get("ran_on") and _section(record).get("failed", True)
        for host, score in (record.attribution.get("scores") or {}).items()
        if score > 0
    }


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
    belief: localize.Belief, universe: Sequence[str], kept: Sequence[str], settings: LocalizeSettings,
    capacity: int | None, size: int,
) -> tuple[localize.Split, dict[str, Any]]:  # fmt: skip
    """The split within what the budget leaves after ``kept`` (pinned, see ``_pin``), and the record's section."""
    budget = settings.model_copy(update={"spare_nodes": max(0, settings.spare_nodes - len(kept))})
    room = None if capacity is None else capacity - len(kept)
    split = localize.choose(belief, [n for n in universe if n not in kept], budget, room)
    testing = any(n not in belief.blamed for n in split.excluded)
    pinned = _pin(belief, universe, [*kept, *split.excluded], settings, capacity, size) if testing else ()
    if pinned:
        on = [n for n in universe if n not in {*kept, *split.excluded, *pinned}]
        why = f"{split.reason}; also without {', '.join(pinned)}, so that it runs on {', '.join(on)}"
        split = localize.Split((*split.excluded, *pinned), why, split.gain_bits)
    ranked = sorted((n for n in belief.posterior if n != localize.NONE), key=lambda n: -belief.posterior[n])
    return split, {
        "suspects": {n: round(belief.posterior[n], 3) for n in ranked[:TOP]},
        "none": round(belief.posterior[localize.NONE], 3),
        "blamed": list(belief.blamed),
        "split": list(split.excluded),
        "pinned": list(pinned),
        "expected_bits": round(split.gain_bits, 3),
        "steps": [*belief.steps, split.reason],
    }


def _pin(
    belief: localize.Belief, universe: Sequence[str], excluded: Sequence[str], settings: LocalizeSettings,
    capacity: int | None, size: int,
) -> tuple[str, ...]:  # fmt: skip
    """The least suspect seen nodes to leave out too, so that the attempt must run on the suspects the split
    keeps in. A scheduler with more room than the job needs picks for itself (Slurm's ``cons_tres`` takes
    consecutive nodes) and may leave out the very suspect the split tests. Only an experiment that can be
    pinned whole within the budget is pinned (an unseen spare cannot be named)."""
    if capacity is None or size < 1:
        return ()
    need = capacity - len(excluded) - size  # nodes the scheduler could otherwise use instead of a suspect
    rest = [n for n in universe if n not in excluded]
    if need <= 0 or need > settings.spare_nodes - len(excluded) or need > len(rest) - size:
        return ()
    marginal = belief.marginals()
    return tuple(sorted(rest, key=lambda n: (marginal.get(n, 0.0), n))[:need])


def _section(record: AuditRecord) -> dict[str, Any]:
    found = (record.attribution or {}).get("localization")
    return found if isinstance(found, dict) else {}
