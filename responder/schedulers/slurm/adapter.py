"""Slurm adapter: how trainguard's decisions become Slurm commands, verified by a fresh look.

The core decides *what* (``ActionRequest``); this module decides *how*:

- ``requeue_excluding``: mark the job (``AdminComment`` ``trainguard:held=<t>``), ``scontrol
  requeuehold``, set the *whole* ``ExcNodeList`` (user's own exclusions + trainguard's wanted set,
  pruned so the job still fits; stale trainguard exclusions cleared, since the list sticks across
  requeues), ``scontrol release``, clear the hold mark, then verify with a fresh ``squeue --json``.
  A job that already ended (FAILED...) cannot be marked, so it is ``scontrol requeue``d and its
  ExcNodeList set while it waits out its BeginTime (``cred_expire``).
- ``requeue`` (``scontrol requeue``), ``stop`` (``scancel``, the incident in ``AdminComment``),
  ``hold``, ``release``, ``drain_node`` (``State=DRAIN Reason="trainguard: <incident>"``) and its
  undo ``resume_node``.

Idempotency: a request names the attempt it was decided for; Slurm's ``restart_cnt`` is the attempt.
A job already past that attempt is not requeued again (an interrupted requeue whose hold is still in
place is finished instead: exclusions set, job released). A held job carries the hold mark, so
``trainguard watchdog`` can release it when a responder dies mid-action (fail-open).

Every value reaching a command is validated again here (job id, node names, incident id) and a
hostile value is refused before any command runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from responder.model import Action
from responder.schedulers.base import (
    ActionRequest,
    ActionResult,
    SchedulerError,
    WorkloadObservation,
    WorkloadState,
    act_frame,
    first_fresh,
    identity_refusal,
)
from responder.schedulers.slurm.commands import Runner, SlurmCommandMetrics, SlurmCommands, SubprocessRunner
from responder.schedulers.slurm.exclusions import join_nodes, plan_exclusions
from responder.schedulers.slurm.marker import Marker, valid_incident_id
from responder.schedulers.slurm.parse import SlurmJob, SlurmNode, parse_sinfo_json, parse_squeue_json
from responder.schedulers.slurm.requeue import Route, Unsettled, requeue_settled, route_requeue
from responder.schedulers.slurm.settings import SlurmSettings
from trainguard.identity import IdentityError, validate_cluster, validate_workload

log = logging.getLogger(__name__)

__all__ = ["SlurmScheduler"]


class SlurmScheduler:
    """``Scheduler`` for Slurm 22.05+. Thread-safe as long as the runner is.

    ``registry``: where the seam's command metrics go (a private registry when None). Several
    adapters on one registry must share one ``metrics=SlurmCommandMetrics(registry)`` instead.
    """

    name = "slurm"

    def __init__(
        self,
        settings: SlurmSettings,
        runner: Runner | None = None,
        registry: CollectorRegistry | None = None,
        metrics: SlurmCommandMetrics | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        if runner is None:
            env = {"SLURM_CONF": str(settings.slurm_conf)} if settings.slurm_conf else None
            runner = SubprocessRunner(env if settings.transport == "local" else None)
        self.commands = SlurmCommands(
            settings.transport_config(),
            runner,
            settings.command_timeout_s,
            metrics if metrics is not None else SlurmCommandMetrics(registry),
            settings.cluster or "default",
        )
        self._now = now
        self._sleep = sleep

    # ------------------------------------------------------------------------------- observation

    def list_jobs(self) -> dict[str, SlurmJob]:
        """Every job Slurm knows (22.05 ``squeue --json`` ignores ``-j``; we filter ourselves)."""
        return parse_squeue_json(self.commands.run(["squeue", "--json"]))

    def list_nodes(self) -> dict[str, SlurmNode]:
        return parse_sinfo_json(self.commands.run(["sinfo", "--json"]))

    def job(self, workload: str) -> SlurmJob | None:
        """The job, or None when Slurm does not list it (finished more than MinJobAge ago, or never was)."""
        return self.list_jobs().get(workload)

    def opted_in(self, job: SlurmJob) -> bool:
        return self.settings.opt_in_token in job.comment or bool(
            set(job.partitions) & set(self.settings.opt_in_partitions)
        )

    def observation(self, job: SlurmJob) -> WorkloadObservation:
        extra = {"slurm_state": job.slurm_state, "partition": ",".join(job.partitions)}
        if job.batch_host:
            extra["batch_host"] = job.batch_host
        if job.marker.held_at is not None:
            extra["trainguard_held_at"] = str(job.marker.held_at)
        if job.marker.excluded:
            extra["trainguard_excluded"] = ",".join(job.marker.excluded)
        return WorkloadObservation(
            workload=job.job_id,
            state=job.state,
            attempt=job.restart_cnt,
            nodes=job.nodes,
            excluded_nodes=job.excluded_nodes,
            reason=job.reason if job.reason != "None" else "",
            opted_in=self.opted_in(job),
            extra=extra,
        )

    def observe(self, cluster: str, workload: str) -> WorkloadObservation:
        self._check_cluster(cluster)
        validate_workload(workload, scheduler="slurm")
        job = self.job(workload)
        if job is None:
            return WorkloadObservation(
                workload=workload,
                state=WorkloadState.UNKNOWN,
                reason="not listed by squeue (ended more than MinJobAge ago, or no such job)",
            )
        return self.observation(job)

    # ------------------------------------------------------------------------------------ acting

    def act(self, request: ActionRequest) -> ActionResult:
        return act_frame(request, self._refuse(request), "slurm", "command", self._node_action, self._job_action)

    def _check_cluster(self, cluster: str) -> None:
        validate_cluster(cluster)
        if self.settings.cluster is not None and cluster != self.settings.cluster:
            raise IdentityError("cluster", cluster, f"this adapter's cluster {self.settings.cluster!r}")

    def _refuse(self, request: ActionRequest) -> str | None:
        """Validate every value that may reach a command; a reason to refuse, or None."""
        reason = identity_refusal(request, "slurm", self.settings.cluster)
        if reason is None and not valid_incident_id(request.incident_id):
            reason = f"incident id {request.incident_id!r} is not [A-Za-z0-9][A-Za-z0-9_.:-]{{0,127}}"
        return reason

    # -- jobs

    def _job_action(self, request: ActionRequest) -> ActionResult:
        """One job action; retried on a fresh observation while the job is between states.

        A rank that dies ends the step at once (srun --kill-on-bad-exit, torchrun), so the decision
        often arrives while the job is COMPLETING, or while it turns FAILED between our look and our
        command ("Job has already finished"). Both settle within seconds; acting on a fresh look then
        is right, giving up is not.
        """
        deadline = time.monotonic() + self.settings.settle_timeout_s
        while True:
            try:
                return self._job_action_once(request)
            except Unsettled as exc:
                if time.monotonic() >= deadline:
                    return ActionResult("failed", f"{exc}; still unsettled after {self.settings.settle_timeout_s:g}s")
                log.info("job %s: %s; looking again", request.workload, exc)
                self._sleep(0.25)

    def _job_action_once(self, request: ActionRequest) -> ActionResult:
        job = self.job(request.workload)
        if job is None:
            return ActionResult("failed", f"job {request.workload} is not listed by squeue; state unknown")
        if request.action is not Action.RELEASE and self.settings.require_opt_in and not self.opted_in(job):
            return ActionResult(
                "skipped",
                f"job {job.job_id} did not opt in (no {self.settings.opt_in_token!r} in its comment, "
                "partition not allowlisted); observed only",
            )
        handler = {
            Action.REQUEUE: self._requeue,
            Action.REQUEUE_EXCLUDING: self._requeue,
            Action.STOP: self._stop,
            Action.HOLD: self._hold,
            Action.RELEASE: self._release,
        }[request.action]
        return handler(request, job)

    def _set_marker(self, job_id: str, marker: Marker) -> None:
        self.commands.run(["scontrol", "update", f"JobId={job_id}", f"AdminComment={marker.format()}"])

    def _requeue(self, request: ActionRequest, job: SlurmJob) -> ActionResult:
        routed = route_requeue(request, job)
        if isinstance(routed, ActionResult):
            return routed
        mode, past, others_held = routed.mode, routed.past, routed.others_held
        attempt = routed.attempt
        excluding = request.action is Action.REQUEUE_EXCLUDING
        plan = (
            plan_exclusions(request.exclude_nodes, job, self.list_nodes(), self.settings.min_spare_nodes)
            if excluding
            else None
        )
        if (
            mode == "in_place"
            and plan is not None
            and set(job.excluded_nodes) == set(plan.exc_node_list)
            and set(job.marker.excluded) == set(plan.applied)
        ):
            why = f"already past attempt {attempt}; not requeued again" if past else "not started"
            return ActionResult(
                "done",
                f"job {job.job_id} {job.slurm_state}, {why}; exclusions already in place",
                verified=True,
                excluded_nodes=plan.applied,
            )
        acted_at = self._now()
        now_s = int(acted_at.timestamp())
        kept = job.marker
        steps: list[str] = []
        expect_restarts, held_at = self._requeue_start(request, job, mode, plan is not None, now_s, steps)

        applied = kept.excluded
        if plan is not None:
            applied = plan.applied
            still_held = held_at if mode in ("finish", "requeue") else None
            self.commands.run(
                [
                    "scontrol", "update", f"JobId={job.job_id}",
                    f"ExcNodeList={join_nodes(plan.exc_node_list)}",
                    f"AdminComment={Marker(still_held, applied, request.incident_id, None, kept.other).format()}",
                ]
            )  # fmt: skip
            steps.append(f"ExcNodeList={join_nodes(plan.exc_node_list) or '(cleared)'}")
            steps.extend(plan.notes)
        if mode in ("finish", "requeue") and (plan is not None or mode == "finish"):
            self.commands.run(["scontrol", "release", job.job_id])
            steps.append("release")
            self._set_marker(job.job_id, Marker(None, applied, request.incident_id, None, kept.other))
        if others_held:
            steps.append("left held: the hold is not trainguard's")

        done = requeue_settled(job, plan, expect_restarts, others_held)
        after = self._verify_job(job.job_id, done)
        detail = "; ".join(steps)
        detail += (
            f"; verified: {after.slurm_state} attempt {after.restart_cnt}"
            if after is not None
            else "; not confirmed by a fresh squeue"
        )
        return ActionResult("done", detail, verified=after is not None, acted_at=acted_at, excluded_nodes=applied)

    def _requeue_start(
        self, request: ActionRequest, job: SlurmJob, mode: Route, excluding: bool, now_s: int, steps: list[str]
    ) -> tuple[int, int | None]:
        """The first commands of a requeue; (the restart count to expect, the hold mark's time)."""
        kept = job.marker
        expect_restarts = job.restart_cnt
        held_at = kept.held_at
        if mode == "finish":
            steps.append(f"finishing an interrupted action (held by trainguard since {kept.held_at})")
        elif mode == "requeue_ended" or (mode == "requeue" and not excluding):
            # For an ended job: requeue, then set the exclusions while it waits out its BeginTime
            # (cred_expire, >= 5 s). A crash in between leaves it runnable without them: fail-open.
            self.commands.run(["scontrol", "requeue", job.job_id])
            steps.append("scontrol requeue")
            expect_restarts += 1
        elif mode == "requeue":
            held_at = now_s
            # mark before holding, so a responder killed right after the hold leaves a job the watchdog frees
            try:
                self._set_marker(job.job_id, Marker(held_at, kept.excluded, request.incident_id, None, kept.other))
            except SchedulerError as exc:
                if "already finished" in str(exc) or "completing" in str(exc).lower():
                    raise Unsettled(f"job {job.job_id} ended while we acted ({exc})") from exc
                raise
            try:
                self.commands.run(["scontrol", "requeuehold", job.job_id])
            except SchedulerError:
                self._set_marker(job.job_id, kept)
                raise
            steps.append("requeuehold")
            expect_restarts += 1
        else:
            steps.append(f"job {job.slurm_state} ({job.reason}): not started, exclusions updated in place")
        return expect_restarts, held_at

    def _stop(self, request: ActionRequest, job: SlurmJob) -> ActionResult:
        if job.state.is_terminal():
            return ActionResult("done", f"job {job.job_id} already {job.slurm_state}; nothing to stop", True)
        acted_at = self._now()
        marker = Marker(None, job.marker.excluded, request.incident_id, int(acted_at.timestamp()), job.marker.other)
        self._set_marker(job.job_id, marker)
        self.commands.run(["scancel", job.job_id])
        after = self._verify_job(
            job.job_id, lambda j: j.state in (WorkloadState.CANCELLED, WorkloadState.COMPLETING)
            or j.state.is_terminal()
        )  # fmt: skip
        return _done(
            f"scancel {job.job_id} (incident {request.incident_id}: {request.reason[:200]})"
            + (f"; now {after.slurm_state}" if after else "; not confirmed by a fresh squeue"),
            after,
            acted_at,
        )

    def _hold(self, request: ActionRequest, job: SlurmJob) -> ActionResult:
        if job.held:
            return ActionResult("done", f"job {job.job_id} already held ({job.reason})", True)
        attempt = int(request.attempt) if request.attempt is not None else None
        if attempt is not None and job.restart_cnt > attempt:
            return ActionResult("done", f"job {job.job_id} already past attempt {attempt}; not held", True)
        acted_at = self._now()
        marker = Marker(int(acted_at.timestamp()), job.marker.excluded, request.incident_id, None, job.marker.other)
        if job.state is WorkloadState.COMPLETING:
            raise Unsettled(f"job {job.job_id} is COMPLETING; its final state is not known yet")
        if job.state is WorkloadState.PENDING:
            verb = "hold"
        elif job.state is WorkloadState.RUNNING:
            verb = "requeuehold"  # a running job cannot be held in place; it is requeued held
        else:
            return ActionResult("skipped", f"job {job.job_id} is {job.slurm_state}; cannot hold")
        self._set_marker(job.job_id, marker)
        try:
            self.commands.run(["scontrol", verb, job.job_id])
        except SchedulerError:
            self._set_marker(job.job_id, job.marker)
            raise
        after = self._verify_job(job.job_id, lambda j: j.held)
        return _done(
            f"scontrol {verb} {job.job_id}; trainguard's hold (the watchdog releases it after its lease)",
            after,
            acted_at,
        )

    def _release(self, request: ActionRequest, job: SlurmJob) -> ActionResult:
        del request
        if not job.held:
            if job.marker.held_at is not None:
                self._set_marker(
                    job.job_id,
                    Marker(None, job.marker.excluded, job.marker.incident, job.marker.stopped_at, job.marker.other),
                )
            return ActionResult("done", f"job {job.job_id} is not held ({job.slurm_state})", True)
        return self.release_job(job)

    def release_job(self, job: SlurmJob) -> ActionResult:
        """Release a held job and clear trainguard's hold mark (also used by the watchdog)."""
        acted_at = self._now()
        self.commands.run(["scontrol", "release", job.job_id])
        if job.marker.held_at is not None:
            self._set_marker(
                job.job_id,
                Marker(None, job.marker.excluded, job.marker.incident, job.marker.stopped_at, job.marker.other),
            )
        after = self._verify_job(job.job_id, lambda j: not j.held)
        return _done(
            f"scontrol release {job.job_id}" + (f"; now {after.slurm_state}" if after else "; not confirmed"),
            after,
            acted_at,
        )

    def _verify_job(self, job_id: str, ok: Callable[[SlurmJob], bool]) -> SlurmJob | None:
        """Poll a fresh ``squeue --json`` until ``ok``; the job, or None if it never showed."""
        return first_fresh(lambda: self.job(job_id), ok, self.settings.verify_timeout_s, 0.05, self._sleep)

    # -- nodes

    def _node_action(self, request: ActionRequest) -> ActionResult:
        node_name = request.node
        assert node_name is not None  # checked by _refuse
        nodes = self.list_nodes()
        node = nodes.get(node_name)
        if node is None:
            return ActionResult("failed", f"node {node_name} is not known to Slurm")
        if request.action is Action.DRAIN_NODE:
            return self._drain(request, node, nodes)
        return self._resume(node)

    def _drain(self, request: ActionRequest, node: SlurmNode, nodes: dict[str, SlurmNode]) -> ActionResult:
        if node.drained_by_trainguard:
            return ActionResult("done", f"{node.name} already drained ({node.reason})", True)
        if node.drain:
            return ActionResult("skipped", f"{node.name} already drained by someone else ({node.reason}); left as is")
        ours = sum(1 for n in nodes.values() if n.drained_by_trainguard)
        limit = max(1, int(len(nodes) * self.settings.max_drained_fraction))
        if ours >= limit:
            return ActionResult(
                "skipped",
                f"circuit breaker: {ours} node(s) already drained by trainguard (limit {limit} of {len(nodes)})",
            )
        reason = f"trainguard: {request.incident_id}"
        acted_at = self._now()
        self.commands.run(["scontrol", "update", f"NodeName={node.name}", "State=DRAIN", f"Reason={reason}"])
        after = self._verify_node(node.name, lambda n: n.drain)
        return _done(
            f"drained {node.name} (Reason={reason!r})" + (f"; now {after.state}+DRAIN" if after else ""),
            after,
            acted_at,
        )

    def _resume(self, node: SlurmNode) -> ActionResult:
        if not node.drain and not node.down:
            return ActionResult("done", f"{node.name} is not drained ({node.state})", True)
        if not node.reason.startswith("trainguard:"):
            return ActionResult(
                "skipped", f"{node.name} was not drained by trainguard ({node.reason!r}); resume it yourself"
            )
        acted_at = self._now()
        self.commands.run(["scontrol", "update", f"NodeName={node.name}", "State=RESUME"])
        after = self._verify_node(node.name, lambda n: not n.drain and not n.down)
        return _done(f"resumed {node.name}" + (f"; now {after.state}" if after else ""), after, acted_at)

    def _verify_node(self, name: str, ok: Callable[[SlurmNode], bool]) -> SlurmNode | None:
        read = lambda: self.list_nodes().get(name)  # noqa: E731 - one fresh sinfo per look
        return first_fresh(read, ok, self.settings.verify_timeout_s, 0.05, self._sleep)


def _done(detail: str, after: object | None, acted_at: datetime) -> ActionResult:
    """A done result, verified when a fresh read (``after``, the job or node) showed the effect."""
    return ActionResult("done", detail, verified=after is not None, acted_at=acted_at)
