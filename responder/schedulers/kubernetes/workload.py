"""``KubeWorkloadScheduler``: the part of the ``Scheduler`` protocol the JobSet and PyTorchJob adapters share.

Validation and refusal before any request, opt-in, node actions, the idempotent requeue frame
(isolate, compare attempts, then the subclass's ``restart``), stop / hold / release by suspension
or a foreground delete, each verified by a fresh read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import Field

from responder.model import Action
from responder.schedulers.base import (
    ActionRequest,
    ActionResult,
    WorkloadObservation,
    WorkloadState,
    act_frame,
    poll,
)
from responder.schedulers.kubernetes.api import (
    ANNOTATION_EXCLUDED,
    ANNOTATION_HELD_AT,
    ANNOTATION_LAST_INCIDENT,
    ANNOTATION_STOPPED_AT,
    KubeAPI,
    KubeRequestMetrics,
    KubeSettings,
    ObjectRef,
    Resource,
    excluded_from,
    labels_and_annotations,
    metadata,
    opted_in,
    refusal,
    rfc3339,
    split_workload,
)
from responder.schedulers.kubernetes.isolation import NodeIsolation
from trainguard.identity import IdentityError, validate_cluster, validate_workload

_REQUEUE = (Action.REQUEUE, Action.REQUEUE_EXCLUDING)


class WorkloadSettings(KubeSettings):
    """Settings of a workload adapter: the shared ones plus how ``stop`` is done."""

    stop_mode: Literal["suspend", "delete"] = Field(
        "suspend",
        description="stop: suspend the workload (pods deleted, object kept, resumable) or delete it (foreground).",
    )


_Settings = TypeVar("_Settings", bound=WorkloadSettings)


class KubeWorkloadScheduler(Generic[_Settings]):
    """What the JobSet and PyTorchJob adapters share: refusal, node actions, stop/hold/release by suspend.

    A subclass names itself (``name``, the scheduler of its workload ids) and its ``RESOURCE``, reads its
    state, attempt and suspension, and implements the restart (``restart``).
    """

    name = "kubernetes"
    RESOURCE: Resource

    def __init__(
        self,
        settings: _Settings,
        api_client: Any | None = None,
        metrics: KubeRequestMetrics | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = KubeAPI.connect(settings, api_client, metrics)
        self.settings = settings
        self.nodes = NodeIsolation(self.api, settings, now, sleep)
        self._now = now
        self._sleep = sleep

    # -- what a subclass says about its resource

    def phase(self, obj: Mapping[str, Any]) -> WorkloadState:
        """The state its status says (``state`` has already ruled out a deletion)."""
        raise NotImplementedError

    def attempt(self, obj: Mapping[str, Any]) -> int:
        raise NotImplementedError

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def suspend_patch(self, suspend: bool) -> dict[str, Any]:
        raise NotImplementedError

    def pod_selector(self, name: str) -> str:
        raise NotImplementedError

    def extra_fields(self, obj: Mapping[str, Any]) -> dict[str, str]:
        del obj
        return {}

    def restart(self, request: ActionRequest, obj: dict[str, Any], applied: tuple[str, ...]) -> ActionResult:
        raise NotImplementedError

    # -- the Scheduler protocol

    def state(self, obj: Mapping[str, Any]) -> WorkloadState:
        """Being deleted is cancelled, whatever the status says; otherwise the resource's own ``phase``."""
        if metadata(obj).get("deletionTimestamp"):
            return WorkloadState.CANCELLED
        return self.phase(obj)

    def ref(self, workload: str) -> ObjectRef:
        return self.RESOURCE.ref(workload)

    def observe(self, cluster: str, workload: str) -> WorkloadObservation:
        validate_cluster(cluster)
        if self.settings.cluster is not None and cluster != self.settings.cluster:
            raise IdentityError("cluster", cluster, f"this adapter's cluster {self.settings.cluster!r}")
        validate_workload(workload, self.name)
        obj = self.api.get_object(self.ref(workload))
        if obj is None:
            return WorkloadObservation(workload, WorkloadState.UNKNOWN, reason=f"no {self.RESOURCE.kind} {workload}")
        return self.observation(workload, obj)

    def observation(self, workload: str, obj: dict[str, Any]) -> WorkloadObservation:
        namespace, name = split_workload(workload)
        pods = self.api.list_pods(namespace, self.pod_selector(name))
        nodes = sorted({p.get("spec", {}).get("nodeName") for p in pods if p.get("spec", {}).get("nodeName")})
        return WorkloadObservation(
            workload=workload,
            state=self.state(obj),
            attempt=self.attempt(obj),
            nodes=tuple(nodes),
            excluded_nodes=excluded_from(obj),
            opted_in=opted_in(obj, self.settings.opt_in_label),
            extra=self.extra_fields(obj),
        )

    def act(self, request: ActionRequest) -> ActionResult:
        reason = refusal(request, self.settings, self.name)
        return act_frame(request, reason, "kubernetes", "request", self._node_action, self._workload_action)

    def _node_action(self, request: ActionRequest) -> ActionResult:
        return self.nodes.drain(request) if request.action is Action.DRAIN_NODE else self.nodes.resume(request)

    def _workload_action(self, request: ActionRequest) -> ActionResult:
        ref = self.ref(request.workload)
        obj = self.api.get_object(ref)
        if obj is None:
            return ActionResult("failed", f"no {self.RESOURCE.kind} {request.workload}; state unknown")
        if (
            request.action is not Action.RELEASE
            and self.settings.require_opt_in
            and not opted_in(obj, self.settings.opt_in_label)
        ):
            return ActionResult(
                "skipped",
                f"{self.RESOURCE.kind} {request.workload} did not opt in (no {self.settings.opt_in_label} label or "
                "annotation); observed only",
            )
        if request.action in _REQUEUE:
            return self._requeue(request, obj)
        if request.action is Action.STOP:
            return self._stop(request, ref, obj)
        if request.action is Action.HOLD:
            return self._hold(request, ref, obj)
        return self._release(ref, obj)

    def _requeue(self, request: ActionRequest, obj: dict[str, Any]) -> ActionResult:
        attempt = self.attempt(obj)
        wanted = int(request.attempt) if request.attempt is not None else None
        if wanted is not None and attempt < wanted:
            return ActionResult(
                "skipped", f"{self.RESOURCE.kind} {request.workload} is at attempt {attempt}, request is for {wanted}"
            )
        state = self.state(obj)
        if state.is_terminal():
            return ActionResult(
                "skipped", f"{self.RESOURCE.kind} {request.workload} is {state}; a finished workload is not restarted"
            )
        notes: list[str] = []
        applied = excluded_from(obj)
        if request.action is Action.REQUEUE_EXCLUDING:
            # exclude_nodes is the whole wanted set; nodes no longer in it keep their taint (an
            # isolation is cluster-wide) until an operator's resume_node, but leave this record
            done = self.nodes.isolate(request.exclude_nodes, request.incident_id, request.reason)
            notes.extend(done.notes)
            dropped = [n for n in applied if n not in done.applied]
            if dropped:
                notes.append(f"no longer excluded for this workload: {','.join(dropped)} (undo: resume_node)")
            applied = done.applied
            if applied != excluded_from(obj):
                obj = self.api.patch_object(
                    self.ref(request.workload),
                    {"metadata": {"annotations": {ANNOTATION_EXCLUDED: ",".join(applied)}}},
                )
        if wanted is not None and attempt > wanted:
            notes.append(f"already past attempt {wanted} (now {attempt}); not restarted again")
            return ActionResult("done", "; ".join(notes), verified=True, excluded_nodes=applied)
        if state is WorkloadState.HELD:
            notes.append("suspended: nothing runs, so nothing to restart; isolation applies when it resumes")
            return ActionResult("done", "; ".join(notes), verified=True, excluded_nodes=applied)
        result = self.restart(request, obj, applied)
        detail = "; ".join([*notes, result.detail])
        return ActionResult(result.outcome, detail, result.verified, result.acted_at, applied)

    def _stop(self, request: ActionRequest, ref: ObjectRef, obj: dict[str, Any]) -> ActionResult:
        state = self.state(obj)
        if state.is_terminal():
            return ActionResult(
                "done", f"{self.RESOURCE.kind} {ref.namespace}/{ref.name} already {state}; nothing to stop", True
            )
        acted_at = self._now()
        if self.settings.stop_mode == "delete":
            self.api.delete_object(ref)
            ok, _ = poll(
                lambda: self.api.get_object(ref),
                lambda o: o is None or bool(metadata(o).get("deletionTimestamp")),
                self.settings.verify_timeout_s, self.settings.poll_interval_s, self._sleep,
            )  # fmt: skip
            return _done(
                f"deleted {self.RESOURCE.kind} {ref.namespace}/{ref.name} (propagationPolicy=Foreground; incident "
                f"{request.incident_id})",
                ok,
                acted_at,
            )
        ok = self._suspend(ref, True, {ANNOTATION_STOPPED_AT: rfc3339(acted_at),
                                       ANNOTATION_LAST_INCIDENT: request.incident_id})  # fmt: skip
        return _done(
            f"suspended {self.RESOURCE.kind} {ref.namespace}/{ref.name} (incident {request.incident_id}: "
            f"{request.reason[:200]})",
            ok,
            acted_at,
        )

    def _suspend(self, ref: ObjectRef, suspend: bool, annotations: dict[str, str | None]) -> bool:
        """Suspend (or resume) the workload with ``annotations``; whether a fresh read confirms it."""
        patch = self.suspend_patch(suspend)
        patch["metadata"] = {"annotations": annotations}
        self.api.patch_object(ref, patch)
        ok, _ = poll(
            lambda: self.api.get_object(ref), lambda o: o is not None and self.suspended(o) == suspend,
            self.settings.verify_timeout_s, self.settings.poll_interval_s, self._sleep,
        )  # fmt: skip
        return ok

    def _hold(self, request: ActionRequest, ref: ObjectRef, obj: dict[str, Any]) -> ActionResult:
        if self.suspended(obj):
            return ActionResult("done", f"{self.RESOURCE.kind} {ref.namespace}/{ref.name} already suspended", True)
        wanted = int(request.attempt) if request.attempt is not None else None
        if wanted is not None and self.attempt(obj) > wanted:
            return ActionResult("done", f"already past attempt {wanted}; not held", True)
        if self.state(obj).is_terminal():
            return ActionResult("skipped", f"{self.RESOURCE.kind} {ref.namespace}/{ref.name} is {self.state(obj)}")
        acted_at = self._now()
        ok = self._suspend(ref, True, {ANNOTATION_HELD_AT: rfc3339(acted_at),
                                       ANNOTATION_LAST_INCIDENT: request.incident_id})  # fmt: skip
        return ActionResult("done", f"suspended {self.RESOURCE.kind} {ref.namespace}/{ref.name} (hold)", ok, acted_at)

    def _release(self, ref: ObjectRef, obj: dict[str, Any]) -> ActionResult:
        _, annotations = labels_and_annotations(obj)
        if not self.suspended(obj):
            return ActionResult("done", f"{self.RESOURCE.kind} {ref.namespace}/{ref.name} is not suspended", True)
        if ANNOTATION_HELD_AT not in annotations or ANNOTATION_STOPPED_AT in annotations:
            return ActionResult(
                "skipped",
                f"{self.RESOURCE.kind} {ref.namespace}/{ref.name} was not suspended by a trainguard hold; "
                "resume it yourself",
            )
        acted_at = self._now()
        ok = self._suspend(ref, False, {ANNOTATION_HELD_AT: None})
        return ActionResult("done", f"resumed {self.RESOURCE.kind} {ref.namespace}/{ref.name}", ok, acted_at)


def _done(detail: str, ok: bool, acted_at: datetime) -> ActionResult:
    """A done result, verified when a fresh read confirmed it; ``detail`` says when none did."""
    return ActionResult(
        "done", detail + ("" if ok else "; not confirmed by a fresh read"), verified=ok, acted_at=acted_at
    )
