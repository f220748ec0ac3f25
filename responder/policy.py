"""Policy: from a verdict to one action, with a sentence that says why.

Defaults (per cluster, see ``PolicySettings``): infra with implicated nodes -> requeue excluding
them; infra or unknown without nodes -> requeue; the application's own error -> stop; attempts that
write no new checkpoint -> stop; a workload at its attempt cap -> stop. Nodes excluded from earlier
attempts stay excluded (Slurm's ExcNodeList is replaced as a whole, so the list must carry them).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from responder.attribution import AttemptProgress, Verdict
from responder.localize import LocalizeSettings
from responder.model import Action


class PolicySettings(BaseModel):
    """What to do per verdict. The defaults are the documented policy; override per cluster."""

    model_config = ConfigDict(extra="forbid")

    infra_with_nodes: Action = Field(Action.REQUEUE_EXCLUDING, description="infra fault, nodes blamed")
    infra_without_nodes: Action = Field(Action.REQUEUE, description="infra fault, no node blamed")
    unknown: Action = Field(Action.REQUEUE, description="cause unknown")
    app: Action = Field(Action.STOP, description="the application's own error: retrying cannot help")
    no_progress: Action = Field(Action.STOP, description="attempts that write no new checkpoint")
    max_attempts: int = Field(5, ge=1, description="stop a workload that reached this many attempts")
    no_progress_attempts: int = Field(
        3, ge=1, description="stop after this many attempts in a row without a new checkpoint (needs Prometheus)"
    )
    max_excluded_nodes: int = Field(8, ge=0, description="most nodes excluded from one workload")
    localize: LocalizeSettings = Field(
        default_factory=LocalizeSettings, description="restarts as experiments when evidence names no node"
    )


@dataclass(frozen=True, slots=True)
class Plan:
    action: Action
    reason: str
    excluded_nodes: tuple[str, ...] = ()


def checkpoint_gate(attempts: Mapping[int, AttemptProgress], attempt: int, limit: int) -> str | None:
    """Why retrying is unproductive, or None: the last ``limit`` attempts wrote no new checkpoint.

    An attempt made progress when it saved a checkpoint newer than every earlier attempt's. Telling the
    two failures apart matters to whoever fixes them: steps advancing without checkpoints means saving
    fails (storage, permissions, a bug in the save path); no steps past the last checkpoint means the
    job cannot get going at all.
    """
    if attempt + 1 < limit or not attempts:
        return None  # too few attempts to judge, or nothing known (no Prometheus): the alerts decide
    window = range(attempt - limit + 1, attempt + 1)
    best_before = max(
        (p.checkpoint_step for a, p in attempts.items() if a < window.start and p.checkpoint_step is not None),
        default=-1.0,
    )
    for a in window:
        progress = attempts.get(a)
        if progress is not None and progress.checkpoint_step is not None and progress.checkpoint_step > best_before:
            return None
    furthest = max((p.last_step for a, p in attempts.items() if a in window and p.last_step is not None), default=None)
    span = f"attempts {window.start}-{attempt}"
    if furthest is not None and furthest > best_before + 1:
        return (
            f"{span} trained up to step {furthest:g} but saved no checkpoint newer than step {best_before:g}: "
            "checkpoint saving is failing; retrying cannot make durable progress"
        )
    return f"{span} made no progress past the checkpoint of step {best_before:g}: retrying is not productive"


def plan(
    verdict: Verdict,
    attempt: str | None,
    policy: PolicySettings,
    carried: Collection[str],
    severities: Collection[str],
    attempts: Mapping[int, AttemptProgress] | None = None,
) -> Plan:
    """The action for one incident; ``carried`` are nodes implicated in the workload's earlier attempts,
    ``attempts`` what each attempt achieved (from Prometheus; empty without enrichment)."""
    if severities and set(severities) <= {"info"}:
        return Plan(Action.NONE, "only informational alerts: nothing to do")
    gate = checkpoint_gate(attempts or {}, int(attempt), policy.no_progress_attempts) if attempt else None
    if gate is not None:
        action, reason = policy.no_progress, gate
    elif "no_progress" in verdict.categories:
        action, reason = policy.no_progress, "retries are not productive: attempts wrote no new checkpoint"
    elif attempt is not None and int(attempt) + 1 >= policy.max_attempts:
        action = Action.STOP
        reason = f"attempt {attempt} failed and the cap is {policy.max_attempts} attempts: {verdict.summary}"
    elif verdict.failure_class == "app":
        action, reason = policy.app, f"{verdict.summary}: a retry would fail the same way"
    elif verdict.failure_class == "infra" and verdict.implicated and set(verdict.implicated) <= set(carried):
        # Evidence about nodes this workload was already moved off: late signals of an earlier attempt
        # (a scheduler still listing the old allocation, a rule's window), not a fault of this one.
        return Plan(
            Action.NONE,
            f"{verdict.summary}, but {', '.join(verdict.implicated)} already excluded from this workload: "
            "evidence of an earlier attempt, nothing to do",
        )
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
