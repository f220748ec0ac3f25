"""What the JobSet and PyTorchJob adapters share: one seam to the Kubernetes API, and node isolation.

Every request to the API server goes through ``KubeAPI``: the official ``kubernetes`` client with a
timeout on each call; every patch sent as ``application/merge-patch+json``, named explicitly (the
generated client otherwise picks strategic merge or JSON patch by itself, and custom resources have
no strategic merge patch); raw JSON back as plain dicts; any failure turned into ``SchedulerError``
(state unknown, never "nothing there"); each call counted in ``KubeRequestMetrics``.
``PERMISSIONS`` lists the (API group, resource, verb) triples the adapters use; the Helm chart's
ClusterRole grants exactly these, and a test holds the three together.

Isolation of a node (``isolate_node``) is one JSON merge patch with the node's ``resourceVersion``
(a concurrent change makes it fail with 409 and it is retried on a fresh read):

- ``spec.unschedulable: true`` (cordon), unless the node already was;
- ``spec.taints``: the taints read from the node plus ``trainguard.io/implicated=<incident>:NoSchedule``
  (the list is replaced as a whole, so it is always read first);
- label ``trainguard.io/isolated-by=<actor>`` and annotations with the incident, the reason, the time
  and whether trainguard cordoned the node (``trainguard.io/cordoned``).

Its undo (``resume_node``, an operator's command) removes trainguard's taint, labels and annotations
and uncordons the node only when trainguard cordoned it.

``KubeWorkloadScheduler`` is the part of the ``Scheduler`` protocol both workload adapters share:
validation and refusal before any request, opt-in, node actions, the idempotent requeue frame
(isolate, compare attempts, then the subclass's ``restart``), stop / hold / release by suspension
or a foreground delete, each verified by a fresh read.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import BaseModel, ConfigDict, Field, field_validator

from responder.schedulers.base import (
    Action,
    ActionRequest,
    ActionResult,
    SchedulerError,
    WorkloadObservation,
    WorkloadState,
    identity_refusal,
)
from trainguard.identity import IdentityError, validate_cluster, validate_workload

log = logging.getLogger(__name__)

__all__ = [
    "ANNOTATION_CORDONED",
    "ANNOTATION_EXCLUDED",
    "ANNOTATION_INCIDENT",
    "ANNOTATION_ISOLATED_AT",
    "ANNOTATION_REASON",
    "LABEL_ISOLATED_BY",
    "PERMISSIONS",
    "TAINT_KEY",
    "KubeAPI",
    "KubeRequestMetrics",
    "KubeSettings",
    "KubeWorkloadScheduler",
    "NodeIsolation",
    "WorkloadSettings",
    "make_api_client",
]

PREFIX: Final = "trainguard.io/"
TAINT_KEY: Final = "trainguard.io/implicated"
LABEL_ISOLATED_BY: Final = "trainguard.io/isolated-by"
ANNOTATION_INCIDENT: Final = "trainguard.io/incident"
ANNOTATION_REASON: Final = "trainguard.io/isolation-reason"
ANNOTATION_ISOLATED_AT: Final = "trainguard.io/isolated-at"
ANNOTATION_CORDONED: Final = "trainguard.io/cordoned"
_NODE_ANNOTATIONS: Final = (ANNOTATION_INCIDENT, ANNOTATION_REASON, ANNOTATION_ISOLATED_AT, ANNOTATION_CORDONED)
# on the workload object
ANNOTATION_EXCLUDED: Final = "trainguard.io/excluded-nodes"
ANNOTATION_HELD_AT: Final = "trainguard.io/held-at"
ANNOTATION_STOPPED_AT: Final = "trainguard.io/stopped-at"
ANNOTATION_LAST_INCIDENT: Final = "trainguard.io/last-incident"

MERGE_PATCH: Final = "application/merge-patch+json"

# (API group, resource, verb): everything the adapters ask of the API server. The chart's ClusterRole
# (k8s/trainguard/files/rbac-rules.yaml) grants exactly this; tests/test_k8s_rbac.py checks both ways.
PERMISSIONS: Final = frozenset(
    {
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "patch"),
        ("", "pods", "list"),
        ("", "pods", "delete"),
        ("batch", "jobs", "list"),
        ("batch", "jobs", "patch"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        ("jobset.x-k8s.io", "jobsets", "patch"),
        ("jobset.x-k8s.io", "jobsets", "delete"),
        ("jobset.x-k8s.io", "jobsets/status", "get"),
        ("kubeflow.org", "pytorchjobs", "get"),
        ("kubeflow.org", "pytorchjobs", "patch"),
        ("kubeflow.org", "pytorchjobs", "delete"),
    }
)

# A label value (also a taint value): what the incident id must look like to name a taint.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
_MAX_REASON: Final = 1024


def valid_label_value(value: str) -> bool:
    return bool(_LABEL_VALUE.fullmatch(value))


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeSettings(BaseModel):
    """How trainguard reaches one Kubernetes cluster and what it may do there (shared by both adapters)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str | None = Field(
        None, description="Cluster name (CONTRACT §1); requests for another cluster are refused. None: any."
    )
    in_cluster: bool = Field(
        False, description="Use the pod's service account (the Helm chart sets this); else a kubeconfig."
    )
    kubeconfig: Path | None = Field(None, description="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
    context: str | None = Field(None, description="kubeconfig context (default: the current one).")
    request_timeout_s: float = Field(10.0, gt=0, le=300, description="Timeout of one API request.")
    verify_timeout_s: float = Field(
        30.0, ge=0, le=600, description="How long to poll the API for an action's effect to show."
    )
    poll_interval_s: float = Field(0.5, gt=0, le=30, description="Pause between two verification reads.")
    opt_in_label: str = Field(
        "trainguard.io/policy",
        min_length=3,
        description="A workload opts in when it carries this label or annotation (any non-empty value).",
    )
    require_opt_in: bool = Field(
        True, description="Refuse (skip) workload actions on workloads that did not opt in; release is allowed."
    )
    actor: str = Field(
        "trainguard", description="Who isolates: the value of the trainguard.io/isolated-by label on nodes."
    )
    max_isolated_fraction: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Circuit breaker: at most this fraction of nodes (at least 1) isolated by trainguard "
        "at once; further isolations are skipped.",
    )

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, v: str | None) -> str | None:
        return None if v is None else validate_cluster(v)

    @field_validator("actor")
    @classmethod
    def _actor(cls, v: str) -> str:
        if not valid_label_value(v):
            raise ValueError(f"actor {v!r} is not a Kubernetes label value")
        return v


def make_api_client(settings: KubeSettings) -> Any:
    """An ``ApiClient`` from the pod's service account or a kubeconfig (imported here: optional extra)."""
    from kubernetes import client, config  # noqa: PLC0415 - optional dependency, trainguard[k8s]

    configuration = client.Configuration()
    if settings.in_cluster:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(settings.kubeconfig) if settings.kubeconfig else None,
            context=settings.context,
            client_configuration=configuration,
        )
    return client.ApiClient(configuration)


class KubeRequestMetrics:
    """The seam's metrics. One instance per registry: share it between the adapters of several
    clusters (``JobSetScheduler(..., metrics=m)``); the ``cluster`` label tells them apart."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "trainguard_kubernetes_requests",
            "Kubernetes API requests made by trainguard, by call and result (ok, not_found, error).",
            ["cluster", "call", "result"],
            registry=self.registry,
        )
        self.failures = Counter(
            "trainguard_kubernetes_request_failures",
            "Kubernetes API requests that failed, by call and reason (the HTTP status, or the error's type).",
            ["cluster", "call", "reason"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "trainguard_kubernetes_request_duration_seconds",
            "Wall time of Kubernetes API requests made by trainguard.",
            ["cluster", "call"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )


class KubeAPI:
    """The one seam to the API server: raw JSON dicts in and out, a timeout per call, errors counted.

    ``get``-style methods return ``None`` for 404; every other failure raises ``SchedulerError``.
    """

    def __init__(
        self, api_client: Any, timeout_s: float, metrics: KubeRequestMetrics | None = None, cluster: str = ""
    ) -> None:
        from kubernetes import client  # noqa: PLC0415 - optional dependency, trainguard[k8s]

        self._client = api_client
        self._core = client.CoreV1Api(api_client)
        self._batch = client.BatchV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._timeout = timeout_s
        self.metrics = metrics if metrics is not None else KubeRequestMetrics()
        self._cluster = cluster

    def close(self) -> None:
        """Close the client's connection pool."""
        self._client.close()

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - optional dependency

        m = self.metrics
        started = time.monotonic()
        try:
            response = fn(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
            data = response.data
        except ApiException as exc:
            if exc.status == 404:
                m.requests.labels(self._cluster, what, "not_found").inc()
                return None
            m.requests.labels(self._cluster, what, "error").inc()
            m.failures.labels(self._cluster, what, str(exc.status)).inc()
            raise SchedulerError(f"{what}: HTTP {exc.status} {exc.reason}: {_status_message(exc.body)}") from exc
        except Exception as exc:  # the client raises urllib3, socket and ssl errors unwrapped
            m.requests.labels(self._cluster, what, "error").inc()
            m.failures.labels(self._cluster, what, type(exc).__name__).inc()
            raise SchedulerError(f"{what}: {type(exc).__name__}: {exc}") from exc
        finally:
            m.duration.labels(self._cluster, what).observe(time.monotonic() - started)
        try:
            body: dict[str, Any] = json.loads(data) if data else {}
        except ValueError as exc:
            m.requests.labels(self._cluster, what, "error").inc()
            m.failures.labels(self._cluster, what, "not_json").inc()
            raise SchedulerError(f"{what}: the API server answered something that is not JSON") from exc
        m.requests.labels(self._cluster, what, "ok").inc()
        return body

    def _need(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        body = self._call(what, fn, *args, **kwargs)
        if body is None:
            raise SchedulerError(f"{what}: not found")
        return body

    # -- core/v1

    def read_node(self, name: str) -> dict[str, Any] | None:
        return self._call("read_node", self._core.read_node, name)

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self._need("list_node", self._core.list_node).get("items") or [])

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._need("patch_node", self._core.patch_node, name, patch, _content_type=MERGE_PATCH)

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        body = self._need(
            "list_namespaced_pod", self._core.list_namespaced_pod, namespace, label_selector=label_selector
        )
        return list(body.get("items") or [])

    def delete_pod(self, namespace: str, name: str) -> bool:
        """False when the pod was already gone."""
        return self._call("delete_namespaced_pod", self._core.delete_namespaced_pod, name, namespace) is not None

    # -- batch/v1

    def list_jobs(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        body = self._need(
            "list_namespaced_job", self._batch.list_namespaced_job, namespace, label_selector=label_selector
        )
        return list(body.get("items") or [])

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._need(
            "patch_namespaced_job", self._batch.patch_namespaced_job, name, namespace, patch, _content_type=MERGE_PATCH
        )

    # -- custom resources

    def get_object(self, ref: ObjectRef) -> dict[str, Any] | None:
        return self._call(
            f"get {ref.plural}",
            self._custom.get_namespaced_custom_object,
            ref.group, ref.version, ref.namespace, ref.plural, ref.name,
        )  # fmt: skip

    def get_object_status(self, ref: ObjectRef) -> dict[str, Any] | None:
        return self._call(
            f"get {ref.plural}/status",
            self._custom.get_namespaced_custom_object_status,
            ref.group, ref.version, ref.namespace, ref.plural, ref.name,
        )  # fmt: skip

    def patch_object(self, ref: ObjectRef, patch: dict[str, Any]) -> dict[str, Any]:
        return self._need(
            f"patch {ref.plural}",
            self._custom.patch_namespaced_custom_object,
            ref.group, ref.version, ref.namespace, ref.plural, ref.name, patch,
            _content_type=MERGE_PATCH,
        )  # fmt: skip

    def delete_object(self, ref: ObjectRef) -> bool:
        """Foreground deletion (children first); False when the object was already gone."""
        answer = self._call(
            f"delete {ref.plural}",
            self._custom.delete_namespaced_custom_object,
            ref.group, ref.version, ref.namespace, ref.plural, ref.name,
            propagation_policy="Foreground",
        )  # fmt: skip
        return answer is not None


def _status_message(body: object) -> str:
    """The ``message`` of a Kubernetes ``Status`` error body, else a short prefix of the body."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            parsed = json.loads(body)
        except ValueError:
            return body[:200]
        if isinstance(parsed, dict):
            return str(parsed.get("message", ""))[:300]
    return ""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    group: str
    version: str
    plural: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.plural}.{self.group} {self.namespace}/{self.name}"


def split_workload(workload: str) -> tuple[str, str]:
    namespace, _, name = workload.partition("/")
    return namespace, name


def metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def labels_and_annotations(obj: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    meta = metadata(obj)
    return dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})


def opted_in(obj: Mapping[str, Any], key: str) -> bool:
    labels, annotations = labels_and_annotations(obj)
    return bool(labels.get(key) or annotations.get(key))


def excluded_from(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The nodes trainguard isolated for this workload, as recorded on the workload object."""
    _, annotations = labels_and_annotations(obj)
    raw = annotations.get(ANNOTATION_EXCLUDED, "")
    return tuple(n for n in raw.split(",") if n)


def refusal(request: ActionRequest, settings: KubeSettings, scheduler: str) -> str | None:
    """Validate every value that may reach a request; a reason to refuse, or None."""
    reason = identity_refusal(request, scheduler, settings.cluster)
    if reason is None and not valid_label_value(request.incident_id):
        reason = f"incident id {request.incident_id!r} is not a Kubernetes label value (it names the node taint)"
    return reason


@dataclass(frozen=True, slots=True)
class Isolated:
    applied: tuple[str, ...]
    notes: tuple[str, ...]


class NodeIsolation:
    """Cordon + taint (and the undo) of nodes, with a circuit breaker on how many trainguard holds."""

    def __init__(
        self,
        api: KubeAPI,
        settings: KubeSettings,
        now: Callable[[], datetime],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api
        self.settings = settings
        self._now = now
        self._sleep = sleep

    @staticmethod
    def ours(node: Mapping[str, Any]) -> bool:
        return any(t.get("key") == TAINT_KEY for t in _taints(node))

    def isolate(self, nodes: tuple[str, ...], incident: str, reason: str) -> Isolated:
        """Isolate each of ``nodes`` (already isolated ones count as applied); breaker-limited."""
        applied: list[str] = []
        notes: list[str] = []
        wanted = list(dict.fromkeys(nodes))
        if not wanted:
            return Isolated((), ())
        everything = self.api.list_nodes()
        by_name = {metadata(n).get("name", ""): n for n in everything}
        held = {name for name, n in by_name.items() if self.ours(n)}
        limit = max(1, int(len(by_name) * self.settings.max_isolated_fraction))
        for name in wanted:
            node = by_name.get(name)
            if node is None:
                notes.append(f"{name}: no such node")
                continue
            if name in held:
                applied.append(name)
                continue
            if len(held) >= limit:
                notes.append(
                    f"{name}: circuit breaker, {len(held)} node(s) already isolated by trainguard "
                    f"(limit {limit} of {len(by_name)}); not isolated"
                )
                continue
            outcome = self.isolate_node(name, incident, reason)
            notes.append(outcome)
            held.add(name)
            applied.append(name)
        return Isolated(tuple(applied), tuple(notes))

    def isolate_node(self, name: str, incident: str, reason: str) -> str:
        """Cordon and taint one node, labelled who/why/when; a note on what was done."""
        for attempt in range(3):
            node = self.api.read_node(name)
            if node is None:
                raise SchedulerError(f"node {name} vanished")
            if self.ours(node):
                return f"{name}: already isolated by trainguard"
            spec = node.get("spec") or {}
            cordon = not spec.get("unschedulable", False)
            taint = {"key": TAINT_KEY, "value": incident, "effect": "NoSchedule"}  # when: the isolated-at annotation
            patch = {
                "metadata": {
                    "resourceVersion": metadata(node).get("resourceVersion"),
                    "labels": {LABEL_ISOLATED_BY: self.settings.actor},
                    "annotations": {
                        ANNOTATION_INCIDENT: incident,
                        ANNOTATION_REASON: reason[:_MAX_REASON],
                        ANNOTATION_ISOLATED_AT: rfc3339(self._now()),
                        ANNOTATION_CORDONED: "true" if cordon else "false",
                    },
                },
                "spec": {"unschedulable": True, "taints": [*_taints(node), taint]},
            }
            try:
                self.api.patch_node(name, patch)
            except SchedulerError as exc:
                if "HTTP 409" in str(exc) and attempt < 2:
                    continue  # the node changed between our read and our patch: read it again
                raise
            log.warning("isolated node %s (incident %s): cordon=%s taint %s", name, incident, cordon, TAINT_KEY)
            return f"{name}: {'cordoned and ' if cordon else ''}tainted {TAINT_KEY}={incident}:NoSchedule"
        raise SchedulerError(f"node {name}: kept changing under three patches")  # pragma: no cover

    def resume(self, request: ActionRequest) -> ActionResult:
        """The operator's undo: remove trainguard's taint and marks; uncordon only if we cordoned."""
        name = request.node
        assert name is not None  # checked by refusal()
        for attempt in range(3):
            node = self.api.read_node(name)
            if node is None:
                return ActionResult("failed", f"node {name} is not known to the API server")
            labels, annotations = labels_and_annotations(node)
            if not self.ours(node) and LABEL_ISOLATED_BY not in labels:
                return ActionResult("done", f"{name} is not isolated by trainguard; nothing to undo", True)
            we_cordoned = annotations.get(ANNOTATION_CORDONED) == "true"
            acted_at = self._now()
            patch: dict[str, Any] = {
                "metadata": {
                    "resourceVersion": metadata(node).get("resourceVersion"),
                    "labels": {LABEL_ISOLATED_BY: None},
                    "annotations": dict.fromkeys(_NODE_ANNOTATIONS),
                },
                "spec": {"taints": [t for t in _taints(node) if t.get("key") != TAINT_KEY]},
            }
            if we_cordoned:
                patch["spec"]["unschedulable"] = None  # merge patch: null removes the field (schedulable)
            try:
                self.api.patch_node(name, patch)
            except SchedulerError as exc:
                if "HTTP 409" in str(exc) and attempt < 2:
                    continue
                raise
            after = self.verify_node(name, lambda n: not self.ours(n))
            cordon = "uncordoned" if we_cordoned else "left cordoned (not cordoned by trainguard)"
            return ActionResult(
                "done",
                f"{name}: removed taint {TAINT_KEY}, {cordon}" + ("" if after else "; not confirmed by a fresh read"),
                verified=after is not None,
                acted_at=acted_at,
            )
        raise SchedulerError(f"node {name}: kept changing under three patches")  # pragma: no cover

    def verify_node(self, name: str, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        deadline = time.monotonic() + self.settings.verify_timeout_s
        while True:
            node = self.api.read_node(name)
            if node is not None and ok(node):
                return node
            if time.monotonic() >= deadline:
                return None
            self._sleep(self.settings.poll_interval_s)

    def drain(self, request: ActionRequest) -> ActionResult:
        """``drain_node``: isolate one node (cordon + taint); running pods are not evicted."""
        name = request.node
        assert name is not None
        acted_at = self._now()
        done = self.isolate((name,), request.incident_id, request.reason)
        if name not in done.applied:
            return ActionResult("skipped", "; ".join(done.notes) or f"{name}: not isolated")
        after = self.verify_node(name, self.ours)
        return ActionResult(
            "done",
            "; ".join(done.notes) + ("" if after else "; not confirmed by a fresh read"),
            verified=after is not None,
            acted_at=acted_at,
        )


def _taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = node.get("spec") or {}
    return [dict(t) for t in spec.get("taints") or []]


def poll(
    read: Callable[[], dict[str, Any] | None],
    ok: Callable[[dict[str, Any] | None], bool],
    timeout_s: float,
    interval_s: float,
    sleep: Callable[[float], None],
) -> tuple[bool, dict[str, Any] | None]:
    """Fresh reads until ``ok``; (confirmed, last object read)."""
    deadline = time.monotonic() + timeout_s
    while True:
        obj = read()
        if ok(obj):
            return True, obj
        if time.monotonic() >= deadline:
            return False, obj
        sleep(interval_s)


_REQUEUE = (Action.REQUEUE, Action.REQUEUE_EXCLUDING)


class WorkloadSettings(KubeSettings):
    """Settings of a workload adapter: the shared ones plus how ``stop`` is done."""

    stop_mode: Literal["suspend", "delete"] = Field(
        "suspend",
        description="stop: suspend the workload (pods deleted, object kept, resumable) or delete it (foreground).",
    )


class KubeWorkloadScheduler:
    """What the JobSet and PyTorchJob adapters share: refusal, node actions, stop/hold/release by suspend.

    A subclass names its resource (``GROUP``, ``VERSION``, ``PLURAL``), reads its state, attempt and
    suspension, and implements the restart (``restart``).
    """

    name = "kubernetes"
    SCHEDULER: str = ""
    GROUP: str = ""
    VERSION: str = ""
    PLURAL: str = ""
    KIND: str = ""

    def __init__(
        self,
        settings: WorkloadSettings,
        api_client: Any | None = None,
        metrics: KubeRequestMetrics | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.api = KubeAPI(
            api_client if api_client is not None else make_api_client(settings),
            settings.request_timeout_s,
            metrics,
            settings.cluster or "",
        )
        self.nodes = NodeIsolation(self.api, settings, now, sleep)
        self._now = now
        self._sleep = sleep

    # -- what a subclass says about its resource

    def state(self, obj: Mapping[str, Any]) -> WorkloadState:
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

    def ref(self, workload: str) -> ObjectRef:
        namespace, name = split_workload(workload)
        return ObjectRef(self.GROUP, self.VERSION, self.PLURAL, namespace, name)

    def observe(self, cluster: str, workload: str) -> WorkloadObservation:
        validate_cluster(cluster)
        if self.settings.cluster is not None and cluster != self.settings.cluster:
            raise IdentityError("cluster", cluster, f"this adapter's cluster {self.settings.cluster!r}")
        validate_workload(workload, self.SCHEDULER)
        obj = self.api.get_object(self.ref(workload))
        if obj is None:
            return WorkloadObservation(workload, WorkloadState.UNKNOWN, reason=f"no {self.KIND} {workload}")
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
        reason = refusal(request, self.settings, self.SCHEDULER)
        if reason is not None:
            log.warning("refused %s for %s: %s", request.action, request.workload, reason)
            return ActionResult("failed", f"refused before any request: {reason}")
        try:
            if request.action is Action.DRAIN_NODE:
                return self.nodes.drain(request)
            if request.action is Action.RESUME_NODE:
                return self.nodes.resume(request)
            if request.action is Action.NONE:
                return ActionResult("skipped", "action none: nothing to do")
            return self._workload_action(request)
        except SchedulerError as exc:
            return ActionResult("failed", f"kubernetes: {exc}")

    def _workload_action(self, request: ActionRequest) -> ActionResult:
        ref = self.ref(request.workload)
        obj = self.api.get_object(ref)
        if obj is None:
            return ActionResult("failed", f"no {self.KIND} {request.workload}; state unknown")
        if (
            request.action is not Action.RELEASE
            and self.settings.require_opt_in
            and not opted_in(obj, self.settings.opt_in_label)
        ):
            return ActionResult(
                "skipped",
                f"{self.KIND} {request.workload} did not opt in (no {self.settings.opt_in_label} label or "
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
                "skipped", f"{self.KIND} {request.workload} is at attempt {attempt}, request is for {wanted}"
            )
        state = self.state(obj)
        if state.is_terminal():
            return ActionResult(
                "skipped", f"{self.KIND} {request.workload} is {state}; a finished workload is not restarted"
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
                "done", f"{self.KIND} {ref.namespace}/{ref.name} already {state}; nothing to stop", True
            )
        acted_at = self._now()
        if self.settings.stop_mode == "delete":
            self.api.delete_object(ref)
            ok, _ = poll(
                lambda: self.api.get_object(ref),
                lambda o: o is None or bool(metadata(o).get("deletionTimestamp")),
                self.settings.verify_timeout_s, self.settings.poll_interval_s, self._sleep,
            )  # fmt: skip
            return ActionResult(
                "done",
                f"deleted {self.KIND} {ref.namespace}/{ref.name} (propagationPolicy=Foreground; incident "
                f"{request.incident_id})" + ("" if ok else "; not confirmed by a fresh read"),
                verified=ok,
                acted_at=acted_at,
            )
        patch = self.suspend_patch(True)
        patch["metadata"] = {
            "annotations": {ANNOTATION_STOPPED_AT: rfc3339(acted_at), ANNOTATION_LAST_INCIDENT: request.incident_id}
        }
        self.api.patch_object(ref, patch)
        ok, _ = poll(
            lambda: self.api.get_object(ref), lambda o: o is not None and self.suspended(o),
            self.settings.verify_timeout_s, self.settings.poll_interval_s, self._sleep,
        )  # fmt: skip
        return ActionResult(
            "done",
            f"suspended {self.KIND} {ref.namespace}/{ref.name} (incident {request.incident_id}: "
            f"{request.reason[:200]})" + ("" if ok else "; not confirmed by a fresh read"),
            verified=ok,
            acted_at=acted_at,
        )

    def _hold(self, request: ActionRequest, ref: ObjectRef, obj: dict[str, Any]) -> ActionResult:
        if self.suspended(obj):
            return ActionResult("done", f"{self.KIND} {ref.namespace}/{ref.name} already suspended", True)
        wanted = int(request.attempt) if request.attempt is not None else None
        if wanted is not None and self.attempt(obj) > wanted:
            return ActionResult("done", f"already past attempt {wanted}; not held", True)
        if self.state(obj).is_terminal():
            return ActionResult("skipped", f"{self.KIND} {ref.namespace}/{ref.name} is {self.state(obj)}")
        acted_at = self._now()
        patch = self.suspend_patch(True)
        patch["metadata"] = {
            "annotations": {ANNOTATION_HELD_AT: rfc3339(acted_at), ANNOTATION_LAST_INCIDENT: request.incident_id}
        }
        self.api.patch_object(ref, patch)
        ok, _ = poll(
            lambda: self.api.get_object(ref), lambda o: o is not None and self.suspended(o),
            self.settings.verify_timeout_s, self.settings.poll_interval_s, self._sleep,
        )  # fmt: skip
        return ActionResult("done", f"suspended {self.KIND} {ref.namespace}/{ref.name} (hold)", ok, acted_at)

    def _release(self, ref: ObjectRef, obj: dict[str, Any]) -> ActionResult:
        _, annotations = labels_and_annotations(obj)
        if not self.suspended(obj):
            return ActionResult("done", f"{self.KIND} {ref.namespace}/{ref.name} is not suspended", True)
        if ANNOTATION_HELD_AT not in annotations or ANNOTATION_STOPPED_AT in annotations:
            return ActionResult(
                "skipped",
                f"{self.KIND} {ref.namespace}/{ref.name} was not suspended by a trainguard hold; resume it yourself",
            )
        acted_at = self._now()
        patch = self.suspend_patch(False)
        patch["metadata"] = {"annotations": {ANNOTATION_HELD_AT: None}}
        self.api.patch_object(ref, patch)
        ok, _ = poll(
            lambda: self.api.get_object(ref), lambda o: o is not None and not self.suspended(o),
            self.settings.verify_timeout_s, self.settings.poll_interval_s, self._sleep,
        )  # fmt: skip
        return ActionResult("done", f"resumed {self.KIND} {ref.namespace}/{ref.name}", ok, acted_at)


def conditions(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Status conditions by type (the last of a type wins)."""
    status = obj.get("status") or {}
    return {c.get("type", ""): c for c in status.get("conditions") or [] if isinstance(c, dict)}


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    return str(conditions(obj).get(kind, {}).get("status", "")) == "True"
