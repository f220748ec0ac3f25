"""JobSet adapter (``jobset.x-k8s.io/v1alpha2``): trainguard's decisions as Kubernetes API requests.

The core decides *what*; this module decides *how* (docs/kubernetes.md has the reasoning):

- ``requeue_excluding``: isolate the nodes (cordon + taint ``trainguard.io/implicated=<incident>:
  NoSchedule``, labelled who/why/when; see ``responder.schedulers.kubernetes``), record them on the
  JobSet (annotation ``trainguard.io/excluded-nodes``), then restart as for ``requeue``.
- ``requeue``: JobSet has no restart API, so trainguard makes one child Job of the current attempt
  fail, and the JobSet's own failure policy restarts the whole set: a JSON merge patch of the child
  Job's ``spec.activeDeadlineSeconds`` to 1 (the Job controller then fails it with reason
  ``DeadlineExceeded``; the Job is annotated ``trainguard.io/failed-by=<incident>``). The child Job
  picked is one with a pod on an excluded node when there is one. Before acting, the failure policy
  is read: if it would *fail* the JobSet (a ``FailJobSet`` rule that matches a ``DeadlineExceeded``
  failure, or ``maxRestarts`` already spent), the restart is refused. The restart is verified by a
  fresh read of the JobSet's status subresource: ``status.restarts`` incremented.
- ``stop``: ``spec.suspend: true`` (default) or a foreground delete (``stop_mode: delete``);
  ``hold`` / ``release``: suspend / resume, release only undoing trainguard's own hold.
- ``drain_node`` / ``resume_node``: isolate one node / the operator's undo.

Identity: workload = ``namespace/name``; attempt = ``status.restarts`` (the value of the child Jobs'
``jobset.sigs.k8s.io/restart-attempt`` label). A request for an attempt the JobSet is already past
reports ``done`` without restarting again. Opt-in: the ``trainguard.io/policy`` label or annotation.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import Field

from responder.schedulers.base import ActionRequest, ActionResult, WorkloadState, poll
from responder.schedulers.kubernetes.api import Resource, condition_true, labels_and_annotations, metadata, rfc3339
from responder.schedulers.kubernetes.workload import KubeWorkloadScheduler, WorkloadSettings

log = logging.getLogger(__name__)

__all__ = ["JobSetScheduler", "JobSetSettings", "restart_blocker"]

LABEL_JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
LABEL_RESTART_ATTEMPT: Final = "jobset.sigs.k8s.io/restart-attempt"
LABEL_REPLICATED_JOB: Final = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_JOB_GLOBAL_INDEX: Final = "jobset.sigs.k8s.io/job-global-index"
LABEL_POD_JOB_NAME: Final = "batch.kubernetes.io/job-name"
ANNOTATION_FAILED_BY: Final = "trainguard.io/failed-by"
ANNOTATION_FAILED_AT: Final = "trainguard.io/failed-at"
# What the Job controller writes when activeDeadlineSeconds passes (pkg/controller/job).
DEADLINE_REASON: Final = "DeadlineExceeded"
DEADLINE_MESSAGE: Final = "Job was active longer than specified deadline"


class JobSetSettings(WorkloadSettings):
    """How trainguard reaches JobSets on one cluster (``clusters.<name>.scheduler: {kind: jobset, ...}``)."""

    kind: Literal["jobset"] = Field("jobset", description="The adapter: jobset.")

    restart_deadline_s: int = Field(
        1, ge=1, le=60, description="activeDeadlineSeconds set on the child Job that trainguard fails."
    )


def restart_blocker(jobset: Mapping[str, Any], replicated_job: str) -> tuple[str | None, str]:
    """Would failing a Job of ``replicated_job`` with DeadlineExceeded restart the JobSet?

    Returns (a reason not to, or None; the failure-policy action that applies). First matching
    rule wins; no rule matching means ``RestartJobSet`` (JobSet v0.6+ semantics).
    """
    spec = jobset.get("spec") or {}
    status = jobset.get("status") or {}
    policy = spec.get("failurePolicy") or {}
    max_restarts = int(policy.get("maxRestarts") or 0)
    counted = int(status.get("restartsCountTowardsMax", status.get("restarts", 0)) or 0)
    action, rule_name = "RestartJobSet", "(no rule matches: default)"
    for rule in policy.get("rules") or []:
        reasons = rule.get("onJobFailureReasons") or []
        targets = rule.get("targetReplicatedJobs") or []
        patterns = rule.get("onJobFailureMessagePatterns") or []
        if reasons and DEADLINE_REASON not in reasons:
            continue
        if targets and replicated_job not in targets:
            continue
        if patterns and not any(_search(p, DEADLINE_MESSAGE) for p in patterns):
            continue
        action, rule_name = str(rule.get("action", "")), str(rule.get("name", "?"))
        break
    if action == "RestartJobSetAndIgnoreMaxRestarts":
        return None, action
    if action != "RestartJobSet":
        return (
            f"failure-policy rule {rule_name!r} answers a {DEADLINE_REASON} failure with {action}, "
            "not a restart of the whole JobSet",
            action,
        )
    if counted >= max_restarts:
        return (
            f"restart budget spent (restartsCountTowardsMax {counted} of maxRestarts {max_restarts}): "
            "failing a child Job would fail the JobSet",
            action,
        )
    return None, action


def _search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False  # an RE2 pattern Python cannot read: treat as not matching, like a rule that does not apply


def restarts(obj: Mapping[str, Any]) -> int:
    value = (obj.get("status") or {}).get("restarts", 0)
    return int(value) if isinstance(value, int) else 0


class JobSetScheduler(KubeWorkloadScheduler[JobSetSettings]):
    """``Scheduler`` for JobSet v0.6+. Pass ``api_client`` (a ``kubernetes.client.ApiClient``) in tests."""

    name = "jobset"
    RESOURCE = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")

    def phase(self, obj: Mapping[str, Any]) -> WorkloadState:
        terminal = (obj.get("status") or {}).get("terminalState")
        if terminal == "Completed" or condition_true(obj, "Completed"):
            return WorkloadState.COMPLETED
        if terminal == "Failed" or condition_true(obj, "Failed"):
            return WorkloadState.FAILED
        if self.suspended(obj):
            return WorkloadState.HELD
        jobs = (obj.get("status") or {}).get("replicatedJobsStatus") or []
        if any(int(j.get("active") or 0) + int(j.get("ready") or 0) > 0 for j in jobs):
            return WorkloadState.RUNNING
        return WorkloadState.PENDING

    def attempt(self, obj: Mapping[str, Any]) -> int:
        return restarts(obj)

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool((obj.get("spec") or {}).get("suspend")) or condition_true(obj, "Suspended")

    def suspend_patch(self, suspend: bool) -> dict[str, Any]:
        return {"spec": {"suspend": suspend}}

    def pod_selector(self, name: str) -> str:
        return f"{LABEL_JOBSET_NAME}={name}"

    def extra_fields(self, obj: Mapping[str, Any]) -> dict[str, str]:
        status = obj.get("status") or {}
        policy = (obj.get("spec") or {}).get("failurePolicy") or {}
        extra = {
            "restarts": str(status.get("restarts", 0)),
            "restarts_count_towards_max": str(status.get("restartsCountTowardsMax", status.get("restarts", 0))),
            "max_restarts": str(policy.get("maxRestarts", 0)),
        }
        if status.get("terminalState"):
            extra["terminal_state"] = str(status["terminalState"])
        return extra

    def restart(self, request: ActionRequest, obj: dict[str, Any], applied: tuple[str, ...]) -> ActionResult:
        ref = self.ref(request.workload)
        namespace, name = ref.namespace, ref.name
        before = restarts(obj)
        jobs = [
            j
            for j in self.api.list_jobs(namespace, f"{LABEL_JOBSET_NAME}={name}")
            if labels_and_annotations(j)[0].get(LABEL_RESTART_ATTEMPT) == str(before) and not _finished(j)
        ]
        if not jobs:
            return ActionResult("failed", f"no running child Job of JobSet {request.workload} at attempt {before}")
        child = self._pick(namespace, name, jobs, applied)
        child_name = metadata(child).get("name", "")
        replicated = labels_and_annotations(child)[0].get(LABEL_REPLICATED_JOB, "")
        blocker, policy_action = restart_blocker(obj, replicated)
        if blocker is not None:
            return ActionResult("skipped", f"not restarted: {blocker}")
        acted_at = self._now()
        self.api.patch_job(
            namespace,
            child_name,
            {
                "metadata": {
                    "annotations": {ANNOTATION_FAILED_BY: request.incident_id, ANNOTATION_FAILED_AT: rfc3339(acted_at)}
                },
                "spec": {"activeDeadlineSeconds": self.settings.restart_deadline_s},
            },
        )
        log.warning("failing Job %s/%s so JobSet %s restarts (incident %s)", namespace, child_name, name,
                    request.incident_id)  # fmt: skip
        ok, after = poll(
            lambda: self.api.get_object_status(ref),
            lambda o: o is not None and restarts(o) > before,
            self.settings.verify_timeout_s, self.settings.poll_interval_s, self._sleep,
        )  # fmt: skip
        detail = (
            f"failed child Job {child_name} (activeDeadlineSeconds={self.settings.restart_deadline_s}) so the "
            f"failure policy restarts the JobSet ({policy_action})"
        )
        if ok and after is not None:
            status = after.get("status") or {}
            detail += (
                f"; verified: status.restarts {before} -> {restarts(after)}"
                f" (restartsCountTowardsMax {status.get('restartsCountTowardsMax', '?')})"
            )
        else:
            detail += f"; not confirmed: status.restarts still {before} after {self.settings.verify_timeout_s:g}s"
        return ActionResult("done", detail, verified=ok, acted_at=acted_at, excluded_nodes=applied)

    def _pick(self, namespace: str, name: str, jobs: list[dict[str, Any]], applied: tuple[str, ...]) -> dict[str, Any]:
        """The child Job to fail: one that trainguard already failed for this attempt, or one with a pod
        on an excluded node, else the lowest global index."""
        for job in jobs:
            if ANNOTATION_FAILED_BY in labels_and_annotations(job)[1]:
                return job  # an earlier, interrupted try: the same Job again (the patch is idempotent)
        if applied:
            on_bad = {
                labels_and_annotations(p)[0].get(LABEL_POD_JOB_NAME)
                for p in self.api.list_pods(namespace, f"{LABEL_JOBSET_NAME}={name}")
                if (p.get("spec") or {}).get("nodeName") in applied
            }
            for job in jobs:
                if metadata(job).get("name") in on_bad:
                    return job

        def index(job: dict[str, Any]) -> tuple[int, str]:
            raw = labels_and_annotations(job)[0].get(LABEL_JOB_GLOBAL_INDEX, "")
            return (int(raw) if raw.isdigit() else 1 << 30, str(metadata(job).get("name", "")))

        return min(jobs, key=index)


def _finished(job: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed", "FailureTarget") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )
