"""Policy: from a verdict to one action, with a sentence that says why.

Defaults (per cluster, see ``PolicySettings``): infra with implicated nodes -> requeue excluding
them; infra or unknown without nodes -> requeue; the application's own error -> stop; attempts that
write no new checkpoint -> stop; a workload at its attempt cap -> stop. Nodes excluded from earlier
attempts stay excluded (Slurm's ExcNodeList is replaced as a whole, so the list must carry them).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from responder.attribution import Verdict
from responder.schedulers.base import Action
from responder.settings import PolicySettings


@dataclass(frozen=True, slots=True)
class Plan:
    action: Action
    reason: str
    excluded_nodes: tuple[str, ...] = ()


def plan(
    verdict: Verdict, attempt: str | None, policy: PolicySettings, carried: Collection[str], severities: Collection[str]
) -> Plan:
    """The action for one incident; ``carried`` are nodes implicated in the workload's earlier attempts."""
    if severities and set(severities) <= {"info"}:
        return Plan(Action.NONE, "only informational alerts: nothing to do")
    if "no_progress" in verdict.categories:
        action, reason = policy.no_progress, "retries are not productive: attempts wrote no new checkpoint"
    elif attempt is not None and int(attempt) + 1 >= policy.max_attempts:
        action = Action.STOP
        reason = f"attempt {attempt} failed and the cap is {policy.max_attempts} attempts: {verdict.summary}"
    elif verdict.failure_class == "app":
        action, reason = policy.app, f"{verdict.summary}: a retry would fail the same way"
    elif verdict.failure_class == "infra" and verdict.implicated:
        action, reason = policy.infra_with_nodes, f"{verdict.summary}: restart without them"
    elif verdict.failure_class == "infra":
        action, reason = policy.infra_without_nodes, f"{verdict.summary}: restart"
    else:
        action, reason = policy.unknown, f"{verdict.summary}: restart and watch"

    if action in (Action.REQUEUE, Action.REQUEUE_EXCLUDING):
        wanted = list(verdict.implicated) + sorted(set(carried) - set(verdict.implicated))
        excluded = tuple(wanted[: policy.max_excluded_nodes])
        if excluded:
            dropped = len(wanted) - len(excluded)
            earlier = sorted(set(excluded) - set(verdict.implicated))
            if earlier:
                reason += f"; keeps earlier exclusions {', '.join(earlier)}"
            if dropped:
                reason += f"; {dropped} older exclusion(s) dropped at the cap of {policy.max_excluded_nodes}"
            return Plan(Action.REQUEUE_EXCLUDING, reason, excluded)
        return Plan(Action.REQUEUE, reason)
    return Plan(action, reason)
