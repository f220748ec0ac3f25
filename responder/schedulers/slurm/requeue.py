"""How a requeue goes, decided from the job as Slurm shows it (no commands here: the adapter runs them).

``route_requeue`` gives either the answer without acting (too early, already past the attempt, ended,
nothing to requeue) or the route: ``finish`` an interrupted try whose hold is still ours, ``requeue``
a running job (a marked ``requeuehold``), ``requeue_ended`` a failed job (a plain ``requeue``: Slurm
refuses AdminComment on an ended job), or change exclusions ``in_place`` on a job not started.
``requeue_settled`` is what the fresh observation must show for the requeue to count as verified.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from responder.model import Action
from responder.schedulers.base import ActionRequest, ActionResult, WorkloadState
from responder.schedulers.slurm.exclusions import ExclusionPlan
from responder.schedulers.slurm.parse import SlurmJob

Route = Literal["finish", "in_place", "requeue", "requeue_ended"]


class Unsettled(Exception):
    """The job is between states; look again shortly."""


@dataclass(frozen=True, slots=True)
class RequeueRoute:
    mode: Route
    attempt: int | None
    past: bool  # the job is already past the attempt the request is for
    others_held: bool  # held, but not by trainguard: left held


def route_requeue(request: ActionRequest, job: SlurmJob) -> ActionResult | RequeueRoute:
    """The answer without acting, or the route the requeue takes (raises ``Unsettled`` while COMPLETING)."""
    attempt = int(request.attempt) if request.attempt is not None else None
    excluding = request.action is Action.REQUEUE_EXCLUDING
    mode: Route
    if attempt is not None and job.restart_cnt < attempt:
        return ActionResult("skipped", f"job {job.job_id} is at attempt {job.restart_cnt}, request is for {attempt}")
    ours_held = job.held and job.marker.held_at is not None
    past = attempt is not None and job.restart_cnt > attempt
    if past and not ours_held and not (excluding and job.state is WorkloadState.PENDING):
        return ActionResult(
            "done",
            f"job {job.job_id} already past attempt {attempt} (restart_cnt={job.restart_cnt}, "
            f"{job.slurm_state}); not requeued again",
            verified=True,
            excluded_nodes=job.marker.excluded,
        )
    if job.state in (WorkloadState.COMPLETED, WorkloadState.CANCELLED):
        return ActionResult("skipped", f"job {job.job_id} is {job.slurm_state}; not requeued")
    if job.state is WorkloadState.COMPLETING:
        raise Unsettled(f"job {job.job_id} is COMPLETING; its final state is not known yet")
    others_held = job.held and not ours_held
    if ours_held:
        mode = "finish"  # an earlier try held it and stopped before the release: finish, never requeue again
    elif past:
        mode = "in_place"  # requeued already (by an earlier try or by Slurm), not started: exclusions only
    elif job.state is WorkloadState.RUNNING:
        mode = "requeue"
    elif job.state is WorkloadState.FAILED:
        mode = "requeue_ended"  # Slurm refuses AdminComment on an ended job, so no marked hold (below)
    elif job.state is WorkloadState.PENDING or others_held:
        mode = "in_place"  # not started: nothing to requeue; exclusions can change in place
    else:
        return ActionResult("skipped", f"job {job.job_id} is {job.slurm_state}; cannot requeue")
    if not excluding and mode == "in_place":
        return ActionResult(
            "done", f"job {job.job_id} is {job.slurm_state}, not running: nothing to requeue", verified=True
        )
    return RequeueRoute(mode, attempt, past, others_held)


def requeue_settled(
    job: SlurmJob, plan: ExclusionPlan | None, expect_restarts: int, others_held: bool
) -> Callable[[SlurmJob], bool]:
    """What a fresh ``squeue`` must show of ``job`` once the requeue took effect."""

    def done(j: SlurmJob) -> bool:
        if j.restart_cnt < expect_restarts:
            return False
        if plan is not None and set(j.excluded_nodes) != set(plan.exc_node_list):
            return False
        if others_held:
            return j.held
        if j.state is WorkloadState.COMPLETING:
            # 22.05 prints a requeued job whose old tasks are still ending as COMPLETING
            return j.restart_cnt > job.restart_cnt
        return j.state in (WorkloadState.PENDING, WorkloadState.RUNNING)

    return done
