"""Kubeflow PyTorchJob adapter (``kubeflow.org/v1``, Training Operator v1): the JobSet verbs, PyTorchJob's way.

- isolation (``requeue_excluding``, ``drain_node``, ``resume_node``): identical to JobSet's
  (``responder.schedulers.kubernetes``);
- ``requeue``: PyTorchJob counts no restarts, so trainguard keeps the attempt itself: the job's pods
  are listed, then one merge patch (with the object's ``resourceVersion``, so two responders cannot
  both win) sets the annotations ``trainguard.io/attempt=<n+1>`` and ``trainguard.io/restarted-at``
  (the attempt also on each replica's pod template, for the re-created pods to read);
  then the listed pods are deleted and the operator re-creates the missing replicas (all of them, so
  the rendezvous starts afresh). A retry that finds the attempt already bumped by the same incident
  only deletes the pods older than ``restarted-at``. Verified by a fresh pod list: no old pod left,
  as many new ones.
- ``stop``: ``spec.runPolicy.suspend: true`` (Training Operator v1.7+; the operator deletes the pods)
  or a foreground delete (``stop_mode: delete``); ``hold`` / ``release``: suspend / resume.

Identity: workload = ``namespace/name``; attempt = the ``trainguard.io/attempt`` annotation (0 when
absent). Opt-in: the ``trainguard.io/policy`` label or annotation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import Field

from responder.schedulers.base import ActionRequest, ActionResult, WorkloadState, poll
from responder.schedulers.kubernetes.api import (
    ANNOTATION_LAST_INCIDENT,
    Resource,
    condition_true,
    labels_and_annotations,
    metadata,
    rfc3339,
    split_workload,
)
from responder.schedulers.kubernetes.workload import KubeWorkloadScheduler, WorkloadSettings

log = logging.getLogger(__name__)

__all__ = ["PyTorchJobScheduler", "PyTorchJobSettings"]

ANNOTATION_ATTEMPT: Final = "trainguard.io/attempt"
ANNOTATION_RESTARTED_AT: Final = "trainguard.io/restarted-at"


class PyTorchJobSettings(WorkloadSettings):
    """How trainguard reaches PyTorchJobs on one cluster (``clusters.<name>.scheduler: {kind: pytorchjob}``)."""

    kind: Literal["pytorchjob"] = Field("pytorchjob", description="The adapter: pytorchjob.")

    pod_label: str = Field(
        "training.kubeflow.org/job-name",
        description="Pod label naming the PyTorchJob (Training Operator v1.5+; older operators: job-name).",
    )


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class PyTorchJobScheduler(KubeWorkloadScheduler[PyTorchJobSettings]):
    """``Scheduler`` for Kubeflow PyTorchJob (Training Operator v1.7+ for suspend)."""

    name = "pytorchjob"
    RESOURCE = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")

    def phase(self, obj: Mapping[str, Any]) -> WorkloadState:
        if condition_true(obj, "Succeeded"):
            return WorkloadState.COMPLETED
        if condition_true(obj, "Failed"):
            return WorkloadState.FAILED
        if self.suspended(obj):
            return WorkloadState.HELD
        if condition_true(obj, "Running"):
            return WorkloadState.RUNNING
        return WorkloadState.PENDING  # Created, Restarting, or no condition yet

    def attempt(self, obj: Mapping[str, Any]) -> int:
        raw = labels_and_annotations(obj)[1].get(ANNOTATION_ATTEMPT, "0")
        return int(raw) if raw.isdigit() else 0

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        run_policy = (obj.get("spec") or {}).get("runPolicy") or {}
        return bool(run_policy.get("suspend")) or condition_true(obj, "Suspended")

    def suspend_patch(self, suspend: bool) -> dict[str, Any]:
        return {"spec": {"runPolicy": {"suspend": suspend}}}

    def pod_selector(self, name: str) -> str:
        return f"{self.settings.pod_label}={name}"

    def restart(self, request: ActionRequest, obj: dict[str, Any], applied: tuple[str, ...]) -> ActionResult:
        namespace, name = split_workload(request.workload)
        attempt = self.attempt(obj)
        old = self.api.list_pods(namespace, self.pod_selector(name))  # read before the bump: these are the old pods
        if not old:
            return ActionResult(
                "skipped", f"no pods labelled {self.pod_selector(name)}: nothing to restart (see the pod_label setting)"
            )
        acted_at = self._now()
        # the pods' template carries the attempt too: the re-created pods read it through the downward
        # API (PYTORCHJOB_RESTART_ATTEMPT), so their metrics and alerts name the new attempt
        replicas = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
        template = {"template": {"metadata": {"annotations": {ANNOTATION_ATTEMPT: str(attempt + 1)}}}}
        self.api.patch_object(
            self.ref(request.workload),
            {
                "metadata": {
                    "resourceVersion": metadata(obj).get("resourceVersion"),
                    "annotations": {
                        ANNOTATION_ATTEMPT: str(attempt + 1),
                        ANNOTATION_RESTARTED_AT: rfc3339(acted_at),
                        ANNOTATION_LAST_INCIDENT: request.incident_id,
                    },
                },
                "spec": {"pytorchReplicaSpecs": dict.fromkeys(sorted(replicas), template)},
            },
        )
        return self._replace_pods(namespace, name, old, acted_at, attempt + 1, applied)

    def _requeue(self, request: ActionRequest, obj: dict[str, Any]) -> ActionResult:
        _, annotations = labels_and_annotations(obj)
        wanted = int(request.attempt) if request.attempt is not None else None
        restarted_at = _time(annotations.get(ANNOTATION_RESTARTED_AT))
        if (
            wanted is not None
            and self.attempt(obj) == wanted + 1
            and annotations.get(ANNOTATION_LAST_INCIDENT) == request.incident_id
            and restarted_at is not None
        ):
            # an earlier try bumped the attempt: finish deleting the old pods, never bump twice
            namespace, name = split_workload(request.workload)
            result = super()._requeue(request, obj)
            # pods older than the bump are the old attempt's (the responder's clock against the API
            # server's creationTimestamp: a retry after a crash tolerates no more skew than that)
            old = [
                p
                for p in self.api.list_pods(namespace, self.pod_selector(name))
                if (created := _time(metadata(p).get("creationTimestamp"))) is None or created <= restarted_at
            ]
            finish = self._replace_pods(namespace, name, old, restarted_at, self.attempt(obj), result.excluded_nodes)
            return ActionResult(
                "done", f"{result.detail}; {finish.detail}", finish.verified, finish.acted_at, result.excluded_nodes
            )
        return super()._requeue(request, obj)

    def _replace_pods(
        self,
        namespace: str,
        name: str,
        old: list[dict[str, Any]],
        acted_at: datetime,
        attempt: int,
        applied: tuple[str, ...],
    ) -> ActionResult:
        selector = self.pod_selector(name)
        old_uids = {metadata(p).get("uid") for p in old}
        deleted = [
            metadata(p).get("name", "") for p in old if self.api.delete_pod(namespace, metadata(p).get("name", ""))
        ]
        log.warning("deleted %d pod(s) of PyTorchJob %s/%s for attempt %d", len(deleted), namespace, name, attempt)

        def replaced(pods: list[dict[str, Any]]) -> bool:
            fresh = [p for p in pods if metadata(p).get("uid") not in old_uids]
            return not any(metadata(p).get("uid") in old_uids for p in pods) and len(fresh) >= len(old)

        ok, _ = poll(
            lambda: {"items": self.api.list_pods(namespace, selector)},
            lambda o: o is not None and replaced(list(o["items"])),
            self.settings.verify_timeout_s, self.settings.poll_interval_s, self._sleep,
        )  # fmt: skip
        detail = f"attempt {attempt}: deleted {len(deleted)} pod(s) of the old attempt; the operator re-creates them"
        detail += "; verified: old pods gone, replacements created" if ok else "; not confirmed by a fresh pod list"
        return ActionResult("done", detail, verified=ok, acted_at=acted_at, excluded_nodes=applied)
